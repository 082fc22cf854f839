// The PIIX3 IDE function as a driver sees it: PCI identity and decode, signatures after reset,
// device presence, IDENTIFY, interrupts.

#include "devices/ide/ide_controller.h"

#include "devices/ide/ata.h"
#include "devices/ide/ide_test_driver.h"
#include "devices/ide/identify.h"
#include "devices/pci/pci_regs.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

using testing::AtaDriver;
using testing::IdeTestBed;
using testing::MakeCd;
using testing::MakeDisk;
using testing::TestCd;
using testing::TestDisk;

constexpr uint64_t kDiskBytes = 8 << 20;

class IdeControllerTest : public ::testing::Test {
 protected:
  // Primary master: disk. Secondary master: CD-ROM (where QEMU puts a lone ide-cd).
  void SetUp() override {
    disk_ = MakeDisk(kDiskBytes);
    cd_ = MakeCd(16);
    IdeControllerOptions options;
    options.drives.push_back(
        {.channel = 0, .unit = 0, .kind = DeviceKind::kDisk, .drive = disk_.drive});
    options.drives.push_back(
        {.channel = 1, .unit = 0, .kind = DeviceKind::kCdRom, .drive = cd_.drive});
    auto bed = IdeTestBed::Create(std::move(options));
    ASSERT_TRUE(bed.ok()) << bed.status();
    bed_ = *std::move(bed);
  }

  TestDisk disk_;
  TestCd cd_;
  std::unique_ptr<IdeTestBed> bed_;
};

TEST_F(IdeControllerTest, PciIdentity) {
  EXPECT_EQ(bed_->ReadConfig32(pci::kVendorId), 0x70108086u);
  EXPECT_EQ(bed_->ReadConfig32(pci::kRevisionId) >> 8, 0x010180u);
  // BAR4: 16 I/O ports, assigned; BARs 0-3 unimplemented (compatibility mode).
  const uint32_t bar4 = bed_->ReadConfig32(pci::kBar0 + 16);
  EXPECT_EQ(bar4 & 1, 1u);
  EXPECT_EQ(bar4 & ~3u, bed_->bus_master_base());
  EXPECT_NE(bed_->bus_master_base(), 0);
  for (int bar = 0; bar < 4; ++bar) EXPECT_EQ(bed_->ReadConfig32(pci::kBar0 + 4 * bar), 0u);
  // IDETIM: decode enabled on both channels (ata_piix's port enable check).
  EXPECT_EQ(bed_->ReadConfig16(IdeController::kIdetimPrimary), 0x8000);
  EXPECT_EQ(bed_->ReadConfig16(IdeController::kIdetimSecondary), 0x8000);
  EXPECT_EQ(bed_->ReadConfig16(pci::kInterruptPin) & 0xff00, 0);
  // Drive DMA capable bits for the attached drives; simplex clear.
  AtaDriver primary(*bed_, 0);
  AtaDriver secondary(*bed_, 1);
  EXPECT_EQ(primary.BmStatus(), bm::kStatDrive0Dma);
  EXPECT_EQ(secondary.BmStatus(), bm::kStatDrive0Dma);
}

TEST_F(IdeControllerTest, SignaturesAfterSoftReset) {
  AtaDriver primary(*bed_, 0);
  AtaDriver secondary(*bed_, 1);
  primary.SoftReset();
  secondary.SoftReset();
  // ATA disk: 01/01/00/00, diagnostics passed, DRDY.
  primary.Select(0);
  EXPECT_EQ(primary.Status(), 0x50);
  EXPECT_EQ(primary.Error(), 0x01);
  EXPECT_EQ(primary.Reg(reg::kCount), 0x01);
  EXPECT_EQ(primary.Reg(reg::kLbaLow), 0x01);
  EXPECT_EQ(primary.Reg(reg::kLbaMid), 0x00);
  EXPECT_EQ(primary.Reg(reg::kLbaHigh), 0x00);
  // ATAPI: 14/EB, status 00h (DRDY clear), as the Linux traces show.
  secondary.Select(0);
  EXPECT_EQ(secondary.Status(), 0x00);
  EXPECT_EQ(secondary.Error(), 0x01);
  EXPECT_EQ(secondary.Reg(reg::kCount), 0x01);
  EXPECT_EQ(secondary.Reg(reg::kLbaLow), 0x01);
  EXPECT_EQ(secondary.Reg(reg::kLbaMid), 0x14);
  EXPECT_EQ(secondary.Reg(reg::kLbaHigh), 0xeb);
  // Absent slaves: status and error 00h (device 0 answers for them).
  primary.Select(1);
  EXPECT_EQ(primary.Status(), 0x00);
  EXPECT_EQ(primary.AltStatus(), 0x00);
  EXPECT_EQ(primary.Error(), 0x00);
  secondary.Select(1);
  EXPECT_EQ(secondary.Status(), 0x00);
  // No interrupt from a reset.
  EXPECT_EQ(bed_->irq(0).raises(), 0);
  EXPECT_EQ(bed_->irq(1).raises(), 0);
}

TEST_F(IdeControllerTest, SignatureAtPowerOn) {
  AtaDriver secondary(*bed_, 1);
  EXPECT_EQ(secondary.Reg(reg::kLbaMid), 0x14);
  EXPECT_EQ(secondary.Reg(reg::kLbaHigh), 0xeb);
  AtaDriver primary(*bed_, 0);
  EXPECT_EQ(primary.AltStatus(), 0x50);
}

TEST_F(IdeControllerTest, DevicePresenceCheckEchoes) {
  // libata's ata_devchk: write 55h/AAh to Count/LBA Low and read them back, for each device.
  AtaDriver primary(*bed_, 0);
  for (int unit = 0; unit < 2; ++unit) {
    primary.Select(unit);
    primary.SetReg(reg::kCount, 0x55);
    primary.SetReg(reg::kLbaLow, 0xaa);
    primary.SetReg(reg::kCount, 0xaa);
    primary.SetReg(reg::kLbaLow, 0x55);
    EXPECT_EQ(primary.Reg(reg::kCount), 0xaa);
    EXPECT_EQ(primary.Reg(reg::kLbaLow), 0x55);
    EXPECT_EQ(primary.Reg(reg::kDevice) & device::kDev, unit ? device::kDev : 0);
  }
}

TEST(IdeEmptyChannelTest, FloatingBus) {
  TestDisk disk = MakeDisk(kDiskBytes);
  IdeControllerOptions options;
  options.drives.push_back(
      {.channel = 0, .unit = 0, .kind = DeviceKind::kDisk, .drive = disk.drive});
  auto bed = IdeTestBed::Create(std::move(options));
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver secondary(**bed, 1);
  // Nothing on the secondary channel: DD7 pulled down, the rest floating: 7Fh everywhere, and
  // the presence check fails.
  EXPECT_EQ(secondary.Status(), 0x7f);
  EXPECT_EQ(secondary.AltStatus(), 0x7f);
  secondary.SetReg(reg::kCount, 0x55);
  EXPECT_EQ(secondary.Reg(reg::kCount), 0x7f);
  secondary.SoftReset();
  secondary.Command(cmd::kIdentifyDevice);
  EXPECT_EQ(secondary.Status(), 0x7f);
  EXPECT_EQ((*bed)->irq(1).raises(), 0);
  // The bus master registers exist anyway.
  EXPECT_EQ(secondary.BmStatus(), 0);
}

TEST_F(IdeControllerTest, IdentifyDevice) {
  AtaDriver primary(*bed_, 0);
  primary.Select(0);
  auto words = primary.Identify(cmd::kIdentifyDevice);
  ASSERT_TRUE(words.has_value());
  IdentifyWords w = *words;
  const uint32_t sectors = kDiskBytes / 512;
  EXPECT_EQ(uint32_t{w[60]} | uint32_t{w[61]} << 16, sectors);
  EXPECT_EQ(w[100] | w[101] << 16, sectors);
  EXPECT_NE(w[83] & (1 << 10), 0);
  EXPECT_NE(w[84] & (1 << 6), 0);
  EXPECT_NE(w[85] & (1 << 5), 0);  // writeback: write cache on
  EXPECT_EQ(GetAtaString(w, 27, 20), "MICROVM HARDDISK");
  EXPECT_EQ(GetAtaString(w, 10, 10), "disk0");
  // After the data: ready, no DRQ, no further interrupt.
  EXPECT_EQ(primary.AltStatus(), 0x50);
  EXPECT_EQ(bed_->irq(0).raises(), 1);
  EXPECT_FALSE(bed_->irq(0).level());
}

TEST(IdeWriteCacheTest, IdentifyReportsCacheMode) {
  TestDisk disk = MakeDisk(kDiskBytes, block::CacheMode::kWritethrough);
  IdeControllerOptions options;
  options.drives.push_back({.channel = 0,
                            .unit = 1,
                            .kind = DeviceKind::kDisk,
                            .drive = disk.drive,
                            .model = "SLAVE DISK"});
  auto bed = IdeTestBed::Create(std::move(options));
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver primary(**bed, 0);
  primary.Select(1);
  auto w = primary.Identify(cmd::kIdentifyDevice);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ((*w)[85] & (1 << 5), 0);
  EXPECT_NE((*w)[82] & (1 << 5), 0);
  EXPECT_EQ(GetAtaString(*w, 27, 20), "SLAVE DISK");
  EXPECT_EQ((*w)[93] & 0x0100, 0x0100);  // device 1's reset results
  // Device 0 is absent: commands to it go nowhere.
  primary.Select(0);
  primary.Command(cmd::kIdentifyDevice);
  EXPECT_EQ(primary.AltStatus(), 0);
}

TEST_F(IdeControllerTest, IdentifyPacketDevice) {
  AtaDriver secondary(*bed_, 1);
  secondary.Select(0);
  auto w = secondary.Identify(cmd::kIdentifyPacketDevice);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ((*w)[0], 0x85c0);
  EXPECT_EQ(GetAtaString(*w, 27, 20), "MICROVM DVD-ROM");
  EXPECT_EQ(GetAtaString(*w, 10, 10), "cd0");
  // libata sets MWDMA2 on a PIIX3; IDENTIFY then shows it.
  secondary.SetReg(reg::kFeature, feature::kSetTransferMode);
  secondary.SetReg(reg::kCount, 0x22);
  secondary.Command(cmd::kSetFeatures);
  ASSERT_TRUE(secondary.WaitNotBusy());
  EXPECT_EQ(secondary.Status(), 0x50);
  w = secondary.Identify(cmd::kIdentifyPacketDevice);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ((*w)[63], 0x0407);
  EXPECT_EQ((*w)[88], 0x003f);
}

TEST_F(IdeControllerTest, IdentifyDeviceToPacketDeviceAbortsWithSignature) {
  AtaDriver secondary(*bed_, 1);
  secondary.Select(0);
  secondary.SetReg(reg::kLbaMid, 0);
  secondary.SetReg(reg::kLbaHigh, 0);
  secondary.Command(cmd::kIdentifyDevice);
  ASSERT_TRUE(secondary.WaitNotBusy());
  EXPECT_EQ(secondary.Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(secondary.Error(), error::kAbrt);
  EXPECT_EQ(secondary.Reg(reg::kLbaMid), 0x14);
  EXPECT_EQ(secondary.Reg(reg::kLbaHigh), 0xeb);
}

TEST_F(IdeControllerTest, InterruptsRaisedClearedAndMasked) {
  AtaDriver primary(*bed_, 0);
  testing::FakeIrqLine& irq = bed_->irq(0);
  primary.Select(0);
  primary.DeviceControl(0x08);  // nIEN clear
  primary.Command(cmd::kCheckPowerMode);
  ASSERT_TRUE(primary.WaitNotBusy());
  EXPECT_TRUE(irq.level());
  EXPECT_EQ(irq.raises(), 1);
  EXPECT_EQ(primary.Reg(reg::kCount), 0xff);
  // Alternate Status does not acknowledge; Status does.
  EXPECT_EQ(primary.AltStatus(), 0x50);
  EXPECT_TRUE(irq.level());
  EXPECT_NE(primary.BmStatus() & bm::kStatInterrupt, 0);  // the bus master latches it
  EXPECT_EQ(primary.Status(), 0x50);
  EXPECT_FALSE(irq.level());

  // nIEN masks INTRQ; the interrupt stays pending and shows once nIEN clears.
  primary.DeviceControl(0x08 | control::kNien);
  primary.Command(cmd::kIdleImmediate);
  ASSERT_TRUE(primary.WaitNotBusy());
  EXPECT_FALSE(irq.level());
  EXPECT_EQ(irq.raises(), 1);
  primary.DeviceControl(0x08);
  EXPECT_TRUE(irq.level());
  EXPECT_EQ(irq.raises(), 2);
  EXPECT_EQ(primary.Status(), 0x50);
  EXPECT_FALSE(irq.level());

  // Selecting the other (absent) device releases INTRQ; selecting back drives it again.
  primary.Command(cmd::kIdleImmediate);
  ASSERT_TRUE(primary.WaitNotBusy());
  EXPECT_TRUE(irq.level());
  primary.Select(1);
  EXPECT_FALSE(irq.level());
  primary.Select(0);
  EXPECT_TRUE(irq.level());
  // Writing a command clears a pending interrupt.
  primary.Command(cmd::kNop);
  EXPECT_EQ(primary.Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(primary.Error(), error::kAbrt);
  EXPECT_FALSE(irq.level());
  EXPECT_EQ(bed_->irq(1).raises(), 0);
}

TEST_F(IdeControllerTest, DecodeFollowsIoSpaceEnable) {
  AtaDriver primary(*bed_, 0);
  const uint16_t command = bed_->ReadConfig16(pci::kCommand);
  bed_->WriteConfig16(pci::kCommand, command & ~pci::kCommandIoSpace);
  EXPECT_EQ(primary.AltStatus(), 0xff);
  EXPECT_EQ(primary.Status(), 0xff);
  primary.Command(cmd::kCheckPowerMode);  // dropped
  bed_->WriteConfig16(pci::kCommand, command);
  EXPECT_EQ(primary.AltStatus(), 0x50);
  EXPECT_EQ(bed_->irq(0).raises(), 0);
}

TEST(IdeMasterSlaveTest, BothDevicesOnOneChannel) {
  // Disk master and CD slave on the primary channel: each answers when selected, the interrupt
  // line follows the selected device, the bus master serves whichever runs DMA.
  TestDisk disk = MakeDisk(kDiskBytes);
  TestCd cd = MakeCd(32);
  IdeControllerOptions options;
  options.drives.push_back(
      {.channel = 0, .unit = 0, .kind = DeviceKind::kDisk, .drive = disk.drive});
  options.drives.push_back(
      {.channel = 0, .unit = 1, .kind = DeviceKind::kCdRom, .drive = cd.drive});
  auto bed = IdeTestBed::Create(std::move(options));
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver ata(**bed, 0);
  ata.SoftReset();
  ata.Select(1);
  EXPECT_EQ(ata.Reg(reg::kLbaMid), 0x14);
  EXPECT_EQ(ata.Reg(reg::kLbaHigh), 0xeb);
  ata.Select(0);
  EXPECT_EQ(ata.Reg(reg::kLbaMid), 0x00);
  EXPECT_EQ(ata.BmStatus(), bm::kStatDrive0Dma | bm::kStatDrive1Dma);
  ata.DeviceControl(0x08);

  // The CD reads by DMA; the disk then by PIO.
  ata.Select(1);
  testing::PacketResult r = ata.PacketDma(testing::Read10(3, 2), 0x1000, 0x100000, 4096);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.data[0], testing::CdByte(3 * 2048, 0));
  std::vector<uint8_t> data(512, 0x3c);
  ASSERT_TRUE(disk.backend->WriteData(0, data).ok());
  ata.Select(0);
  ata.Issue28(cmd::kReadSectors, 0, 1);
  EXPECT_EQ(ata.PioIn(512, 512), data);

  // An interrupt pending on the CD shows only while it is selected.
  ata.Select(1);
  ata.Command(cmd::kCheckPowerMode);
  ASSERT_TRUE(ata.WaitNotBusy());
  EXPECT_TRUE((*bed)->irq(0).level());
  ata.Select(0);
  EXPECT_FALSE((*bed)->irq(0).level());
  EXPECT_EQ(ata.Status(), 0x50);  // the disk's status does not acknowledge the CD's interrupt
  ata.Select(1);
  EXPECT_TRUE((*bed)->irq(0).level());
  EXPECT_EQ(ata.Status(), 0x50);
  EXPECT_FALSE((*bed)->irq(0).level());
  EXPECT_EQ((*bed)->irq(1).raises(), 0);
}

TEST(IdeCreateTest, RejectsBadConfigurations) {
  TestDisk disk = MakeDisk(kDiskBytes);
  TestCd cd = MakeCd(16);
  vmm::Bus pio("pio");
  auto region = vmm::GuestMemoryRegion::Create(vmm::GuestAddress(0), 1 << 20);
  ASSERT_TRUE(region.ok());
  std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
  regions.push_back(*std::move(region));
  auto memory = vmm::GuestMemory::Create(std::move(regions));
  ASSERT_TRUE(memory.ok());
  auto irq = std::make_shared<testing::FakeIrqLine>();
  auto threads = StartIoThreads("ide-io", 1, {});
  ASSERT_TRUE(threads.ok()) << threads.status();
  const std::shared_ptr<IoThread> iothread = threads->front();
  auto create = [&](std::vector<IdeDriveConfig> drives) {
    IdeControllerOptions options;
    options.drives = std::move(drives);
    options.iothread = iothread;
    auto controller = IdeController::Create(std::move(options), pio, irq, irq, *memory);
    if (controller.ok()) (*controller)->Shutdown();
    return controller.status();
  };
  EXPECT_FALSE(create({{.channel = 2, .drive = disk.drive}}).ok());
  EXPECT_FALSE(create({{.drive = disk.drive}, {.drive = disk.drive}}).ok());       // same position
  EXPECT_FALSE(create({{.kind = DeviceKind::kCdRom, .drive = disk.drive}}).ok());  // not removable
  EXPECT_FALSE(create({{.kind = DeviceKind::kDisk, .drive = cd.drive}}).ok());
  EXPECT_FALSE(create({{.drive = nullptr}}).ok());
  // The assembly starts the controller's thread; without one there is no controller.
  IdeControllerOptions threadless;
  threadless.drives.push_back({.drive = disk.drive});
  EXPECT_EQ(IdeController::Create(std::move(threadless), pio, irq, irq, *memory).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A good one registers its ports; a second one on the same bus cannot.
  IdeControllerOptions options;
  options.drives.push_back({.drive = disk.drive});
  options.iothread = iothread;
  auto first = IdeController::Create(std::move(options), pio, irq, irq, *memory);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(create({}).code(), absl::StatusCode::kAlreadyExists);
  (*first)->Shutdown();
  EXPECT_TRUE(create({}).ok());
}

}  // namespace
}  // namespace devices::ide

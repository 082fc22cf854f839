// A hostile guest: malformed PRD tables, DMA in the wrong direction or without bus mastering,
// commands to absent devices, register sequences out of order, resets mid-command, and a random
// register storm. Each ends in the status/error bits the specs give, never a crash, and the
// controller works afterwards.

#include <random>

#include "devices/ide/ata.h"
#include "devices/ide/ide_controller.h"
#include "devices/ide/ide_test_driver.h"
#include "devices/pci/pci_regs.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

using testing::AtaDriver;
using testing::IdeTestBed;
using testing::MakeCd;
using testing::MakeDisk;
using testing::MakePacket;
using testing::PacketResult;
using testing::PrdEntry;
using testing::Read10;
using testing::TestCd;
using testing::TestDisk;

constexpr uint8_t kBmBits = bm::kStatInterrupt | bm::kStatActive | bm::kStatError;

class IdeHostileTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(/*bus_master=*/true); }

  void Start(bool bus_master) {
    disk_ = MakeDisk(8 << 20);
    cd_ = MakeCd(64);
    IdeControllerOptions options;
    options.drives.push_back(
        {.channel = 0, .unit = 0, .kind = DeviceKind::kDisk, .drive = disk_.drive});
    options.drives.push_back(
        {.channel = 1, .unit = 0, .kind = DeviceKind::kCdRom, .drive = cd_.drive});
    auto bed = IdeTestBed::Create(std::move(options), /*assign_bars=*/true, bus_master);
    ASSERT_TRUE(bed.ok()) << bed.status();
    bed_ = *std::move(bed);
    ata_ = std::make_unique<AtaDriver>(*bed_, 0);
    atapi_ = std::make_unique<AtaDriver>(*bed_, 1);
    ata_->Select(0);
    atapi_->Select(0);
  }

  // READ DMA of `sectors` with the table at `table`; returns the bus master status at the end.
  uint8_t ReadDma(uint32_t table, uint8_t sectors, bool to_memory = true,
                  uint8_t command = cmd::kReadDma) {
    ata_->SetupDma(table, to_memory);
    ata_->Issue28(command, 0, sectors);
    ata_->StartDma();
    EXPECT_TRUE(ata_->WaitDma());
    const uint8_t bm_status = ata_->BmStatus();
    ata_->StopDma();
    status_ = ata_->Status();
    error_ = ata_->Error();
    return bm_status;
  }

  // The disk still reads correctly by DMA and by PIO, and the CD by DMA.
  void ExpectUsable() {
    std::vector<uint8_t> data(1024, 0x5c);
    ASSERT_TRUE(disk_.backend->WriteData(512 * 9, data).ok());
    ata_->WritePrdTable(0x3000, {{0x400000, 1024, true}});
    const uint8_t bm_status = ReadDma(0x3000, 2, true, cmd::kReadDma);
    (void)bm_status;
    EXPECT_EQ(status_, 0x50);
    ata_->Issue28(cmd::kReadSectors, 9, 2);
    EXPECT_EQ(ata_->PioIn(1024, 512), data);
    PacketResult r = atapi_->PacketDma(Read10(3, 1), 0x5000, 0x500000, 2048);
    EXPECT_EQ(r.status, 0x50);
    EXPECT_EQ(atapi_->PacketPio(MakePacket({0x00}), 0).status, 0x50);
  }

  TestDisk disk_;
  TestCd cd_;
  std::unique_ptr<IdeTestBed> bed_;
  std::unique_ptr<AtaDriver> ata_;
  std::unique_ptr<AtaDriver> atapi_;
  uint8_t status_ = 0;
  uint8_t error_ = 0;
};

TEST_F(IdeHostileTest, PrdTableOutsideMemory) {
  const uint8_t bm_status = ReadDma(0xfff00000, 1);
  EXPECT_EQ(bm_status & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(error_, error::kAbrt);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  ExpectUsable();
}

TEST_F(IdeHostileTest, PrdRegionOutsideMemory) {
  ata_->WritePrdTable(0x1000, {{0x100000, 512, false}, {0xfff00000, 512, true}});
  EXPECT_EQ(ReadDma(0x1000, 2) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(error_, error::kAbrt);
  // A region straddling the end of RAM.
  ata_->WritePrdTable(0x1000, {{IdeTestBed::kMemoryBytes - 256, 512, true}});
  EXPECT_EQ(ReadDma(0x1000, 1) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  ExpectUsable();
}

TEST_F(IdeHostileTest, PrdTableWithoutEndOfTable) {
  // 1024 two-byte entries, none with EOT: the walk stops after one page (512 entries).
  std::vector<PrdEntry> entries(1024, PrdEntry{0x100000, 2, false});
  ata_->WritePrdTable(0x10000, entries);
  EXPECT_EQ(ReadDma(0x10000, 8) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(error_, error::kAbrt);
  ExpectUsable();
}

TEST_F(IdeHostileTest, PrdTableShorterThanTransfer) {
  ata_->WritePrdTable(0x1000, {{0x100000, 512, true}});
  EXPECT_EQ(ReadDma(0x1000, 4) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(error_, error::kAbrt);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  ExpectUsable();
}

TEST_F(IdeHostileTest, ZeroAndOddLengthEntries) {
  // Count 0 is 64 KiB (SFF-8038i): 16 sectors fit, the table has room left (Active stays).
  ata_->WritePrdTable(0x1000, {{0x100000, 0, true}});
  EXPECT_EQ(ReadDma(0x1000, 16) & kBmBits, bm::kStatInterrupt | bm::kStatActive);
  EXPECT_EQ(status_, 0x50);
  // Bit 0 of the count is reserved: 513 is 512.
  ata_->WritePrdTable(0x1000, {{0x100000, 513, true}});
  EXPECT_EQ(ReadDma(0x1000, 1) & kBmBits, bm::kStatInterrupt);
  EXPECT_EQ(status_, 0x50);
  // 511 is 510: too short for a sector.
  ata_->WritePrdTable(0x1000, {{0x100000, 511, true}});
  EXPECT_EQ(ReadDma(0x1000, 1) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  ExpectUsable();
}

TEST_F(IdeHostileTest, DmaInTheWrongDirection) {
  ata_->WritePrdTable(0x1000, {{0x100000, 512, true}});
  // READ DMA with the bus master set to read memory.
  EXPECT_EQ(ReadDma(0x1000, 1, /*to_memory=*/false) & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(error_, error::kAbrt);
  // WRITE DMA with the bus master set to write memory: nothing reaches the disk.
  EXPECT_EQ(ReadDma(0x1000, 1, /*to_memory=*/true, cmd::kWriteDma) & kBmBits,
            bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(status_, status::kDrdy | status::kErr);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  // ATAPI: a READ(10) by DMA with the engine reading memory.
  atapi_->WritePrdTable(0x1000, {{0x100000, 2048, true}});
  atapi_->SetupDma(0x1000, /*to_memory=*/false);
  atapi_->SetReg(reg::kFeature, kPacketFeatureDma);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->WriteData(Read10(0, 1), true);
  atapi_->StartDma();
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->BmStatus() & kBmBits, bm::kStatInterrupt | bm::kStatError);
  atapi_->StopDma();
  EXPECT_EQ(atapi_->Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(atapi_->Error(), 0xb4);  // ABORTED COMMAND, ABRT
  EXPECT_EQ(atapi_->Reg(reg::kCount), reason::kIo | reason::kCoD);
  ExpectUsable();
}

TEST(IdeNoBusMasterTest, DmaWithoutBusMasterEnable) {
  TestDisk disk = MakeDisk(1 << 20);
  IdeControllerOptions options;
  options.drives.push_back({.drive = disk.drive});
  auto bed = IdeTestBed::Create(std::move(options), true, /*bus_master=*/false);
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver ata(**bed, 0);
  ata.Select(0);
  ata.WritePrdTable(0x1000, {{0x100000, 512, true}});
  ata.SetupDma(0x1000, true);
  ata.Issue28(cmd::kReadDma, 0, 1);
  ata.StartDma();
  ASSERT_TRUE(ata.WaitDma());
  EXPECT_EQ(ata.BmStatus() & kBmBits, bm::kStatInterrupt | bm::kStatError);
  EXPECT_EQ(ata.Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(disk.backend->operation_count(), 0u);
  // With it on, the same works.
  (*bed)->WriteConfig16(pci::kCommand,
                        (*bed)->ReadConfig16(pci::kCommand) | pci::kCommandBusMaster);
  ata.SetupDma(0x1000, true);
  ata.Issue28(cmd::kReadDma, 0, 1);
  ata.StartDma();
  ASSERT_TRUE(ata.WaitDma());
  EXPECT_EQ(ata.BmStatus() & kBmBits, bm::kStatInterrupt);
  EXPECT_EQ(ata.Status(), 0x50);
}

TEST_F(IdeHostileTest, PacketDmaTableFaults) {
  // Table outside memory.
  atapi_->SetupDma(0xfff00000, true);
  atapi_->SetReg(reg::kFeature, kPacketFeatureDma);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->WriteData(Read10(0, 1), true);
  atapi_->StartDma();
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->BmStatus() & kBmBits, bm::kStatInterrupt | bm::kStatError);
  atapi_->StopDma();
  EXPECT_EQ(atapi_->Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(atapi_->Error(), 0xb4);
  // A table too short for a two-block read.
  atapi_->WritePrdTable(0x1000, {{0x100000, 2048, true}});
  atapi_->SetupDma(0x1000, true);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->WriteData(Read10(0, 2), true);
  atapi_->StartDma();
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->BmStatus() & kBmBits, bm::kStatInterrupt | bm::kStatError);
  atapi_->StopDma();
  EXPECT_EQ(atapi_->Status(), status::kDrdy | status::kErr);
  ExpectUsable();
}

TEST_F(IdeHostileTest, CommandsToAnAbsentDevice) {
  ata_->Select(1);
  for (uint8_t command : {cmd::kIdentifyDevice, cmd::kReadSectors, cmd::kReadDma, cmd::kFlushCache,
                          cmd::kPacket, cmd::kDeviceReset}) {
    ata_->Command(command);
    EXPECT_EQ(ata_->AltStatus(), 0);
    EXPECT_EQ(ata_->Status(), 0);
    EXPECT_EQ(ata_->Error(), 0);
  }
  EXPECT_EQ(ata_->ReadData(512), std::vector<uint8_t>(512, 0));
  EXPECT_EQ(bed_->irq(0).raises(), 0);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  ata_->Select(0);
  ExpectUsable();
}

TEST_F(IdeHostileTest, DataPortWithoutDrq) {
  EXPECT_EQ(ata_->ReadData(16, true), std::vector<uint8_t>(16, 0));
  ata_->WriteData(std::vector<uint8_t>(512, 0xaa));
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
  EXPECT_EQ(ata_->Status(), 0x50);
  // Byte accesses to the data register do not transfer.
  ata_->Issue28(cmd::kReadSectors, 0, 1);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(bed_->In8(ata_->command_base()), 0xff);
  EXPECT_EQ(ata_->ReadData(512).size(), 512u);
  EXPECT_EQ(ata_->AltStatus(), 0x50);
  ExpectUsable();
}

TEST_F(IdeHostileTest, WritesWhileBusyOrDrqAreIgnored) {
  std::vector<uint8_t> data(512, 0x42);
  ASSERT_TRUE(disk_.backend->WriteData(512 * 5, data).ok());
  ata_->Issue28(cmd::kReadSectors, 5, 1);
  ASSERT_TRUE(ata_->WaitNotBusy());
  ASSERT_NE(ata_->AltStatus() & status::kDrq, 0);
  // During DRQ: register writes, a device switch and new commands are all ignored.
  ata_->SetReg(reg::kLbaLow, 0x99);
  ata_->Select(1);
  ata_->Command(cmd::kIdentifyDevice);
  ata_->Command(cmd::kWriteSectors);
  EXPECT_EQ(ata_->Reg(reg::kLbaLow), 5);
  EXPECT_EQ(ata_->Reg(reg::kDevice) & device::kDev, 0);
  EXPECT_EQ(ata_->ReadData(512), data);
  EXPECT_EQ(ata_->Status(), 0x50);
  ExpectUsable();
}

TEST_F(IdeHostileTest, SoftResetMidTransfer) {
  // A PIO read left with DRQ set, a DMA command whose engine never starts, a packet half
  // written: each is dropped by SRST, and the channel works at once.
  ata_->Issue28(cmd::kReadSectors, 0, 4);
  ASSERT_TRUE(ata_->WaitNotBusy());
  ata_->ReadData(100);
  ata_->SoftReset();
  EXPECT_EQ(ata_->Status(), 0x50);
  EXPECT_EQ(ata_->Error(), 0x01);
  EXPECT_EQ(ata_->ReadData(2), std::vector<uint8_t>(2, 0));

  ata_->Select(0);
  const uint64_t operations = disk_.backend->operation_count();
  ata_->WritePrdTable(0x1000, {{0x100000, 512, true}});
  ata_->SetupDma(0x1000, true);
  ata_->Issue28(cmd::kReadDma, 0, 1);
  EXPECT_NE(ata_->AltStatus() & status::kBsy, 0);  // waiting for Start
  ata_->SoftReset();
  ata_->StartDma();  // too late: nothing pending
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  ata_->StopDma();
  EXPECT_EQ(disk_.backend->operation_count(), operations);

  atapi_->SetReg(reg::kFeature, 0);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  bed_->Out16(atapi_->command_base(), 0x0028);
  atapi_->SoftReset();
  EXPECT_EQ(atapi_->Status(), 0x00);
  EXPECT_EQ(atapi_->Reg(reg::kLbaHigh), 0xeb);
  ata_->Select(0);
  ExpectUsable();
}

TEST_F(IdeHostileTest, DeviceResetRecoversAHungPacketDevice) {
  // A DMA packet whose engine is never started: the device stays busy; DEVICE RESET (the one
  // command accepted while BSY) recovers it.
  atapi_->SetReg(reg::kFeature, kPacketFeatureDma);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->WriteData(Read10(0, 1), true);
  EXPECT_NE(atapi_->AltStatus() & status::kBsy, 0);
  atapi_->Command(cmd::kIdentifyPacketDevice);  // ignored while BSY
  atapi_->Command(cmd::kDeviceReset);
  EXPECT_EQ(atapi_->AltStatus(), 0);
  EXPECT_EQ(atapi_->Reg(reg::kLbaMid), 0x14);
  atapi_->StartDma();  // nothing pending any more
  atapi_->StopDma();
  ExpectUsable();
}

TEST_F(IdeHostileTest, OverlongDataAccessesEndTheBlock) {
  // A 9-byte INQUIRY block read with four dwords: the padding is zeros and the block ends.
  PacketResult r = atapi_->PacketPio(MakePacket({0x12, 0, 0, 0, 9, 0}), 0xfffe, /*wide=*/true);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.data.size(), 9u);
  // A 12-byte packet written with 8 dwords: the extra words go nowhere.
  atapi_->SetReg(reg::kFeature, 0);
  atapi_->SetReg(reg::kLbaMid, 0);
  atapi_->SetReg(reg::kLbaHigh, 0);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  for (int i = 0; i < 8; ++i) bed_->Out32(atapi_->command_base(), 0);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->Status(), 0x50);  // TEST UNIT READY (all zeros) ran once
  ExpectUsable();
}

TEST_F(IdeHostileTest, RandomRegisterStorm) {
  // Deterministic random accesses to every port of both channels and the bus master block,
  // including random PRD tables in random guest memory. Nothing may crash or hang for good; a
  // soft reset then brings both channels back.
  std::mt19937 random(1234);
  std::vector<uint8_t> noise(1 << 16);
  for (uint8_t& b : noise) b = static_cast<uint8_t>(random());
  for (uint32_t at = 0; at < IdeTestBed::kMemoryBytes; at += noise.size()) {
    ASSERT_TRUE(bed_->memory().Write(vmm::GuestAddress(at), noise).ok());
  }
  const uint16_t ports[] = {0x1f0, 0x1f1, 0x1f2, 0x1f3, 0x1f4, 0x1f5, 0x1f6, 0x1f7, 0x3f6,
                            0x170, 0x171, 0x172, 0x173, 0x174, 0x175, 0x176, 0x177, 0x376};
  const uint8_t interesting[] = {cmd::kReadSectors,
                                 cmd::kWriteSectors,
                                 cmd::kReadDma,
                                 cmd::kWriteDma,
                                 cmd::kReadDmaExt,
                                 cmd::kWriteDmaFuaExt,
                                 cmd::kPacket,
                                 cmd::kIdentifyDevice,
                                 cmd::kIdentifyPacketDevice,
                                 cmd::kFlushCache,
                                 cmd::kSetFeatures,
                                 cmd::kSetMultipleMode,
                                 cmd::kReadMultiple,
                                 cmd::kWriteMultiple,
                                 cmd::kDeviceReset,
                                 cmd::kExecuteDeviceDiagnostic};
  for (int i = 0; i < 20000; ++i) {
    const uint32_t r = random();
    const int kind = r % 8;
    if (kind < 3) {
      const uint16_t port = ports[(r >> 8) % std::size(ports)];
      const bool command_port = (port & 7) == 7 && port != 0x3f6 && port != 0x376;
      const uint8_t value = command_port && (r & 0x10000)
                                ? interesting[(r >> 17) % std::size(interesting)]
                                : static_cast<uint8_t>(random());
      // Keep SRST pulses short so the storm does not spend itself in reset.
      bed_->Out8(port, (port & 0x200) ? static_cast<uint8_t>(value & ~control::kSrst) : value);
    } else if (kind < 5) {
      (void)bed_->In8(ports[(r >> 8) % std::size(ports)]);
    } else if (kind == 5) {
      const uint16_t base = (r & 0x100) ? 0x170 : 0x1f0;
      if (r & 0x200) {
        (void)bed_->In32(base);
      } else {
        bed_->Out16(base, static_cast<uint16_t>(random()));
      }
    } else if (kind == 6) {
      const uint16_t at = static_cast<uint16_t>(bed_->bus_master_base() + ((r >> 8) % 16));
      bed_->Out8(at, static_cast<uint8_t>(random()));
    } else {
      // A plausible PRD pointer some of the time.
      const uint16_t bm = static_cast<uint16_t>(bed_->bus_master_base() + ((r & 0x100) ? 8 : 0));
      bed_->Out32(bm + bm::kPrdTable, (r & 0x200) ? (random() % IdeTestBed::kMemoryBytes)
                                                  : static_cast<uint32_t>(random()));
      bed_->Out8(bm + bm::kCommand, static_cast<uint8_t>(r >> 16) & 0x09);
    }
  }
  for (AtaDriver* driver : {ata_.get(), atapi_.get()}) {
    driver->StopDma();
    driver->DeviceControl(0x08);
    driver->SoftReset();
  }
  bed_->WriteConfig16(pci::kCommand, bed_->ReadConfig16(pci::kCommand) | pci::kCommandIoSpace |
                                         pci::kCommandBusMaster);
  ata_->Select(0);
  atapi_->Select(0);
  ExpectUsable();
}

}  // namespace
}  // namespace devices::ide

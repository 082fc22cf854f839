// The ATA disk through the registers: PIO (LBA28, LBA48, MULTIPLE), DMA through PRD tables,
// WRITE DMA FUA EXT, FLUSH CACHE, SET FEATURES, errors from the block layer.

#include <cstring>
#include <numeric>

#include "devices/ide/ata.h"
#include "devices/ide/ide_controller.h"
#include "devices/ide/ide_test_driver.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

using testing::AtaDriver;
using testing::IdeTestBed;
using testing::MakeDisk;
using testing::PrdEntry;
using testing::TestDisk;

std::vector<uint8_t> Pattern(size_t bytes, uint8_t seed) {
  std::vector<uint8_t> data(bytes);
  for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 7 + seed + i / 512);
  return data;
}

class IdeAtaTest : public ::testing::Test {
 protected:
  void Start(uint64_t disk_bytes = 8 << 20, block::CacheMode cache = block::CacheMode::kWriteback,
             bool native_fua = true) {
    disk_ = MakeDisk(disk_bytes, cache, native_fua);
    IdeControllerOptions options;
    options.drives.push_back(
        {.channel = 0, .unit = 0, .kind = DeviceKind::kDisk, .drive = disk_.drive});
    auto bed = IdeTestBed::Create(std::move(options));
    ASSERT_TRUE(bed.ok()) << bed.status();
    bed_ = *std::move(bed);
    ata_ = std::make_unique<AtaDriver>(*bed_, 0);
    ata_->Select(0);
  }
  void SetUp() override { Start(); }

  void Fill(uint64_t offset, const std::vector<uint8_t>& data) {
    ASSERT_TRUE(disk_.backend->WriteData(offset, data).ok());
  }
  std::vector<uint8_t> Stored(uint64_t offset, uint64_t length) {
    auto data = disk_.backend->ReadData(offset, length);
    return data.ok() ? *data : std::vector<uint8_t>{};
  }
  std::vector<uint8_t> Guest(uint64_t address, uint64_t length) {
    std::vector<uint8_t> data(length);
    EXPECT_TRUE(bed_->memory().Read(vmm::GuestAddress(address), data).ok());
    return data;
  }
  void PutGuest(uint64_t address, const std::vector<uint8_t>& data) {
    ASSERT_TRUE(bed_->memory().Write(vmm::GuestAddress(address), data).ok());
  }
  // A DMA command with the bus master set up as libata does it.
  uint8_t Dma(uint8_t command, uint64_t lba, uint16_t count, bool lba48, uint32_t table,
              bool to_memory) {
    ata_->SetupDma(table, to_memory);
    if (lba48) {
      ata_->Issue48(command, lba, count);
    } else {
      ata_->Issue28(command, lba, static_cast<uint8_t>(count));
    }
    ata_->StartDma();
    EXPECT_TRUE(ata_->WaitDma());
    const uint8_t bm_status = ata_->BmStatus();
    ata_->StopDma();
    last_status_ = ata_->Status();
    last_error_ = ata_->Error();
    return bm_status;
  }

  TestDisk disk_;
  std::unique_ptr<IdeTestBed> bed_;
  std::unique_ptr<AtaDriver> ata_;
  uint8_t last_status_ = 0;
  uint8_t last_error_ = 0;
};

TEST_F(IdeAtaTest, PioReadSectorsLba28) {
  const std::vector<uint8_t> data = Pattern(3 * 512, 1);
  Fill(100 * 512, data);
  ata_->Issue28(cmd::kReadSectors, 100, 3);
  EXPECT_EQ(ata_->PioIn(data.size(), 512), data);
  EXPECT_EQ(ata_->Status(), 0x50);
  // One interrupt per DRQ block, none after the last.
  EXPECT_EQ(bed_->irq(0).raises(), 3);
}

TEST_F(IdeAtaTest, PioReadWith32BitAccesses) {
  const std::vector<uint8_t> data = Pattern(2 * 512, 9);
  Fill(7 * 512, data);
  ata_->Issue28(cmd::kReadSectors, 7, 2);
  EXPECT_EQ(ata_->PioIn(data.size(), 512, /*wide=*/true), data);
}

TEST(IdeAtaLba48Test, PioReadAndWriteSectorsExtAbove2TiB) {
  // A sparse 4 TiB disk: LBA 0x1_2345_6789 needs all 48 bits' worth of HOB registers.
  TestDisk disk = MakeDisk(uint64_t{4} << 40);
  IdeControllerOptions options;
  options.drives.push_back(
      {.channel = 1, .unit = 1, .kind = DeviceKind::kDisk, .drive = disk.drive});
  auto bed = IdeTestBed::Create(std::move(options));
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver ata(**bed, 1);
  ata.Select(1);
  const uint64_t lba = 0x123456789;
  const std::vector<uint8_t> data = Pattern(2 * 512, 3);
  ata.Issue48(cmd::kWriteSectorsExt, lba, 2);
  EXPECT_EQ(ata.PioOut(data, 512), 0x50);
  auto stored = disk.backend->ReadData(lba * 512, data.size());
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(*stored, data);
  ata.Issue48(cmd::kReadSectorsExt, lba, 2);
  EXPECT_EQ(ata.PioIn(data.size(), 512), data);
  // HOB reads back the high order bytes of the address (Device Control bit 7).
  ata.DeviceControl(0x08 | control::kHob);
  EXPECT_EQ(ata.Reg(reg::kLbaLow), 0x23);
  EXPECT_EQ(ata.Reg(reg::kLbaMid), 0x01);
  ata.DeviceControl(0x08);
  EXPECT_EQ(ata.Reg(reg::kLbaLow), 0x89);
  EXPECT_EQ((*bed)->irq(1).raises(), 2 + 2);  // write: after each block; read: before each
}

TEST_F(IdeAtaTest, PioWriteSectors) {
  const std::vector<uint8_t> data = Pattern(4 * 512, 5);
  ata_->Issue28(cmd::kWriteSectors, 2000, 4);
  // PIO data-out: DRQ for the first block without an interrupt.
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->AltStatus(), 0x58);
  EXPECT_EQ(bed_->irq(0).raises(), 0);
  EXPECT_EQ(ata_->PioOut(data, 512, /*wide=*/true), 0x50);
  EXPECT_EQ(Stored(2000 * 512, data.size()), data);
  EXPECT_EQ(bed_->irq(0).raises(), 4);
  const auto ops = disk_.backend->operations();
  ASSERT_EQ(ops.size(), 4u);  // one write per DRQ block
  EXPECT_FALSE(ops[0].fua);
}

TEST_F(IdeAtaTest, ReadWriteMultiple) {
  // SET MULTIPLE MODE 4, then 10 sectors: blocks of 4, 4, 2.
  ata_->SetReg(reg::kCount, 4);
  ata_->Command(cmd::kSetMultipleMode);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  const std::vector<uint8_t> data = Pattern(10 * 512, 7);
  ata_->Issue28(cmd::kWriteMultiple, 50, 10);
  EXPECT_EQ(ata_->PioOut(data, 4 * 512), 0x50);
  EXPECT_EQ(disk_.backend->operation_count(), 3u);
  EXPECT_EQ(Stored(50 * 512, data.size()), data);
  ata_->Issue28(cmd::kReadMultiple, 50, 10);
  EXPECT_EQ(ata_->PioIn(data.size(), 4 * 512), data);
  ata_->Issue48(cmd::kReadMultipleExt, 50, 10);
  EXPECT_EQ(ata_->PioIn(data.size(), 4 * 512), data);
  ata_->Issue48(cmd::kWriteMultipleFuaExt, 60, 1);
  EXPECT_EQ(ata_->PioOut(std::vector<uint8_t>(512, 0xee), 4 * 512), 0x50);
  EXPECT_TRUE(disk_.backend->operations().back().fua);
}

TEST_F(IdeAtaTest, DmaReadThroughPrdTable) {
  const std::vector<uint8_t> data = Pattern(8 * 512, 11);
  Fill(300 * 512, data);
  // Two regions, the second ending the table exactly at the transfer's end.
  ata_->WritePrdTable(0x1000, {{0x100000, 1024, false}, {0x200000, 3072, true}});
  const uint8_t bm_status = Dma(cmd::kReadDma, 300, 8, false, 0x1000, /*to_memory=*/true);
  EXPECT_EQ(last_status_, 0x50);
  // SFF-8038i: Interrupt set, Active clear: the table was used exactly.
  EXPECT_EQ(bm_status & (bm::kStatInterrupt | bm::kStatActive | bm::kStatError),
            bm::kStatInterrupt);
  std::vector<uint8_t> got = Guest(0x100000, 1024);
  std::vector<uint8_t> second = Guest(0x200000, 3072);
  got.insert(got.end(), second.begin(), second.end());
  EXPECT_EQ(got, data);
  EXPECT_EQ(bed_->irq(0).raises(), 1);
}

TEST_F(IdeAtaTest, DmaReadExtWithLargerTableKeepsActive) {
  const std::vector<uint8_t> data = Pattern(2 * 512, 12);
  Fill(10 * 512, data);
  ata_->WritePrdTable(0x1000, {{0x100000, 0x10000, true}});
  const uint8_t bm_status = Dma(cmd::kReadDmaExt, 10, 2, true, 0x1000, true);
  EXPECT_EQ(last_status_, 0x50);
  // The table is larger than the transfer: a valid completion with Active still set.
  EXPECT_EQ(bm_status & (bm::kStatInterrupt | bm::kStatActive | bm::kStatError),
            bm::kStatInterrupt | bm::kStatActive);
  EXPECT_EQ(Guest(0x100000, data.size()), data);
}

TEST_F(IdeAtaTest, DmaWriteAndStartBeforeCommand) {
  const std::vector<uint8_t> data = Pattern(16 * 512, 13);
  PutGuest(0x300000, data);
  ata_->WritePrdTable(0x2000, {{0x300000, 8192, true}});
  // Some drivers start the engine first, then issue the command: same result.
  ata_->SetupDma(0x2000, /*to_memory=*/false);
  ata_->StartDma();
  ata_->Issue28(cmd::kWriteDma, 4000, 16);
  ASSERT_TRUE(ata_->WaitDma());
  ata_->StopDma();
  EXPECT_EQ(ata_->Status(), 0x50);
  EXPECT_EQ(Stored(4000 * 512, data.size()), data);
  const auto ops = disk_.backend->operations();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, block::RequestType::kWrite);
  EXPECT_EQ(ops[0].length, 8192u);
  EXPECT_FALSE(ops[0].fua);
}

TEST_F(IdeAtaTest, WriteDmaFuaExtReachesTheBackendAsFua) {
  const std::vector<uint8_t> data = Pattern(8 * 512, 14);
  PutGuest(0x300000, data);
  ata_->WritePrdTable(0x2000, {{0x300000, 4096, true}});
  Dma(cmd::kWriteDmaFuaExt, 0x800, 8, true, 0x2000, false);
  EXPECT_EQ(last_status_, 0x50);
  const auto ops = disk_.backend->operations();
  ASSERT_EQ(ops.size(), 1u);  // native FUA: one write, no flush
  EXPECT_EQ(ops[0].type, block::RequestType::kWrite);
  EXPECT_EQ(ops[0].offset, 0x800u * 512);
  EXPECT_TRUE(ops[0].fua);
  EXPECT_EQ(Stored(0x800 * 512, data.size()), data);
  // A plain WRITE DMA EXT: no FUA.
  Dma(cmd::kWriteDmaExt, 0x900, 8, true, 0x2000, false);
  EXPECT_FALSE(disk_.backend->operations().back().fua);
}

TEST_F(IdeAtaTest, WriteCacheDisabledMakesWritesFua) {
  ata_->SetReg(reg::kFeature, feature::kDisableWriteCache);
  ata_->Command(cmd::kSetFeatures);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  auto w = ata_->Identify(cmd::kIdentifyDevice);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ((*w)[85] & (1 << 5), 0);
  PutGuest(0x300000, Pattern(512, 1));
  ata_->WritePrdTable(0x2000, {{0x300000, 512, true}});
  Dma(cmd::kWriteDma, 1, 1, false, 0x2000, false);
  EXPECT_TRUE(disk_.backend->operations().back().fua);
  ata_->SetReg(reg::kFeature, feature::kEnableWriteCache);
  ata_->Command(cmd::kSetFeatures);
  ASSERT_TRUE(ata_->WaitNotBusy());
  Dma(cmd::kWriteDma, 1, 1, false, 0x2000, false);
  EXPECT_FALSE(disk_.backend->operations().back().fua);
}

TEST_F(IdeAtaTest, FlushCache) {
  for (uint8_t command : {cmd::kFlushCache, cmd::kFlushCacheExt}) {
    const uint64_t before = disk_.backend->operation_count();
    ata_->Command(command);
    ASSERT_TRUE(ata_->WaitNotBusy());
    EXPECT_EQ(ata_->Status(), 0x50);
    ASSERT_EQ(disk_.backend->operation_count(), before + 1);
    EXPECT_EQ(disk_.backend->operations().back().type, block::RequestType::kFlush);
  }
  EXPECT_EQ(bed_->irq(0).raises(), 2);
}

TEST_F(IdeAtaTest, BlockErrorsBecomeAtaErrors) {
  // A failed read: UNC with the LBA in the registers.
  disk_.backend->FailOperation(disk_.backend->operation_count(), EIO);
  ata_->Issue28(cmd::kReadSectors, 42, 1);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(ata_->Error(), error::kUnc);
  EXPECT_EQ(ata_->Reg(reg::kLbaLow), 42);
  // A failed DMA write: ABRT.
  PutGuest(0x300000, Pattern(512, 1));
  ata_->WritePrdTable(0x2000, {{0x300000, 512, true}});
  disk_.backend->FailOperation(disk_.backend->operation_count(), EIO);
  const uint8_t bm_status = Dma(cmd::kWriteDma, 5, 1, false, 0x2000, false);
  EXPECT_EQ(last_status_, status::kDrdy | status::kErr);
  EXPECT_EQ(last_error_, error::kAbrt);
  EXPECT_EQ(bm_status & bm::kStatError, 0);  // not a bus error
  // A failed flush: ABRT.
  disk_.backend->FailOperation(disk_.backend->operation_count(), EIO);
  ata_->Command(cmd::kFlushCacheExt);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(ata_->Error(), error::kAbrt);
  // And the disk works afterwards.
  const std::vector<uint8_t> data = Pattern(512, 2);
  Fill(42 * 512, data);
  ata_->Issue28(cmd::kReadSectors, 42, 1);
  EXPECT_EQ(ata_->PioIn(512, 512), data);
}

TEST_F(IdeAtaTest, AddressOutsideTheDiskIsIdnf) {
  const uint64_t sectors = (8 << 20) / 512;
  ata_->Issue28(cmd::kReadSectors, sectors - 1, 2);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), status::kDrdy | status::kErr);
  EXPECT_EQ(ata_->Error(), error::kIdnf);
  ata_->Issue48(cmd::kReadDmaExt, uint64_t{1} << 40, 1);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Error(), error::kIdnf);
  ata_->Issue28(cmd::kReadVerifySectors, sectors - 1, 1);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  EXPECT_EQ(disk_.backend->operation_count(), 0u);
}

TEST_F(IdeAtaTest, UnknownCommandsAbort) {
  for (uint8_t command : {uint8_t{0x00}, uint8_t{0x5a}, uint8_t{0xb0}, uint8_t{0x2f}, cmd::kPacket,
                          cmd::kIdentifyPacketDevice, cmd::kDeviceReset}) {
    ata_->Command(command);
    ASSERT_TRUE(ata_->WaitNotBusy());
    EXPECT_EQ(ata_->Status(), status::kDrdy | status::kErr) << int{command};
    EXPECT_EQ(ata_->Error(), error::kAbrt) << int{command};
  }
  ata_->Command(cmd::kCheckPowerMode);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  EXPECT_EQ(ata_->Error(), 0);
}

TEST_F(IdeAtaTest, ChsAddressing) {
  const std::vector<uint8_t> data = Pattern(512, 21);
  // Default translation 16 heads x 63 sectors: C/H/S 1/2/3 = (1*16+2)*63+2.
  Fill(((1 * 16 + 2) * 63 + 2) * 512, data);
  ata_->SetReg(reg::kCount, 1);
  ata_->SetReg(reg::kLbaLow, 3);
  ata_->SetReg(reg::kLbaMid, 1);
  ata_->SetReg(reg::kLbaHigh, 0);
  ata_->SetReg(reg::kDevice, 0xa2);
  ata_->Command(cmd::kReadSectors);
  EXPECT_EQ(ata_->PioIn(512, 512), data);
}

TEST_F(IdeAtaTest, ExecuteDeviceDiagnostic) {
  ata_->SetReg(reg::kLbaMid, 0x77);
  ata_->Command(cmd::kExecuteDeviceDiagnostic);
  ASSERT_TRUE(ata_->WaitNotBusy());
  EXPECT_EQ(ata_->Status(), 0x50);
  EXPECT_EQ(ata_->Error(), 0x01);
  EXPECT_EQ(ata_->Reg(reg::kLbaMid), 0);
  EXPECT_EQ(ata_->Reg(reg::kCount), 1);
  EXPECT_EQ(bed_->irq(0).raises(), 1);
}

}  // namespace
}  // namespace devices::ide

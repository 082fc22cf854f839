// The ATAPI CD-ROM through the registers: PACKET with PIO (byte count limit, DRQ blocks,
// interrupt reason) and DMA, the MMC unit behind it (devices/scsi's CdRom), REQUEST SENSE after
// errors, and a media change as Linux sees it on QEMU's ide-cd.

#include "block/media.h"
#include "devices/ide/ata.h"
#include "devices/ide/ide_controller.h"
#include "devices/ide/ide_test_driver.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

using testing::AtaDriver;
using testing::CdByte;
using testing::IdeTestBed;
using testing::MakeCd;
using testing::MakeCdMedium;
using testing::MakePacket;
using testing::PacketResult;
using testing::Read10;
using testing::TestCd;

constexpr uint64_t kDisc1Blocks = 4278;
constexpr uint64_t kDisc2Blocks = 310;

std::vector<uint8_t> Expected(uint32_t lba, uint32_t blocks, uint8_t seed) {
  std::vector<uint8_t> data(uint64_t{blocks} * 2048);
  for (size_t i = 0; i < data.size(); ++i) data[i] = CdByte(uint64_t{lba} * 2048 + i, seed);
  return data;
}

class IdeAtapiTest : public ::testing::Test {
 protected:
  void Start(uint64_t blocks) {
    cd_ = MakeCd(blocks);
    IdeControllerOptions options;
    options.drives.push_back(
        {.channel = 1, .unit = 0, .kind = DeviceKind::kCdRom, .drive = cd_.drive});
    auto bed = IdeTestBed::Create(std::move(options));
    ASSERT_TRUE(bed.ok()) << bed.status();
    bed_ = *std::move(bed);
    atapi_ = std::make_unique<AtaDriver>(*bed_, 1);
    atapi_->Select(0);
  }
  void SetUp() override { Start(kDisc1Blocks); }

  PacketResult Tur() { return atapi_->PacketPio(MakePacket({0x00}), 0); }

  TestCd cd_;
  std::unique_ptr<IdeTestBed> bed_;
  std::unique_ptr<AtaDriver> atapi_;
};

TEST_F(IdeAtapiTest, TestUnitReadyAndInquiry) {
  PacketResult tur = Tur();
  ASSERT_FALSE(tur.timed_out);
  EXPECT_EQ(tur.status, 0x50);  // GOOD; no power-on unit attention on IDE
  EXPECT_EQ(tur.reason, reason::kIo | reason::kCoD);
  EXPECT_TRUE(tur.data.empty());
  PacketResult inquiry = atapi_->PacketPio(MakePacket({0x12, 0, 0, 0, 36, 0}), 36);
  EXPECT_EQ(inquiry.status, 0x50);
  ASSERT_EQ(inquiry.data.size(), 36u);
  EXPECT_EQ(inquiry.data[0], 0x05);
  EXPECT_EQ(inquiry.data[1], 0x80);
  EXPECT_EQ(inquiry.block_sizes, std::vector<uint32_t>{36});
}

TEST_F(IdeAtapiTest, Read10PioWithSmallByteCountLimit) {
  // Two blocks under a byte count limit of 1000 (less than a sector): DRQ blocks of 1000 bytes,
  // the last one shorter; interrupt reason IO=1 CoD=0 on each.
  PacketResult r = atapi_->PacketPio(Read10(17, 2), 1000);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.block_sizes, (std::vector<uint32_t>{1000, 1000, 1000, 1000, 96}));
  EXPECT_EQ(r.data, Expected(17, 2, 0));
  // One INTRQ per data block plus the status phase.
  EXPECT_EQ(bed_->irq(1).raises(), 6);
}

TEST_F(IdeAtapiTest, OddByteCountLimitIsRoundedDown) {
  PacketResult r = atapi_->PacketPio(Read10(0, 1), 1001, /*wide=*/false);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.block_sizes, (std::vector<uint32_t>{1000, 1000, 48}));
  EXPECT_EQ(r.data, Expected(0, 1, 0));
}

TEST_F(IdeAtapiTest, OddLengthResponseWithDwordReads) {
  // READ CAPACITY is 8 bytes; INQUIRY alloc 5 gives an odd block that Linux reads with a dword
  // and a word for the slop.
  PacketResult r = atapi_->PacketPio(MakePacket({0x12, 0, 0, 0, 5, 0}), 0xfffe);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.block_sizes, std::vector<uint32_t>{5});
  ASSERT_EQ(r.data.size(), 5u);
  EXPECT_EQ(r.data[0], 0x05);
  PacketResult cap = atapi_->PacketPio(MakePacket({0x25}), 8);
  ASSERT_EQ(cap.data.size(), 8u);
  EXPECT_EQ(cap.data[3], (kDisc1Blocks - 1) & 0xff);
  EXPECT_EQ(cap.data[6], 0x08);
}

// What SeaBIOS does: the packet written with one rep outsw, each 2048-byte DRQ block read with
// one rep insw. A string that runs past a block reads on into the next one, and past the last
// one reads zeros, exactly as the same words read one at a time would.
TEST_F(IdeAtapiTest, StringIoReadsAcrossDrqBlocks) {
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->SetReg(reg::kFeature, 0);
  atapi_->SetReg(reg::kLbaMid, 0x00);
  atapi_->SetReg(reg::kLbaHigh, 0x08);  // byte count limit 2048
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  const Packet cdb = Read10(30, 2);
  bed_->OutString(atapi_->command_base(), 2, cdb);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  ASSERT_EQ(atapi_->AltStatus() & status::kDrq, status::kDrq);
  std::vector<uint8_t> data(2 * 2048 + 8, 0xee);
  bed_->InString(atapi_->command_base(), 2, data);
  std::vector<uint8_t> want = Expected(30, 2, 0);
  want.resize(data.size(), 0);
  EXPECT_EQ(data, want);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->Status(), 0x50);
  EXPECT_EQ(atapi_->Reg(reg::kCount), reason::kIo | reason::kCoD);
}

TEST_F(IdeAtapiTest, Read10Dma) {
  PacketResult r = atapi_->PacketDma(Read10(100, 16), 0x1000, 0x100000, 16 * 2048);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.reason, reason::kIo | reason::kCoD);
  EXPECT_EQ(r.data, Expected(100, 16, 0));
  EXPECT_EQ(r.bm_status & (bm::kStatInterrupt | bm::kStatActive | bm::kStatError),
            bm::kStatInterrupt);
  EXPECT_EQ(bed_->irq(1).raises(), 1);
}

TEST_F(IdeAtapiTest, DmaShorterResponseThanTableIsValid) {
  // MODE SENSE(10) page 2Ah alloc 128 by DMA (what Linux does): fewer bytes come back than the
  // 128-byte table holds: Interrupt with Active still set (SFF-8038i, a valid completion).
  PacketResult r =
      atapi_->PacketDma(MakePacket({0x5a, 0, 0x2a, 0, 0, 0, 0, 0, 0x80, 0}), 0x1000, 0x100000, 128);
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.data[8] & 0x3f, 0x2a);
  EXPECT_EQ(r.bm_status & (bm::kStatInterrupt | bm::kStatActive | bm::kStatError),
            bm::kStatInterrupt | bm::kStatActive);
}

TEST_F(IdeAtapiTest, BusMasterStatusAfterExactDma) {
  atapi_->WritePrdTable(0x1000, {{0x100000, 2048, true}});
  atapi_->SetupDma(0x1000, true);
  atapi_->SetReg(reg::kFeature, kPacketFeatureDma);
  atapi_->SetReg(reg::kLbaMid, 0);
  atapi_->SetReg(reg::kLbaHigh, 8);
  atapi_->Command(cmd::kPacket);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  atapi_->WriteData(Read10(1, 1), /*wide=*/true);
  atapi_->StartDma();
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->BmStatus() & (bm::kStatInterrupt | bm::kStatActive | bm::kStatError),
            bm::kStatInterrupt);
  atapi_->StopDma();
  EXPECT_EQ(atapi_->Status(), 0x50);
}

TEST(IdeAtapiEmptyTest, EmptyDriveIsNotReady) {
  TestCd cd = MakeCd(0);
  IdeControllerOptions options;
  options.drives.push_back(
      {.channel = 0, .unit = 1, .kind = DeviceKind::kCdRom, .drive = cd.drive});
  auto bed = IdeTestBed::Create(std::move(options));
  ASSERT_TRUE(bed.ok()) << bed.status();
  AtaDriver atapi(**bed, 0);
  atapi.Select(1);
  PacketResult tur = atapi.PacketPio(MakePacket({0x00}), 0);
  // CHECK CONDITION: status DRDY|ERR (41h), sense key NOT READY in Error bits 7:4 (20h).
  EXPECT_EQ(tur.status, 0x41);
  EXPECT_EQ(tur.error, 0x20);
  EXPECT_EQ(tur.reason, reason::kIo | reason::kCoD);
  const std::array<uint8_t, 3> sense = atapi.RequestSense();
  EXPECT_EQ(sense[0], 0x02);
  EXPECT_EQ(sense[1], 0x3a);
  // A read without a medium: NOT READY, and nothing waits for DMA.
  PacketResult read = atapi.PacketDma(Read10(0, 1), 0x1000, 0x100000, 2048);
  EXPECT_FALSE(read.timed_out);
  EXPECT_EQ(read.status, 0x41);
  EXPECT_EQ(read.error, 0x20);
}

TEST_F(IdeAtapiTest, MediaChangeIsNotReadyThenUnitAttentionThenNewData) {
  ASSERT_EQ(Tur().status, 0x50);
  ASSERT_TRUE(cd_.media->Eject(/*force=*/true).ok());
  // Tray open, no medium: NOT READY, MEDIUM NOT PRESENT.
  PacketResult empty = Tur();
  EXPECT_EQ(empty.status, 0x41);
  EXPECT_EQ(empty.error, 0x20);
  EXPECT_EQ(atapi_->RequestSense()[1], 0x3a);
  ASSERT_TRUE(cd_.media->Insert(MakeCdMedium(kDisc2Blocks, 0x40), "cd2.iso").ok());
  // docs/linux-commands.md 3.6: TUR -> 02/3A (error 20h), REQUEST SENSE, TUR -> 06/28
  // (error 60h), REQUEST SENSE, TUR -> GOOD.
  PacketResult first = Tur();
  EXPECT_EQ(first.status, 0x41);
  EXPECT_EQ(first.error, 0x20);
  std::array<uint8_t, 3> sense = atapi_->RequestSense();
  EXPECT_EQ(sense, (std::array<uint8_t, 3>{0x02, 0x3a, 0x00}));
  PacketResult second = Tur();
  EXPECT_EQ(second.status, 0x41);
  EXPECT_EQ(second.error, 0x60);
  sense = atapi_->RequestSense();
  EXPECT_EQ(sense, (std::array<uint8_t, 3>{0x06, 0x28, 0x00}));
  EXPECT_EQ(Tur().status, 0x50);
  PacketResult cap = atapi_->PacketPio(MakePacket({0x25}), 8);
  ASSERT_EQ(cap.data.size(), 8u);
  EXPECT_EQ(cap.data[2] << 8 | cap.data[3], kDisc2Blocks - 1);
  PacketResult read = atapi_->PacketDma(Read10(16, 2), 0x1000, 0x100000, 2 * 2048);
  EXPECT_EQ(read.status, 0x50);
  EXPECT_EQ(read.data, Expected(16, 2, 0x40));
}

TEST_F(IdeAtapiTest, CheckConditionKeepsSenseForRequestSense) {
  // LBA out of range: ILLEGAL REQUEST 05/21, with ABRT (an invalid parameter).
  PacketResult r = atapi_->PacketPio(Read10(kDisc1Blocks, 1), 2048);
  EXPECT_EQ(r.status, 0x41);
  EXPECT_EQ(r.error, 0x54);
  EXPECT_TRUE(r.data.empty());
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x05, 0x21, 0x00}));
  // Unknown opcode: 05/20.
  r = atapi_->PacketPio(MakePacket({0xff}), 0);
  EXPECT_EQ(r.error, 0x54);
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x05, 0x20, 0x00}));
  // The sense is consumed.
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x00, 0x00, 0x00}));
}

TEST_F(IdeAtapiTest, LinuxProbeSequence) {
  // The MMC commands of docs/linux-commands.md 3.2, PIO or DMA as libata chose them.
  EXPECT_EQ(Tur().status, 0x50);
  EXPECT_EQ(atapi_->PacketPio(MakePacket({0x12, 1, 0, 0, 4, 0}), 4).status, 0x50);
  PacketResult mode =
      atapi_->PacketDma(MakePacket({0x5a, 0, 0x2a, 0, 0, 0, 0, 0, 0x80, 0}), 0x1000, 0x100000, 128);
  EXPECT_EQ(mode.status, 0x50);
  PacketResult config =
      atapi_->PacketDma(MakePacket({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}), 0x1000, 0x100000, 32);
  EXPECT_EQ(config.status, 0x50);
  EXPECT_EQ(config.data[7], 0x08);  // current profile: CD-ROM
  PacketResult toc = atapi_->PacketPio(MakePacket({0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0}), 12);
  EXPECT_EQ(toc.status, 0x50);
  EXPECT_EQ(toc.data.size(), 12u);
  PacketResult gesn = atapi_->PacketPio(MakePacket({0x4a, 1, 0, 0, 0x10, 0, 0, 0, 8, 0}), 8);
  EXPECT_EQ(gesn.status, 0x50);
  ASSERT_EQ(gesn.data.size(), 8u);
  EXPECT_EQ(gesn.data[5], 0x02);  // media present
  // PREVENT reaches the media state (the block layer's cache), ALLOW undoes it.
  EXPECT_EQ(atapi_->PacketPio(MakePacket({0x1e, 0, 0, 0, 1, 0}), 0).status, 0x50);
  EXPECT_TRUE(cd_.media->Current()->locked);
  EXPECT_EQ(atapi_->PacketPio(MakePacket({0x1e, 0, 0, 0, 0, 0}), 0).status, 0x50);
  EXPECT_FALSE(cd_.media->Current()->locked);
}

TEST_F(IdeAtapiTest, ModeSelectPioDataOut) {
  // MODE SELECT(10) of a bare 8-byte header: a data-out phase in DRQ blocks of at most 4 bytes
  // (interrupt reason IO=0, CoD=0), then GOOD.
  std::vector<uint8_t> header = {0, 0, 0, 0, 0, 0, 0, 0};
  PacketResult r =
      atapi_->PacketPioOut(MakePacket({0x55, 0x10, 0, 0, 0, 0, 0, 0, 8, 0}), 4, header);
  ASSERT_FALSE(r.timed_out);
  EXPECT_EQ(r.block_sizes, (std::vector<uint32_t>{4, 4}));
  EXPECT_EQ(r.status, 0x50);
  EXPECT_EQ(r.reason, reason::kIo | reason::kCoD);
  // The parameter data reaches the unit: a page it cannot take is refused (05/26).
  std::vector<uint8_t> bad = {0, 0, 0, 0, 0, 0, 0, 0, 0x2a, 0x02, 0xff, 0xff};
  r = atapi_->PacketPioOut(MakePacket({0x55, 0x10, 0, 0, 0, 0, 0, 0, 12, 0}), 0xfffe, bad);
  EXPECT_EQ(r.block_sizes, std::vector<uint32_t>{12});
  EXPECT_EQ(r.status, 0x41);
  EXPECT_EQ(r.error, 0x54);
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x05, 0x26, 0x00}));
}

TEST_F(IdeAtapiTest, GuestEjectAndLock) {
  // PREVENT, then START STOP UNIT with LoEj (eject): refused 05/53/02, the media layer hears an
  // eject request; after ALLOW the eject opens the tray, and reads are NOT READY.
  ASSERT_EQ(atapi_->PacketPio(MakePacket({0x1e, 0, 0, 0, 1, 0}), 0).status, 0x50);
  PacketResult r = atapi_->PacketPio(MakePacket({0x1b, 0, 0, 0, 0x02, 0}), 0);
  EXPECT_EQ(r.status, 0x41);
  EXPECT_EQ(r.error, 0x54);
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x05, 0x53, 0x02}));
  EXPECT_FALSE(cd_.media->Current()->tray_open);
  ASSERT_EQ(atapi_->PacketPio(MakePacket({0x1e, 0, 0, 0, 0, 0}), 0).status, 0x50);
  EXPECT_EQ(atapi_->PacketPio(MakePacket({0x1b, 0, 0, 0, 0x02, 0}), 0).status, 0x50);
  EXPECT_TRUE(cd_.media->Current()->tray_open);
  PacketResult read = atapi_->PacketDma(Read10(0, 1), 0x1000, 0x100000, 2048);
  EXPECT_EQ(read.status, 0x41);
  EXPECT_EQ(read.error, 0x20);
  EXPECT_EQ(atapi_->RequestSense(), (std::array<uint8_t, 3>{0x02, 0x3a, 0x02}));
  // Load (close the tray) again: the same medium reads.
  EXPECT_EQ(atapi_->PacketPio(MakePacket({0x1b, 0, 0, 0, 0x03, 0}), 0).status, 0x50);
  read = atapi_->PacketDma(Read10(5, 1), 0x1000, 0x100000, 2048);
  EXPECT_EQ(read.status, 0x50);
  EXPECT_EQ(read.data, Expected(5, 1, 0));
}

TEST_F(IdeAtapiTest, DeviceResetShowsSignatureWithoutInterrupt) {
  ASSERT_EQ(atapi_->PacketPio(MakePacket({0x1e, 0, 0, 0, 1, 0}), 0).status, 0x50);
  const int raises = bed_->irq(1).raises();
  atapi_->Command(cmd::kDeviceReset);
  ASSERT_TRUE(atapi_->WaitNotBusy());
  EXPECT_EQ(atapi_->AltStatus(), 0x00);
  EXPECT_EQ(atapi_->Reg(reg::kLbaMid), 0x14);
  EXPECT_EQ(atapi_->Reg(reg::kLbaHigh), 0xeb);
  EXPECT_EQ(atapi_->Error(), 0x01);
  EXPECT_EQ(bed_->irq(1).raises(), raises);
  EXPECT_FALSE(cd_.media->Current()->locked);  // a logical unit reset clears the lock
  EXPECT_EQ(Tur().status, 0x50);
}

TEST_F(IdeAtapiTest, MediaStateIsNotProbedPerCommand) {
  auto medium = MakeCdMedium(64, 1);
  ASSERT_TRUE(cd_.media->Eject(true).ok());
  ASSERT_TRUE(cd_.media->Insert(medium, "probe.iso").ok());
  Tur();
  atapi_->RequestSense();
  Tur();
  atapi_->RequestSense();
  ASSERT_EQ(Tur().status, 0x50);
  // The first read opens the new medium's queue: the one time its backend is asked anything.
  ASSERT_EQ(atapi_->PacketDma(Read10(0, 1), 0x1000, 0x100000, 2048).status, 0x50);
  const uint64_t before = medium->info_calls();
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(Tur().status, 0x50);
    ASSERT_EQ(atapi_->PacketDma(Read10(i, 1), 0x1000, 0x100000, 2048).status, 0x50);
  }
  EXPECT_EQ(medium->info_calls(), before);
}

}  // namespace
}  // namespace devices::ide

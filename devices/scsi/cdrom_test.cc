// The MMC-6 CD/DVD unit on a removable drive with MemoryBackend media.

#include "devices/scsi/cdrom.h"

#include <string>
#include <vector>

#include "block/media.h"
#include "block/memory_backend.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/test_harness.h"
#include "gtest/gtest.h"

namespace devices::scsi {
namespace {

using testing::Cdb10;
using testing::Harness;
using testing::MakeMedium;
using testing::Result;
using testing::RunOptions;

constexpr uint64_t kDisc1Blocks = 4278;  // cd1.iso of the Linux captures: 8,761,344 bytes
constexpr uint64_t kDisc2Blocks = 310;   // cd2.iso: 634,880 bytes

const std::initializer_list<uint8_t> kTur = {0x00, 0, 0, 0, 0, 0};
const std::initializer_list<uint8_t> kGesn = {0x4a, 0x01, 0, 0, 0x10, 0, 0, 0, 0x08, 0};

class CdRomTest : public ::testing::Test {
 protected:
  void Start(std::shared_ptr<block::BlockBackend> medium, LogicalUnitOptions unit = {}) {
    absl::StatusOr<testing::CdSetup> setup = testing::MakeCdRom(std::move(medium), unit);
    ASSERT_TRUE(setup.ok()) << setup.status();
    setup_ = *std::move(setup);
    absl::StatusOr<std::unique_ptr<Harness>> harness = Harness::ForUnit(setup_.cd);
    ASSERT_TRUE(harness.ok()) << harness.status();
    harness_ = *std::move(harness);
  }
  void StartReady(uint64_t blocks = kDisc1Blocks) {
    Start(MakeMedium(blocks));
    ASSERT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
    ASSERT_TRUE(Run(kTur).good());
  }
  // The ATAPI configuration (what the IDE transport will use).
  void StartAtapi(std::shared_ptr<block::BlockBackend> medium) {
    LogicalUnitOptions unit;
    unit.power_on_unit_attention = false;
    unit.media_change_report = MediaChangeReport::kNotReadyThenUnitAttention;
    unit.physical_interface = 2;
    Start(std::move(medium), unit);
  }

  Result Run(std::initializer_list<uint8_t> cdb, size_t in = 0) { return harness_->In(cdb, in); }
  Result Run(const std::vector<uint8_t>& cdb, size_t in = 0) {
    RunOptions options;
    options.data_in_size = in;
    return harness_->Run(cdb, options);
  }
  uint8_t GesnEvent() {
    const Result r = Run(kGesn, 8);
    EXPECT_TRUE(r.good());
    return r.data.size() == 8 ? r.data[4] : 0xff;
  }
  uint8_t GesnStatus() {
    const Result r = Run(kGesn, 8);
    return r.data.size() == 8 ? r.data[5] : 0xff;
  }
  Sense RequestSense() {
    const Result r = Run({0x03, 0, 0, 0, 0x60, 0}, 96);  // libata's REQUEST SENSE
    EXPECT_TRUE(r.good());
    EXPECT_EQ(r.data.size(), 18u);
    return Sense{static_cast<SenseKey>(r.data[2] & 0x0f), r.data[12], r.data[13]};
  }
  uint32_t Capacity() {
    const Result r = Run({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8);
    EXPECT_TRUE(r.good()) << ::testing::PrintToString(r.sense);
    return r.data.size() == 8 ? Be32(&r.data[0]) + 1 : 0;
  }

  testing::CdSetup setup_;
  std::unique_ptr<Harness> harness_;
};

TEST_F(CdRomTest, Inquiry) {
  Start(MakeMedium(16));
  const Result r = Run({0x12, 0, 0, 0, 36, 0}, 36);
  ASSERT_TRUE(r.good());
  EXPECT_EQ(r.data[0], 0x05);
  EXPECT_EQ(r.data[1], 0x80);  // RMB
  EXPECT_EQ(std::string(r.data.begin() + 16, r.data.begin() + 32), "VIRTUAL DVD-ROM ");
  // ATAPI's VPD 0x83 with alloc 4: truncated, GOOD (QEMU's ATAPI answers 05/4B here).
  const Result id = Run({0x12, 1, 0x83, 0, 4, 0}, 4);
  ASSERT_TRUE(id.good());
  EXPECT_EQ(id.data.size(), 4u);
  const Result list = Run({0x12, 1, 0, 0, 36, 0}, 36);
  EXPECT_EQ(list.data, (std::vector<uint8_t>{5, 0, 0, 3, 0x00, 0x80, 0x83}));
}

// SPC-4 7.8.15 and 7.8.6: the serial, and one T10 vendor ID designator built from it.
TEST_F(CdRomTest, SerialAndDeviceIdentificationPages) {
  Start(MakeMedium(16));
  const Result serial = Run({0x12, 1, 0x80, 0, 0xff, 0}, 255);
  ASSERT_TRUE(serial.good());
  ASSERT_GE(serial.data.size(), 4u);
  EXPECT_EQ(serial.data[0], 0x05);
  EXPECT_EQ(serial.data[1], 0x80);
  const std::string text(serial.data.begin() + 4, serial.data.end());
  EXPECT_EQ(serial.data[3], text.size());
  EXPECT_FALSE(text.empty());
  const Result id = Run({0x12, 1, 0x83, 0, 0xff, 0}, 255);
  ASSERT_TRUE(id.good());
  const std::vector<uint8_t>& d = id.data;
  ASSERT_EQ(d.size(), 4u + 4 + 8 + text.size());
  EXPECT_EQ(d[3], 4 + 8 + text.size());  // one designator
  EXPECT_EQ(d[4], 0x02);                 // ASCII
  EXPECT_EQ(d[5], 0x01);                 // logical unit, T10 vendor ID
  EXPECT_EQ(d[7], 8 + text.size());
  EXPECT_EQ(std::string(d.begin() + 16, d.end()), text);
}

// docs/linux-commands.md 2.1 and 2.3: sr's probe and first open.
TEST_F(CdRomTest, LinuxProbeAndOpenSequence) {
  Start(MakeMedium(kDisc1Blocks));
  EXPECT_TRUE(Run({0x12, 0, 0, 0, 0x24, 0}, 36).good());
  EXPECT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
  EXPECT_TRUE(Run(kTur).good());
  const Result caps = Run({0x1a, 0, 0x2a, 0, 0x80, 0}, 128);
  ASSERT_TRUE(caps.good());
  ASSERT_EQ(caps.data.size(), 4u + 22);
  EXPECT_EQ(caps.data[3], 0);  // no block descriptors
  EXPECT_EQ(caps.data[4], 0x2a);
  EXPECT_EQ(caps.data[5], 0x14);
  EXPECT_EQ(Be16(&caps.data[4 + 8]) / 176, 50);  // "16x/50x"
  EXPECT_EQ(Be16(&caps.data[4 + 14]) / 176, 16);
  EXPECT_EQ(caps.data[4 + 6] >> 5, 1);  // tray
  // MRW and random-writable probes: the first feature returned is not theirs.
  const Result mrw = Run({0x46, 0, 0x00, 0x28, 0, 0, 0, 0, 0x10, 0}, 16);
  ASSERT_TRUE(mrw.good());
  EXPECT_NE(Be16(&mrw.data[8]), 0x0028);
  const Result rwrt = Run({0x46, 0, 0x00, 0x20, 0, 0, 0, 0, 0x18, 0}, 24);
  ASSERT_TRUE(rwrt.good());
  EXPECT_NE(Be16(&rwrt.data[8]), 0x0020);
  // Session information through the old control-byte format (0x40).
  const Result session = Run({0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0x40}, 12);
  ASSERT_TRUE(session.good());
  EXPECT_EQ(session.data,
            (std::vector<uint8_t>{0x00, 0x0a, 0x01, 0x01, 0x00, 0x14, 0x01, 0x00, 0, 0, 0, 0}));
  const Result toc = Run({0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0}, 12);
  ASSERT_TRUE(toc.good());
  EXPECT_EQ(toc.data,
            (std::vector<uint8_t>{0x00, 0x12, 0x01, 0x01, 0x00, 0x14, 0x01, 0x00, 0, 0, 0, 0}));
  EXPECT_TRUE(Run({0x43, 0, 0, 0, 0, 0, 1, 0, 0x0c, 0}, 12).good());
  EXPECT_EQ(Capacity(), kDisc1Blocks);
  const Result disc2 = Run({0x51, 0, 0, 0, 0, 0, 0, 0, 0x02, 0}, 2);
  EXPECT_EQ(disc2.data, (std::vector<uint8_t>{0x00, 0x20}));
  const Result disc = Run({0x51, 0, 0, 0, 0, 0, 0, 0, 0x22, 0}, 34);
  ASSERT_TRUE(disc.good());
  EXPECT_EQ(disc.data[2], 0x0e);
  EXPECT_EQ(disc.data[6], 1);  // last track in last session
  // READ TRACK INFORMATION, which QEMU lacks: track 1 covers the medium.
  const Result track8 = Run({0x52, 0x01, 0, 0, 0, 0x01, 0, 0, 0x08, 0}, 8);
  ASSERT_TRUE(track8.good());
  const Result track = Run({0x52, 0x01, 0, 0, 0, 0x01, 0, 0, 0x24, 0}, 36);
  ASSERT_TRUE(track.good());
  EXPECT_EQ(Be32(&track.data[8]) + Be32(&track.data[24]), kDisc1Blocks);  // sr's last written
  EXPECT_EQ(track.data[7] & 0x03, 0);                                     // no NWA/LRA
  // The lead-out in MSF: 4278 + 150 frames = 00:59:03.
  const Result leadout = Run({0x43, 0x02, 0, 0, 0, 0, 0xaa, 0, 0x0c, 0}, 12);
  EXPECT_EQ(leadout.data,
            (std::vector<uint8_t>{0x00, 0x0a, 0x01, 0x01, 0x00, 0x14, 0xaa, 0x00, 0, 0, 0x3b, 3}));
  EXPECT_EQ(GesnEvent(), 0);
  EXPECT_TRUE(Run({0x1e, 0, 0, 0, 1, 0}).good());  // PREVENT
  const Result config = Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32);
  ASSERT_TRUE(config.good());
  EXPECT_EQ(Be16(&config.data[6]), 0x0008);        // current profile CD-ROM
  EXPECT_TRUE(Run({0x1e, 0, 0, 0, 0, 0}).good());  // ALLOW
  // Then a mount: READ(10) of the volume descriptors.
  const Result pvd = Run(Cdb10(0x28, 0, 16, 1), 2048);
  ASSERT_TRUE(pvd.good());
  EXPECT_EQ(pvd.data, std::vector<uint8_t>(2048, 16));
}

TEST_F(CdRomTest, ReadCommands) {
  StartReady(64);
  const Result r10 = Run(Cdb10(0x28, 0, 3, 2), 4096);
  ASSERT_TRUE(r10.good());
  EXPECT_EQ(r10.data[0], 3);
  EXPECT_EQ(r10.data[2048], 4);
  EXPECT_FALSE(r10.synchronous);
  const Result r12 = Run({0xa8, 0, 0, 0, 0, 60, 0, 0, 0, 4, 0, 0}, 8192);
  ASSERT_TRUE(r12.good());
  EXPECT_EQ(r12.data[8191], 63);
  // READ CD, user data of any sector type / of mode 1.
  const Result cd = Run({0xbe, 0x00, 0, 0, 0, 7, 0, 0, 1, 0x10, 0, 0}, 2048);
  ASSERT_TRUE(cd.good());
  EXPECT_EQ(cd.data, std::vector<uint8_t>(2048, 7));
  EXPECT_TRUE(Run({0xbe, 0x08, 0, 0, 0, 7, 0, 0, 1, 0x10, 0, 0}, 2048).good());
  EXPECT_TRUE(Run({0xbe, 0x00, 0, 0, 0, 7, 0, 0, 1, 0x00, 0, 0}, 2048).good());  // no fields
  EXPECT_EQ(Run({0xbe, 0x00, 0, 0, 0, 7, 0, 0, 1, 0xf8, 0, 0}, 2352).sense,
            sense::kInvalidFieldInCdb);  // raw sectors
  EXPECT_EQ(Run({0xbe, 0x04, 0, 0, 0, 7, 0, 0, 1, 0x10, 0, 0}, 2352).sense,
            sense::kIllegalModeForThisTrack);  // CD-DA
  EXPECT_EQ(Run({0xbe, 0x00, 0, 0, 0, 7, 0, 0, 1, 0x10, 1, 0}, 2048).sense,
            sense::kInvalidFieldInCdb);  // sub-channel
  // Range, and writes are not CD commands.
  EXPECT_EQ(Run(Cdb10(0x28, 0, 63, 2), 4096).sense, sense::kLbaOutOfRange);
  EXPECT_TRUE(Run(Cdb10(0x28, 0, 64, 0), 0).good());
  EXPECT_EQ(Run(Cdb10(0x2a, 0, 0, 1), 0).sense, sense::kInvalidCommandOperationCode);
  EXPECT_EQ(Run(Cdb10(0x28, 0, 0, 2), 2048).sense, sense::kInvalidFieldInCdb);  // overrun
  EXPECT_TRUE(Run(Cdb10(0x2b, 0, 63, 0)).good());                               // SEEK
  EXPECT_EQ(Run(Cdb10(0x2b, 0, 64, 0)).sense, sense::kLbaOutOfRange);
  EXPECT_TRUE(Run({0xbb, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0}).good());  // SET CD SPEED
}

TEST_F(CdRomTest, HotPathAsksTheBackendNothingPerCommand) {
  std::shared_ptr<block::MemoryBackend> medium = MakeMedium(64);
  Start(medium);
  ASSERT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
  ASSERT_TRUE(Run(Cdb10(0x28, 0, 0, 1), 2048).good());
  const uint64_t before = medium->info_calls();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Run(Cdb10(0x28, 0, i, 1), 2048).good());
    ASSERT_TRUE(Run(kTur).good());
    ASSERT_EQ(Capacity(), 64u);
  }
  EXPECT_EQ(medium->info_calls(), before);
}

TEST_F(CdRomTest, NoMedium) {
  Start(nullptr);
  EXPECT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
  // An empty drive's tray is open (RemovableMedia's initial state without a medium)...
  const Sense not_ready = Run(kTur).sense;
  EXPECT_TRUE(not_ready == sense::kMediumNotPresentTrayClosed ||
              not_ready == sense::kMediumNotPresentTrayOpen);
  ASSERT_TRUE(setup_.media->SetTrayOpen(false, false).ok());
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentTrayClosed);
  ASSERT_TRUE(setup_.media->SetTrayOpen(true, false).ok());
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentTrayOpen);
  EXPECT_EQ(Run(Cdb10(0x28, 0, 0, 1), 2048).sense, sense::kMediumNotPresentTrayOpen);
  EXPECT_EQ(Run({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8).sense, sense::kMediumNotPresentTrayOpen);
  EXPECT_EQ(Run({0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0}, 12).sense, sense::kMediumNotPresentTrayOpen);
  // Not medium commands work.
  EXPECT_TRUE(Run({0x12, 0, 0, 0, 36, 0}, 36).good());
  EXPECT_TRUE(Run({0x1a, 0, 0x2a, 0, 0x80, 0}, 128).good());
  const Result config = Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32);
  ASSERT_TRUE(config.good());
  EXPECT_EQ(Be16(&config.data[6]), 0);  // no current profile
  EXPECT_EQ(GesnStatus(), 0x01);        // tray open
  // REQUEST SENSE reports the current condition.
  EXPECT_EQ(RequestSense(), sense::kMediumNotPresentTrayOpen);
  const Result mech = Run({0xbd, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, 8);
  EXPECT_EQ(mech.data[1], 0x10);  // door open
}

// docs/linux-commands.md 2.6, virtio-scsi: eject -f, change, then the next open sees
// 06/3A/00, 06/28/00, and the new disc.
TEST_F(CdRomTest, MediaChangeScsiStyle) {
  StartReady();
  ASSERT_TRUE(setup_.media->Eject(/*force=*/true).ok());
  // Polling meanwhile: GESN sees the removal and the open tray, and does not consume the UA.
  EXPECT_EQ(GesnEvent(), 3);  // MediaRemoval
  EXPECT_EQ(GesnStatus(), 0x01);
  EXPECT_EQ(GesnEvent(), 0);
  ASSERT_TRUE(setup_.media->Insert(MakeMedium(kDisc2Blocks, 100), "cd2.iso").ok());
  EXPECT_EQ(GesnEvent(), 2);  // NewMedia, once
  EXPECT_EQ(GesnEvent(), 0);
  EXPECT_EQ(GesnStatus(), 0x02);
  EXPECT_TRUE(Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32).good());  // GET CONFIGURATION
  // The open.
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentAttention);
  EXPECT_EQ(Run(kTur).sense, sense::kNotReadyToReadyChange);
  EXPECT_TRUE(Run(kTur).good());
  EXPECT_EQ(Capacity(), kDisc2Blocks);
  const Result read = Run(Cdb10(0x28, 0, 16, 1), 2048);
  ASSERT_TRUE(read.good());
  EXPECT_EQ(read.data, std::vector<uint8_t>(2048, 116));
}

TEST_F(CdRomTest, MediaChangeScsiStyleWithCommandsWhileEmpty) {
  StartReady();
  ASSERT_TRUE(setup_.media->Eject(true).ok());
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentAttention);
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentTrayOpen);  // no 06/28/00: nothing loaded
  ASSERT_TRUE(setup_.media->Insert(MakeMedium(kDisc2Blocks, 100), "cd2.iso").ok());
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentAttention);
  EXPECT_EQ(Run(kTur).sense, sense::kNotReadyToReadyChange);
  EXPECT_TRUE(Run(kTur).good());
}

// docs/linux-commands.md 3.6, ATAPI: NOT READY, then UNIT ATTENTION, each fetched with REQUEST
// SENSE by libata, then the new disc's data.
TEST_F(CdRomTest, MediaChangeAtapiStyle) {
  StartAtapi(MakeMedium(kDisc1Blocks));
  EXPECT_TRUE(Run(kTur).good());  // no power-on unit attention on ATAPI
  EXPECT_EQ(GesnEvent(), 0);
  ASSERT_TRUE(setup_.media->Eject(true).ok());
  // MediaRemoval, tray open (QEMU's ATAPI reports NoChg here; Linux 6.1 treats both alike).
  EXPECT_EQ(Run(kGesn, 8).data, (std::vector<uint8_t>{0x00, 0x04, 0x04, 0x10, 0x03, 0x01, 0, 0}));
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentTrayOpen);
  EXPECT_EQ(RequestSense(), sense::kMediumNotPresentTrayOpen);
  ASSERT_TRUE(setup_.media->Insert(MakeMedium(kDisc2Blocks, 100), "cd2.iso").ok());
  // docs/linux-commands.md 3.6: NewMedia, media present, once.
  EXPECT_EQ(Run(kGesn, 8).data,
            (std::vector<uint8_t>{0x00, 0x04, 0x04, 0x10, 0x02, 0x02, 0x00, 0x00}));
  EXPECT_EQ(GesnEvent(), 0);
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresent);
  EXPECT_EQ(RequestSense(), sense::kMediumNotPresent);
  EXPECT_EQ(Run(kTur).sense, sense::kNotReadyToReadyChange);
  EXPECT_EQ(RequestSense(), sense::kNotReadyToReadyChange);
  EXPECT_TRUE(Run(kTur).good());
  EXPECT_EQ(Capacity(), kDisc2Blocks);
  const Result read = Run(Cdb10(0x28, 0, 16, 1), 2048);
  ASSERT_TRUE(read.good());
  EXPECT_EQ(read.data, std::vector<uint8_t>(2048, 116));
}

TEST_F(CdRomTest, MediaChangeAtapiStyleInquiryAndGesnNotBlocked) {
  StartAtapi(MakeMedium(kDisc1Blocks));
  ASSERT_TRUE(setup_.media->Eject(true).ok());
  ASSERT_TRUE(setup_.media->Insert(MakeMedium(kDisc2Blocks), "cd2.iso").ok());
  EXPECT_TRUE(Run({0x12, 0, 0, 0, 36, 0}, 36).good());
  EXPECT_TRUE(Run(kGesn, 8).good());
  EXPECT_TRUE(Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32).good());
  // A READ is the first blocked command: it gets the NOT READY step.
  EXPECT_EQ(Run(Cdb10(0x28, 0, 0, 1), 2048).sense, sense::kMediumNotPresent);
  EXPECT_EQ(Run(Cdb10(0x28, 0, 0, 1), 2048).sense, sense::kNotReadyToReadyChange);
  EXPECT_TRUE(Run(Cdb10(0x28, 0, 0, 1), 2048).good());
}

TEST_F(CdRomTest, UnitAttentionExemptions) {
  Start(MakeMedium(16));
  // Pending power-on attention: INQUIRY, REPORT LUNS, GET CONFIGURATION, GESN run without
  // consuming it; MODE SENSE and READ CAPACITY report it.
  EXPECT_TRUE(Run({0x12, 0, 0, 0, 36, 0}, 36).good());
  EXPECT_TRUE(Run({0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, 16).good());
  EXPECT_TRUE(Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32).good());
  EXPECT_TRUE(Run(kGesn, 8).good());
  EXPECT_EQ(Run({0x1a, 0, 0x2a, 0, 0x80, 0}, 128).sense, sense::kPowerOnOrReset);
  EXPECT_TRUE(Run({0x1a, 0, 0x2a, 0, 0x80, 0}, 128).good());
}

TEST_F(CdRomTest, LockedEjectIsRefused) {
  StartReady(16);
  ASSERT_TRUE(Run({0x1e, 0, 0, 0, 1, 0}).good());  // PREVENT
  EXPECT_TRUE(setup_.media->Current()->locked);
  const Result caps = Run({0x1a, 0, 0x2a, 0, 0x80, 0}, 128);
  EXPECT_EQ(caps.data[4 + 6] & 0x02, 0x02);  // lock state
  // START STOP UNIT, LoEj, START = 0: eject.
  EXPECT_EQ(Run({0x1b, 0, 0, 0, 0x02, 0}).sense, sense::kMediumRemovalPrevented);
  EXPECT_FALSE(setup_.media->Current()->tray_open);
  EXPECT_EQ(GesnEvent(), 1);  // EjectRequest
  EXPECT_EQ(GesnEvent(), 0);
  // The host cannot eject without force either, and asks the guest (as QEMU's "eject cd"): the
  // next GESN reports an EjectRequest, once.
  EXPECT_FALSE(setup_.media->Eject(false).ok());
  EXPECT_FALSE(setup_.media->Current()->tray_open);
  EXPECT_EQ(GesnEvent(), 1);
  EXPECT_EQ(GesnEvent(), 0);
  // ALLOW, then the eject works: the tray opens with the disc in it.
  ASSERT_TRUE(Run({0x1e, 0, 0, 0, 0, 0}).good());
  EXPECT_TRUE(Run({0x1b, 0, 0, 0, 0x02, 0}).good());
  EXPECT_TRUE(setup_.media->Current()->tray_open);
  EXPECT_EQ(Run(kTur).sense, sense::kMediumNotPresentTrayOpen);
  EXPECT_EQ(GesnStatus(), 0x01);
  // Load: the same disc, no unit attention.
  EXPECT_TRUE(Run({0x1b, 0, 0, 0, 0x03, 0}).good());
  EXPECT_TRUE(Run(kTur).good());
  EXPECT_EQ(GesnEvent(), 0);
}

TEST_F(CdRomTest, ResetUnlocks) {
  StartReady(16);
  ASSERT_TRUE(Run({0x1e, 0, 0, 0, 1, 0}).good());
  setup_.cd->Reset();
  EXPECT_FALSE(setup_.media->Current()->locked);
  EXPECT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
}

TEST_F(CdRomTest, GetEventStatusNotification) {
  StartReady(16);
  // Asynchronous: not supported.
  EXPECT_EQ(Run({0x4a, 0x00, 0, 0, 0x10, 0, 0, 0, 8, 0}, 8).sense, sense::kInvalidFieldInCdb);
  // A class other than media: NEA, header only.
  EXPECT_EQ(Run({0x4a, 0x01, 0, 0, 0x02, 0, 0, 0, 8, 0}, 8).data,
            (std::vector<uint8_t>{0x00, 0x00, 0x80, 0x10}));
  // Idle, disc present (3.3).
  EXPECT_EQ(Run(kGesn, 8).data, (std::vector<uint8_t>{0x00, 0x04, 0x04, 0x10, 0, 0x02, 0, 0}));
  // Allocation length 4: the header alone.
  EXPECT_EQ(Run({0x4a, 0x01, 0, 0, 0x10, 0, 0, 0, 4, 0}, 8).data.size(), 4u);
}

TEST_F(CdRomTest, GetConfigurationProfilesAndFeatures) {
  StartReady(16);
  const Result all = Run({0x46, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0}, 256);
  ASSERT_TRUE(all.good());
  const std::vector<uint8_t>& d = all.data;
  EXPECT_EQ(Be32(&d[0]) + 4, d.size());
  EXPECT_EQ(Be16(&d[6]), 0x0008);
  std::vector<uint16_t> codes;
  for (size_t at = 8; at + 4 <= d.size(); at += 4 + d[at + 3]) codes.push_back(Be16(&d[at]));
  EXPECT_EQ(codes, (std::vector<uint16_t>{0x0000, 0x0001, 0x0002, 0x0003, 0x0010, 0x001e, 0x001f,
                                          0x0100}));
  // Profile list: DVD-ROM (not current), CD-ROM (current).
  EXPECT_EQ(d[11], 8);
  EXPECT_EQ(Be16(&d[12]), 0x0010);
  EXPECT_EQ(d[14], 0);
  EXPECT_EQ(Be16(&d[16]), 0x0008);
  EXPECT_EQ(d[18], 1);
  // Core: SCSI physical interface.
  EXPECT_EQ(Be32(&d[24]), 1u);
  // RT 2: one feature.
  const Result random = Run({0x46, 0x02, 0x00, 0x10, 0, 0, 0, 0, 0x20, 0}, 32);
  ASSERT_EQ(random.data.size(), 8u + 12);
  EXPECT_EQ(Be16(&random.data[8]), 0x0010);
  EXPECT_EQ(random.data[10] & 0x01, 1);  // current
  EXPECT_EQ(Be32(&random.data[12]), 2048u);
  // RT 1: current features only (no DVD Read on a CD).
  const Result current = Run({0x46, 0x01, 0x00, 0x1f, 0, 0, 0, 0, 0x40, 0}, 64);
  ASSERT_GE(current.data.size(), 12u);
  EXPECT_EQ(Be16(&current.data[8]), 0x0100);
  EXPECT_EQ(Run({0x46, 0x03, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32).sense, sense::kInvalidFieldInCdb);
  // Truncation keeps the full data length.
  const Result head = Run({0x46, 0, 0, 0, 0, 0, 0, 0, 8, 0}, 64);
  EXPECT_EQ(head.data.size(), 8u);
  EXPECT_EQ(Be32(&head.data[0]) + 4, d.size());
}

TEST_F(CdRomTest, DvdProfileForLargeMedia) {
  block::MemoryBackendOptions options;
  options.size_bytes = 1ULL << 30;  // 1 GiB > 737,280,000 bytes; sparse
  options.read_only = true;
  Start(std::make_shared<block::MemoryBackend>(options));
  const Result config = Run({0x46, 0, 0, 0, 0, 0, 0, 0, 0x20, 0}, 32);
  ASSERT_TRUE(config.good());
  EXPECT_EQ(Be16(&config.data[6]), 0x0010);
  EXPECT_EQ(config.data[14], 1);  // DVD-ROM current
  ASSERT_EQ(Run(kTur).sense, sense::kPowerOnOrReset);
  const Result track = Run({0x52, 0x01, 0, 0, 0, 0x01, 0, 0, 0x30, 0}, 48);
  ASSERT_TRUE(track.good());
  EXPECT_EQ(Be32(&track.data[20]), 16u);  // DVD blocking factor
  EXPECT_EQ(Be32(&track.data[24]), (1u << 30) / 2048);
}

TEST_F(CdRomTest, ReadTocFormats) {
  StartReady(kDisc1Blocks);
  const Result lba = Run({0x43, 0, 0, 0, 0, 0, 0, 0, 0xff, 0}, 255);
  ASSERT_TRUE(lba.good());
  ASSERT_EQ(lba.data.size(), 20u);
  EXPECT_EQ(Be16(&lba.data[0]), 18);
  EXPECT_EQ(lba.data[14], 0xaa);
  EXPECT_EQ(Be32(&lba.data[16]), kDisc1Blocks);
  const Result msf = Run({0x43, 0x02, 0, 0, 0, 0, 1, 0, 0xff, 0}, 255);
  ASSERT_TRUE(msf.good());
  EXPECT_EQ(std::vector<uint8_t>(msf.data.begin() + 8, msf.data.begin() + 12),
            (std::vector<uint8_t>{0, 0, 2, 0}));  // track 1 at 00:02:00
  // Format 2 (full TOC): A0, A1, A2, track 1.
  const Result full = Run({0x43, 0x02, 0x02, 0, 0, 0, 1, 0, 0xff, 0}, 255);
  ASSERT_TRUE(full.good());
  ASSERT_EQ(full.data.size(), 4u + 4 * 11);
  EXPECT_EQ(full.data[4 + 3], 0xa0);
  EXPECT_EQ(full.data[4 + 8], 1);
  EXPECT_EQ(full.data[15 + 3], 0xa1);
  EXPECT_EQ(full.data[26 + 3], 0xa2);
  EXPECT_EQ(std::vector<uint8_t>(full.data.begin() + 34, full.data.begin() + 37),
            (std::vector<uint8_t>{0, 0x3b, 3}));
  EXPECT_EQ(full.data[37 + 3], 0x01);
  EXPECT_EQ(Run({0x43, 0, 0, 0, 0, 0, 2, 0, 0x0c, 0}, 12).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x43, 0, 0x04, 0, 0, 0, 0, 0, 0x0c, 0}, 12).sense, sense::kInvalidFieldInCdb);
  // Lead-out only.
  EXPECT_EQ(Run({0x43, 0, 0, 0, 0, 0, 0xaa, 0, 0xff, 0}, 255).data.size(), 12u);
}

TEST_F(CdRomTest, ReadTrackInformationAddressing) {
  StartReady(100);
  EXPECT_TRUE(Run({0x52, 0x00, 0, 0, 0, 50, 0, 0, 0x30, 0}, 48).good());  // by LBA
  EXPECT_EQ(Run({0x52, 0x00, 0, 0, 0, 100, 0, 0, 0x30, 0}, 48).sense, sense::kLbaOutOfRange);
  EXPECT_TRUE(Run({0x52, 0x02, 0, 0, 0, 1, 0, 0, 0x30, 0}, 48).good());  // session 1
  EXPECT_EQ(Run({0x52, 0x01, 0, 0, 0, 2, 0, 0, 0x30, 0}, 48).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x52, 0x01, 0, 0, 0, 0, 0, 0, 0x30, 0}, 48).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x52, 0x05, 0, 0, 0, 1, 0, 0, 0x30, 0}, 48).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x51, 0x01, 0, 0, 0, 0, 0, 0, 0x22, 0}, 34).sense, sense::kInvalidFieldInCdb);
}

TEST_F(CdRomTest, ModeSense10AsAtapiSendsIt) {
  StartAtapi(MakeMedium(16));
  RunOptions options;
  options.data_in_size = 128;
  options.cdb_size = 12;
  const Result r = harness_->Run({0x5a, 0, 0x2a, 0, 0, 0, 0, 0, 0x80, 0}, options);
  ASSERT_TRUE(r.good());
  ASSERT_EQ(r.data.size(), 8u + 22);
  EXPECT_EQ(Be16(&r.data[0]), r.data.size() - 2);
  EXPECT_EQ(Be16(&r.data[6]), 0);  // no block descriptors
  EXPECT_EQ(r.data[8], 0x2a);
  const Result all = harness_->Run({0x5a, 0, 0x3f, 0, 0, 0, 0, 0, 0xff, 0}, options);
  ASSERT_TRUE(all.good());
  EXPECT_EQ(all.data.size(), 8u + 12 + 8 + 16 + 22);
  // GET CONFIGURATION's core feature says ATAPI.
  const Result config = harness_->Run({0x46, 0x02, 0x00, 0x01, 0, 0, 0, 0, 0x20, 0}, options);
  ASSERT_TRUE(config.good());
  EXPECT_EQ(Be32(&config.data[12]), 2u);
}

TEST_F(CdRomTest, MechanismStatusAndSubChannel) {
  StartReady(16);
  const Result mech = Run({0xbd, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0}, 8);
  ASSERT_TRUE(mech.good());
  EXPECT_EQ(mech.data, std::vector<uint8_t>(8, 0));
  const Result header = Run({0x42, 0, 0x00, 0x01, 0, 0, 0, 0, 0x10, 0}, 16);
  EXPECT_EQ(header.data, (std::vector<uint8_t>{0, 0x15, 0, 0}));
  const Result position = Run({0x42, 0x02, 0x40, 0x01, 0, 0, 0, 0, 0x10, 0}, 16);
  ASSERT_TRUE(position.good());
  ASSERT_EQ(position.data.size(), 16u);
  EXPECT_EQ(position.data[4], 0x01);
  EXPECT_EQ(position.data[6], 1);
  EXPECT_EQ(Run({0x42, 0, 0x40, 0x07, 0, 0, 0, 0, 0x10, 0}, 16).sense, sense::kInvalidFieldInCdb);
}

TEST_F(CdRomTest, ReportSupportedOperationCodesListsMmcCommands) {
  StartReady(16);
  const Result gesn = Run({0xa3, 0x0c, 0x01, 0x4a, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32);
  ASSERT_TRUE(gesn.good());
  EXPECT_EQ(gesn.data[1], 0x03);
  EXPECT_EQ(Be16(&gesn.data[2]), 10);
  const Result write = Run({0xa3, 0x0c, 0x01, 0x2a, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32);
  EXPECT_EQ(write.data[1], 0x01);  // WRITE(10): not supported on this unit
}

}  // namespace
}  // namespace devices::scsi

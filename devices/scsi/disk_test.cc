// The SBC-3 disk on MemoryBackend drives, command by command, through the synchronous harness.

#include "devices/scsi/disk.h"

#include <cerrno>
#include <string>
#include <vector>

#include "block/cache_mode.h"
#include "block/drive.h"
#include "block/memory_backend.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/test_harness.h"
#include "gtest/gtest.h"

namespace devices::scsi {
namespace {

using block::RecordedOperation;
using block::RequestType;
using testing::Cdb10;
using testing::Cdb16;
using testing::Harness;
using testing::Result;
using testing::RunOptions;

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(seed + i * 7);
  return data;
}

class DiskTest : public ::testing::Test {
 protected:
  void Start(block::MemoryBackendOptions backend = {}, block::DriveOptions drive = {},
             LogicalUnitOptions unit = {}) {
    absl::StatusOr<testing::DiskSetup> setup = testing::MakeDisk(backend, drive, unit);
    ASSERT_TRUE(setup.ok()) << setup.status();
    setup_ = *std::move(setup);
    absl::StatusOr<std::unique_ptr<Harness>> harness = Harness::ForUnit(setup_.disk);
    ASSERT_TRUE(harness.ok()) << harness.status();
    harness_ = *std::move(harness);
  }
  // Starts and consumes the power-on unit attention.
  void StartReady(block::MemoryBackendOptions backend = {}, block::DriveOptions drive = {},
                  LogicalUnitOptions unit = {}) {
    Start(backend, drive, unit);
    const Result tur = Run({0x00, 0, 0, 0, 0, 0});
    ASSERT_EQ(tur.sense, sense::kPowerOnOrReset);
  }

  Result Run(std::initializer_list<uint8_t> cdb, RunOptions options = {}) {
    return harness_->Run(cdb, options);
  }
  Result Run(const std::vector<uint8_t>& cdb, RunOptions options = {}) {
    return harness_->Run(cdb, options);
  }
  Result Read(const std::vector<uint8_t>& cdb, size_t bytes, size_t segment = 0) {
    RunOptions options;
    options.data_in_size = bytes;
    options.segment = segment;
    return harness_->Run(cdb, options);
  }
  Result Write(const std::vector<uint8_t>& cdb, std::vector<uint8_t> data, size_t segment = 0) {
    RunOptions options;
    options.data_out = std::move(data);
    options.segment = segment;
    return harness_->Run(cdb, options);
  }
  std::vector<uint8_t> Stored(uint64_t offset, uint64_t length) {
    absl::StatusOr<std::vector<uint8_t>> data = setup_.backend->ReadData(offset, length);
    EXPECT_TRUE(data.ok());
    return data.ok() ? *data : std::vector<uint8_t>();
  }
  std::vector<RecordedOperation> OpsSince(size_t first) {
    std::vector<RecordedOperation> ops = setup_.backend->operations();
    return std::vector<RecordedOperation>(ops.begin() + first, ops.end());
  }
  size_t OpCount() { return setup_.backend->operation_count(); }

  testing::DiskSetup setup_;
  std::unique_ptr<Harness> harness_;
};

// ---- INQUIRY and VPD ----

TEST_F(DiskTest, StandardInquiry) {
  Start();
  const Result r = harness_->In({0x12, 0, 0, 0, 36, 0}, 36);
  ASSERT_TRUE(r.good());  // INQUIRY is not blocked by the power-on unit attention
  ASSERT_EQ(r.data.size(), 36u);
  EXPECT_EQ(r.data[0], 0x00);  // PQ 0, direct access
  EXPECT_EQ(r.data[1], 0x00);  // not removable
  EXPECT_EQ(r.data[2], 0x06);  // SPC-4
  EXPECT_EQ(r.data[3], 0x12);  // HISUP, response data format 2
  EXPECT_EQ(r.data[4], 31);
  EXPECT_EQ(std::string(r.data.begin() + 8, r.data.begin() + 16), "MICROVM ");
  EXPECT_EQ(std::string(r.data.begin() + 16, r.data.begin() + 32), "VIRTUAL DISK    ");
  // And the unit attention is still there for the TUR.
  EXPECT_EQ(Run({0, 0, 0, 0, 0, 0}).sense, sense::kPowerOnOrReset);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
}

TEST_F(DiskTest, InquiryAllocationLengthTruncates) {
  StartReady();
  const Result r = harness_->In({0x12, 0, 0, 0, 5, 0}, 64);
  ASSERT_TRUE(r.good());
  EXPECT_EQ(r.data.size(), 5u);
  EXPECT_EQ(r.data_in_residual, 59u);
  EXPECT_EQ(r.data[4], 31);  // the length field describes the whole data
  // A data-in buffer shorter than the allocation length truncates too (no overrun).
  const Result small = harness_->In({0x12, 0, 0, 0, 0xff, 0}, 10);
  ASSERT_TRUE(small.good());
  EXPECT_EQ(small.data.size(), 10u);
  EXPECT_FALSE(small.overrun);
  EXPECT_EQ(harness_->In({0x12, 0, 0x80, 0, 36, 0}, 36).sense, sense::kInvalidFieldInCdb);
}

TEST_F(DiskTest, VpdPagesAsLinuxReadsThem) {
  StartReady();
  // Linux: the 4-byte header first, then the whole page.
  const Result head = harness_->In({0x12, 1, 0x00, 0, 4, 0}, 4);
  ASSERT_TRUE(head.good());
  ASSERT_EQ(head.data.size(), 4u);
  EXPECT_EQ(head.data[3], 6);
  const Result list = harness_->In({0x12, 1, 0x00, 0, 10, 0}, 10);
  EXPECT_EQ(list.data, (std::vector<uint8_t>{0, 0, 0, 6, 0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2}));

  const Result serial = harness_->In({0x12, 1, 0x80, 0, 0xff, 0}, 255);
  ASSERT_TRUE(serial.good());
  EXPECT_EQ(std::string(serial.data.begin() + 4, serial.data.end()), "disk0");

  const Result id = harness_->In({0x12, 1, 0x83, 0, 0xff, 0}, 255);
  ASSERT_TRUE(id.good());
  const std::vector<uint8_t>& d = id.data;
  ASSERT_GE(d.size(), 4u);
  EXPECT_EQ(Be16(&d[2]) + 4u, d.size());
  // First designator: T10 vendor ID, ASCII, "MICROVM disk0".
  EXPECT_EQ(d[4], 0x02);
  EXPECT_EQ(d[5], 0x01);
  EXPECT_EQ(d[7], 8 + 5);
  EXPECT_EQ(std::string(d.begin() + 8, d.begin() + 8 + 13), "MICROVM disk0");
  // Second: NAA, binary, 8 bytes, NAA 3h (locally assigned).
  const size_t naa = 8 + 13;
  EXPECT_EQ(d[naa + 0], 0x01);
  EXPECT_EQ(d[naa + 1], 0x03);
  EXPECT_EQ(d[naa + 3], 8);
  EXPECT_EQ(d[naa + 4] >> 4, 3);

  const Result limits = harness_->In({0x12, 1, 0xb0, 0, 64, 0}, 64);
  ASSERT_TRUE(limits.good());
  ASSERT_EQ(limits.data.size(), 64u);
  EXPECT_EQ(Be16(&limits.data[2]), 0x3c);
  EXPECT_EQ(limits.data[4] & 1, 1);     // WSNZ
  EXPECT_EQ(Be16(&limits.data[6]), 8);  // 4 KiB granularity
  EXPECT_EQ(Be32(&limits.data[8]), setup_.disk->max_transfer_blocks());
  EXPECT_EQ(Be32(&limits.data[8]), (8u << 20) / 512);
  EXPECT_EQ(Be32(&limits.data[20]), (1u << 30) / 512);  // max unmap LBA count
  EXPECT_EQ(Be32(&limits.data[24]), Disk::kMaxUnmapDescriptors);
  EXPECT_EQ(Be64(&limits.data[36]), (32u << 20) / 512);  // max WRITE SAME length

  const Result characteristics = harness_->In({0x12, 1, 0xb1, 0, 64, 0}, 64);
  ASSERT_TRUE(characteristics.good());
  EXPECT_EQ(Be16(&characteristics.data[4]), 1);  // non-rotating

  const Result provisioning = harness_->In({0x12, 1, 0xb2, 0, 8, 0}, 8);
  ASSERT_TRUE(provisioning.good());
  EXPECT_EQ(provisioning.data,
            (std::vector<uint8_t>{0x00, 0xb2, 0x00, 0x04, 0x00, 0xe0, 0x02, 0x00}));

  EXPECT_EQ(harness_->In({0x12, 1, 0x89, 0, 0xff, 0}, 255).sense, sense::kInvalidFieldInCdb);
}

TEST_F(DiskTest, VpdWithoutDiscard) {
  block::MemoryBackendOptions backend;
  backend.discard = false;
  StartReady(backend);
  const Result limits = harness_->In({0x12, 1, 0xb0, 0, 64, 0}, 64);
  EXPECT_EQ(Be32(&limits.data[20]), 0u);
  EXPECT_EQ(Be32(&limits.data[24]), 0u);
  const Result provisioning = harness_->In({0x12, 1, 0xb2, 0, 8, 0}, 8);
  EXPECT_EQ(provisioning.data[5], 0);
  const Result capacity = harness_->In({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32);
  EXPECT_EQ(capacity.data[14], 0);  // LBPME off
  // UNMAP is not offered.
  EXPECT_EQ(Write(Cdb10(0x42, 0, 0, 24), std::vector<uint8_t>(24)).sense,
            sense::kInvalidCommandOperationCode);
}

// ---- Unit attention and REQUEST SENSE ----

TEST_F(DiskTest, PowerOnUnitAttentionThroughRequestSense) {
  Start();
  // SeaBIOS's way: TUR fails, REQUEST SENSE fetches the attention, TUR passes.
  EXPECT_EQ(Run({0, 0, 0, 0, 0, 0}).sense, sense::kPowerOnOrReset);
  const Result sense = harness_->In({0x03, 0, 0, 0, 18, 0}, 18);
  ASSERT_TRUE(sense.good());
  EXPECT_EQ(sense.data[2], 0x06);
  EXPECT_EQ(sense.data[12], 0x29);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
  // Nothing pending: NO SENSE.
  const Result none = harness_->In({0x03, 0, 0, 0, 18, 0}, 18);
  EXPECT_EQ(none.data[2], 0);
  EXPECT_EQ(none.data[12], 0);
}

TEST_F(DiskTest, RequestSenseWithoutPriorCommandReportsAttention) {
  Start();
  const Result sense = harness_->In({0x03, 0, 0, 0, 252, 0}, 252);
  ASSERT_TRUE(sense.good());
  EXPECT_EQ(sense.data.size(), 18u);  // fixed format, truncated to what there is
  EXPECT_EQ(sense.data[12], 0x29);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());                                           // consumed
  EXPECT_EQ(harness_->In({0x03, 1, 0, 0, 18, 0}, 18).sense, sense::kInvalidFieldInCdb);  // DESC
}

TEST_F(DiskTest, RequestSenseReturnsTheLastError) {
  StartReady();
  EXPECT_EQ(Run({0xc5, 0, 0, 0, 0, 0}).sense, sense::kInvalidCommandOperationCode);
  const Result sense = harness_->In({0x03, 0, 0, 0, 18, 0}, 18);
  EXPECT_EQ(sense.data[2], 0x05);
  EXPECT_EQ(sense.data[12], 0x20);
  // Cleared by the REQUEST SENSE.
  EXPECT_EQ(harness_->In({0x03, 0, 0, 0, 18, 0}, 18).data[2], 0);
  // And dropped by any other command.
  EXPECT_EQ(Run({0xc5, 0, 0, 0, 0, 0}).sense, sense::kInvalidCommandOperationCode);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
  EXPECT_EQ(harness_->In({0x03, 0, 0, 0, 18, 0}, 18).data[2], 0);
}

TEST_F(DiskTest, ResetQueuesAttentionAndRestoresWce) {
  StartReady();
  // WCE off through MODE SELECT, then a reset: the attention, and WCE back on.
  std::vector<uint8_t> select = {0, 0, 0, 0, 0x08, 0x12, 0x00};
  select.resize(4 + 20, 0);
  EXPECT_TRUE(Write({0x15, 0x10, 0, 0, 24, 0}, select).good());
  EXPECT_FALSE(setup_.disk->write_cache_enabled());
  setup_.disk->Reset();
  EXPECT_TRUE(setup_.disk->write_cache_enabled());
  EXPECT_EQ(Run({0, 0, 0, 0, 0, 0}).sense, sense::kPowerOnOrReset);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
}

TEST_F(DiskTest, NoPowerOnAttentionWhenDisabled) {
  LogicalUnitOptions unit;
  unit.power_on_unit_attention = false;
  Start({}, {}, unit);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
}

// ---- READ CAPACITY ----

TEST_F(DiskTest, ReadCapacity) {
  StartReady();
  const Result ten = harness_->In({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8);
  ASSERT_TRUE(ten.good());
  EXPECT_EQ(Be32(&ten.data[0]), 2047u);  // 1 MiB of 512-byte blocks
  EXPECT_EQ(Be32(&ten.data[4]), 512u);
  const Result sixteen = harness_->In({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32);
  ASSERT_TRUE(sixteen.good());
  ASSERT_EQ(sixteen.data.size(), 32u);
  EXPECT_EQ(Be64(&sixteen.data[0]), 2047u);
  EXPECT_EQ(Be32(&sixteen.data[8]), 512u);
  EXPECT_EQ(sixteen.data[13], 3);     // 8 logical blocks per 4 KiB physical block
  EXPECT_EQ(sixteen.data[14], 0x80);  // LBPME
  // Allocation length 12 truncates; an obsolete LBA without PMI is invalid.
  EXPECT_EQ(harness_->In({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 0, 0}, 32).data.size(),
            12u);
  EXPECT_EQ(harness_->In({0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0}, 8).sense, sense::kInvalidFieldInCdb);
  // Another SERVICE ACTION IN(16) service action is an unknown command.
  EXPECT_EQ(harness_->In({0x9e, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32).sense,
            sense::kInvalidCommandOperationCode);
}

TEST_F(DiskTest, ReadCapacity10SaturatesForLargeDisks) {
  block::MemoryBackendOptions backend;
  backend.size_bytes = uint64_t{3} << 40;  // 3 TiB of 512-byte blocks: more than 2^32 blocks
  StartReady(backend);
  const Result ten = harness_->In({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8);
  EXPECT_EQ(Be32(&ten.data[0]), 0xffffffffu);
  const Result sixteen = harness_->In({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0}, 32);
  EXPECT_EQ(Be64(&sixteen.data[0]), (uint64_t{3} << 40) / 512 - 1);
}

// ---- READ and WRITE ----

TEST_F(DiskTest, WriteThenReadRoundTripAllSizes) {
  StartReady();
  const std::vector<uint8_t> data = Pattern(4096, 1);
  // WRITE(10) at LBA 8, scattered over 3 iovecs of uneven size.
  const Result w = Write(Cdb10(0x2a, 0, 8, 8), data, 1000);
  ASSERT_TRUE(w.good()) << ::testing::PrintToString(w.sense);
  EXPECT_FALSE(w.synchronous);
  EXPECT_EQ(w.data_out_residual, 0u);
  EXPECT_EQ(Stored(8 * 512, 4096), data);

  const Result r10 = Read(Cdb10(0x28, 0, 8, 8), 4096, 700);
  ASSERT_TRUE(r10.good());
  EXPECT_EQ(r10.data, data);
  const Result r6 = Read({0x08, 0, 0, 8, 8, 0}, 4096);
  EXPECT_EQ(r6.data, data);
  std::vector<uint8_t> r12cdb = {0xa8, 0, 0, 0, 0, 8, 0, 0, 0, 8, 0, 0};
  EXPECT_EQ(Read(r12cdb, 4096).data, data);
  EXPECT_EQ(Read(Cdb16(0x88, 0, 8, 8), 4096).data, data);

  const std::vector<uint8_t> other = Pattern(1024, 9);
  EXPECT_TRUE(Write({0x0a, 0, 0, 100, 2, 0}, other).good());  // WRITE(6)
  std::vector<uint8_t> w12 = {0xaa, 0, 0, 0, 0, 102, 0, 0, 0, 2, 0, 0};
  EXPECT_TRUE(Write(w12, other).good());
  EXPECT_TRUE(Write(Cdb16(0x8a, 0, 104, 2), other).good());
  EXPECT_EQ(Stored(100 * 512, 1024), other);
  EXPECT_EQ(Stored(102 * 512, 1024), other);
  EXPECT_EQ(Stored(104 * 512, 1024), other);
}

TEST_F(DiskTest, Read6ZeroLengthMeans256Blocks) {
  StartReady();
  const size_t before = OpCount();
  const Result r = Read({0x08, 0, 0, 0, 0, 0}, 256 * 512);
  ASSERT_TRUE(r.good());
  EXPECT_EQ(r.data.size(), 256u * 512);
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].length, 256u * 512);
}

TEST_F(DiskTest, ZeroTransferLengthIsGoodWithoutIo) {
  StartReady();
  const size_t before = OpCount();
  const Result r = Read(Cdb10(0x28, 0, 10, 0), 512);
  EXPECT_TRUE(r.good());
  EXPECT_TRUE(r.synchronous);
  EXPECT_EQ(r.data_in_residual, 512u);
  EXPECT_TRUE(Write(Cdb10(0x2a, 0, 2048, 0), {}).good());  // LBA == capacity, 0 blocks: fine
  EXPECT_EQ(Read(Cdb10(0x28, 0, 2049, 0), 0).sense, sense::kLbaOutOfRange);
  EXPECT_EQ(OpCount(), before);
}

TEST_F(DiskTest, FuaWriteReachesTheBackendAsFua) {
  block::MemoryBackendOptions backend;
  backend.native_fua = true;
  StartReady(backend);
  size_t before = OpCount();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0x08, 0, 1), Pattern(512, 3)).good());  // FUA
  std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kWrite);
  EXPECT_TRUE(ops[0].fua);

  before = OpCount();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0x00, 0, 1), Pattern(512, 3)).good());
  ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_FALSE(ops[0].fua);

  before = OpCount();
  ASSERT_TRUE(Write(Cdb16(0x8a, 0x18, 0, 1), Pattern(512, 3)).good());  // DPO + FUA
  ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_TRUE(ops[0].fua);
}

TEST_F(DiskTest, FuaWriteEmulatedAsWriteThenFlush) {
  StartReady();  // MemoryBackend without native FUA
  const size_t before = OpCount();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0x08, 0, 1), Pattern(512, 3)).good());
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].type, RequestType::kWrite);
  EXPECT_EQ(ops[1].type, RequestType::kFlush);
}

TEST_F(DiskTest, FuaReadFlushesFirst) {
  StartReady();
  size_t before = OpCount();
  ASSERT_TRUE(Read(Cdb10(0x28, 0x08, 0, 1), 512).good());
  std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].type, RequestType::kFlush);
  EXPECT_EQ(ops[1].type, RequestType::kRead);
  // Without FUA, no flush.
  before = OpCount();
  ASSERT_TRUE(Read(Cdb10(0x28, 0x10, 0, 1), 512).good());  // DPO only
  ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kRead);
}

TEST_F(DiskTest, FuaReadWithoutWriteCacheDoesNotFlush) {
  block::DriveOptions drive;
  drive.cache_mode = block::CacheMode::kWritethrough;
  StartReady({}, drive);
  const size_t before = OpCount();
  ASSERT_TRUE(Read(Cdb10(0x28, 0x08, 0, 1), 512).good());
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kRead);
}

TEST_F(DiskTest, FailedFlushFailsTheFuaRead) {
  StartReady();
  setup_.backend->FailOperation(OpCount(), EIO);  // the flush
  const Result r = Read(Cdb10(0x28, 0x08, 0, 1), 512);
  EXPECT_EQ(r.sense, sense::kWriteError);
  EXPECT_EQ(r.data_in_residual, 512u);
}

TEST_F(DiskTest, RangeAndLimitErrors) {
  StartReady();
  EXPECT_EQ(Read(Cdb10(0x28, 0, 2047, 2), 1024).sense, sense::kLbaOutOfRange);
  EXPECT_EQ(Read(Cdb16(0x88, 0, ~uint64_t{0}, 1), 512).sense, sense::kLbaOutOfRange);
  EXPECT_EQ(Write(Cdb16(0x8a, 0, 0xffffffffffffff00ULL, 0x200), std::vector<uint8_t>(512)).sense,
            sense::kLbaOutOfRange);
  EXPECT_TRUE(Read(Cdb10(0x28, 0, 2047, 1), 512).good());
  // More than MAXIMUM TRANSFER LENGTH (16384 blocks): INVALID FIELD IN CDB, before the range.
  std::vector<uint8_t> big = {0xa8, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x01, 0, 0};
  EXPECT_EQ(Read(big, 0).sense, sense::kInvalidFieldInCdb);
  // RDPROTECT / WRPROTECT: no protection information.
  EXPECT_EQ(Read(Cdb10(0x28, 0x20, 0, 1), 512).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Write(Cdb10(0x2a, 0x20, 0, 1), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
}

TEST_F(DiskTest, BufferShorterThanTransferIsAnOverrun) {
  StartReady();
  const size_t before = OpCount();
  const Result w = Write(Cdb10(0x2a, 0, 0, 4), std::vector<uint8_t>(1024));
  EXPECT_EQ(w.sense, sense::kInvalidFieldInCdb);
  EXPECT_TRUE(w.overrun);
  EXPECT_EQ(w.data_out_residual, 1024u);  // nothing transferred
  const Result r = Read(Cdb10(0x28, 0, 0, 4), 1000);
  EXPECT_EQ(r.sense, sense::kInvalidFieldInCdb);
  EXPECT_TRUE(r.overrun);
  EXPECT_EQ(OpCount(), before);  // no I/O
}

TEST_F(DiskTest, BufferLongerThanTransferLeavesResidual) {
  StartReady();
  const std::vector<uint8_t> data = Pattern(512, 5);
  std::vector<uint8_t> longer = data;
  longer.resize(1536, 0xee);
  const Result w = Write(Cdb10(0x2a, 0, 3, 1), longer, 100);
  ASSERT_TRUE(w.good());
  EXPECT_EQ(w.data_out_residual, 1024u);
  EXPECT_EQ(Stored(3 * 512, 512), data);
  EXPECT_EQ(Stored(4 * 512, 512), std::vector<uint8_t>(512, 0));
  const Result r = Read(Cdb10(0x28, 0, 3, 1), 2048, 300);
  ASSERT_TRUE(r.good());
  EXPECT_EQ(r.data_in_residual, 1536u);
  EXPECT_EQ(r.data, data);
}

TEST_F(DiskTest, WriteProtected) {
  block::DriveOptions drive;
  drive.read_only = true;
  StartReady({}, drive);
  const size_t before = OpCount();
  EXPECT_EQ(Write(Cdb10(0x2a, 0, 0, 1), std::vector<uint8_t>(512)).sense, sense::kWriteProtected);
  EXPECT_EQ(Write(Cdb10(0x41, 0, 0, 1), std::vector<uint8_t>(512)).sense, sense::kWriteProtected);
  EXPECT_EQ(OpCount(), before);
  EXPECT_TRUE(Read(Cdb10(0x28, 0, 0, 1), 512).good());
  const Result mode = harness_->In({0x1a, 0, 0x3f, 0, 4, 0}, 4);
  EXPECT_EQ(mode.data[2], 0x90);  // WP | DPOFUA
}

TEST_F(DiskTest, BackendErrorsMapToSense) {
  StartReady();
  setup_.backend->FailOperation(OpCount(), EIO);
  EXPECT_EQ(Read(Cdb10(0x28, 0, 0, 1), 512).sense, sense::kUnrecoveredReadError);
  setup_.backend->FailOperation(OpCount(), EIO);
  const Result w = Write(Cdb10(0x2a, 0, 0, 1), std::vector<uint8_t>(512));
  EXPECT_EQ(w.sense, sense::kWriteError);
  EXPECT_EQ(w.data_out_residual, 512u);
  setup_.backend->FailOperation(OpCount(), ENOSPC);
  EXPECT_EQ(Write(Cdb10(0x2a, 0, 0, 1), std::vector<uint8_t>(512)).sense,
            sense::kSpaceAllocationFailedWriteProtect);
  setup_.backend->FailOperation(OpCount(), EIO);
  EXPECT_EQ(Run(Cdb10(0x35, 0, 0, 0)).sense, sense::kWriteError);
  // The failure is kept for REQUEST SENSE.
  setup_.backend->FailOperation(OpCount(), EIO);
  EXPECT_EQ(Read(Cdb10(0x28, 0, 0, 1), 512).sense, sense::kUnrecoveredReadError);
  EXPECT_EQ(harness_->In({0x03, 0, 0, 0, 18, 0}, 18).data[12], 0x11);
  // And the unit goes on working.
  EXPECT_TRUE(Read(Cdb10(0x28, 0, 0, 1), 512).good());
  // EROFS and ERANGE from below (the drive's own checks) and ENOMEDIUM.
  setup_.backend->FailOperation(OpCount(), EROFS);
  EXPECT_EQ(Write(Cdb10(0x2a, 0, 0, 1), std::vector<uint8_t>(512)).sense, sense::kWriteProtected);
  setup_.backend->FailOperation(OpCount(), ERANGE);
  EXPECT_EQ(Read(Cdb10(0x28, 0, 0, 1), 512).sense, sense::kLbaOutOfRange);
  setup_.backend->FailOperation(OpCount(), ENOMEDIUM);
  EXPECT_EQ(Read(Cdb10(0x28, 0, 0, 1), 512).sense, sense::kMediumNotPresent);
}

TEST_F(DiskTest, HotPathAsksTheBackendNothing) {
  StartReady();
  const uint64_t before = setup_.backend->info_calls();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(Write(Cdb10(0x2a, 0, i, 1), Pattern(512, i)).good());
    ASSERT_TRUE(Read(Cdb10(0x28, 0, i, 1), 512).good());
  }
  EXPECT_EQ(setup_.backend->info_calls(), before);
}

// ---- SYNCHRONIZE CACHE, VERIFY, START STOP UNIT ----

TEST_F(DiskTest, SynchronizeCacheFlushes) {
  StartReady();
  size_t before = OpCount();
  // Linux: 35 00 00 00 00 00 00 00 00 00 (the whole device).
  ASSERT_TRUE(Run(Cdb10(0x35, 0, 0, 0)).good());
  std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kFlush);
  before = OpCount();
  ASSERT_TRUE(Run(Cdb16(0x91, 0x02, 100, 10)).good());  // IMMED, a range
  EXPECT_EQ(OpsSince(before).size(), 1u);
  EXPECT_EQ(Run(Cdb10(0x35, 0, 2040, 10)).sense, sense::kLbaOutOfRange);
}

TEST_F(DiskTest, Verify) {
  StartReady();
  const size_t before = OpCount();
  EXPECT_TRUE(Run(Cdb10(0x2f, 0, 0, 100)).good());
  EXPECT_TRUE(Run(Cdb16(0x8f, 0, 2000, 48)).good());
  EXPECT_EQ(OpCount(), before);
  EXPECT_EQ(Run(Cdb10(0x2f, 0, 2000, 49)).sense, sense::kLbaOutOfRange);
  EXPECT_EQ(Run(Cdb10(0x2f, 0x02, 0, 1)).sense, sense::kInvalidFieldInCdb);  // BYTCHK
}

TEST_F(DiskTest, StartStopUnit) {
  StartReady();
  size_t before = OpCount();
  EXPECT_TRUE(Run({0x1b, 0, 0, 0, 0x01, 0}).good());  // start
  EXPECT_EQ(OpCount(), before);
  EXPECT_TRUE(Run({0x1b, 0, 0, 0, 0x00, 0}).good());  // stop: flushes first
  std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kFlush);
  before = OpCount();
  EXPECT_TRUE(Run({0x1b, 0, 0, 0, 0x04, 0}).good());  // stop, NO_FLUSH
  EXPECT_EQ(OpCount(), before);
  // Reads work whatever was asked (no motor).
  EXPECT_TRUE(Read(Cdb10(0x28, 0, 0, 1), 512).good());
}

// ---- MODE SENSE / MODE SELECT ----

TEST_F(DiskTest, ModeSenseCachingPageAsLinuxReadsIt) {
  StartReady();
  // 1a 00 3f 00 04 00: the header (write protect).
  const Result header = harness_->In({0x1a, 0, 0x3f, 0, 4, 0}, 4);
  ASSERT_TRUE(header.good());
  ASSERT_EQ(header.data.size(), 4u);
  EXPECT_EQ(header.data[2], 0x10);  // DPOFUA, not write protected
  EXPECT_EQ(header.data[3], 8);     // one block descriptor
  // 1a 00 08 00 04 00 then alloc 32.
  const Result head8 = harness_->In({0x1a, 0, 0x08, 0, 4, 0}, 4);
  EXPECT_EQ(head8.data[0], 4 + 8 + 20 - 1);
  const Result caching = harness_->In({0x1a, 0, 0x08, 0, 32, 0}, 32);
  ASSERT_TRUE(caching.good());
  ASSERT_EQ(caching.data.size(), 32u);
  // Block descriptor: 2048 blocks of 512.
  EXPECT_EQ(Be24(&caching.data[5]), 2048u);
  EXPECT_EQ(Be24(&caching.data[9]), 512u);
  EXPECT_EQ(caching.data[12], 0x08);
  EXPECT_EQ(caching.data[13], 0x12);
  EXPECT_EQ(caching.data[14], 0x04);  // WCE, RCD = 0
}

TEST_F(DiskTest, ModeSenseWcePerCacheMode) {
  for (block::CacheMode mode :
       {block::CacheMode::kNone, block::CacheMode::kWriteback, block::CacheMode::kWritethrough,
        block::CacheMode::kDirectsync, block::CacheMode::kUnsafe}) {
    SCOPED_TRACE(block::CacheModeName(mode));
    block::DriveOptions drive;
    drive.cache_mode = mode;
    StartReady({}, drive);
    const Result caching = harness_->In({0x1a, 0x08, 0x08, 0, 0xff, 0}, 255);  // DBD
    ASSERT_TRUE(caching.good());
    ASSERT_EQ(caching.data.size(), 24u);
    EXPECT_EQ(caching.data[3], 0);  // no block descriptor
    EXPECT_EQ(caching.data[2], 0x10);
    EXPECT_EQ((caching.data[6] & 0x04) != 0, block::WriteCacheEnabled(mode));
  }
}

TEST_F(DiskTest, ModeSensePageControlAndAllPages) {
  StartReady();
  const Result all = harness_->In({0x1a, 0x08, 0x3f, 0, 0xff, 0}, 255);
  ASSERT_TRUE(all.good());
  // Pages 01h (12), 04h (24), 08h (20), 0Ah (12) after a 4-byte header.
  ASSERT_EQ(all.data.size(), 4u + 12 + 24 + 20 + 12);
  EXPECT_EQ(all.data[0], all.data.size() - 1);
  EXPECT_EQ(all.data[4], 0x01);
  EXPECT_EQ(all.data[16], 0x04);
  EXPECT_EQ(all.data[40], 0x08);
  EXPECT_EQ(all.data[60], 0x0a);
  EXPECT_EQ(all.data[63], 0x10);  // control page: QUEUE ALGORITHM MODIFIER 1
  // All subpages (FFh) gives the same.
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0x3f, 0xff, 0xff, 0}, 255).data, all.data);

  const Result changeable = harness_->In({0x1a, 0x08, 0x48, 0, 0xff, 0}, 255);
  ASSERT_TRUE(changeable.good());
  EXPECT_EQ(changeable.data[6], 0x04);  // only WCE
  const Result defaults = harness_->In({0x1a, 0x08, 0x88, 0, 0xff, 0}, 255);
  EXPECT_EQ(defaults.data[6], 0x04);
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0xc8, 0, 0xff, 0}, 255).sense,
            sense::kSavingParametersNotSupported);
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0x2a, 0, 0xff, 0}, 255).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0x08, 0x01, 0xff, 0}, 255).sense, sense::kInvalidFieldInCdb);
}

TEST_F(DiskTest, ModeSense10LongLba) {
  StartReady();
  const Result r = harness_->In({0x5a, 0x10, 0x08, 0, 0, 0, 0, 0, 0xff, 0}, 255);  // LLBAA
  ASSERT_TRUE(r.good());
  ASSERT_EQ(r.data.size(), 8u + 16 + 20);
  EXPECT_EQ(Be16(&r.data[0]), r.data.size() - 2);
  EXPECT_EQ(r.data[3], 0x10);  // DPOFUA
  EXPECT_EQ(r.data[4], 0x01);  // LONGLBA
  EXPECT_EQ(Be16(&r.data[6]), 16);
  EXPECT_EQ(Be64(&r.data[8]), 2048u);
  EXPECT_EQ(Be32(&r.data[20]), 512u);
  EXPECT_EQ(r.data[24], 0x08);
  const Result shortdesc = harness_->In({0x5a, 0x00, 0x08, 0, 0, 0, 0, 0, 0xff, 0}, 255);
  EXPECT_EQ(Be16(&shortdesc.data[6]), 8);
}

TEST_F(DiskTest, ModeSelectChangesWceAndWritesBecomeFua) {
  block::MemoryBackendOptions backend;
  backend.native_fua = true;
  StartReady(backend);
  // What Linux's sd sends for "echo 'write through' > cache_type": MODE SELECT(6), PF, the
  // caching page as MODE SENSE returned it with WCE cleared and PS cleared, no block descriptor.
  const Result current = harness_->In({0x1a, 0x08, 0x08, 0, 0xff, 0}, 255);
  std::vector<uint8_t> list(current.data.begin(), current.data.end());
  list[0] = 0;       // mode data length: reserved in MODE SELECT
  list[2] = 0;       // device-specific: WP and DPOFUA cleared
  list[6] &= ~0x04;  // WCE off
  ASSERT_TRUE(Write({0x15, 0x10, 0, 0, static_cast<uint8_t>(list.size()), 0}, list).good());
  EXPECT_FALSE(setup_.disk->write_cache_enabled());
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0x08, 0, 0xff, 0}, 255).data[6] & 0x04, 0);
  // The default is still on.
  EXPECT_EQ(harness_->In({0x1a, 0x08, 0x88, 0, 0xff, 0}, 255).data[6] & 0x04, 0x04);
  // Now a plain write goes to the backend as FUA.
  const size_t before = OpCount();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0, 0, 1), std::vector<uint8_t>(512)).good());
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_TRUE(ops[0].fua);

  // Back on, through MODE SELECT(10) with a block descriptor restating the geometry.
  std::vector<uint8_t> ten(8, 0);
  ten[7] = 8;
  std::vector<uint8_t> descriptor(8, 0);
  PutBe24(&descriptor[5], 512);
  ten.insert(ten.end(), descriptor.begin(), descriptor.end());
  ten.insert(ten.end(), list.begin() + 4, list.end());
  ten[8 + 8 + 2] |= 0x04;
  ASSERT_TRUE(
      Write({0x55, 0x10, 0, 0, 0, 0, 0, 0, static_cast<uint8_t>(ten.size()), 0}, ten).good());
  EXPECT_TRUE(setup_.disk->write_cache_enabled());
}

TEST_F(DiskTest, ModeSelectRejectsOtherChanges) {
  StartReady();
  const Result current = harness_->In({0x1a, 0x08, 0x08, 0, 0xff, 0}, 255);
  std::vector<uint8_t> list(current.data.begin(), current.data.end());
  list[0] = 0;
  list[2] = 0;
  std::vector<uint8_t> bad = list;
  bad[6] |= 0x01;  // RCD: not changeable
  EXPECT_EQ(Write({0x15, 0x10, 0, 0, static_cast<uint8_t>(bad.size()), 0}, bad).sense,
            sense::kInvalidFieldInParameterList);
  // The same control page as it is: accepted; changed: refused.
  const Result control = harness_->In({0x1a, 0x08, 0x0a, 0, 0xff, 0}, 255);
  std::vector<uint8_t> same(control.data.begin(), control.data.end());
  same[0] = 0;
  same[2] = 0;
  EXPECT_TRUE(Write({0x15, 0x10, 0, 0, static_cast<uint8_t>(same.size()), 0}, same).good());
  same[6] |= 0x04;  // D_SENSE
  EXPECT_EQ(Write({0x15, 0x10, 0, 0, static_cast<uint8_t>(same.size()), 0}, same).sense,
            sense::kInvalidFieldInParameterList);
  // A different block size: refused.
  std::vector<uint8_t> geometry = {0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0x10, 0x00};
  EXPECT_EQ(Write({0x15, 0x10, 0, 0, 12, 0}, geometry).sense, sense::kInvalidFieldInParameterList);
  // SP: saving is not supported; PF = 0: not supported; a truncated page; a short list.
  EXPECT_EQ(Write({0x15, 0x11, 0, 0, static_cast<uint8_t>(list.size()), 0}, list).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(Write({0x15, 0x00, 0, 0, static_cast<uint8_t>(list.size()), 0}, list).sense,
            sense::kInvalidFieldInCdb);
  std::vector<uint8_t> truncated(list.begin(), list.begin() + 10);
  EXPECT_EQ(Write({0x15, 0x10, 0, 0, 10, 0}, truncated).sense, sense::kParameterListLengthError);
  EXPECT_EQ(Write({0x15, 0x10, 0, 0, 2, 0}, {0, 0}).sense, sense::kParameterListLengthError);
  // Parameter list longer than the data-out buffer: overrun.
  const Result overrun = Write({0x15, 0x10, 0, 0, 24, 0}, std::vector<uint8_t>(10));
  EXPECT_EQ(overrun.sense, sense::kInvalidFieldInCdb);
  EXPECT_TRUE(overrun.overrun);
  // Length 0: nothing to do.
  EXPECT_TRUE(Write({0x15, 0x10, 0, 0, 0, 0}, {}).good());
  EXPECT_TRUE(setup_.disk->write_cache_enabled());
}

// ---- REPORT SUPPORTED OPERATION CODES ----

TEST_F(DiskTest, ReportSupportedOperationCodesOneCommand) {
  StartReady();
  // Linux's probe: a3 0c 01 12 00 00 00 00 00 0a 00 00 (QEMU answers 05/20/00).
  const Result inquiry = harness_->In({0xa3, 0x0c, 0x01, 0x12, 0, 0, 0, 0, 0, 0x0a, 0, 0}, 10);
  ASSERT_TRUE(inquiry.good());
  EXPECT_EQ(inquiry.data,
            (std::vector<uint8_t>{0x00, 0x03, 0x00, 0x06, 0x12, 0x01, 0xff, 0xff, 0xff, 0x00}));
  // WRITE SAME(16) and (10) then (what sd asks next).
  const Result ws16 = harness_->In({0xa3, 0x0c, 0x01, 0x93, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32);
  ASSERT_TRUE(ws16.good());
  EXPECT_EQ(ws16.data[1] & 0x07, 0x03);
  EXPECT_EQ(Be16(&ws16.data[2]), 16);
  EXPECT_EQ(ws16.data[4], 0x93);
  // By service action: READ CAPACITY(16).
  const Result rc16 = harness_->In({0xa3, 0x0c, 0x02, 0x9e, 0, 0x10, 0, 0, 0, 0x20, 0, 0}, 32);
  ASSERT_TRUE(rc16.good());
  EXPECT_EQ(rc16.data[1], 0x03);
  EXPECT_EQ(rc16.data[4], 0x9e);
  EXPECT_EQ(rc16.data[5], 0x10);
  // Option 1 on an opcode with service actions, option 2 on one without: invalid.
  EXPECT_EQ(harness_->In({0xa3, 0x0c, 0x01, 0x9e, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(harness_->In({0xa3, 0x0c, 0x02, 0x28, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32).sense,
            sense::kInvalidFieldInCdb);
  // Not supported: SUPPORT 001b.
  const Result none = harness_->In({0xa3, 0x0c, 0x01, 0xc0, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32);
  ASSERT_TRUE(none.good());
  EXPECT_EQ(none.data, (std::vector<uint8_t>{0x00, 0x01, 0x00, 0x00}));
  // With RCTD: the timeouts descriptor follows.
  const Result timeouts = harness_->In({0xa3, 0x0c, 0x81, 0x28, 0, 0, 0, 0, 0, 0x40, 0, 0}, 64);
  ASSERT_TRUE(timeouts.good());
  EXPECT_EQ(timeouts.data.size(), 4u + 10 + 12);
  EXPECT_EQ(timeouts.data[1], 0x83);
  EXPECT_EQ(Be16(&timeouts.data[14]), 0x0a);
}

TEST_F(DiskTest, ReportSupportedOperationCodesAllCommands) {
  StartReady();
  const Result all = harness_->In({0xa3, 0x0c, 0x00, 0, 0, 0, 0, 0, 0x10, 0x00, 0, 0}, 4096);
  ASSERT_TRUE(all.good());
  const size_t count = setup_.disk->commands().size();
  EXPECT_EQ(count, Disk::Commands().size());  // discard: UNMAP included
  ASSERT_EQ(all.data.size(), 4 + 8 * count);
  EXPECT_EQ(Be32(&all.data[0]), 8 * count);
  bool saw_read_capacity16 = false;
  for (size_t i = 0; i < count; ++i) {
    const uint8_t* d = &all.data[4 + 8 * i];
    const CommandInfo* info = setup_.disk->commands()[i];
    EXPECT_EQ(d[0], info->opcode);
    EXPECT_EQ(Be16(&d[6]), info->cdb_length());
    if (d[0] == 0x9e) {
      saw_read_capacity16 = true;
      EXPECT_EQ(d[5] & 0x01, 1);  // SERVACTV
      EXPECT_EQ(Be16(&d[2]), 0x10);
    }
  }
  EXPECT_TRUE(saw_read_capacity16);
  // Truncated at the allocation length, with the full length in the header.
  const Result head = harness_->In({0xa3, 0x0c, 0x00, 0, 0, 0, 0, 0, 0, 12, 0, 0}, 4096);
  EXPECT_EQ(head.data.size(), 12u);
  EXPECT_EQ(Be32(&head.data[0]), 8 * count);
  EXPECT_EQ(harness_->In({0xa3, 0x0c, 0x05, 0, 0, 0, 0, 0, 0, 12, 0, 0}, 64).sense,
            sense::kInvalidFieldInCdb);
}

// ---- UNMAP and WRITE SAME ----

std::vector<uint8_t> UnmapList(std::initializer_list<std::pair<uint64_t, uint32_t>> ranges) {
  std::vector<uint8_t> list(8, 0);
  for (const auto& [lba, blocks] : ranges) {
    std::vector<uint8_t> d(16, 0);
    PutBe64(&d[0], lba);
    PutBe32(&d[8], blocks);
    list.insert(list.end(), d.begin(), d.end());
  }
  PutBe16(&list[0], static_cast<uint16_t>(list.size() - 2));
  PutBe16(&list[2], static_cast<uint16_t>(list.size() - 8));
  return list;
}

TEST_F(DiskTest, UnmapDiscards) {
  StartReady();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0, 0, 512), std::vector<uint8_t>(512 * 512, 0xab)).good());
  const size_t before = OpCount();
  // 64 KiB-aligned ranges: the MemoryBackend frees whole chunks.
  const std::vector<uint8_t> list = UnmapList({{0, 128}, {256, 128}});
  const Result r = Write(Cdb10(0x42, 0, 0, static_cast<uint16_t>(list.size())), list);
  ASSERT_TRUE(r.good()) << ::testing::PrintToString(r.sense);
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].type, RequestType::kDiscard);
  EXPECT_EQ(ops[0].offset, 0u);
  EXPECT_EQ(ops[0].length, 128u * 512);
  EXPECT_EQ(ops[1].offset, 256u * 512);
  EXPECT_EQ(Stored(0, 512), std::vector<uint8_t>(512, 0));
  EXPECT_EQ(Stored(128 * 512, 512), std::vector<uint8_t>(512, 0xab));
}

TEST_F(DiskTest, UnmapErrors) {
  StartReady();
  const std::vector<uint8_t> out_of_range = UnmapList({{2040, 16}});
  EXPECT_EQ(
      Write(Cdb10(0x42, 0, 0, static_cast<uint16_t>(out_of_range.size())), out_of_range).sense,
      sense::kLbaOutOfRange);
  EXPECT_EQ(Write(Cdb10(0x42, 0, 0, 6), std::vector<uint8_t>(6)).sense,
            sense::kParameterListLengthError);
  EXPECT_EQ(Write(Cdb10(0x42, 1, 0, 24), UnmapList({{0, 1}})).sense,
            sense::kInvalidFieldInCdb);  // ANCHOR
  const Result overrun = Write(Cdb10(0x42, 0, 0, 40), UnmapList({{0, 1}}));
  EXPECT_TRUE(overrun.overrun);
  EXPECT_TRUE(Write(Cdb10(0x42, 0, 0, 0), {}).good());  // nothing
  // Zero-block descriptors are skipped: no I/O.
  const size_t before = OpCount();
  const std::vector<uint8_t> empty = UnmapList({{5, 0}});
  EXPECT_TRUE(Write(Cdb10(0x42, 0, 0, static_cast<uint16_t>(empty.size())), empty).good());
  EXPECT_EQ(OpCount(), before);
}

TEST_F(DiskTest, WriteSameZerosAsExt4Does) {
  StartReady();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0, 0, 64), std::vector<uint8_t>(64 * 512, 0x77)).good());
  const size_t before = OpCount();
  // 41 00 00 00 4a 2a 00 00 18 00 scaled to this disk: LBA 10, 24 blocks, a zero block.
  const Result r = Write(Cdb10(0x41, 0, 10, 24), std::vector<uint8_t>(512, 0));
  ASSERT_TRUE(r.good()) << ::testing::PrintToString(r.sense);
  EXPECT_EQ(r.data_out_residual, 0u);
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kWrite);
  EXPECT_EQ(ops[0].offset, 10u * 512);
  EXPECT_EQ(ops[0].length, 24u * 512);
  EXPECT_EQ(Stored(10 * 512, 24 * 512), std::vector<uint8_t>(24 * 512, 0));
  EXPECT_EQ(Stored(9 * 512, 512), std::vector<uint8_t>(512, 0x77));
  EXPECT_EQ(Stored(34 * 512, 512), std::vector<uint8_t>(512, 0x77));
}

TEST_F(DiskTest, WriteSamePatternInSeveralRequests) {
  StartReady();
  const std::vector<uint8_t> block = Pattern(512, 42);
  const size_t before = OpCount();
  // 2048 blocks: exactly one 1 MiB request, from iovecs of 100 bytes.
  ASSERT_TRUE(Write(Cdb16(0x93, 0, 0, 2048), block, 100).good());
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);  // exactly 1 MiB
  ASSERT_TRUE(Write(Cdb10(0x41, 0, 5, 2043), block).good());
  const std::vector<RecordedOperation> more = OpsSince(before + 1);
  ASSERT_EQ(more.size(), 1u);
  for (uint64_t lba : {0, 5, 1000, 2047}) {
    EXPECT_EQ(Stored(lba * 512, 512), block) << lba;
  }
}

TEST_F(DiskTest, WriteSameSplitsLargeRanges) {
  block::MemoryBackendOptions backend;
  backend.size_bytes = 8 << 20;
  StartReady(backend);
  const size_t before = OpCount();
  // 5000 blocks = 2.44 MiB: two 1 MiB requests and a tail.
  ASSERT_TRUE(Write(Cdb10(0x41, 0, 100, 5000), Pattern(512, 1)).good());
  const std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 3u);
  uint64_t total = 0;
  for (const RecordedOperation& op : ops) total += op.length;
  EXPECT_EQ(total, 5000u * 512);
  EXPECT_EQ(Stored(5099 * 512, 512), Pattern(512, 1));
  EXPECT_EQ(Stored(5100 * 512, 512), std::vector<uint8_t>(512, 0));
}

TEST_F(DiskTest, WriteSameUnmapAndNdob) {
  StartReady();
  ASSERT_TRUE(Write(Cdb10(0x2a, 0, 0, 256), std::vector<uint8_t>(256 * 512, 0x55)).good());
  size_t before = OpCount();
  ASSERT_TRUE(Write(Cdb16(0x93, 0x08, 0, 128), std::vector<uint8_t>(512)).good());  // UNMAP
  std::vector<RecordedOperation> ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kDiscard);
  EXPECT_EQ(ops[0].length, 128u * 512);
  // NDOB: zeros without a data-out buffer.
  before = OpCount();
  ASSERT_TRUE(Write(Cdb16(0x93, 0x01, 128, 8), {}).good());
  ops = OpsSince(before);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].type, RequestType::kWrite);
  EXPECT_EQ(Stored(128 * 512, 8 * 512), std::vector<uint8_t>(8 * 512, 0));
  // Errors: zero blocks (WSNZ), ANCHOR, too long, missing data, NDOB in the 10-byte CDB.
  EXPECT_EQ(Write(Cdb10(0x41, 0, 0, 0), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(Write(Cdb10(0x41, 0x10, 0, 1), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(Write(Cdb16(0x93, 0, 0, 70000), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_TRUE(Write(Cdb10(0x41, 0, 0, 1), std::vector<uint8_t>(100)).overrun);
  EXPECT_EQ(Write(Cdb10(0x41, 0x01, 0, 1), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(Write(Cdb10(0x41, 0, 2047, 2), std::vector<uint8_t>(512)).sense, sense::kLbaOutOfRange);
}

TEST_F(DiskTest, WriteSameUnmapWithoutDiscardIsInvalid) {
  block::MemoryBackendOptions backend;
  backend.discard = false;
  StartReady(backend);
  EXPECT_EQ(Write(Cdb10(0x41, 0x08, 0, 8), std::vector<uint8_t>(512)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_TRUE(Write(Cdb10(0x41, 0x00, 0, 8), std::vector<uint8_t>(512)).good());
}

// ---- CDB validation ----

TEST_F(DiskTest, UnknownOpcodesAndShortCdbs) {
  StartReady();
  EXPECT_EQ(Run({0xc5, 0, 0, 0, 0, 0}).sense, sense::kInvalidCommandOperationCode);
  EXPECT_EQ(Run({0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0}).sense, sense::kInvalidCommandOperationCode);
  EXPECT_EQ(Run({0x43, 0, 0, 0, 0, 0, 0, 0, 0x0c, 0}).sense,
            sense::kInvalidCommandOperationCode);  // READ TOC on a disk
  // READ(16) in a 12-byte CDB (ATAPI-sized): the group needs 16.
  RunOptions options;
  options.data_in_size = 512;
  const std::vector<uint8_t> read16 = Cdb16(0x88, 0, 0, 1);
  EXPECT_EQ(harness_->Run(std::span<const uint8_t>(read16.data(), 12), options).sense,
            sense::kInvalidFieldInCdb);
  // The same in a 32-byte CDB (virtio-scsi's default size): fine.
  options.cdb_size = 32;
  EXPECT_TRUE(harness_->Run(read16, options).good());
  EXPECT_EQ(Run(std::vector<uint8_t>{}).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x12}).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(Run({0x9e}).sense, sense::kInvalidFieldInCdb);  // short, service action unknown yet
  EXPECT_EQ(Run({0xc5}).sense, sense::kInvalidCommandOperationCode);
}

// ---- The Linux 6.1 probe of docs/linux-commands.md 1.1 ----

TEST_F(DiskTest, LinuxProbeSequence) {
  Start();
  EXPECT_TRUE(harness_->In({0x12, 0, 0, 0, 0x24, 0}, 36).good());
  for (uint8_t alloc : {4, 9, 4, 9, 36}) {
    EXPECT_TRUE(harness_->In({0x12, 1, 0, 0, alloc, 0}, alloc).good());
  }
  EXPECT_TRUE(harness_->In({0x12, 1, 0x83, 0, 4, 0}, 4).good());
  const Result id = harness_->In({0x12, 1, 0x83, 0, 4, 0}, 4);
  const uint8_t full = static_cast<uint8_t>(Be16(&id.data[2]) + 4);
  EXPECT_EQ(harness_->In({0x12, 1, 0x83, 0, full, 0}, full).data.size(), full);
  for (uint8_t page : {0xb0, 0xb1}) {
    EXPECT_TRUE(harness_->In({0x12, 1, page, 0, 4, 0}, 4).good());
    EXPECT_TRUE(harness_->In({0x12, 1, page, 0, 64, 0}, 64).good());
  }
  EXPECT_TRUE(harness_->In({0x12, 1, 0xb2, 0, 8, 0}, 8).good());
  EXPECT_TRUE(harness_->In({0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096).good());
  EXPECT_EQ(Run({0, 0, 0, 0, 0, 0}).sense, sense::kPowerOnOrReset);
  EXPECT_TRUE(Run({0, 0, 0, 0, 0, 0}).good());
  EXPECT_TRUE(harness_->In({0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0}, 32).good());
  EXPECT_TRUE(harness_->In({0x1a, 0, 0x3f, 0, 4, 0}, 4).good());
  EXPECT_TRUE(harness_->In({0x1a, 0, 0x08, 0, 4, 0}, 4).good());
  const Result caching = harness_->In({0x1a, 0, 0x08, 0, 0x20, 0}, 32);
  EXPECT_EQ(caching.data[2], 0x10);  // Linux: "supports DPO and FUA"
  EXPECT_TRUE(harness_->In({0xa3, 0x0c, 0x01, 0x12, 0, 0, 0, 0, 0, 0x0a, 0, 0}, 10).good());
  EXPECT_TRUE(Read(Cdb10(0x28, 0, 0, 8), 4096).good());
}

}  // namespace
}  // namespace devices::scsi

// Sense encoding, LUN addressing, scatter-gather helpers and the dispatch tables' consistency.

#include <set>
#include <utility>
#include <vector>

#include "devices/scsi/cdrom.h"
#include "devices/scsi/constants.h"
#include "devices/scsi/disk.h"
#include "devices/scsi/iovec_util.h"
#include "devices/scsi/lun.h"
#include "devices/scsi/sense.h"
#include "devices/scsi/task.h"
#include "gtest/gtest.h"

namespace devices::scsi {
namespace {

TEST(SenseTest, FixedFormat) {
  const auto data = EncodeFixedSense(sense::kMediumRemovalPrevented);
  EXPECT_EQ(data.size(), 18u);
  EXPECT_EQ(data[0], 0x70);  // current, fixed, VALID = 0
  EXPECT_EQ(data[2], 0x05);
  EXPECT_EQ(data[7], 10);  // additional sense length
  EXPECT_EQ(data[12], 0x53);
  EXPECT_EQ(data[13], 0x02);
  EXPECT_EQ(EncodeFixedSense(sense::kNoSense)[2], 0);
}

TEST(LunTest, PeripheralAndFlatAddressing) {
  EXPECT_EQ(DecodeLun(0), 0);
  EXPECT_EQ(DecodeLun(uint64_t{0x0005} << 48), 5);  // peripheral, bus 0
  EXPECT_EQ(DecodeLun(uint64_t{0x4000} << 48), 0);  // flat (Linux virtio_scsi)
  EXPECT_EQ(DecodeLun(uint64_t{0x412c} << 48), 300);
  EXPECT_EQ(DecodeLun(uint64_t{0x0105} << 48), std::nullopt);        // bus 1
  EXPECT_EQ(DecodeLun(uint64_t{0x8000} << 48), std::nullopt);        // logical unit addressing
  EXPECT_EQ(DecodeLun((uint64_t{0x4000} << 48) | 1), std::nullopt);  // a second level
  EXPECT_EQ(EncodeLun(7), uint64_t{0x0007} << 48);
  EXPECT_EQ(EncodeLun(300), uint64_t{0x412c} << 48);
  EXPECT_EQ(EncodeFlatLun(0), uint64_t{0x4000} << 48);
  for (uint16_t lun : {0, 1, 255, 256, 16383}) {
    EXPECT_EQ(DecodeLun(EncodeLun(lun)), lun);
    EXPECT_EQ(DecodeLun(EncodeFlatLun(lun)), lun);
  }
}

TEST(IovecTest, DataInWriterTruncatesAcrossSegments) {
  std::vector<uint8_t> a(3, 0), b(4, 0);
  const std::vector<iovec> iov = {{a.data(), a.size()}, {b.data(), b.size()}};
  DataInWriter writer(iov, 5);
  const uint8_t first[] = {1, 2};
  const uint8_t second[] = {3, 4, 5, 6};
  writer.Append(first);
  writer.Append(second);
  EXPECT_EQ(writer.produced(), 6u);
  EXPECT_EQ(writer.transferred(), 5u);
  EXPECT_EQ(a, (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(b, (std::vector<uint8_t>{4, 5, 0, 0}));
}

TEST(IovecTest, TrimGatherScatterIsZero) {
  std::vector<uint8_t> a = {1, 2, 3}, b = {0, 0, 0, 0};
  const std::vector<iovec> iov = {{a.data(), a.size()}, {b.data(), b.size()}};
  EXPECT_EQ(TotalLength(iov), 7u);
  std::vector<iovec> trimmed;
  TrimInto(iov, 5, &trimmed);
  ASSERT_EQ(trimmed.size(), 2u);
  EXPECT_EQ(trimmed[1].iov_len, 2u);
  std::vector<uint8_t> out(4);
  EXPECT_EQ(GatherFrom(iov, out), 4u);
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 2, 3, 0}));
  EXPECT_FALSE(IsZero(iov, 1));
  const std::vector<iovec> tail = {{b.data(), b.size()}};
  EXPECT_TRUE(IsZero(tail, 4));
  const uint8_t data[] = {9, 9, 9, 9, 9, 9, 9, 9};
  EXPECT_EQ(ScatterTo(iov, data), 7u);
  EXPECT_EQ(b[3], 9);
}

TEST(TaskTest, CdbIsCopiedAndBounded) {
  Task task;
  std::vector<uint8_t> long_cdb(40, 0xab);
  task.SetCdb(long_cdb);
  EXPECT_EQ(task.cdb().size(), kMaxCdbSize);
  const uint8_t shortcdb[] = {0x12, 0x00};
  task.SetCdb(shortcdb);
  EXPECT_EQ(task.cdb().size(), 2u);
}

TEST(CdbTest, GroupLengths) {
  EXPECT_EQ(CdbLengthForOpcode(0x00), 6);
  EXPECT_EQ(CdbLengthForOpcode(0x28), 10);
  EXPECT_EQ(CdbLengthForOpcode(0x5a), 10);
  EXPECT_EQ(CdbLengthForOpcode(0x7f), 0);
  EXPECT_EQ(CdbLengthForOpcode(0x88), 16);
  EXPECT_EQ(CdbLengthForOpcode(0xa8), 12);
  EXPECT_EQ(CdbLengthForOpcode(0xc0), 0);
}

void CheckTable(std::span<const CommandInfo> table) {
  std::set<std::pair<int, int>> seen;
  for (const CommandInfo& info : table) {
    SCOPED_TRACE(info.name);
    EXPECT_GT(info.cdb_length(), 0);
    EXPECT_EQ(info.usage[0], info.opcode);
    for (size_t i = info.cdb_length(); i < info.usage.size(); ++i) EXPECT_EQ(info.usage[i], 0);
    if (info.service_action != kNoServiceAction) {
      EXPECT_EQ(info.usage[1] & 0x1f, info.service_action);
    }
    EXPECT_NE(info.handler, nullptr);
    EXPECT_TRUE(seen.insert({info.opcode, info.service_action}).second);
  }
}

TEST(TableTest, DiskTableIsConsistent) { CheckTable(Disk::Commands()); }
TEST(TableTest, CdRomTableIsConsistent) { CheckTable(CdRom::Commands()); }

}  // namespace
}  // namespace devices::scsi

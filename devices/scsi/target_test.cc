// A target with several LUNs: dispatch, REPORT LUNS, missing LUNs, asynchronous completion, and
// queues on two threads.

#include "devices/scsi/target.h"

#include <sys/uio.h>

#include <thread>
#include <vector>

#include "block/memory_backend.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/lun.h"
#include "devices/scsi/test_harness.h"
#include "gtest/gtest.h"

namespace devices::scsi {
namespace {

using testing::Cdb10;
using testing::Harness;
using testing::Result;
using testing::RunOptions;

uint64_t Flat(uint16_t lun) { return EncodeFlatLun(lun); }

class TargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::DiskSetup> disk = testing::MakeDisk();
    ASSERT_TRUE(disk.ok());
    disk_ = *disk;
    block::MemoryBackendOptions big;
    big.size_bytes = 4 << 20;
    absl::StatusOr<testing::DiskSetup> disk300 = testing::MakeDisk(big);
    ASSERT_TRUE(disk300.ok());
    disk300_ = *disk300;
    absl::StatusOr<testing::CdSetup> cd = testing::MakeCdRom(testing::MakeMedium(32));
    ASSERT_TRUE(cd.ok());
    cd_ = *cd;
    ASSERT_TRUE(target_.AddLogicalUnit(0, disk_.disk).ok());
    ASSERT_TRUE(target_.AddLogicalUnit(300, disk300_.disk).ok());
    ASSERT_TRUE(target_.AddLogicalUnit(1, cd_.cd).ok());
  }

  Result In(std::initializer_list<uint8_t> cdb, size_t in, uint64_t lun) {
    return harness_->In(cdb, in, lun);
  }

  testing::DiskSetup disk_;
  testing::DiskSetup disk300_;
  testing::CdSetup cd_;
  Target target_;
  std::unique_ptr<Harness> harness_;
};

TEST_F(TargetTest, ConfigurationErrors) {
  EXPECT_EQ(target_.AddLogicalUnit(1, disk_.disk).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(target_.AddLogicalUnit(16384, disk_.disk).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target_.AddLogicalUnit(2, nullptr).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(target_.luns().size(), 3u);
  EXPECT_EQ(target_.Find(300), disk300_.disk);
  EXPECT_EQ(target_.Find(2), nullptr);
  auto queue = target_.CreateQueue([](Task&) {});
  ASSERT_TRUE(queue.ok());
  EXPECT_EQ((*queue)->completion_fds().size(), 3u);
}

// Hot-plug: the inventory changes at any time; a queue made before changes only when its thread
// applies the change (TargetQueue::AddUnit, TakeUnit).
TEST_F(TargetTest, UnitsComeAndGoWhileQueuesExist) {
  auto made = target_.CreateQueue([](Task&) {});
  ASSERT_TRUE(made.ok());
  TargetQueue& queue = **made;
  ASSERT_TRUE(target_.AddLogicalUnit(2, disk_.disk).ok());
  EXPECT_EQ(target_.luns(), (std::vector<uint16_t>{0, 1, 2, 300}));
  EXPECT_EQ(queue.Find(2), nullptr);
  auto fd = queue.AddUnit(2, disk_.disk);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_GE(*fd, 0);
  EXPECT_NE(queue.Find(2), nullptr);
  EXPECT_EQ(queue.completion_fds().size(), 4u);
  EXPECT_EQ(queue.completion_fds()[2], *fd);  // parallel to the LUNs, ascending
  EXPECT_EQ(std::vector<uint16_t>(queue.luns().begin(), queue.luns().end()),
            (std::vector<uint16_t>{0, 1, 2, 300}));
  EXPECT_EQ(queue.AddUnit(2, disk_.disk).status().code(), absl::StatusCode::kAlreadyExists);

  auto removed = target_.RemoveLogicalUnit(1);
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(*removed, cd_.cd);
  EXPECT_EQ(target_.RemoveLogicalUnit(1).status().code(), absl::StatusCode::kNotFound);
  std::unique_ptr<LuQueue> taken = queue.TakeUnit(1);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->in_flight(), 0u);
  EXPECT_EQ(queue.TakeUnit(1), nullptr);
  EXPECT_EQ(queue.Find(1), nullptr);
  EXPECT_EQ(queue.completion_fds().size(), 3u);
  EXPECT_EQ(std::vector<uint16_t>(queue.luns().begin(), queue.luns().end()),
            (std::vector<uint16_t>{0, 2, 300}));
  // A new queue starts from the inventory as it is now.
  auto later = target_.CreateQueue([](Task&) {});
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(std::vector<uint16_t>((*later)->luns().begin(), (*later)->luns().end()),
            (std::vector<uint16_t>{0, 2, 300}));
}

TEST_F(TargetTest, DispatchByLunInEitherAddressing) {
  auto harness = Harness::ForTarget(target_);
  ASSERT_TRUE(harness.ok());
  harness_ = *std::move(harness);
  EXPECT_EQ(In({0x12, 0, 0, 0, 36, 0}, 36, Flat(0)).data[0], 0x00);
  EXPECT_EQ(In({0x12, 0, 0, 0, 36, 0}, 36, Flat(1)).data[0], 0x05);
  EXPECT_EQ(In({0x12, 0, 0, 0, 36, 0}, 36, EncodeLun(1)).data[0], 0x05);  // peripheral
  EXPECT_EQ(In({0x12, 0, 0, 0, 36, 0}, 36, Flat(300)).data[0], 0x00);
  const Result capacity = In({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8, Flat(300));
  EXPECT_EQ(capacity.sense, sense::kPowerOnOrReset);  // each unit has its own attention
  EXPECT_EQ(Be32(&In({0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 8, Flat(300)).data[0]) + 1u,
            (4u << 20) / 512);
}

TEST_F(TargetTest, ReportLuns) {
  auto harness = Harness::ForTarget(target_);
  ASSERT_TRUE(harness.ok());
  harness_ = *std::move(harness);
  const Result all = In({0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(0));
  ASSERT_TRUE(all.good());
  ASSERT_EQ(all.data.size(), 8u + 3 * 8);
  EXPECT_EQ(Be32(&all.data[0]), 24u);
  EXPECT_EQ(Be64(&all.data[8]), EncodeLun(0));
  EXPECT_EQ(Be64(&all.data[16]), EncodeLun(1));
  EXPECT_EQ(Be64(&all.data[24]), uint64_t{0x412c} << 48);  // flat for LUN 300
  // Allocation length 16 (SeaBIOS): the header and one LUN; the list length still says 24.
  const Result first = In({0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0}, 16, Flat(0));
  ASSERT_TRUE(first.good());
  EXPECT_EQ(first.data.size(), 16u);
  EXPECT_EQ(Be32(&first.data[0]), 24u);
  // Through the CD unit and through a LUN without a unit: the same list.
  EXPECT_EQ(In({0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(1)).data, all.data);
  EXPECT_EQ(In({0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(7)).data, all.data);
  // SELECT REPORT 01h: no well-known LUNs; 02h: all; 10h: invalid.
  EXPECT_EQ(In({0xa0, 0, 1, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(0)).data,
            std::vector<uint8_t>(8, 0));
  EXPECT_EQ(In({0xa0, 0, 2, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(0)).data, all.data);
  EXPECT_EQ(In({0xa0, 0, 0x10, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(0)).sense,
            sense::kInvalidFieldInCdb);
  EXPECT_EQ(In({0xa0, 0, 0x10, 0, 0, 0, 0, 0, 0x10, 0, 0, 0}, 4096, Flat(9)).sense,
            sense::kInvalidFieldInCdb);
}

TEST_F(TargetTest, MissingLun) {
  auto harness = Harness::ForTarget(target_);
  ASSERT_TRUE(harness.ok());
  harness_ = *std::move(harness);
  const Result inquiry = In({0x12, 0, 0, 0, 36, 0}, 36, Flat(2));
  ASSERT_TRUE(inquiry.good());
  EXPECT_EQ(inquiry.data.size(), 36u);
  EXPECT_EQ(inquiry.data[0], 0x7f);  // PQ 011b, type 1Fh
  const Result vpd = In({0x12, 1, 0, 0, 36, 0}, 36, Flat(2));
  EXPECT_EQ(vpd.data, (std::vector<uint8_t>{0x7f, 0, 0, 0}));
  EXPECT_EQ(In({0x12, 1, 0x83, 0, 36, 0}, 36, Flat(2)).sense, sense::kInvalidFieldInCdb);
  EXPECT_EQ(In({0x00, 0, 0, 0, 0, 0}, 0, Flat(2)).sense, sense::kLogicalUnitNotSupported);
  EXPECT_EQ(In({0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0}, 512, Flat(2)).sense,
            sense::kLogicalUnitNotSupported);
  EXPECT_EQ(In({0xc5}, 0, Flat(2)).sense, sense::kLogicalUnitNotSupported);
  const Result sense = In({0x03, 0, 0, 0, 18, 0}, 18, Flat(2));
  ASSERT_TRUE(sense.good());
  EXPECT_EQ(sense.data[2], 0x05);
  EXPECT_EQ(sense.data[12], 0x25);
  // LUNs this target cannot address: a bus identifier, a second level.
  EXPECT_EQ(In({0x12, 0, 0, 0, 36, 0}, 36, uint64_t{0x0100} << 48).data[0], 0x7f);
  EXPECT_EQ(In({0x00, 0, 0, 0, 0, 0}, 0, Flat(0) | 1).sense, sense::kLogicalUnitNotSupported);
  // A short INQUIRY CDB.
  EXPECT_EQ(In({0x12, 0, 0}, 36, Flat(2)).sense, sense::kInvalidFieldInCdb);
}

TEST_F(TargetTest, ResetPostsAttentionOnEveryUnit) {
  auto harness = Harness::ForTarget(target_);
  ASSERT_TRUE(harness.ok());
  harness_ = *std::move(harness);
  for (uint16_t lun : {0, 1, 300}) {
    EXPECT_EQ(In({0, 0, 0, 0, 0, 0}, 0, Flat(lun)).sense, sense::kPowerOnOrReset);
    EXPECT_TRUE(In({0, 0, 0, 0, 0, 0}, 0, Flat(lun)).good());
  }
  target_.Reset();
  for (uint16_t lun : {0, 1, 300}) {
    EXPECT_EQ(In({0, 0, 0, 0, 0, 0}, 0, Flat(lun)).sense, sense::kPowerOnOrReset);
  }
}

TEST_F(TargetTest, TasksOnTwoUnitsCompleteThroughTheHandler) {
  std::vector<Task*> completed;
  auto queue = target_.CreateQueue([&completed](Task& task) { completed.push_back(&task); });
  ASSERT_TRUE(queue.ok());
  TargetQueue& q = **queue;
  // Consume the power-on attentions.
  for (uint16_t lun : {0, 300}) {
    Task tur;
    const uint8_t cdb[6] = {};
    tur.SetCdb(cdb);
    tur.lun = Flat(lun);
    ASSERT_EQ(q.Execute(tur), Execution::kCompleted);
  }
  std::vector<uint8_t> a(512), b(1024);
  const iovec va{a.data(), a.size()}, vb{b.data(), b.size()};
  Task ta, tb;
  const std::vector<uint8_t> ca = Cdb10(0x28, 0, 0, 1), cb = Cdb10(0x28, 0, 0, 2);
  ta.SetCdb(ca);
  ta.lun = Flat(0);
  ta.data_in = std::span<const iovec>(&va, 1);
  tb.SetCdb(cb);
  tb.lun = Flat(300);
  tb.data_in = std::span<const iovec>(&vb, 1);
  EXPECT_EQ(q.Execute(ta), Execution::kInFlight);
  EXPECT_EQ(q.Execute(tb), Execution::kInFlight);
  EXPECT_EQ(q.in_flight(), 2u);
  q.Submit();
  for (int i = 0; i < 100 && completed.size() < 2; ++i) {
    for (size_t index = 0; index < q.completion_fds().size(); ++index) q.ProcessCompletions(index);
  }
  ASSERT_EQ(completed.size(), 2u);
  EXPECT_EQ(q.in_flight(), 0u);
  EXPECT_EQ(ta.status(), Status::kGood);
  EXPECT_EQ(tb.status(), Status::kGood);
  EXPECT_EQ(tb.data_in_residual(), 0u);
}

TEST_F(TargetTest, TaskObjectsAreReused) {
  auto queue = target_.CreateQueue([](Task&) {});
  ASSERT_TRUE(queue.ok());
  TargetQueue& q = **queue;
  Task task;
  std::vector<uint8_t> buffer(64, 0);
  const iovec v{buffer.data(), buffer.size()};
  task.data_in = std::span<const iovec>(&v, 1);
  task.lun = Flat(0);
  const uint8_t bad[6] = {0xc5, 0, 0, 0, 0, 0};
  task.SetCdb(bad);
  ASSERT_EQ(q.Execute(task), Execution::kCompleted);
  EXPECT_EQ(task.status(), Status::kCheckCondition);
  EXPECT_EQ(task.sense(), sense::kPowerOnOrReset);  // the attention comes first
  ASSERT_EQ(q.Execute(task), Execution::kCompleted);
  EXPECT_EQ(task.sense(), sense::kInvalidCommandOperationCode);
  EXPECT_EQ(task.sense_data()[12], 0x20);
  EXPECT_EQ(task.data_in_residual(), 64u);
  const uint8_t inquiry[6] = {0x12, 0, 0, 0, 36, 0};
  task.SetCdb(inquiry);
  ASSERT_EQ(q.Execute(task), Execution::kCompleted);
  EXPECT_EQ(task.status(), Status::kGood);
  EXPECT_EQ(task.sense(), sense::kNoSense);
  EXPECT_EQ(task.data_in_residual(), 28u);
  EXPECT_FALSE(task.overrun());
}

TEST_F(TargetTest, QueuesOnTwoThreads) {
  // Each thread has its own TargetQueue; both write and read back their own half of LUN 300.
  auto worker = [this](uint32_t first_lba, uint8_t seed, bool* ok) {
    auto harness = Harness::ForTarget(target_);
    if (!harness.ok()) return;
    Harness& h = **harness;
    *ok = true;
    for (uint32_t i = 0; i < 200; ++i) {
      const uint32_t lba = first_lba + (i % 64) * 8;
      RunOptions write;
      write.lun = Flat(300);
      write.data_out.assign(4096, static_cast<uint8_t>(seed + i));
      Result w = h.Run(Cdb10(0x2a, (i % 3 == 0) ? 0x08 : 0, lba, 8), write);
      if (w.sense == sense::kPowerOnOrReset) w = h.Run(Cdb10(0x2a, 0, lba, 8), write);
      RunOptions read;
      read.lun = Flat(300);
      read.data_in_size = 4096;
      const Result r = h.Run(Cdb10(0x28, 0, lba, 8), read);
      if (!w.good() || !r.good() || r.data != write.data_out) *ok = false;
    }
  };
  bool ok_a = false, ok_b = false;
  std::thread a(worker, 0, 1, &ok_a);
  std::thread b(worker, 4096, 101, &ok_b);
  a.join();
  b.join();
  EXPECT_TRUE(ok_a);
  EXPECT_TRUE(ok_b);
}

}  // namespace
}  // namespace devices::scsi

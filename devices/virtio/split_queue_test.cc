#include "devices/virtio/split_queue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "devices/virtio/split_queue_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace devices::virtio {
namespace {

using ::devices::virtio::testing::Buffer;
using ::devices::virtio::testing::DriverQueue;
using ::devices::virtio::testing::GuestAllocator;
using ::devices::virtio::testing::kAvailNoInterrupt;
using ::devices::virtio::testing::kDescIndirect;
using ::devices::virtio::testing::kDescNext;
using ::devices::virtio::testing::kDescWrite;
using ::devices::virtio::testing::kUsedNoNotify;
using ::devices::virtio::testing::MakeGuestMemory;
using ::devices::virtio::testing::RawDescriptor;
using ::devices::virtio::testing::UsedElement;
using ::testing::HasSubstr;
using vmm::GuestAddress;

// Region A [0, 1 MiB) holds the rings (at 0x1000) and buffers (from 0x40000). Regions B
// [0x200000, 0x210000) and C [0x210000, 0x220000) are adjacent to each other; the hole
// [0x100000, 0x200000) lies between A and B.
constexpr uint64_t kRingBase = 0x1000;
constexpr uint64_t kRegionB = 0x200000;
constexpr uint64_t kRegionC = 0x210000;
constexpr uint64_t kHole = 0x100000;

class SplitQueueTest : public ::testing::Test {
 protected:
  SplitQueueTest()
      : memory_(MakeGuestMemory({{0, 0x100000}, {kRegionB, 0x10000}, {kRegionC, 0x10000}})),
        allocator_(GuestAddress(0x40000), GuestAddress(0x100000)) {}

  void SetUpQueue(uint16_t size, bool event_idx = false, bool indirect = false) {
    config_ = DriverQueue::Layout(size, GuestAddress(kRingBase), event_idx, indirect);
    driver_.emplace(memory_, config_);
    auto queue = SplitQueue::Create(memory_, config_);
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_.emplace(*std::move(queue));
  }

  Buffer Readable(uint32_t length) { return Buffer{allocator_.Allocate(length), length, false}; }
  Buffer Writable(uint32_t length) { return Buffer{allocator_.Allocate(length), length, true}; }
  uint8_t* Host(GuestAddress address) { return memory_.GetHostSpan(address, 1)->data(); }

  DescriptorChain PopChain() {
    auto chain = queue_->Pop();
    EXPECT_TRUE(chain.ok()) << chain.status();
    if (!chain.ok() || !chain->has_value()) {
      ADD_FAILURE() << "no chain";
      return DescriptorChain{};
    }
    return **chain;
  }

  // Pops expecting an error and returns it.
  absl::Status PopError() {
    auto chain = queue_->Pop();
    if (chain.ok()) return absl::OkStatus();
    return chain.status();
  }

  // Writes a raw chain into the table starting at descriptor 0 and publishes head 0.
  void PublishRaw(std::vector<RawDescriptor> descriptors) {
    for (size_t i = 0; i < descriptors.size(); ++i) {
      driver_->WriteDescriptor(static_cast<uint16_t>(i), descriptors[i]);
    }
    driver_->Publish(0);
  }

  vmm::GuestMemory memory_;
  GuestAllocator allocator_;
  QueueConfig config_;
  std::optional<DriverQueue> driver_;
  std::optional<SplitQueue> queue_;
};

// ---------------------------------------------------------------------------------------------
// Create()

TEST_F(SplitQueueTest, CreateAcceptsEveryPowerOfTwoSize) {
  vmm::GuestMemory big = MakeGuestMemory({{0, 0x200000}});
  for (uint32_t size = 1; size <= 32768; size *= 2) {
    QueueConfig config = DriverQueue::Layout(static_cast<uint16_t>(size), GuestAddress(0));
    auto queue = SplitQueue::Create(big, config);
    ASSERT_TRUE(queue.ok()) << size << ": " << queue.status();
    EXPECT_EQ(queue->size(), size);
  }
}

TEST_F(SplitQueueTest, CreateRejectsSizesThatAreNotPowersOfTwo) {
  for (uint16_t size : {0, 3, 6, 100, 255, 32767, 32769, 49152, 65535}) {
    QueueConfig config = DriverQueue::Layout(8, GuestAddress(kRingBase));
    config.size = size;
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok()) << size;
    EXPECT_EQ(queue.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(queue.status().message(), HasSubstr("power of two"));
  }
}

TEST_F(SplitQueueTest, CreateRejectsMisalignedRings) {
  const QueueConfig good = DriverQueue::Layout(8, GuestAddress(kRingBase));
  struct Case {
    uint64_t desc_offset, avail_offset, used_offset;
    const char* what;
  };
  for (const Case& c :
       {Case{8, 0, 0, "descriptor table"}, Case{1, 0, 0, "descriptor table"},
        Case{0, 1, 0, "available ring"}, Case{0, 0, 2, "used ring"}, Case{0, 0, 1, "used ring"}}) {
    QueueConfig config = good;
    config.descriptor_table = config.descriptor_table + c.desc_offset;
    config.available_ring = config.available_ring + c.avail_offset + 0x100;
    config.used_ring = config.used_ring + c.used_offset + 0x200;
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok()) << c.what;
    EXPECT_THAT(queue.status().message(), HasSubstr(c.what));
    EXPECT_THAT(queue.status().message(), HasSubstr("aligned"));
  }
}

TEST_F(SplitQueueTest, CreateRejectsRingsOutsideMemory) {
  const QueueConfig good = DriverQueue::Layout(256, GuestAddress(kRingBase));
  {
    QueueConfig config = good;  // runs past the end of region A
    config.descriptor_table = GuestAddress(0x100000 - 0x800);
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok());
    EXPECT_THAT(queue.status().message(), HasSubstr("descriptor table"));
  }
  {
    QueueConfig config = good;  // in the hole
    config.available_ring = GuestAddress(kHole + 0x1000);
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok());
    EXPECT_THAT(queue.status().message(), HasSubstr("available ring"));
  }
  {
    QueueConfig config = good;  // across the boundary of the adjacent regions B and C
    config.used_ring = GuestAddress(kRegionC - 0x100);
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok());
    EXPECT_THAT(queue.status().message(), HasSubstr("used ring"));
  }
  {
    QueueConfig config = good;  // wrapping around 2^64
    config.used_ring = GuestAddress(0xfffffffffffffff0ull);
    auto queue = SplitQueue::Create(memory_, config);
    ASSERT_FALSE(queue.ok());
    EXPECT_THAT(queue.status().message(), HasSubstr("used ring"));
  }
  {
    QueueConfig config = good;  // the last byte (avail_event) is outside
    config.size = 1;
    config.used_ring = GuestAddress(0x100000 - 12);
    EXPECT_FALSE(SplitQueue::Create(memory_, config).ok());
    config.used_ring = GuestAddress(0x100000 - 16);
    EXPECT_TRUE(SplitQueue::Create(memory_, config).ok());
  }
}

// ---------------------------------------------------------------------------------------------
// Simple chains

TEST_F(SplitQueueTest, EmptyQueuePopsNothing) {
  SetUpQueue(8);
  EXPECT_FALSE(queue_->HasAvailable());
  auto chain = queue_->Pop();
  ASSERT_TRUE(chain.ok());
  EXPECT_FALSE(chain->has_value());
}

TEST_F(SplitQueueTest, ReadableThenWritableChain) {
  SetUpQueue(8);
  const Buffer buffers[] = {Readable(16), Readable(4096), Writable(512), Writable(1)};
  std::memcpy(Host(buffers[0].address), "virtio header!!", 16);
  auto head = driver_->AddChain(buffers);
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(queue_->HasAvailable());

  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.head, *head);
  ASSERT_EQ(chain.readable.size(), 2u);
  ASSERT_EQ(chain.writable.size(), 2u);
  EXPECT_EQ(chain.readable[0].iov_base, Host(buffers[0].address));
  EXPECT_EQ(chain.readable[0].iov_len, 16u);
  EXPECT_EQ(chain.readable[1].iov_base, Host(buffers[1].address));
  EXPECT_EQ(chain.readable[1].iov_len, 4096u);
  EXPECT_EQ(chain.writable[0].iov_base, Host(buffers[2].address));
  EXPECT_EQ(chain.writable[0].iov_len, 512u);
  EXPECT_EQ(chain.writable[1].iov_base, Host(buffers[3].address));
  EXPECT_EQ(chain.writable[1].iov_len, 1u);
  EXPECT_EQ(chain.readable_bytes, 16u + 4096u);
  EXPECT_EQ(chain.writable_bytes, 513u);
  EXPECT_EQ(std::memcmp(chain.readable[0].iov_base, "virtio header!!", 16), 0);
  EXPECT_EQ(queue_->next_available(), 1);
  EXPECT_FALSE(queue_->HasAvailable());

  ASSERT_TRUE(queue_->PushUsed(chain.head, 513).ok());
  EXPECT_EQ(driver_->UsedIdx(), 1);
  auto used = driver_->CollectUsed();
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->id, *head);
  EXPECT_EQ(used->len, 513u);
  EXPECT_EQ(driver_->num_free(), 8);
}

TEST_F(SplitQueueTest, ReadableOnlyAndWritableOnlyChains) {
  SetUpQueue(4);
  const Buffer tx[] = {Readable(100)};
  const Buffer rx[] = {Writable(200), Writable(300)};
  ASSERT_TRUE(driver_->AddChain(tx).ok());
  ASSERT_TRUE(driver_->AddChain(rx).ok());
  DescriptorChain first = PopChain();
  EXPECT_EQ(first.readable.size(), 1u);
  EXPECT_TRUE(first.writable.empty());
  EXPECT_EQ(first.writable_bytes, 0u);
  DescriptorChain second = PopChain();
  EXPECT_TRUE(second.readable.empty());
  EXPECT_EQ(second.writable.size(), 2u);
  EXPECT_EQ(second.writable_bytes, 500u);
  // Completion order is the device's choice (§2.7.8: used ring entries name the head).
  ASSERT_TRUE(queue_->PushUsed(second.head, 7).ok());
  ASSERT_TRUE(queue_->PushUsed(first.head, 0).ok());
  EXPECT_EQ(driver_->CollectUsed()->id, second.head);
  EXPECT_EQ(driver_->CollectUsed()->id, first.head);
  EXPECT_FALSE(driver_->CollectUsed().has_value());
}

TEST_F(SplitQueueTest, ZeroLengthBuffersAreSkipped) {
  SetUpQueue(4);
  // A zero-length buffer gives no iovec and its address is never used, even outside memory.
  PublishRaw({{kHole, 0, kDescNext, 1},
              {0x50000, 8, kDescWrite | kDescNext, 2},
              {0xdead0000000ull, 0, kDescWrite, 0}});
  DescriptorChain chain = PopChain();
  EXPECT_TRUE(chain.readable.empty());
  ASSERT_EQ(chain.writable.size(), 1u);
  EXPECT_EQ(chain.writable_bytes, 8u);
}

TEST_F(SplitQueueTest, BufferAcrossAdjacentRegionsIsSplit) {
  SetUpQueue(4);
  PublishRaw({{kRegionC - 0x100, 0x300, 0, 0}});
  DescriptorChain chain = PopChain();
  ASSERT_EQ(chain.readable.size(), 2u);
  EXPECT_EQ(chain.readable[0].iov_base, Host(GuestAddress(kRegionC - 0x100)));
  EXPECT_EQ(chain.readable[0].iov_len, 0x100u);
  EXPECT_EQ(chain.readable[1].iov_base, Host(GuestAddress(kRegionC)));
  EXPECT_EQ(chain.readable[1].iov_len, 0x200u);
  EXPECT_EQ(chain.readable_bytes, 0x300u);
}

TEST_F(SplitQueueTest, LongestChainIsTheQueueSize) {
  SetUpQueue(16);
  std::vector<Buffer> buffers;
  for (int i = 0; i < 16; ++i) buffers.push_back(i < 10 ? Readable(64) : Writable(64));
  ASSERT_TRUE(driver_->AddChain(buffers).ok());
  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.readable.size(), 10u);
  EXPECT_EQ(chain.writable.size(), 6u);
}

// ---------------------------------------------------------------------------------------------
// Indirect descriptors (§2.7.5.3)

TEST_F(SplitQueueTest, IndirectTable) {
  SetUpQueue(8, /*event_idx=*/false, /*indirect=*/true);
  const Buffer buffers[] = {Readable(16), Readable(4096), Writable(1)};
  const GuestAddress table = allocator_.Allocate(3 * 16);
  auto head = driver_->AddIndirectChain(buffers, table);
  ASSERT_TRUE(head.ok());
  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.head, *head);
  ASSERT_EQ(chain.readable.size(), 2u);
  ASSERT_EQ(chain.writable.size(), 1u);
  EXPECT_EQ(chain.readable[1].iov_base, Host(buffers[1].address));
  EXPECT_EQ(chain.writable[0].iov_base, Host(buffers[2].address));
  EXPECT_EQ(chain.readable_bytes, 4112u);
  EXPECT_EQ(chain.writable_bytes, 1u);
  ASSERT_TRUE(queue_->PushUsed(chain.head, 1).ok());
  EXPECT_EQ(driver_->CollectUsed()->id, *head);
}

TEST_F(SplitQueueTest, IndirectTableNeedNotBeAlignedAndItsWriteFlagIsIgnored) {
  SetUpQueue(8, false, true);
  const GuestAddress table = allocator_.Allocate(64) + 3;
  driver_->WriteTableDescriptor(table, 0, {0x50000, 10, kDescNext, 1});
  driver_->WriteTableDescriptor(table, 1, {0x51000, 20, kDescWrite, 0});
  // §2.7.5.3.2: the device MUST ignore VIRTQ_DESC_F_WRITE on the descriptor naming the table.
  PublishRaw({{table.value(), 32, kDescIndirect | kDescWrite, 0}});
  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.readable_bytes, 10u);
  EXPECT_EQ(chain.writable_bytes, 20u);
}

TEST_F(SplitQueueTest, DirectDescriptorsFollowedByIndirectTable) {
  // §2.7.5.3.2: "zero or more normal chained descriptors followed by a single descriptor with
  // flags&VIRTQ_DESC_F_INDIRECT".
  SetUpQueue(8, false, true);
  const GuestAddress table = allocator_.Allocate(32);
  driver_->WriteTableDescriptor(table, 0, {0x51000, 30, kDescNext, 1});
  driver_->WriteTableDescriptor(table, 1, {0x52000, 40, kDescWrite, 0});
  PublishRaw({{0x50000, 16, kDescNext, 1}, {table.value(), 32, kDescIndirect, 0}});
  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.readable.size(), 2u);
  EXPECT_EQ(chain.readable_bytes, 46u);
  EXPECT_EQ(chain.writable_bytes, 40u);
}

TEST_F(SplitQueueTest, IndirectTableAsLongAsTheQueue) {
  SetUpQueue(8, false, true);
  std::vector<Buffer> buffers;
  for (int i = 0; i < 8; ++i) buffers.push_back(Writable(8));
  ASSERT_TRUE(driver_->AddIndirectChain(buffers, allocator_.Allocate(8 * 16)).ok());
  EXPECT_EQ(PopChain().writable.size(), 8u);
}

TEST_F(SplitQueueTest, IndirectWithoutNegotiationIsAnError) {
  SetUpQueue(8, false, /*indirect=*/false);
  const Buffer buffers[] = {Readable(16)};
  ASSERT_TRUE(driver_->AddIndirectChain(buffers, allocator_.Allocate(16)).ok());
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("VIRTIO_F_INDIRECT_DESC"));
}

TEST_F(SplitQueueTest, IndirectDescriptorWithNextIsAnError) {
  SetUpQueue(8, false, true);
  const GuestAddress table = allocator_.Allocate(16);
  driver_->WriteTableDescriptor(table, 0, {0x50000, 16, 0, 0});
  PublishRaw({{table.value(), 16, kDescIndirect | kDescNext, 1}, {0x50000, 16, 0, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("NEXT"));
}

TEST_F(SplitQueueTest, NestedIndirectIsAnError) {
  SetUpQueue(8, false, true);
  const GuestAddress outer = allocator_.Allocate(32);
  const GuestAddress inner = allocator_.Allocate(16);
  driver_->WriteTableDescriptor(inner, 0, {0x50000, 16, 0, 0});
  driver_->WriteTableDescriptor(outer, 0, {0x50000, 16, kDescNext, 1});
  driver_->WriteTableDescriptor(outer, 1, {inner.value(), 16, kDescIndirect, 0});
  PublishRaw({{outer.value(), 32, kDescIndirect, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("indirect descriptor inside an indirect table"));
}

TEST_F(SplitQueueTest, IndirectTableLengthIsChecked) {
  SetUpQueue(8, false, true);
  const GuestAddress table = allocator_.Allocate(0x1000);
  for (uint32_t len : {0u, 8u, 15u, 17u, 31u}) {
    SetUpQueue(8, false, true);
    PublishRaw({{table.value(), len, kDescIndirect, 0}});
    EXPECT_THAT(PopError().message(), HasSubstr("not a non-zero multiple of 16")) << len;
  }
  SetUpQueue(8, false, true);
  PublishRaw({{table.value(), 9 * 16, kDescIndirect, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("longer than the queue size"));
  SetUpQueue(8, false, true);
  PublishRaw({{0xfffffffffffffff0ull, 0x20, kDescIndirect, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("indirect table"));
  SetUpQueue(8, false, true);
  PublishRaw({{kRegionC - 16, 0x20, kDescIndirect, 0}});  // must be contiguous on the host
  EXPECT_THAT(PopError().message(), HasSubstr("not inside one guest memory region"));
}

TEST_F(SplitQueueTest, IndirectTableLoopAndBadNext) {
  SetUpQueue(8, false, true);
  const GuestAddress table = allocator_.Allocate(48);
  driver_->WriteTableDescriptor(table, 0, {0x50000, 16, kDescNext, 1});
  driver_->WriteTableDescriptor(table, 1, {0x50000, 16, kDescNext, 2});
  driver_->WriteTableDescriptor(table, 2, {0x50000, 16, kDescNext, 0});
  PublishRaw({{table.value(), 48, kDescIndirect, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("loop"));

  SetUpQueue(8, false, true);
  driver_->WriteTableDescriptor(table, 2, {0x50000, 16, kDescNext, 3});  // only 3 entries
  PublishRaw({{table.value(), 48, kDescIndirect, 0}});
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("next index 3 is not below 3"));
}

// ---------------------------------------------------------------------------------------------
// Hostile chains

TEST_F(SplitQueueTest, DescriptorLoopIsAnError) {
  SetUpQueue(8);
  PublishRaw({{0x50000, 16, kDescNext, 1}, {0x50000, 16, kDescNext, 0}});
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("loop"));

  SetUpQueue(8);  // a descriptor naming itself
  PublishRaw({{0x50000, 16, kDescNext, 0}});
  EXPECT_THAT(PopError().message(), HasSubstr("loop"));
}

TEST_F(SplitQueueTest, ChainLongerThanQueueSizeIsAnError) {
  SetUpQueue(4);
  // 0 -> 1 -> 2 -> 3 -> 1: five descriptors walked in a table of four.
  PublishRaw({{0x50000, 1, kDescNext, 1},
              {0x50000, 1, kDescNext, 2},
              {0x50000, 1, kDescNext, 3},
              {0x50000, 1, kDescNext, 1}});
  absl::Status status = PopError();
  EXPECT_THAT(status.message(), HasSubstr("more than 4 descriptors"));
}

TEST_F(SplitQueueTest, HeadIndexOutOfRangeIsAnError) {
  SetUpQueue(8);
  driver_->Publish(8);
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("head descriptor 8"));
  SetUpQueue(8);
  driver_->Publish(0xffff);
  EXPECT_THAT(PopError().message(), HasSubstr("head descriptor 65535"));
}

TEST_F(SplitQueueTest, NextIndexOutOfRangeIsAnError) {
  SetUpQueue(8);
  PublishRaw({{0x50000, 16, kDescNext, 8}});
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(status.message(), HasSubstr("next index 8"));
}

TEST_F(SplitQueueTest, BufferOutsideMemoryIsAnError) {
  struct Case {
    uint64_t addr;
    uint32_t len;
    const char* message;
  };
  for (const Case& c : {
           Case{kHole, 16, "not inside guest memory"},                  // in the hole
           Case{0x100000 - 8, 16, "not inside guest memory"},           // runs off region A
           Case{kRegionC + 0x10000 - 1, 2, "not inside guest memory"},  // off the end of C
           Case{0x7fffffffffff0000ull, 16, "not inside guest memory"},
           Case{0xfffffffffffffff0ull, 0x20, "wraps around"},          // addr + len > 2^64
           Case{0xffffffffffffffffull, 1, "not inside guest memory"},  // the last byte
           Case{0xffffffffffffffffull, 2, "wraps around"},
       }) {
    SetUpQueue(8);
    PublishRaw({{0x50000, 16, kDescNext, 1}, {c.addr, c.len, kDescWrite, 0}});
    absl::Status status = PopError();
    EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << c.addr;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.addr;
    EXPECT_THAT(status.message(), HasSubstr("descriptor 1")) << c.addr;
  }
}

TEST_F(SplitQueueTest, BufferSpanningTheHoleIsAnError) {
  SetUpQueue(8);
  // Starts in region A, ends in region B, with the hole in between.
  PublishRaw({{0x100000 - 0x10, kRegionB - 0x100000 + 0x20, 0, 0}});
  absl::Status status = PopError();
  EXPECT_THAT(status.message(), HasSubstr("not inside guest memory"));
}

TEST_F(SplitQueueTest, ReadableAfterWritableIsAnError) {
  SetUpQueue(8);
  PublishRaw({{0x50000, 16, kDescWrite | kDescNext, 1}, {0x51000, 16, 0, 0}});
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("device-readable buffer after a device-writable one"));
}

TEST_F(SplitQueueTest, AvailableIndexJumpingTooFarIsAnError) {
  SetUpQueue(8);
  for (int i = 0; i < 8; ++i) driver_->WriteDescriptor(i, {0x50000, 16, 0, 0});
  driver_->SetAvailIdx(9);
  absl::Status status = PopError();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("more than the queue size 8"));
  // Going backwards is a huge jump forwards in 16-bit arithmetic.
  SetUpQueue(8);
  driver_->SetAvailIdx(0xffff);
  EXPECT_THAT(PopError().message(), HasSubstr("more than the queue size"));
  // Exactly the queue size is a full ring, not an error.
  SetUpQueue(8);
  driver_->SetAvailIdx(8);
  for (int i = 0; i < 8; ++i) {
    auto chain = queue_->Pop();
    ASSERT_TRUE(chain.ok()) << chain.status();
    ASSERT_TRUE(chain->has_value());
  }
}

TEST_F(SplitQueueTest, ChainOver4GiBIsAnError) {
  vmm::GuestMemory big = MakeGuestMemory({{0, (4ull << 30) + 0x100000}});
  const QueueConfig config = DriverQueue::Layout(4, GuestAddress(0x1000));
  DriverQueue driver(big, config);
  auto queue = SplitQueue::Create(big, config);
  ASSERT_TRUE(queue.ok());
  driver.WriteDescriptor(0, {0x100000, 0xffffffff, kDescNext, 1});
  driver.WriteDescriptor(1, {0x100000, 1, kDescWrite, 0});
  driver.Publish(0);
  // Exactly 4 GiB is allowed (§2.7.5.2: "longer than 2^32 bytes" is not).
  auto chain = queue->Pop();
  ASSERT_TRUE(chain.ok()) << chain.status();
  EXPECT_EQ((*chain)->readable_bytes + (*chain)->writable_bytes, 1ull << 32);
  driver.WriteDescriptor(1, {0x100000, 2, kDescWrite, 0});
  driver.Publish(0);
  auto too_long = queue->Pop();
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(too_long.status().message(), HasSubstr("longer than 4 GiB"));
}

TEST_F(SplitQueueTest, PushUsedChecksItsArguments) {
  SetUpQueue(8);
  const Buffer buffers[] = {Writable(16)};
  ASSERT_TRUE(driver_->AddChain(buffers).ok());
  DescriptorChain chain = PopChain();
  absl::Status status = queue_->PushUsed(8, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("used head 8"));
  EXPECT_EQ(driver_->UsedIdx(), 0);
  EXPECT_TRUE(queue_->PushUsed(chain.head, 16).ok());
  EXPECT_EQ(driver_->UsedIdx(), 1);
}

// ---------------------------------------------------------------------------------------------
// Index wrap-around and queue sizes

TEST_F(SplitQueueTest, IndicesWrapAround) {
  SetUpQueue(8);
  const Buffer data[] = {Readable(8), Writable(8)};
  uint32_t pattern = 1;
  std::vector<uint16_t> heads;
  for (int round = 0; round < 50000; ++round) {  // used and avail idx wrap 16-bit twice or more
    const int batch = 1 + round % 4;
    for (int i = 0; i < batch; ++i) ASSERT_TRUE(driver_->AddChain(data).ok()) << round;
    heads.clear();
    for (int i = 0; i < batch; ++i) heads.push_back(PopChain().head);
    auto none = queue_->Pop();
    ASSERT_TRUE(none.ok() && !none->has_value());
    // Complete in reverse order with distinct lengths.
    for (int i = batch - 1; i >= 0; --i) ASSERT_TRUE(queue_->PushUsed(heads[i], pattern + i).ok());
    for (int i = batch - 1; i >= 0; --i) {
      auto used = driver_->CollectUsed();
      ASSERT_TRUE(used.has_value());
      ASSERT_EQ(used->id, heads[i]);
      ASSERT_EQ(used->len, pattern + i);
    }
    pattern += 7;
  }
  EXPECT_EQ(queue_->next_available(), driver_->avail_idx());
  EXPECT_EQ(driver_->UsedIdx(), driver_->avail_idx());
}

TEST_F(SplitQueueTest, StartsNearTheWrapOfTheAvailableIndex) {
  SetUpQueue(8);
  driver_->SetAvailIdx(0xfffe);
  queue_->set_next_available(0xfffe);
  const Buffer data[] = {Readable(8)};
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_EQ(driver_->avail_idx(), 3);
  for (int i = 0; i < 5; ++i) PopChain();
  EXPECT_EQ(queue_->next_available(), 3);
}

// A vhost-user front end restarting a stopped ring hands back the index it stopped at: the
// device resumes consuming there and writes used elements from the same position.
TEST_F(SplitQueueTest, ResumesAtTheStartIndex) {
  SetUpQueue(8, /*event_idx=*/true);
  driver_->SetAvailIdx(1000);
  QueueConfig resumed_config = config_;
  resumed_config.start_index = 1000;
  auto resumed = SplitQueue::Create(memory_, resumed_config);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  queue_.emplace(*std::move(resumed));
  EXPECT_FALSE(queue_->HasAvailable());
  const Buffer data[] = {Writable(8)};
  auto head = driver_->AddChain(data);
  ASSERT_TRUE(head.ok());
  DescriptorChain chain = PopChain();
  EXPECT_EQ(chain.head, *head);
  EXPECT_EQ(queue_->next_available(), 1001);
  ASSERT_TRUE(queue_->PushUsed(chain.head, 8).ok());
  EXPECT_EQ(driver_->UsedIdx(), 1001);
  EXPECT_EQ(driver_->UsedAt(1000).id, *head);
  driver_->SetUsedEvent(1000);  // the driver wants to hear of the element at index 1000
  EXPECT_TRUE(queue_->ShouldInterrupt());
}

TEST(SplitQueueSizesTest, FullRingAtEverySize) {
  vmm::GuestMemory memory = MakeGuestMemory({{0, 0x400000}});
  const GuestAddress buffer(0x300000);
  for (uint32_t size = 1; size <= 32768; size *= 2) {
    const QueueConfig config = DriverQueue::Layout(static_cast<uint16_t>(size), GuestAddress(0));
    DriverQueue driver(memory, config);
    auto queue = SplitQueue::Create(memory, config);
    ASSERT_TRUE(queue.ok());
    const Buffer data[] = {Buffer{buffer, 64, true}};
    for (int round = 0; round < 3; ++round) {
      for (uint32_t i = 0; i < size; ++i) ASSERT_TRUE(driver.AddChain(data).ok());
      EXPECT_EQ(driver.num_free(), 0);
      std::vector<bool> seen(size);
      for (uint32_t i = 0; i < size; ++i) {
        auto chain = queue->Pop();
        ASSERT_TRUE(chain.ok() && chain->has_value()) << size;
        ASSERT_FALSE(seen[(*chain)->head]);
        seen[(*chain)->head] = true;
        ASSERT_TRUE(queue->PushUsed((*chain)->head, 64).ok());
      }
      auto none = queue->Pop();
      ASSERT_TRUE(none.ok() && !none->has_value());
      for (uint32_t i = 0; i < size; ++i) ASSERT_TRUE(driver.CollectUsed().has_value());
      EXPECT_EQ(driver.num_free(), size);
    }
    // The whole table as one chain.
    std::vector<Buffer> chain_buffers(size, Buffer{buffer, 1, false});
    ASSERT_TRUE(driver.AddChain(chain_buffers).ok());
    auto chain = queue->Pop();
    ASSERT_TRUE(chain.ok() && chain->has_value()) << size;
    EXPECT_EQ((*chain)->readable.size(), size);
  }
}

// ---------------------------------------------------------------------------------------------
// Notification suppression (§2.7.7, §2.7.10)

TEST_F(SplitQueueTest, InterruptHonoursNoInterruptFlagWithoutEventIdx) {
  SetUpQueue(8);
  const Buffer data[] = {Writable(8)};
  EXPECT_FALSE(queue_->ShouldInterrupt());  // nothing used yet
  ASSERT_TRUE(driver_->AddChain(data).ok());
  ASSERT_TRUE(queue_->PushUsed(PopChain().head, 8).ok());
  EXPECT_TRUE(queue_->ShouldInterrupt());
  EXPECT_FALSE(queue_->ShouldInterrupt());  // nothing new since
  driver_->SetAvailFlags(kAvailNoInterrupt);
  ASSERT_TRUE(driver_->AddChain(data).ok());
  ASSERT_TRUE(queue_->PushUsed(PopChain().head, 8).ok());
  EXPECT_FALSE(queue_->ShouldInterrupt());
  driver_->SetAvailFlags(0);
  ASSERT_TRUE(driver_->AddChain(data).ok());
  ASSERT_TRUE(queue_->PushUsed(PopChain().head, 8).ok());
  // used_event is ignored without EVENT_IDX.
  driver_->SetUsedEvent(100);
  EXPECT_TRUE(queue_->ShouldInterrupt());
}

TEST_F(SplitQueueTest, InterruptHonoursUsedEvent) {
  SetUpQueue(8, /*event_idx=*/true);
  const Buffer data[] = {Writable(8)};
  auto complete = [&](int n) {
    for (int i = 0; i < n; ++i) ASSERT_TRUE(driver_->AddChain(data).ok());
    for (int i = 0; i < n; ++i) ASSERT_TRUE(queue_->PushUsed(PopChain().head, 8).ok());
    for (int i = 0; i < n; ++i) driver_->CollectUsed();
  };
  // §2.7.7.2: notify when the entry at index used_event is written (used idx passes it).
  driver_->SetUsedEvent(0);
  complete(1);  // used idx 0 -> 1: entry 0 written
  EXPECT_TRUE(queue_->ShouldInterrupt());
  complete(1);  // 1 -> 2: the driver still waits for 0, which was passed already
  EXPECT_FALSE(queue_->ShouldInterrupt());
  driver_->SetUsedEvent(4);
  complete(2);  // 2 -> 4
  EXPECT_FALSE(queue_->ShouldInterrupt());
  complete(1);  // 4 -> 5: entry 4 written
  EXPECT_TRUE(queue_->ShouldInterrupt());
  driver_->SetUsedEvent(7);
  complete(3);  // 5 -> 8 in one batch crosses 7
  EXPECT_TRUE(queue_->ShouldInterrupt());
  EXPECT_FALSE(queue_->ShouldInterrupt());  // nothing new
  // The NO_INTERRUPT flag is ignored with EVENT_IDX.
  driver_->SetAvailFlags(kAvailNoInterrupt);
  driver_->SetUsedEvent(8);
  complete(1);
  EXPECT_TRUE(queue_->ShouldInterrupt());
  // Across the 16-bit wrap: used_event 0xffff is written when used idx goes 0xffff -> 0.
  driver_->SetUsedEvent(0xffff);
  while (static_cast<uint16_t>(0xffff - driver_->UsedIdx()) > 4) {
    complete(4);
    ASSERT_FALSE(queue_->ShouldInterrupt()) << driver_->UsedIdx();
  }
  while (driver_->UsedIdx() != 0) complete(1);
  EXPECT_TRUE(queue_->ShouldInterrupt());
}

TEST_F(SplitQueueTest, InterruptAfterManyPushesWithoutAsking) {
  SetUpQueue(4, /*event_idx=*/true);
  const Buffer data[] = {Writable(8)};
  driver_->SetUsedEvent(0x9000);
  // 0x8000 completions without a ShouldInterrupt(): the window is ambiguous in 16 bits, so the
  // queue says yes rather than risk a lost interrupt.
  for (int i = 0; i < 0x8000; ++i) {
    ASSERT_TRUE(driver_->AddChain(data).ok());
    ASSERT_TRUE(queue_->PushUsed(PopChain().head, 8).ok());
    driver_->CollectUsed();
  }
  driver_->SetUsedEvent(0x1000);
  EXPECT_TRUE(queue_->ShouldInterrupt());
}

TEST_F(SplitQueueTest, EnableNotificationsWithEventIdx) {
  SetUpQueue(8, /*event_idx=*/true);
  const Buffer data[] = {Readable(8)};
  EXPECT_FALSE(queue_->EnableNotifications());
  EXPECT_EQ(driver_->AvailEvent(), 0);
  EXPECT_EQ(driver_->UsedFlags(), 0);
  uint16_t old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_TRUE(driver_->NeedsNotification(old));  // the first buffer after enabling
  old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_FALSE(driver_->NeedsNotification(old));  // already notified once
  queue_->DisableNotifications();
  EXPECT_EQ(driver_->UsedFlags(), 0);        // §2.7.10.2: flags stay 0 with EVENT_IDX
  EXPECT_EQ(driver_->AvailEvent(), 0xffff);  // one behind: already passed
  // Disabled: no further buffer asks for a notification, not even the first one.
  queue_->EnableNotifications();
  queue_->DisableNotifications();
  old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_FALSE(driver_->NeedsNotification(old));
  // Buffers arrived while notifications were off: EnableNotifications says so.
  EXPECT_TRUE(queue_->EnableNotifications());
  EXPECT_EQ(driver_->AvailEvent(), 0);
  PopChain();
  PopChain();
  PopChain();
  EXPECT_FALSE(queue_->EnableNotifications());
  EXPECT_EQ(driver_->AvailEvent(), 3);
  old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_TRUE(driver_->NeedsNotification(old));
}

TEST_F(SplitQueueTest, EnableNotificationsWithoutEventIdx) {
  SetUpQueue(8);
  const Buffer data[] = {Readable(8)};
  queue_->DisableNotifications();
  EXPECT_EQ(driver_->UsedFlags(), kUsedNoNotify);
  uint16_t old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_FALSE(driver_->NeedsNotification(old));
  EXPECT_TRUE(queue_->EnableNotifications());
  EXPECT_EQ(driver_->UsedFlags(), 0);
  PopChain();
  EXPECT_FALSE(queue_->EnableNotifications());
  old = driver_->avail_idx();
  ASSERT_TRUE(driver_->AddChain(data).ok());
  EXPECT_TRUE(driver_->NeedsNotification(old));
  EXPECT_EQ(driver_->AvailEvent(), 0);  // untouched without EVENT_IDX
}

// The device loop a queue's user runs: no buffer is missed when the driver adds buffers
// concurrently with the device going to sleep.
TEST_F(SplitQueueTest, NoLostNotificationsUnderConcurrency) {
  for (bool event_idx : {false, true}) {
    SetUpQueue(64, event_idx);
    constexpr int kChains = 100000;
    std::atomic<int> kicks{0};
    std::atomic<bool> failed{false};
    std::atomic<int> completed{0};
    std::thread device([&] {
      int processed = 0;
      while (processed < kChains) {
        queue_->DisableNotifications();
        while (true) {
          auto chain = queue_->Pop();
          if (!chain.ok()) {
            failed.store(true);
            return;
          }
          if (!chain->has_value()) {
            // Empty: re-enable notifications and re-check before sleeping.
            if (!queue_->EnableNotifications()) break;
            queue_->DisableNotifications();
            continue;
          }
          if (!queue_->PushUsed((*chain)->head, 0).ok()) {
            failed.store(true);
            return;
          }
          completed.store(++processed);
        }
        if (processed == kChains) break;
        // Sleep until kicked.
        while (kicks.load() == 0) std::this_thread::yield();
        kicks.fetch_sub(1);
      }
    });
    // The driver adds (kicking when NeedsNotification says so) and collects.
    const Buffer data[] = {Readable(8)};
    int added = 0;
    while (added < kChains && !failed.load()) {
      while (driver_->CollectUsed().has_value()) {
      }
      if (driver_->num_free() == 0) {
        std::this_thread::yield();
        continue;
      }
      const uint16_t old = driver_->avail_idx();
      ASSERT_TRUE(driver_->AddChain(data).ok());
      ++added;
      if (driver_->NeedsNotification(old)) kicks.fetch_add(1);
    }
    device.join();
    EXPECT_FALSE(failed.load());
    EXPECT_EQ(completed.load(), kChains) << "event_idx " << event_idx;
  }
}

// A guest that rewrites its rings while the device walks them can make Pop() fail but never
// make it hand out memory outside guest RAM.
TEST_F(SplitQueueTest, ConcurrentlyMutatingGuestNeverEscapesGuestMemory) {
  SetUpQueue(16, false, true);
  uint8_t* table = Host(config_.descriptor_table);
  uint8_t* avail = Host(config_.available_ring);
  const GuestAddress indirect = allocator_.Allocate(16 * 16);
  uint8_t* indirect_host = Host(indirect);
  std::atomic<bool> stop{false};
  std::thread guest([&] {
    uint64_t x = 88172645463325252ull;
    auto next = [&x] {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      return x;
    };
    while (!stop.load(std::memory_order_relaxed)) {
      const uint64_t r = next();
      uint8_t* base = (r & 1) ? table : indirect_host;
      const uint64_t slot = (r >> 1) % 16;
      uint8_t* d = base + 16 * slot;
      // Biased towards well-formed values, so that many chains get through.
      switch ((r >> 8) % 5) {
        case 0:
          __atomic_store_n(reinterpret_cast<uint64_t*>(d),
                           (r & 4) ? (next() % 0x230000) : 0x50000 + (next() % 0x1000),
                           __ATOMIC_RELAXED);
          break;
        case 1:
          __atomic_store_n(reinterpret_cast<uint32_t*>(d + 8),
                           static_cast<uint32_t>((r & 8) ? (next() % 17) * 16 : next() % 0x3000),
                           __ATOMIC_RELAXED);
          break;
        case 2:
          __atomic_store_n(reinterpret_cast<uint16_t*>(d + 12),
                           static_cast<uint16_t>((next() & 3) | ((r & 0x30) == 0 ? 4 : 0)),
                           __ATOMIC_RELAXED);
          if ((r & 0x30) == 0) {  // an indirect descriptor names the indirect table
            __atomic_store_n(reinterpret_cast<uint64_t*>(d), indirect.value(), __ATOMIC_RELAXED);
          }
          break;
        case 3:
          __atomic_store_n(reinterpret_cast<uint16_t*>(d + 14), static_cast<uint16_t>(next() % 20),
                           __ATOMIC_RELAXED);
          break;
        case 4:
          __atomic_store_n(reinterpret_cast<uint16_t*>(avail + 4 + 2 * slot),
                           static_cast<uint16_t>(next() % 18), __ATOMIC_RELAXED);
          // Expose a new entry now and then (the device has to keep up to see chains).
          if ((r >> 16) % 4 == 0) {
            __atomic_fetch_add(reinterpret_cast<uint16_t*>(avail + 2), 1, __ATOMIC_RELEASE);
          }
          break;
      }
      for (int i = 0; i < 64; ++i) __builtin_ia32_pause();
    }
  });
  auto inside_guest_memory = [&](const iovec& v) {
    const uint8_t* p = static_cast<const uint8_t*>(v.iov_base);
    for (const auto& region : memory_.regions()) {
      const uint8_t* start = region->host_address();
      if (p >= start && v.iov_len <= region->size() && p - start <= region->size() - v.iov_len) {
        return true;
      }
    }
    return false;
  };
  int chains = 0, errors = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < deadline) {
    auto chain = queue_->Pop();
    if (!chain.ok()) {
      ++errors;
      auto queue = SplitQueue::Create(memory_, config_);
      ASSERT_TRUE(queue.ok());
      queue_.emplace(*std::move(queue));
      queue_->set_next_available(
          __atomic_load_n(reinterpret_cast<uint16_t*>(avail + 2), __ATOMIC_ACQUIRE));
      continue;
    }
    if (!chain->has_value()) continue;
    ++chains;
    uint64_t readable = 0, writable = 0;
    for (const iovec& v : (*chain)->readable) {
      ASSERT_TRUE(inside_guest_memory(v));
      readable += v.iov_len;
    }
    for (const iovec& v : (*chain)->writable) {
      ASSERT_TRUE(inside_guest_memory(v));
      writable += v.iov_len;
    }
    ASSERT_EQ(readable, (*chain)->readable_bytes);
    ASSERT_EQ(writable, (*chain)->writable_bytes);
    ASSERT_LT((*chain)->head, 16);
    ASSERT_TRUE(queue_->PushUsed((*chain)->head, 0).ok());
  }
  stop.store(true);
  guest.join();
  std::printf("mutating guest: %d chains popped, %d broken rings detected\n", chains, errors);
}

// ---------------------------------------------------------------------------------------------
// Cost of the hot path (printed, not asserted).

TEST(SplitQueueBenchmark, PopAndPushUsedCost) {
  vmm::GuestMemory memory = MakeGuestMemory({{0, 0x400000}});
  constexpr uint16_t kSize = 256;
  struct Shape {
    const char* name;
    int descriptors;
    bool indirect;
  };
  for (const Shape& shape :
       {Shape{"1 descriptor", 1, false}, Shape{"3 descriptors (blk-like)", 3, false},
        Shape{"indirect table of 3", 3, true}, Shape{"indirect table of 16", 16, true}}) {
    const QueueConfig config = DriverQueue::Layout(kSize, GuestAddress(0), true, true);
    DriverQueue driver(memory, config);
    GuestAllocator allocator(GuestAddress(0x100000), GuestAddress(0x400000));
    auto created = SplitQueue::Create(memory, config);
    ASSERT_TRUE(created.ok());
    SplitQueue queue = *std::move(created);
    // Fill the ring once; afterwards only avail->idx moves: the ring entries stay valid, so the
    // same chains are offered again each lap and the loop measures the device side only.
    std::vector<Buffer> buffers;
    buffers.push_back(Buffer{allocator.Allocate(16), 16, false});
    for (int i = 1; i + 1 < shape.descriptors; ++i) {
      buffers.push_back(Buffer{allocator.Allocate(4096), 4096, false});
    }
    if (shape.descriptors > 1) buffers.push_back(Buffer{allocator.Allocate(1), 1, true});
    const uint16_t chains = shape.indirect ? kSize : kSize / shape.descriptors;
    std::vector<uint16_t> heads;
    for (uint16_t i = 0; i < chains; ++i) {
      auto head = shape.indirect
                      ? driver.AddIndirectChain(buffers, allocator.Allocate(16 * buffers.size()))
                      : driver.AddChain(buffers);
      ASSERT_TRUE(head.ok());
      heads.push_back(*head);
    }
    // Every ring slot names a valid chain, so each lap can offer a whole ring again.
    for (uint32_t i = chains; i < kSize; ++i) driver.Offer(heads[i % chains]);
    driver.SetAvailIdx(0);
    // The machine is shared and noisy: report the best and the median of several runs.
    constexpr int kRuns = 9;
    constexpr int kLaps = 200;
    std::vector<double> per_chain;
    uint64_t total = 0;
    for (int run = 0; run < kRuns; ++run) {
      const auto start = std::chrono::steady_clock::now();
      for (int lap = 0; lap < kLaps; ++lap) {
        driver.SetAvailIdx(static_cast<uint16_t>(driver.avail_idx() + kSize));
        for (uint16_t i = 0; i < kSize; ++i) {
          auto chain = queue.Pop();
          if (!chain.ok() || !chain->has_value()) FAIL();
          total += (*chain)->readable_bytes;
          if (!queue.PushUsed((*chain)->head, 1).ok()) FAIL();
        }
        queue.ShouldInterrupt();
      }
      const auto elapsed = std::chrono::steady_clock::now() - start;
      per_chain.push_back(std::chrono::duration<double, std::nano>(elapsed).count() /
                          (double{kLaps} * kSize));
    }
    std::sort(per_chain.begin(), per_chain.end());
    std::printf("Pop+PushUsed, %-26s best %6.1f ns, median %6.1f ns per chain (%llu bytes)\n",
                shape.name, per_chain.front(), per_chain[kRuns / 2],
                static_cast<unsigned long long>(total / (uint64_t{kRuns} * kLaps * kSize)));
  }
}

}  // namespace
}  // namespace devices::virtio

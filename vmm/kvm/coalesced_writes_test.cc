#include "vmm/kvm/coalesced_writes.h"

#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace vmm {
namespace {

constexpr size_t kPage = 4096;

class RecordingDevice : public BusDevice {
 public:
  void Read(uint64_t, std::span<uint8_t> data) override { std::fill(data.begin(), data.end(), 0); }
  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    absl::MutexLock lock(&mutex);
    writes.push_back({offset, std::vector<uint8_t>(data.begin(), data.end())});
  }
  absl::Mutex mutex;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> writes;
};

// A page laid out as KVM's ring, filled the way the kernel fills it (entry, then `last`).
class FakeRing {
 public:
  FakeRing() : page_(std::make_unique<uint64_t[]>(kPage / sizeof(uint64_t))) {}
  kvm_abi::CoalescedRing* get() { return reinterpret_cast<kvm_abi::CoalescedRing*>(page_.get()); }
  void Queue(uint32_t capacity, uint64_t address, std::vector<uint8_t> data, bool pio) {
    kvm_coalesced_mmio& entry = get()->entries()[get()->last];
    entry.phys_addr = address;
    entry.len = static_cast<uint32_t>(data.size());
    entry.pio = pio ? 1 : 0;
    std::memcpy(entry.data, data.data(), std::min<size_t>(data.size(), sizeof(entry.data)));
    get()->last = (get()->last + 1) % capacity;
  }

 private:
  std::unique_ptr<uint64_t[]> page_;
};

class CoalescedWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(pio_.Register(0x1f0, 8, ide_).ok());
    ASSERT_TRUE(mmio_.Register(0xfe000000, 0x1000, mmio_device_).ok());
  }
  Bus pio_{"pio"};
  Bus mmio_{"mmio"};
  std::shared_ptr<RecordingDevice> ide_ = std::make_shared<RecordingDevice>();
  std::shared_ptr<RecordingDevice> mmio_device_ = std::make_shared<RecordingDevice>();
  CoalescedWrites writes_{pio_, mmio_, kPage};
  FakeRing ring_;
};

TEST_F(CoalescedWritesTest, CapacityIsTheKernels) {
  // KVM_COALESCED_MMIO_MAX for 4 KiB pages.
  EXPECT_EQ(writes_.capacity(), 170u);
}

TEST_F(CoalescedWritesTest, AppliesInTheGuestsOrderOnTheRightBus) {
  ring_.Queue(writes_.capacity(), 0x1f2, {0x08}, true);
  ring_.Queue(writes_.capacity(), 0x1f3, {0x10}, true);
  ring_.Queue(writes_.capacity(), 0xfe000010, {1, 2, 3, 4}, false);
  ring_.Queue(writes_.capacity(), 0x1f1, {0xaa, 0xbb}, true);
  EXPECT_EQ(writes_.Drain(ring_.get()), 4u);
  EXPECT_EQ(ring_.get()->first, 4u);
  ASSERT_EQ(ide_->writes.size(), 3u);
  EXPECT_EQ(ide_->writes[0], (std::pair<uint64_t, std::vector<uint8_t>>{2, {0x08}}));
  EXPECT_EQ(ide_->writes[1], (std::pair<uint64_t, std::vector<uint8_t>>{3, {0x10}}));
  EXPECT_EQ(ide_->writes[2], (std::pair<uint64_t, std::vector<uint8_t>>{1, {0xaa, 0xbb}}));
  ASSERT_EQ(mmio_device_->writes.size(), 1u);
  EXPECT_EQ(mmio_device_->writes[0],
            (std::pair<uint64_t, std::vector<uint8_t>>{0x10, {1, 2, 3, 4}}));
  EXPECT_EQ(writes_.applied(), 4u);
  // Nothing queued since: nothing applied again.
  EXPECT_EQ(writes_.Drain(ring_.get()), 0u);
  EXPECT_EQ(ide_->writes.size(), 3u);
}

TEST_F(CoalescedWritesTest, WrapsAroundTheRing) {
  ring_.get()->first = ring_.get()->last = writes_.capacity() - 2;
  for (uint8_t value = 0; value < 5; ++value) ring_.Queue(writes_.capacity(), 0x1f4, {value}, true);
  EXPECT_EQ(ring_.get()->last, 3u);
  EXPECT_EQ(writes_.Drain(ring_.get()), 5u);
  EXPECT_EQ(ring_.get()->first, 3u);
  ASSERT_EQ(ide_->writes.size(), 5u);
  for (uint8_t value = 0; value < 5; ++value) EXPECT_EQ(ide_->writes[value].second[0], value);
}

TEST_F(CoalescedWritesTest, NeverReadsPastAnEntrysData) {
  // A length beyond the entry's 8 data bytes is cut to them.
  ring_.Queue(writes_.capacity(), 0x1f0, {1, 2, 3, 4, 5, 6, 7, 8}, true);
  ring_.get()->entries()[0].len = 4096;
  EXPECT_EQ(writes_.Drain(ring_.get()), 1u);
  ASSERT_EQ(ide_->writes.size(), 1u);
  EXPECT_EQ(ide_->writes[0].second.size(), 8u);
}

TEST_F(CoalescedWritesTest, IgnoresAPageThatIsNotARing) {
  ring_.get()->first = 0;
  ring_.get()->last = writes_.capacity() + 7;
  EXPECT_EQ(writes_.Drain(ring_.get()), 0u);
  ring_.get()->first = 1000;
  ring_.get()->last = 2;
  EXPECT_EQ(writes_.Drain(ring_.get()), 0u);
  EXPECT_TRUE(ide_->writes.empty());
  EXPECT_EQ(writes_.Drain(nullptr), 0u);
}

TEST_F(CoalescedWritesTest, TwoDrainersApplyEachEntryOnceInOrder) {
  // Two vCPU threads draining the same ring while entries arrive: each write lands once, in order.
  constexpr int kEntries = 20000;
  std::atomic<bool> done{false};
  auto drainer = [&] {
    while (!done.load()) writes_.Drain(ring_.get());
    writes_.Drain(ring_.get());
  };
  std::thread a(drainer), b(drainer);
  for (int i = 0; i < kEntries; ++i) {
    // As KVM: wait for room (one slot stays empty), fill, publish.
    while ((__atomic_load_n(&ring_.get()->last, __ATOMIC_RELAXED) + 1) % writes_.capacity() ==
           __atomic_load_n(&ring_.get()->first, __ATOMIC_ACQUIRE)) {
      std::this_thread::yield();
    }
    const uint32_t last = ring_.get()->last;
    kvm_coalesced_mmio& entry = ring_.get()->entries()[last];
    entry.phys_addr = 0x1f3;
    entry.len = 4;
    entry.pio = 1;
    std::memcpy(entry.data, &i, sizeof(i));
    __atomic_store_n(&ring_.get()->last, (last + 1) % writes_.capacity(), __ATOMIC_RELEASE);
  }
  done.store(true);
  a.join();
  b.join();
  ASSERT_EQ(ide_->writes.size(), static_cast<size_t>(kEntries));
  for (int i = 0; i < kEntries; ++i) {
    int value;
    std::memcpy(&value, ide_->writes[i].second.data(), sizeof(value));
    ASSERT_EQ(value, i);
  }
  EXPECT_EQ(writes_.applied(), static_cast<uint64_t>(kEntries));
}

}  // namespace
}  // namespace vmm

#ifndef DEVICES_VIRTIO_SPLIT_QUEUE_TEST_UTIL_H_
#define DEVICES_VIRTIO_SPLIT_QUEUE_TEST_UTIL_H_

// Test helpers for code that uses a SplitQueue: guest memory from a list of regions, a bump
// allocator for guest buffers, and the driver side of a split virtqueue (virtio 1.2 §2.7.13,
// §2.7.14) that lays out the rings and adds chains the way a Linux driver does.

#include <cstdint>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "devices/virtio/split_queue.h"
#include "vmm/machine/guest_memory.h"

namespace devices::virtio::testing {

// §2.7.5, §2.7.6, §2.7.8 flag values, for tests that write raw rings.
inline constexpr uint16_t kDescNext = 1;
inline constexpr uint16_t kDescWrite = 2;
inline constexpr uint16_t kDescIndirect = 4;
inline constexpr uint16_t kAvailNoInterrupt = 1;
inline constexpr uint16_t kUsedNoNotify = 1;

// struct virtq_desc (§2.7.5), little-endian like the host.
struct RawDescriptor {
  uint64_t addr = 0;
  uint32_t len = 0;
  uint16_t flags = 0;
  uint16_t next = 0;
};
static_assert(sizeof(RawDescriptor) == 16);

// struct virtq_used_elem (§2.7.8).
struct UsedElement {
  uint32_t id = 0;
  uint32_t len = 0;
};

// Guest memory made of page-aligned (start, size) regions. Aborts the test binary on bad input.
vmm::GuestMemory MakeGuestMemory(std::vector<std::pair<uint64_t, uint64_t>> regions);

// Hands out guest addresses from [start, end), bump-pointer style.
class GuestAllocator {
 public:
  GuestAllocator(vmm::GuestAddress start, vmm::GuestAddress end) : next_(start), end_(end) {}
  // Aborts when the range is exhausted.
  vmm::GuestAddress Allocate(uint64_t bytes, uint64_t align = 16);

 private:
  vmm::GuestAddress next_;
  vmm::GuestAddress end_;
};

// One element of a chain to add.
struct Buffer {
  vmm::GuestAddress address;
  uint32_t length = 0;
  bool writable = false;
};

// The driver side of a split virtqueue over guest memory.
class DriverQueue {
 public:
  // Bytes Layout() uses from `base` for a queue of `size`.
  static uint64_t LayoutBytes(uint16_t size);
  // A configuration with the descriptor table at `base` (16-aligned), the available ring right
  // after it and the used ring after that (4-aligned).
  static QueueConfig Layout(uint16_t size, vmm::GuestAddress base, bool event_idx = false,
                            bool indirect = false);

  // Zeroes the three areas (as a driver does when it allocates them) and starts with every
  // descriptor free.
  DriverQueue(const vmm::GuestMemory& memory, const QueueConfig& config);

  const QueueConfig& config() const { return config_; }
  uint16_t num_free() const { return static_cast<uint16_t>(free_.size()); }

  // Adds a chain of direct descriptors (taken from the free list) and exposes it (§2.7.13).
  // Returns the head, or ResourceExhausted when there are not enough free descriptors.
  absl::StatusOr<uint16_t> AddChain(std::span<const Buffer> buffers);
  // Writes `buffers` as an indirect table at `table` and adds one descriptor referring to it.
  absl::StatusOr<uint16_t> AddIndirectChain(std::span<const Buffer> buffers,
                                            vmm::GuestAddress table);

  // Raw access, for hostile rings.
  void WriteDescriptor(uint16_t index, const RawDescriptor& descriptor) const;
  void WriteTableDescriptor(vmm::GuestAddress table, uint32_t index,
                            const RawDescriptor& descriptor) const;
  // Puts `head` into the next available ring slot without exposing it.
  void Offer(uint16_t head);
  // Exposes everything offered: avail->idx with release ordering (§2.7.13.3.1).
  void Expose();
  // Offer + Expose.
  void Publish(uint16_t head) {
    Offer(head);
    Expose();
  }
  // Sets avail->idx (and the driver's own shadow of it) directly.
  void SetAvailIdx(uint16_t idx);
  uint16_t avail_idx() const { return avail_shadow_; }
  void SetAvailFlags(uint16_t flags) const;
  void SetUsedEvent(uint16_t used_event) const;

  // The device's side, as the driver sees it.
  uint16_t UsedIdx() const;
  uint16_t UsedFlags() const;
  uint16_t AvailEvent() const;
  UsedElement UsedAt(uint16_t index) const;  // index modulo the queue size
  // The next used element not yet collected; returns its descriptors to the free list.
  std::optional<UsedElement> CollectUsed();

  // Whether a driver that just exposed buffers, moving avail->idx from `old_idx`, has to notify
  // the device (§2.7.10: vring_need_event on avail_event, or VIRTQ_USED_F_NO_NOTIFY).
  bool NeedsNotification(uint16_t old_idx) const;

 private:
  uint8_t* Host(vmm::GuestAddress address, uint64_t length) const;

  const vmm::GuestMemory* memory_;
  QueueConfig config_;
  std::vector<uint16_t> free_;                 // stack of free descriptor indices
  std::vector<std::vector<uint16_t>> chains_;  // per head: the descriptors it holds
  uint16_t avail_shadow_ = 0;
  uint16_t last_used_ = 0;
};

}  // namespace devices::virtio::testing

#endif  // DEVICES_VIRTIO_SPLIT_QUEUE_TEST_UTIL_H_

#ifndef DEVICES_VIRTIO_SPLIT_QUEUE_H_
#define DEVICES_VIRTIO_SPLIT_QUEUE_H_

#include <sys/uio.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/machine/guest_memory.h"

namespace devices::virtio {

// Where the driver put a split virtqueue's three areas, and what it negotiated (virtio 1.2 §2.7,
// §4.1.4.3: queue_size, queue_desc, queue_driver (avail), queue_device (used)).
struct QueueConfig {
  uint16_t size = 0;  // a power of two, 1..32768 (§2.7: "Queue Size ... power of 2")
  vmm::GuestAddress descriptor_table;
  vmm::GuestAddress available_ring;
  vmm::GuestAddress used_ring;
  bool event_idx = false;  // VIRTIO_F_EVENT_IDX negotiated (§2.7.7, §2.7.10)
  bool indirect = false;   // VIRTIO_F_INDIRECT_DESC negotiated (§2.7.5.3)
  // Where the device resumes in the rings: the next available index to consume and the next used
  // index to write. 0 after a device reset (§2.7); a vhost-user front end that stops and restarts
  // a ring passes the position back (VHOST_USER_SET_VRING_BASE). Every chain consumed before the
  // stop must have been made used, so one index serves both rings.
  uint16_t start_index = 0;
};

// One available descriptor chain, walked and validated: every buffer lies wholly inside guest memory
// and is given as host memory. Device-readable buffers all come before device-writable ones
// (§2.7.4.2: "a device MUST NOT ... readable after writable" is the driver's rule; a chain breaking
// it is rejected).
struct DescriptorChain {
  uint16_t head = 0;            // the id to return in the used ring
  std::vector<iovec> readable;  // driver -> device
  std::vector<iovec> writable;  // device -> driver
  uint64_t readable_bytes = 0;
  uint64_t writable_bytes = 0;
};

// The device side of a split virtqueue (virtio 1.2 §2.7). Used by one thread at a time (the queue's
// iothread). Every index and address from the guest is checked; a broken ring or chain is an error
// the device answers by setting DEVICE_NEEDS_RESET (§2.1.2) and no longer touching the queue.
class SplitQueue {
 public:
  // Validates the configuration: size, alignment (§2.7: descriptor table 16, available ring 2, used
  // ring 4 bytes) and that all three areas lie in guest memory. `memory` must outlive the queue.
  static absl::StatusOr<SplitQueue> Create(const vmm::GuestMemory& memory,
                                           const QueueConfig& config);

  // The next available chain, or nullopt when the driver has published nothing new. Errors
  // (FailedPrecondition / OutOfRange, with a message saying what was wrong): the available index
  // moved by more than the queue size, a head or next index >= size, a loop (a chain longer than the
  // queue size, or an indirect table with more entries than it has), an indirect descriptor inside
  // an indirect table or with NEXT set, a zero-length or misaligned indirect table, a buffer outside
  // guest memory, a readable buffer after a writable one, total length over 4 GiB.
  absl::StatusOr<std::optional<DescriptorChain>> Pop();
  // Makes the chain `head` used with `written` bytes written into its writable buffers (§2.7.8).
  // Publishes the used index with release ordering after the element.
  absl::Status PushUsed(uint16_t head, uint32_t written);
  // Whether the driver wants an interrupt for what was pushed since the last call (§2.7.10: the
  // used_event index with EVENT_IDX, else VIRTQ_AVAIL_F_NO_INTERRUPT).
  bool ShouldInterrupt();
  // Driver notifications (§2.7.7, §2.7.10): with EVENT_IDX, writes avail_event so the driver kicks
  // at the next buffer (or, disabled, at none); else clears/sets VIRTQ_USED_F_NO_NOTIFY.
  // EnableNotifications() returns true if buffers arrived meanwhile (the caller must Pop() again
  // before sleeping, or it can miss them).
  bool EnableNotifications();
  void DisableNotifications();
  // True when the available index differs from the last one seen.
  bool HasAvailable() const;

  uint16_t size() const { return config_.size; }
  // Where the device is in the rings, e.g. for vhost-user GET_VRING_BASE (§ of the vhost-user spec).
  uint16_t next_available() const { return next_available_; }
  void set_next_available(uint16_t index) { next_available_ = index; }

 private:
  SplitQueue(const vmm::GuestMemory& memory, const QueueConfig& config)
      : memory_(&memory), config_(config) {}
  // avail_event (§2.7.8): the 16 bits after the used ring's elements.
  uint8_t* AvailEventHost() const;

  const vmm::GuestMemory* memory_;
  QueueConfig config_;
  // Host addresses of the three areas, checked by Create() to lie wholly inside one region each.
  uint8_t* descriptor_table_host_ = nullptr;
  uint8_t* available_ring_host_ = nullptr;
  uint8_t* used_ring_host_ = nullptr;
  uint16_t next_available_ = 0;  // last available index consumed
  uint16_t next_used_ = 0;       // used index the next PushUsed writes
  uint16_t signalled_used_ = 0;  // used index at the last ShouldInterrupt() call
  bool signalled_used_valid_ = false;
};

}  // namespace devices::virtio

#endif  // DEVICES_VIRTIO_SPLIT_QUEUE_H_

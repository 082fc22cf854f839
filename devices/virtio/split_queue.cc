#include "devices/virtio/split_queue.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"

namespace devices::virtio {
namespace {

// The split virtqueue is little-endian (virtio 1.2 §2.7: "le16", "le32", "le64" fields); on a
// little-endian host the guest's bytes are used as they are.
static_assert(std::endian::native == std::endian::little, "a big-endian host needs byte swaps");

// §2.7.5: struct virtq_desc.
constexpr uint64_t kDescriptorSize = 16;
constexpr uint16_t kDescFNext = 1;      // VIRTQ_DESC_F_NEXT
constexpr uint16_t kDescFWrite = 2;     // VIRTQ_DESC_F_WRITE
constexpr uint16_t kDescFIndirect = 4;  // VIRTQ_DESC_F_INDIRECT
// §2.7.6: struct virtq_avail {le16 flags; le16 idx; le16 ring[size]; le16 used_event;}.
constexpr uint64_t kAvailFlagsOffset = 0;
constexpr uint64_t kAvailIdxOffset = 2;
constexpr uint64_t kAvailRingOffset = 4;
constexpr uint16_t kAvailFNoInterrupt = 1;  // VIRTQ_AVAIL_F_NO_INTERRUPT
// §2.7.8: struct virtq_used {le16 flags; le16 idx; virtq_used_elem ring[size]; le16 avail_event;}
// with struct virtq_used_elem {le32 id; le32 len;}.
constexpr uint64_t kUsedFlagsOffset = 0;
constexpr uint64_t kUsedIdxOffset = 2;
constexpr uint64_t kUsedRingOffset = 4;
constexpr uint64_t kUsedElemSize = 8;
constexpr uint16_t kUsedFNoNotify = 1;  // VIRTQ_USED_F_NO_NOTIFY
// §2.7: alignment of the three areas.
constexpr uint64_t kDescriptorTableAlign = 16;
constexpr uint64_t kAvailableRingAlign = 2;
constexpr uint64_t kUsedRingAlign = 4;
constexpr uint16_t kMaxQueueSize = 32768;
// §2.7.5.2: "Drivers MUST NOT add a descriptor chain longer than 2^32 bytes in total".
constexpr uint64_t kMaxChainBytes = uint64_t{1} << 32;
// Most chains have one to three buffers per direction; a small reservation saves regrowth.
constexpr size_t kIovecReserve = 4;

uint64_t AvailableRingBytes(uint16_t size) { return 6 + 2 * uint64_t{size}; }
uint64_t UsedRingBytes(uint16_t size) { return 6 + 8 * uint64_t{size}; }

// Every load of a ring field is a single (relaxed, aligned) atomic access: the guest may change the
// field at any time, and the compiler must neither tear nor repeat the load. Alignment of each
// field follows from the alignment Create() checks and from regions being page aligned on both the
// guest and the host side.
uint16_t LoadU16(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_RELAXED);
}
uint16_t LoadU16Acquire(const uint8_t* p) {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(p), __ATOMIC_ACQUIRE);
}
void StoreU16(uint8_t* p, uint16_t value) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), value, __ATOMIC_RELAXED);
}
void StoreU16Release(uint8_t* p, uint16_t value) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), value, __ATOMIC_RELEASE);
}
void StoreU32(uint8_t* p, uint32_t value) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(p), value, __ATOMIC_RELAXED);
}

struct Descriptor {
  uint64_t addr;
  uint32_t len;
  uint16_t flags;
  uint16_t next;
};
static_assert(sizeof(Descriptor) == kDescriptorSize);

// Copies one descriptor out of guest memory exactly once. Indirect tables need not be aligned
// (§2.7.5.3 sets no alignment), so this is a memcpy; the compiler barrier after it keeps the
// compiler from re-reading guest memory in place of the local copy (no double fetch).
Descriptor LoadDescriptor(const uint8_t* p) {
  Descriptor descriptor;
  std::memcpy(&descriptor, p, sizeof(descriptor));
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return descriptor;
}

// §2.7.10 (and the Linux driver's vring_need_event): true when `event` lies in [old, new_idx) in
// 16-bit modular arithmetic, i.e. the index the other side waits for was passed since `old`.
bool NeedEvent(uint16_t event, uint16_t new_idx, uint16_t old) {
  return static_cast<uint16_t>(new_idx - event - 1) < static_cast<uint16_t>(new_idx - old);
}

// Where in the chain a descriptor is, for error messages.
std::string Where(uint16_t head, bool indirect, uint32_t index) {
  if (indirect) return absl::StrFormat("chain %u, indirect descriptor %u", head, index);
  return absl::StrFormat("chain %u, descriptor %u", head, index);
}

// The host address of [addr, addr + len) (len > 0) when it lies wholly inside one region, else
// nullptr. (GuestMemory::GetHostSpan does the same but builds a StatusOr; this is the hot path.)
const uint8_t* HostRange(const vmm::GuestMemory& memory, uint64_t addr, uint64_t len) {
  for (const auto& region : memory.regions()) {
    if (region->Contains(vmm::GuestAddress(addr))) {
      const uint64_t offset = addr - region->start().value();
      return len <= region->size() - offset ? region->host_address() + offset : nullptr;
    }
  }
  return nullptr;
}

// Appends the host iovecs of the guest buffer [addr, addr + len) to `out`. A buffer that crosses
// from one region into an adjacent one (no gap) becomes one iovec per region; any part outside
// guest memory is an error.
absl::Status AppendBuffer(const vmm::GuestMemory& memory, uint64_t addr, uint32_t len,
                          std::vector<iovec>& out, uint16_t head, bool indirect, uint32_t index) {
  if (len == 0) return absl::OkStatus();  // nothing to read or write; no address to trust
  if (addr > UINT64_MAX - (len - 1)) {    // the last byte, addr + len - 1, is past 2^64 - 1
    return absl::OutOfRangeError(
        absl::StrFormat("%s: buffer [0x%x, +0x%x) wraps around the address space",
                        Where(head, indirect, index), addr, len));
  }
  if (out.capacity() == 0) out.reserve(kIovecReserve);
  uint64_t cursor = addr;
  uint64_t remaining = len;
  const auto& regions = memory.regions();
  size_t r = 0;
  for (; r < regions.size(); ++r) {
    if (regions[r]->Contains(vmm::GuestAddress(cursor))) break;
  }
  while (true) {
    if (r == regions.size() || !regions[r]->Contains(vmm::GuestAddress(cursor))) {
      return absl::OutOfRangeError(absl::StrFormat(
          "%s: buffer [0x%x, +0x%x) is not inside guest memory (0x%x is outside every region)",
          Where(head, indirect, index), addr, len, cursor));
    }
    const vmm::GuestMemoryRegion& region = *regions[r];
    const uint64_t offset = cursor - region.start().value();
    const uint64_t chunk = std::min(remaining, region.size() - offset);
    out.push_back(iovec{region.host_address() + offset, static_cast<size_t>(chunk)});
    remaining -= chunk;
    if (remaining == 0) return absl::OkStatus();
    cursor += chunk;  // the region's end; continues only into a region starting right there
    ++r;
  }
}

// An indirect descriptor's table (§2.7.5.3), checked as §2.7.5.3.1 requires: only with
// VIRTIO_F_INDIRECT_DESC negotiated, never inside an indirect table, never together with NEXT, at
// most a queue size of entries; and (§2.7.5.3) a length that is a non-zero multiple of 16.
absl::StatusOr<const uint8_t*> IndirectTable(const vmm::GuestMemory& memory,
                                             const QueueConfig& config, const Descriptor& desc,
                                             uint16_t head, bool in_indirect, uint32_t index) {
  if (!config.indirect) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: indirect descriptor without VIRTIO_F_INDIRECT_DESC negotiated",
                        Where(head, in_indirect, index)));
  }
  if (in_indirect) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: indirect descriptor inside an indirect table", Where(head, true, index)));
  }
  if (desc.flags & kDescFNext) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: indirect descriptor has VIRTQ_DESC_F_NEXT set", Where(head, false, index)));
  }
  if (desc.len == 0 || desc.len % kDescriptorSize != 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: indirect table length %u is not a non-zero multiple of 16",
                        Where(head, false, index), desc.len));
  }
  if (desc.len / kDescriptorSize > config.size) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: indirect table of %u entries is longer than the queue size %u",
                        Where(head, false, index), desc.len / kDescriptorSize, config.size));
  }
  const uint8_t* table = HostRange(memory, desc.addr, desc.len);
  if (table == nullptr) {
    return absl::OutOfRangeError(
        absl::StrFormat("%s: indirect table [0x%x, +0x%x) is not inside one guest memory region",
                        Where(head, false, index), desc.addr, desc.len));
  }
  return table;
}

}  // namespace

absl::StatusOr<SplitQueue> SplitQueue::Create(const vmm::GuestMemory& memory,
                                              const QueueConfig& config) {
  // §2.7: "Queue Size value is always a power of 2. The maximum Queue Size value is 32768."
  if (config.size == 0 || config.size > kMaxQueueSize || !std::has_single_bit(config.size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "queue size %u is not a power of two between 1 and %u", config.size, kMaxQueueSize));
  }
  struct Area {
    const char* name;
    vmm::GuestAddress address;
    uint64_t bytes;
    uint64_t align;
    uint8_t** host;
  };
  SplitQueue queue(memory, config);
  const Area areas[] = {
      {"descriptor table", config.descriptor_table, kDescriptorSize * config.size,
       kDescriptorTableAlign, &queue.descriptor_table_host_},
      {"available ring", config.available_ring, AvailableRingBytes(config.size),
       kAvailableRingAlign, &queue.available_ring_host_},
      {"used ring", config.used_ring, UsedRingBytes(config.size), kUsedRingAlign,
       &queue.used_ring_host_},
  };
  for (const Area& area : areas) {
    // §2.7 (the alignment table) and §2.7.1: descriptor table 16, available ring 2, used ring 4.
    if (area.address.value() % area.align != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s at 0x%x is not %u-byte aligned (virtio 1.2 §2.7)", area.name,
                          area.address.value(), area.align));
    }
    auto span = memory.GetHostSpan(area.address, area.bytes);
    if (!span.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s [0x%x, +0x%x) for queue size %u is not inside one guest memory "
                          "region",
                          area.name, area.address.value(), area.bytes, config.size));
    }
    *area.host = span->data();
  }
  queue.next_available_ = config.start_index;
  queue.next_used_ = config.start_index;
  queue.signalled_used_ = config.start_index;
  // Nothing has been pushed since the (re)start, and that is known: the driver saw every used
  // element before the ring was stopped, or there were none.
  queue.signalled_used_valid_ = true;
  return queue;
}

absl::StatusOr<std::optional<DescriptorChain>> SplitQueue::Pop() {
  const uint16_t size = config_.size;
  // §2.7.6, §2.7.13.3.1: read avail->idx, then (acquire: pairs with the barrier the driver puts
  // before its idx update) the ring entries and descriptors that idx exposes.
  const uint16_t available = LoadU16Acquire(available_ring_host_ + kAvailIdxOffset);
  const uint16_t pending = static_cast<uint16_t>(available - next_available_);
  if (pending == 0) return std::nullopt;
  if (pending > size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "available index %u is %u entries past the last one consumed (%u): more than the queue "
        "size %u",
        available, pending, next_available_, size));
  }
  const uint16_t slot = next_available_ & (size - 1);
  const uint16_t head = LoadU16(available_ring_host_ + kAvailRingOffset + 2 * uint64_t{slot});
  if (head >= size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "available ring entry %u names head descriptor %u, not below the queue size %u", slot, head,
        size));
  }

  DescriptorChain chain;
  chain.head = head;
  // The walk: first the descriptor table from `head`; an indirect descriptor (§2.7.5.3) switches
  // to its table, from entry 0, for the rest of the chain.
  const uint8_t* table = descriptor_table_host_;
  uint32_t table_entries = size;
  bool in_indirect = false;
  uint32_t index = head;
  uint32_t visited = 0;  // descriptors walked in the current table
  bool seen_writable = false;
  while (true) {
    // §2.7.5.2: a chain longer than the table can only be a loop (§2.7.5.3.1 bounds a chain
    // by the queue size; an indirect table by its own entry count).
    if (++visited > table_entries) {
      return absl::FailedPreconditionError(
          absl::StrFormat("chain %u has more than %u descriptors in its %s: a loop", head,
                          table_entries, in_indirect ? "indirect table" : "descriptor table"));
    }
    const Descriptor desc = LoadDescriptor(table + kDescriptorSize * index);
    if (desc.flags & kDescFIndirect) {
      auto indirect_table = IndirectTable(*memory_, config_, desc, head, in_indirect, index);
      if (!indirect_table.ok()) return indirect_table.status();
      table = *indirect_table;
      table_entries = desc.len / kDescriptorSize;
      in_indirect = true;
      index = 0;
      visited = 0;
      continue;
    }
    // §2.7.4.2: "The driver MUST place any device-writable descriptor elements after any
    // device-readable descriptor elements"; a chain breaking that is rejected.
    std::vector<iovec>* out;
    if (desc.flags & kDescFWrite) {
      seen_writable = true;
      chain.writable_bytes += desc.len;
      out = &chain.writable;
    } else {
      if (seen_writable) {
        return absl::FailedPreconditionError(
            absl::StrFormat("%s: device-readable buffer after a device-writable one",
                            Where(head, in_indirect, index)));
      }
      chain.readable_bytes += desc.len;
      out = &chain.readable;
    }
    // Each len < 2^32 and a chain has at most 2 * 32768 descriptors: no 64-bit overflow.
    if (chain.readable_bytes + chain.writable_bytes > kMaxChainBytes) {
      return absl::FailedPreconditionError(
          absl::StrFormat("chain %u is longer than 4 GiB in total (§2.7.5.2)", head));
    }
    if (absl::Status status =
            AppendBuffer(*memory_, desc.addr, desc.len, *out, head, in_indirect, index);
        !status.ok()) {
      return status;
    }
    if (!(desc.flags & kDescFNext)) break;
    if (desc.next >= table_entries) {
      return absl::OutOfRangeError(absl::StrFormat("%s: next index %u is not below %u",
                                                   Where(head, in_indirect, index), desc.next,
                                                   table_entries));
    }
    index = desc.next;
  }
  ++next_available_;
  return chain;
}

absl::Status SplitQueue::PushUsed(uint16_t head, uint32_t written) {
  if (head >= config_.size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("used head %u is not below the queue size %u", head, config_.size));
  }
  // §2.7.8.2: the element (and the buffers' contents) before the index: release, pairing with the
  // driver's read barrier after it reads used->idx.
  uint8_t* element =
      used_ring_host_ + kUsedRingOffset + kUsedElemSize * (next_used_ & (config_.size - 1));
  StoreU32(element, head);
  StoreU32(element + 4, written);
  ++next_used_;
  StoreU16Release(used_ring_host_ + kUsedIdxOffset, next_used_);
  // If so many were pushed without a ShouldInterrupt() that the 16-bit distance to the last one
  // is ambiguous, the next ShouldInterrupt() cannot tell and must say yes.
  if (static_cast<uint16_t>(next_used_ - signalled_used_) >= 0x8000) signalled_used_valid_ = false;
  return absl::OkStatus();
}

bool SplitQueue::ShouldInterrupt() {
  const uint16_t old = signalled_used_;
  const bool valid = signalled_used_valid_;
  signalled_used_ = next_used_;
  signalled_used_valid_ = true;
  if (valid && old == next_used_) return false;  // nothing pushed since the last call
  // §2.7.7.2, §2.7.14: a full barrier between publishing used->idx and reading the driver's
  // suppression field; it pairs with the driver's barrier between writing used_event (or clearing
  // NO_INTERRUPT) and re-reading used->idx, so that one of the two sides sees the other.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!config_.event_idx) {
    // §2.7.7.2: without VIRTIO_F_EVENT_IDX, VIRTQ_AVAIL_F_NO_INTERRUPT in avail->flags.
    return !(LoadU16(available_ring_host_ + kAvailFlagsOffset) & kAvailFNoInterrupt);
  }
  // §2.7.6, §2.7.7.2: with VIRTIO_F_EVENT_IDX, used_event (after the available ring's entries):
  // notify when the used idx moved past it since the last call.
  const uint16_t used_event =
      LoadU16(available_ring_host_ + kAvailRingOffset + 2 * uint64_t{config_.size});
  if (!valid) return true;
  return NeedEvent(used_event, next_used_, old);
}

uint8_t* SplitQueue::AvailEventHost() const {
  return used_ring_host_ + kUsedRingOffset + kUsedElemSize * config_.size;
}

bool SplitQueue::EnableNotifications() {
  if (config_.event_idx) {
    // §2.7.8, §2.7.10.2: avail_event (after the used ring's elements); the driver notifies once
    // avail->idx passes it, i.e. at its next buffer. used->flags stays 0 with EVENT_IDX.
    StoreU16(AvailEventHost(), next_available_);
  } else {
    StoreU16(used_ring_host_ + kUsedFlagsOffset, 0);  // §2.7.10: clear VIRTQ_USED_F_NO_NOTIFY
  }
  // Full barrier between the store above and re-reading avail->idx; pairs with the driver's
  // barrier between publishing avail->idx and reading avail_event / used->flags (§2.7.13.4.1;
  // Linux: virtqueue_kick_prepare), so a buffer added meanwhile is either notified or seen here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return LoadU16Acquire(available_ring_host_ + kAvailIdxOffset) != next_available_;
}

void SplitQueue::DisableNotifications() {
  if (config_.event_idx) {
    // §2.7.10: with VIRTIO_F_EVENT_IDX the driver notifies when avail->idx passes avail_event.
    // One behind what was already seen has been passed, so no further buffer notifies (until
    // the 16-bit index wraps, long after EnableNotifications()). Leaving the value stale would
    // still cost one notification: the first buffer after the last EnableNotifications().
    StoreU16(AvailEventHost(), static_cast<uint16_t>(next_available_ - 1));
  } else {
    StoreU16(used_ring_host_ + kUsedFlagsOffset, kUsedFNoNotify);  // §2.7.10
  }
}

bool SplitQueue::HasAvailable() const {
  return LoadU16Acquire(available_ring_host_ + kAvailIdxOffset) != next_available_;
}

}  // namespace devices::virtio

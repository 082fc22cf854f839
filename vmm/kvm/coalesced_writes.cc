#include "vmm/kvm/coalesced_writes.h"

#include <algorithm>
#include <span>

namespace vmm {

CoalescedWrites::CoalescedWrites(const Bus& pio_bus, const Bus& mmio_bus, size_t page_size,
                                 int page_offset)
    : pio_bus_(pio_bus),
      mmio_bus_(mmio_bus),
      // The kernel's KVM_COALESCED_MMIO_MAX: the entries that fit in the page after the indexes.
      capacity_(static_cast<uint32_t>((page_size - sizeof(kvm_abi::CoalescedRing)) /
                                      sizeof(kvm_coalesced_mmio))),
      page_offset_(page_offset) {}

size_t CoalescedWrites::Drain(kvm_abi::CoalescedRing* ring) {
  if (ring == nullptr) return 0;
  // KVM fills an entry, then publishes it by advancing `last` (after a write barrier); only this
  // class moves `first`, and KVM reads it to find room.
  if (__atomic_load_n(&ring->first, __ATOMIC_RELAXED) ==
      __atomic_load_n(&ring->last, __ATOMIC_ACQUIRE)) {
    return 0;
  }
  absl::MutexLock lock(&mutex_);
  uint32_t first = __atomic_load_n(&ring->first, __ATOMIC_RELAXED);
  const uint32_t last = __atomic_load_n(&ring->last, __ATOMIC_ACQUIRE);
  // Indexes only the kernel and this class write; out of range means a page that is not a ring,
  // and nothing in it is applied.
  if (first >= capacity_ || last >= capacity_) return 0;
  size_t applied = 0;
  while (first != last) {
    const kvm_coalesced_mmio& entry = ring->entries()[first];
    const std::span<const uint8_t> data(entry.data,
                                        std::min<size_t>(entry.len, sizeof(entry.data)));
    if (entry.pio) {
      pio_bus_.Write(entry.phys_addr, data);
    } else {
      mmio_bus_.Write(entry.phys_addr, data);
    }
    first = (first + 1) % capacity_;
    // Released one at a time: KVM may queue into the slot as soon as it sees it free.
    __atomic_store_n(&ring->first, first, __ATOMIC_RELEASE);
    ++applied;
  }
  applied_.fetch_add(applied, std::memory_order_relaxed);
  return applied;
}

}  // namespace vmm

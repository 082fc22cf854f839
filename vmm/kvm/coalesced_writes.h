#ifndef VMM_KVM_COALESCED_WRITES_H_
#define VMM_KVM_COALESCED_WRITES_H_

#include <linux/kvm.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/kvm/kvm_abi.h"
#include "vmm/machine/bus.h"

namespace vmm {

// The guest writes KVM queued instead of exiting (VmFd::RegisterCoalescedPio), applied through the
// buses in the order the guest made them. Each vCPU thread calls Drain() after every return from
// KVM_RUN, before it handles the exit: any access that does exit (a command register write, a
// status read, a PCI configuration cycle) then finds the device as if each queued write had exited
// on its own. So a write is only ever applied later than the guest made it, never out of order
// with the guest's other accesses, as on a bus that posts writes. One per VM: the ring is one page
// of the VM, which every vCPU maps; the mutex keeps two vCPUs from applying the same entries, or
// one vCPU's exit from overtaking entries another is still applying.
class CoalescedWrites {
 public:
  // `page_size`: the ring's page (the host's), which fixes how many entries it holds;
  // `page_offset`: where the page lies in a vCPU's mapping (KVM_CAP_COALESCED_MMIO's value).
  CoalescedWrites(const Bus& pio_bus, const Bus& mmio_bus, size_t page_size, int page_offset = 0);
  CoalescedWrites(const CoalescedWrites&) = delete;
  CoalescedWrites& operator=(const CoalescedWrites&) = delete;

  // Applies every queued entry of `ring` (the calling vCPU's view of the page; nullptr: nothing).
  // Returns how many. An empty ring costs two loads and no lock.
  size_t Drain(kvm_abi::CoalescedRing* ring);
  // Entries applied since the VM was built.
  uint64_t applied() const { return applied_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }
  int page_offset() const { return page_offset_; }

 private:
  const Bus& pio_bus_;
  const Bus& mmio_bus_;
  const uint32_t capacity_;
  const int page_offset_;
  absl::Mutex mutex_;
  std::atomic<uint64_t> applied_{0};
};

}  // namespace vmm

#endif  // VMM_KVM_COALESCED_WRITES_H_

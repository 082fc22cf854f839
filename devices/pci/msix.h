#ifndef DEVICES_PCI_MSIX_H_
#define DEVICES_PCI_MSIX_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/msi.h"

namespace devices::pci {

// The state behind an MSI-X capability (PCI Local Bus 3.0 §6.8.2): the vector table, the Pending
// Bit Array and the Message Control enable/function-mask bits. Each table entry is backed by one
// vmm::MsiVector (on KVM an irqfd on its own GSI). PciDevice places the capability structure in
// configuration space and routes the table/PBA ranges of its BAR here.
//
// Masking (§6.8.2.9, §6.8.2.10). An interrupt is deliverable when MSI-X is enabled, the function is
// not masked and the vector is not masked. Trigger() on a vector that is not deliverable sets its
// pending bit instead; the transition that makes it deliverable again (vector unmask, function
// unmask, enable) sends the message once and clears the bit. We also record pending while MSI-X is
// disabled (the function has no INTx here), so a driver that enables MSI-X late does not lose an
// event; at worst it sees one spurious interrupt.
//
// Concurrency. Trigger() is the fast path for iothreads: it reads two atomics (the function-level
// "blocked" flag and the vector's mask flag) and writes the vector's eventfd, taking no lock. The
// unmask paths run under mutex_ (vCPU threads). Both sides use sequentially consistent atomics in
// a store-then-check pattern: Trigger() stores pending and then re-checks the masks; unmasking
// stores the masks and then claims pending with an exchange. Whichever runs second sees the other's
// store, and the exchange makes sure the message is sent once.
//
// Messages are handed to the MsiVector (vmm::MsiVector::SetMessage, on KVM a GSI routing update)
// lazily: when a vector becomes deliverable with a changed entry, or when the guest rewrites the
// entry of a vector that is deliverable. Programming masked entries costs no routing update.
class MsixCapability {
 public:
  // Allocates `vector_count` (1..2048) vectors from `controller`. All entries start masked, as
  // §6.8.2.9 requires after reset.
  static absl::StatusOr<std::unique_ptr<MsixCapability>> Create(vmm::MsiController& controller,
                                                                uint32_t vector_count);

  uint32_t vector_count() const { return vector_count_; }
  // Bytes of the table (16 per entry) and of the PBA (one bit per vector, in whole QWORDs).
  uint64_t table_bytes() const { return uint64_t{vector_count_} * 16; }
  uint64_t pba_bytes() const { return (uint64_t{vector_count_} + 63) / 64 * 8; }

  // Device side. Sends `vector`'s message, or marks it pending when masked (see above). Out-of-range
  // vectors are ignored. Lock-free; callable from any thread.
  void Trigger(uint32_t vector);
  // Whether the guest enabled MSI-X (Message Control bit 15). Lock-free.
  bool enabled() const { return enabled_.load(); }

  // Guest side: accesses to the table or PBA, `offset` relative to the structure. Only aligned
  // DWORD and QWORD accesses are honoured (§6.8.2: "software must use aligned full DWORD or aligned
  // full QWORD transactions"); others read as zero and are not written. Writes to the PBA are
  // ignored (its bits are read-only). Accesses beyond the structure read as zero.
  void ReadTable(uint64_t offset, std::span<uint8_t> data);
  void WriteTable(uint64_t offset, std::span<const uint8_t> data);
  void ReadPba(uint64_t offset, std::span<uint8_t> data) const;

  // The guest wrote Message Control: MSI-X Enable (bit 15) and Function Mask (bit 14).
  void SetControl(bool enable, bool function_mask);

  // Inspection (tests, debugging).
  struct Entry {
    uint64_t address = 0;
    uint32_t data = 0;
    bool masked = true;
  };
  Entry entry(uint32_t vector) const;
  bool pending(uint32_t vector) const;
  bool function_masked() const;

 private:
  struct Vector {
    std::unique_ptr<vmm::MsiVector> msi;
    uint32_t address_low = 0;   // guarded by mutex_
    uint32_t address_high = 0;  // guarded by mutex_
    uint32_t data = 0;          // guarded by mutex_
    // The table entry differs from the message last given to `msi`. Guarded by mutex_.
    bool message_dirty = true;
    std::atomic<bool> masked{true};
    std::atomic<bool> pending{false};
  };

  MsixCapability(uint32_t vector_count, std::unique_ptr<Vector[]> vectors);

  bool Deliverable(const Vector& vector) const { return !blocked_.load() && !vector.masked.load(); }
  // Sends the message if the vector is deliverable and was pending.
  void DeliverIfPending(Vector& vector);
  // Hands a changed entry to its MsiVector.
  void SyncMessageLocked(Vector& vector) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint32_t ReadTableDword(uint64_t offset) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteTableDword(uint64_t offset, uint32_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint32_t ReadPbaDword(uint64_t offset) const;

  const uint32_t vector_count_;
  const std::unique_ptr<Vector[]> vectors_;

  mutable absl::Mutex mutex_;
  bool enable_ ABSL_GUARDED_BY(mutex_) = false;
  bool function_mask_ ABSL_GUARDED_BY(mutex_) = false;
  // !enable_ || function_mask_, readable without the lock.
  std::atomic<bool> blocked_{true};
  std::atomic<bool> enabled_{false};
};

}  // namespace devices::pci

#endif  // DEVICES_PCI_MSIX_H_

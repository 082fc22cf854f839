#ifndef VMM_KVM_KVM_MSI_H_
#define VMM_KVM_KVM_MSI_H_

#include <cstdint>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/kvm/kvm.h"
#include "vmm/machine/msi.h"

namespace vmm {

// MSI vectors on KVM: each vector owns a GSI above the IOAPIC's pins and an eventfd registered as an
// irqfd on it. KVM_SET_GSI_ROUTING replaces the whole table, so this class keeps the default routes
// of the legacy pins (what KVM sets up with the in-kernel irqchip: GSI n to PIC pin n for n < 16
// (except 2, the cascade) and to IOAPIC pin n for n < 24) and adds one MSI route per programmed
// vector.
class KvmMsiController : public MsiController {
 public:
  explicit KvmMsiController(VmFd& vm);
  absl::StatusOr<std::unique_ptr<MsiVector>> AllocateVector() override;

 private:
  class Vector;
  friend class Vector;
  absl::Status Route(uint32_t gsi, uint64_t address, uint32_t data);
  void Release(uint32_t gsi);
  absl::Status CommitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  VmFd& vm_;
  absl::Mutex mutex_;
  uint32_t next_gsi_ ABSL_GUARDED_BY(mutex_);
  struct Message {
    uint64_t address = 0;
    uint32_t data = 0;
  };
  std::map<uint32_t, Message> routes_ ABSL_GUARDED_BY(mutex_);  // programmed MSI routes by GSI
};

}  // namespace vmm

#endif  // VMM_KVM_KVM_MSI_H_

#ifndef VMM_MACHINE_MSI_H_
#define VMM_MACHINE_MSI_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vmm {

// One message-signalled interrupt a device can raise (PCI Local Bus 3.0, 6.8: an MSI-X table entry
// is an address/data pair the guest programs). Raising it is a write to an eventfd that KVM turns
// into the interrupt in the kernel (irqfd), so an iothread signals the guest without a VM exit.
class MsiVector {
 public:
  virtual ~MsiVector() = default;
  // The guest (re)programmed the entry. A vector with address 0 routes nowhere until programmed.
  virtual absl::Status SetMessage(uint64_t address, uint32_t data) = 0;
  // Signals the interrupt. Thread-safe; callable from any iothread.
  virtual void Trigger() = 0;
  // The eventfd behind Trigger(), for code that wants to hand it to another party (vhost-user).
  virtual int event_fd() const = 0;
};

// Hands out MSI vectors (on KVM: one GSI each, routed through KVM_SET_GSI_ROUTING).
class MsiController {
 public:
  virtual ~MsiController() = default;
  virtual absl::StatusOr<std::unique_ptr<MsiVector>> AllocateVector() = 0;
};

}  // namespace vmm

#endif  // VMM_MACHINE_MSI_H_

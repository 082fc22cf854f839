#ifndef VMM_MACHINE_IOEVENT_REGISTRAR_H_
#define VMM_MACHINE_IOEVENT_REGISTRAR_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace vmm {

// Where a guest write should signal an eventfd without an exit to the VMM (KVM_IOEVENTFD). Devices
// use this to turn doorbell registers (virtio notify addresses) into eventfds their iothreads poll.
// A machine primitive beside MsiController (msi.h): devices get one from the assembly, and device
// tests fake it; vmm/kvm's KvmIoEventRegistrar is the real one.
class IoEventRegistrar {
 public:
  struct Spec {
    uint64_t address = 0;
    uint32_t length = 0;  // 0 (any length, MMIO only), 1, 2, 4 or 8
    bool pio = false;
    std::optional<uint64_t> datamatch;
  };
  virtual ~IoEventRegistrar() = default;
  virtual absl::Status Register(int event_fd, const Spec& spec) = 0;
  // Must be given the same spec as the Register() call it undoes.
  virtual absl::Status Unregister(int event_fd, const Spec& spec) = 0;
};

}  // namespace vmm

#endif  // VMM_MACHINE_IOEVENT_REGISTRAR_H_

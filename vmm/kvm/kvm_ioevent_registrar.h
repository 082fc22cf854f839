#ifndef VMM_KVM_KVM_IOEVENT_REGISTRAR_H_
#define VMM_KVM_KVM_IOEVENT_REGISTRAR_H_

#include "vmm/kvm/kvm.h"
#include "vmm/machine/ioevent_registrar.h"

namespace vmm {

// The machine's IoEventRegistrar (vmm/machine/ioevent_registrar.h) on KVM_IOEVENTFD: the assembly
// gives it to virtio-pci, which knows no KVM. `vm` must outlive the registrar and every registration.
class KvmIoEventRegistrar : public vmm::IoEventRegistrar {
 public:
  explicit KvmIoEventRegistrar(VmFd& vm) : vm_(vm) {}
  absl::Status Register(int event_fd, const Spec& spec) override {
    return vm_.RegisterIoeventfd(event_fd, ToKvm(spec));
  }
  absl::Status Unregister(int event_fd, const Spec& spec) override {
    return vm_.UnregisterIoeventfd(event_fd, ToKvm(spec));
  }

 private:
  static VmFd::IoEventSpec ToKvm(const Spec& spec) {
    return VmFd::IoEventSpec{.address = spec.address,
                             .length = spec.length,
                             .pio = spec.pio,
                             .datamatch = spec.datamatch};
  }
  VmFd& vm_;
};

}  // namespace vmm

#endif  // VMM_KVM_KVM_IOEVENT_REGISTRAR_H_

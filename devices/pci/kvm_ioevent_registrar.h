#ifndef DEVICES_PCI_KVM_IOEVENT_REGISTRAR_H_
#define DEVICES_PCI_KVM_IOEVENT_REGISTRAR_H_

#include "devices/pci/ioevent_registrar.h"
#include "vmm/kvm.h"

namespace devices::pci {

// IoEventRegistrar on KVM_IOEVENTFD. `vm` must outlive the registrar and every registration.
class KvmIoEventRegistrar : public IoEventRegistrar {
 public:
  explicit KvmIoEventRegistrar(vmm::VmFd& vm) : vm_(vm) {}
  absl::Status Register(int event_fd, const Spec& spec) override {
    return vm_.RegisterIoeventfd(event_fd, ToKvm(spec));
  }
  absl::Status Unregister(int event_fd, const Spec& spec) override {
    return vm_.UnregisterIoeventfd(event_fd, ToKvm(spec));
  }

 private:
  static vmm::VmFd::IoEventSpec ToKvm(const Spec& spec) {
    return vmm::VmFd::IoEventSpec{.address = spec.address,
                                  .length = spec.length,
                                  .pio = spec.pio,
                                  .datamatch = spec.datamatch};
  }
  vmm::VmFd& vm_;
};

}  // namespace devices::pci

#endif  // DEVICES_PCI_KVM_IOEVENT_REGISTRAR_H_

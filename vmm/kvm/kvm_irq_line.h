#ifndef VMM_KVM_KVM_IRQ_LINE_H_
#define VMM_KVM_KVM_IRQ_LINE_H_

#include <cstdint>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "vmm/kvm/kvm.h"
#include "vmm/machine/irq_line.h"

namespace vmm {

// The machine's IrqLine (vmm/machine/irq_line.h) as one input of KVM's in-kernel IOAPIC and PIC,
// driven through KVM_IRQ_LINE: the assembly gives these to the legacy devices (serial, ACPI, IDE),
// which know no KVM. `vm` must outlive the line.
class KvmIrqLine : public IrqLine {
 public:
  KvmIrqLine(VmFd& vm, uint32_t irq) : vm_(vm), irq_(irq) {}
  void SetLevel(bool asserted) override {
    absl::Status status = vm_.SetIrqLine(irq_, asserted);
    if (!status.ok()) absl::FPrintF(stderr, "microvm: IRQ %u: %s\n", irq_, status.message());
  }

 private:
  VmFd& vm_;
  const uint32_t irq_;
};

}  // namespace vmm

#endif  // VMM_KVM_KVM_IRQ_LINE_H_

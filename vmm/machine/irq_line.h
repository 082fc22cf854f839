#ifndef VMM_MACHINE_IRQ_LINE_H_
#define VMM_MACHINE_IRQ_LINE_H_

namespace vmm {

// One interrupt input of the guest's interrupt controller, as a device sees it: a level it drives.
// Edge-triggered consumers (ISA IRQs on the IOAPIC/PIC) see the rising edge.
class IrqLine {
 public:
  virtual ~IrqLine() = default;
  virtual void SetLevel(bool asserted) = 0;
};

}  // namespace vmm

#endif  // VMM_MACHINE_IRQ_LINE_H_

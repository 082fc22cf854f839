#ifndef VMM_FDT_MACHINE_FDT_H_
#define VMM_FDT_MACHINE_FDT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/machine/machine_description.h"

namespace vmm::fdt {

// The phandle of the IOAPIC node. The root node names it as `interrupt-parent`, so every
// `interrupts` property in the tree is an IOAPIC pin (Devicetree Specification v0.4, 2.4.1).
inline constexpr uint32_t kIoapicPhandle = 1;

// Number of IOAPIC input pins of KVM's in-kernel IOAPIC (KVM_IOAPIC_NUM_PINS); an `interrupt` of a
// device must name one of them.
inline constexpr uint32_t kIoapicPins = 24;

// Second cell of an `interrupts` specifier: the trigger type as Linux decodes it for
// "intel,ce4100-ioapic" (arch/x86/kernel/devicetree.c, of_ioapic_type[]): 0 = falling edge
// (edge, active low), 1 = level high, 2 = level low, 3 = rising edge (edge, active high).
// Legacy ISA interrupts are edge triggered, active high (MP Spec 1.4, 4.3.4, "conforms to the
// specifications of the bus" for ISA), hence 3.
inline constexpr uint32_t kIrqTypeEdgeRising = 3;

// Builds the flattened device tree (DTB, Devicetree Specification v0.4 chapter 5) describing
// `machine`, laid out as docs/machine.md shows:
//
//   / { compatible = "microvm,x86-64"; model = "microvm"; #address-cells = <2>; #size-cells = <2>;
//       interrupt-parent = <&ioapic>;
//     chosen { bootargs; stdout-path = "/isa/<stdout_device>"; }
//     memory@<base of the first range> { device_type = "memory"; reg = <all ranges>; }
//     cpus { cpu@<apic id> { device_type = "cpu"; reg = <apic id>; } ... }
//     interrupt-controller@fec00000 (IOAPIC, phandle kIoapicPhandle, #interrupt-cells = <2>)
//     interrupt-controller@fee00000 (LAPIC, intel,virtual-wire-mode)
//     isa { compatible = "isa"; #address-cells = <2>; #size-cells = <1>; ranges;
//           <every kPortIo device> }
//     <every kMmio device> }
//
// Devices carry `interrupts = <irq 3>` (IOAPIC pin, rising edge; see kIrqTypeEdgeRising) when they
// have an interrupt, and `clock-frequency` when they have one. Every interrupt is declared rising
// edge: DeviceDescription has no trigger mode yet (a level-triggered device, e.g. PCI INTx, would
// need one). /isa maps I/O space 1:1 (`ranges = <1 0 0 0 0x10000>`) so an OS can translate the
// ports; the LAPIC node says `intel,virtual-wire-mode`, matching the MP table. Unit addresses are
// lowercase hex without "0x". The result is packed (no free space) and at most kFdtMaxBytes long.
//
// Errors: InvalidArgument for a description that cannot be expressed (no memory or CPUs, bad node
// names, duplicate nodes, port ranges beyond 0xffff, an unknown stdout device...);
// ResourceExhausted when the tree does not fit in kFdtMaxBytes.
absl::StatusOr<std::vector<uint8_t>> BuildMachineFdt(const MachineDescription& machine);

// Writes `blob` (a DTB from BuildMachineFdt) to `path`, replacing the file, for
// `microvm --dump-dtb FILE`. Errors name the path.
absl::Status WriteFdtFile(const std::vector<uint8_t>& blob, const std::string& path);

}  // namespace vmm::fdt

#endif  // VMM_FDT_MACHINE_FDT_H_

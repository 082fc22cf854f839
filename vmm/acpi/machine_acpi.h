#ifndef VMM_ACPI_MACHINE_ACPI_H_
#define VMM_ACPI_MACHINE_ACPI_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/machine_description.h"

// The machine's ACPI tables, built from the same MachineDescription as its device tree
// (docs/machine.md "ACPI tables").
namespace vmm::acpi {

// The compatible string of the ACPI fixed hardware's DeviceDescription (the device in
// devices/legacy/acpi_pm.h): its first range is the 16-port block of PM1 event/control registers, PM
// timer and reset register; the FADT points into it, its SCI is ISA IRQ kAcpiSciIrq (layout.h), and
// the DSDT gets \_S5_. (The description carries no `interrupt`: the SCI is level-triggered, which
// only the FADT and the MADT express.)
inline constexpr char kAcpiPmCompatible[] = "microvm,acpi-pm";
// The PCI host bridge's DeviceDescription (devices/pci PciRootBus::Describe()): configuration
// mechanism #1 ports; its windows are MachineDescription::pci_windows.
inline constexpr char kPciConf1Compatible[] = "microvm,pci-conf1";
// Devices the tables treat by identity: COM1 (PNP0501 in the DSDT), the 8042 (left out of the
// DSDT) and the RTC (the FADT's IA-PC boot architecture flags).
inline constexpr char kSerialCompatible[] = "ns16550a";
inline constexpr char kI8042Compatible[] = "intel,8042";
inline constexpr char kRtcCompatible[] = "motorola,mc146818";

struct AcpiTable {
  std::string signature;  // "RSD PTR " for the RSDP, else the 4-character table signature
  uint64_t address;       // guest-physical
  std::vector<uint8_t> bytes;
};

struct AcpiTables {
  // In placement order: RSDP, XSDT, FADT, FACS (with an ACPI power-management device), MADT, DSDT,
  // each 16-byte aligned from `base` (the FACS 64-byte aligned), all within [base, limit).
  std::vector<AcpiTable> tables;
  uint64_t rsdp_address() const { return tables.front().address; }
};

// Builds the RSDP, XSDT, FADT, FACS, MADT and DSDT for `machine`, placed from `base` (16-byte
// aligned) up to `limit`:
// - MADT: a Processor Local APIC per machine.cpu_apic_ids entry (UID = index, enabled), the IOAPIC
//   (id = number of CPUs, as in the MP table) at kIoapicAddress with GSI base 0, NMI on LINT1 of
//   every local APIC, and one interrupt source override: the SCI, ISA IRQ 9 -> GSI 9, level,
//   active high (with a "microvm,acpi-pm" device). None for IRQ 0: KVM's default routing wires ISA
//   IRQ n to GSI n, IRQ 0 included (see the MP table).
// - DSDT: \_SB.PCI0 for the "microvm,pci-conf1" device and machine.pci_windows; COMn (PNP0501) per
//   "ns16550a" device; nothing for "intel,8042" (reset line only; no 8042 in IAPC_BOOT_ARCH);
//   every other device as a PNP0C02 motherboard resource reservation; \_S5_ when there is a
//   "microvm,acpi-pm" device.
// - FADT: with a "microvm,acpi-pm" device, the fixed-hardware model (4.8): SCI_INT 9, no SMI_CMD,
//   its PM1a event/control blocks, PM timer and reset register, a fixed-feature power button, the
//   FACS; without one, hardware-reduced with no registers and no FACS. IAPC_BOOT_ARCH from the
//   devices present.
// InvalidArgument for a description the tables cannot express (no CPUs, more than 254, APIC ids
// above 254, a PCI bridge without windows, an MMIO device above 4 GiB, ...); ResourceExhausted when
// the tables do not fit below `limit`.
absl::StatusOr<AcpiTables> BuildMachineAcpi(const MachineDescription& machine, uint64_t base,
                                            uint64_t limit);

// Writes every table to guest memory at its address.
absl::Status WriteAcpiTables(const GuestMemory& memory, const AcpiTables& tables);

// Writes each table to DIR/<signature>.dat (rsdp.dat, xsdt.dat, facp.dat, facs.dat, apic.dat,
// dsdt.dat), the names acpidump/iasl use; for --dump-acpi. The directory must exist.
absl::Status WriteAcpiFiles(const AcpiTables& tables, const std::string& directory);

}  // namespace vmm::acpi

#endif  // VMM_ACPI_MACHINE_ACPI_H_

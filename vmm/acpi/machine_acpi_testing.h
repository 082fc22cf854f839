#ifndef VMM_ACPI_MACHINE_ACPI_TESTING_H_
#define VMM_ACPI_MACHINE_ACPI_TESTING_H_

#include <cstdint>

#include "vmm/acpi/machine_acpi.h"
#include "vmm/machine/layout.h"
#include "vmm/machine/machine_description.h"
#include "vmm/machine/machine_description_testing.h"

namespace vmm::acpi::testing {

// The machine vm.cc assembles, as the ACPI tests build tables for: 256 MiB, `cpus` CPUs, the
// legacy ports, the ACPI power-management registers, the PCI host bridge and its windows.
inline MachineDescription SampleMachine(uint32_t cpus) {
  using Space = DeviceDescription::AddressSpace;
  MachineDescription machine;
  machine.memory = {{0, 256ull << 20}};
  for (uint32_t id = 0; id < cpus; ++id) machine.cpu_apic_ids.push_back(id);
  fixtures::AddLegacyPortDevices(machine);
  machine.devices.push_back({.node_name = "acpi-pm",
                             .compatible = {kAcpiPmCompatible},
                             .space = Space::kPortIo,
                             .ranges = {{kAcpiPmBase, kAcpiPmBlockSize}}});
  machine.devices.push_back({.node_name = "pci",
                             .compatible = {kPciConf1Compatible},
                             .space = Space::kPortIo,
                             .ranges = {{0xcf8, 8}}});
  machine.pci_windows = MachineDescription::PciWindows{
      .io = {0xc000, 0x4000}, .mmio32 = {0xc0000000, 0xfec00000 - 0xc0000000}};
  return machine;
}

}  // namespace vmm::acpi::testing

#endif  // VMM_ACPI_MACHINE_ACPI_TESTING_H_

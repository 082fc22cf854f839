#ifndef VMM_MACHINE_MACHINE_DESCRIPTION_TESTING_H_
#define VMM_MACHINE_MACHINE_DESCRIPTION_TESTING_H_

#include "vmm/machine/layout.h"
#include "vmm/machine/machine_description.h"

// Test fixtures for the builders that take a MachineDescription (device tree, ACPI tables).
namespace vmm::fixtures {

// Appends the legacy port devices vm.cc registers on every machine, described as it describes
// them: COM1, the i8042 (reset line), the debug-exit port and the POST-code port.
inline void AddLegacyPortDevices(MachineDescription& machine) {
  using Space = DeviceDescription::AddressSpace;
  machine.stdout_device = "serial@3f8";
  machine.devices.push_back({.node_name = "serial",
                             .compatible = {"ns16550a"},
                             .space = Space::kPortIo,
                             .ranges = {{kCom1Port, 8}},
                             .interrupt = kCom1Irq,
                             .clock_frequency = 1843200});
  machine.devices.push_back({.node_name = "keyboard-controller",
                             .compatible = {"intel,8042"},
                             .space = Space::kPortIo,
                             .ranges = {{kI8042DataPort, 1}, {kI8042CommandPort, 1}}});
  machine.devices.push_back({.node_name = "debug-exit",
                             .compatible = {"microvm,debug-exit"},
                             .space = Space::kPortIo,
                             .ranges = {{kDebugExitPort, 1}}});
  machine.devices.push_back({.node_name = "post-code",
                             .compatible = {"microvm,post-code"},
                             .space = Space::kPortIo,
                             .ranges = {{kPostCodePort, 1}}});
}

}  // namespace vmm::fixtures

#endif  // VMM_MACHINE_MACHINE_DESCRIPTION_TESTING_H_

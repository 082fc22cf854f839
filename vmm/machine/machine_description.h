#ifndef VMM_MACHINE_MACHINE_DESCRIPTION_H_
#define VMM_MACHINE_MACHINE_DESCRIPTION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vmm {

// What the VMM wired up, in the terms a guest needs to find it: the input of the device tree (and of
// anything else that describes the machine). Devices append themselves as the VM is assembled.
struct DeviceDescription {
  enum class AddressSpace { kPortIo, kMmio };
  std::string node_name;                // e.g. "serial" (the unit address is appended).
  std::vector<std::string> compatible;  // most specific first, e.g. {"ns16550a"}.
  AddressSpace space = AddressSpace::kPortIo;
  struct Range {
    uint64_t base;
    uint64_t size;
  };
  std::vector<Range> ranges;          // the first range gives the unit address.
  std::optional<uint32_t> interrupt;  // legacy IRQ / GSI, if the device raises one.
  std::optional<uint32_t> clock_frequency;
};

struct MachineDescription {
  struct MemoryRange {
    uint64_t base;
    uint64_t size;
  };
  std::vector<MemoryRange> memory;
  std::vector<uint32_t> cpu_apic_ids;
  std::string cmdline;
  std::string stdout_device;  // node_name@unit of the console, e.g. "serial@3f8".
  std::vector<DeviceDescription> devices;
  // What the PCI host bridge (the "microvm,pci-conf1" device) forwards to bus 0: the windows the
  // VMM assigns BARs from. Set when the machine has PCI; the ACPI DSDT's \_SB.PCI0 _CRS lists them.
  struct PciWindows {
    DeviceDescription::Range io;
    DeviceDescription::Range mmio32;
    std::optional<DeviceDescription::Range> mmio64;
  };
  std::optional<PciWindows> pci_windows;
};

}  // namespace vmm

#endif  // VMM_MACHINE_MACHINE_DESCRIPTION_H_

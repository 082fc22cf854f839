#include "vmm/fdt/machine_fdt.h"

#include <libfdt.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/host_file.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::fdt {
namespace {

// The first buffer tried; it doubles on -FDT_ERR_NOSPACE up to kFdtMaxBytes. A typical machine
// needs well under 2 KiB.
constexpr size_t kInitialBufferBytes = 4096;

// Size of the IOAPIC and LAPIC register windows (Intel 82093AA datasheet; SDM Vol. 3A 11.4.1).
constexpr uint64_t kInterruptControllerWindowBytes = 0x1000;

// Address cell 0 of a child of /isa: 1 selects I/O space (the ISA binding's "i" flag, IEEE 1275
// ISA bus binding 2.1; Linux's of_bus_isa uses the same encoding).
constexpr uint32_t kIsaIoSpace = 1;

// The I/O port space is 64 KiB.
constexpr uint64_t kPortIoSpaceBytes = 0x10000;

// Devicetree Specification v0.4, 2.2.1: a node name is 1-31 characters from [0-9a-zA-Z,._+-] and
// starts with a letter.
constexpr size_t kMaxNodeNameLength = 31;

std::string UnitName(absl::string_view name, uint64_t address) {
  // 2.2.1: the unit address is the node's primary address in the parent's address space; by
  // convention lowercase hex without a "0x" prefix.
  return absl::StrFormat("%s@%x", name, address);
}

absl::Status CheckNodeName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNodeNameLength) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device tree node name \"%s\" must be 1-%d characters", name, kMaxNodeNameLength));
  }
  const auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!is_alpha(name[0])) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device tree node name \"%s\" must start with a letter", name));
  }
  for (char c : name) {
    if (!is_alpha(c) && !(c >= '0' && c <= '9') && std::strchr(",._+-", c) == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device tree node name \"%s\" contains '%c' (allowed: [0-9a-zA-Z,._+-])", name, c));
    }
  }
  return absl::OkStatus();
}

// Property strings are NUL-terminated in the blob; an embedded NUL would silently truncate them.
absl::Status CheckNoNul(absl::string_view what, absl::string_view value) {
  if (value.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " contains a NUL character"));
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const DeviceDescription& device) {
  RETURN_IF_ERROR(CheckNodeName(device.node_name));
  if (device.ranges.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", device.node_name, "\" has no address range"));
  }
  for (const std::string& compatible : device.compatible) {
    if (compatible.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("device \"", device.node_name, "\" has an empty compatible string"));
    }
    RETURN_IF_ERROR(CheckNoNul("compatible of " + device.node_name, compatible));
  }
  for (const DeviceDescription::Range& range : device.ranges) {
    const bool port_io = device.space == DeviceDescription::AddressSpace::kPortIo;
    if (range.size == 0 || range.base + range.size < range.base ||
        (port_io && range.base + range.size > kPortIoSpaceBytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device \"%s\": range 0x%x+0x%x is empty or outside the %s space", device.node_name,
          range.base, range.size, port_io ? "I/O port" : "memory"));
    }
  }
  if (device.interrupt.has_value() && *device.interrupt >= kIoapicPins) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device \"%s\": interrupt %u is not an IOAPIC pin (0-%u)", device.node_name,
                        *device.interrupt, kIoapicPins - 1));
  }
  return absl::OkStatus();
}

std::string DeviceNodeName(const DeviceDescription& device) {
  return UnitName(device.node_name, device.ranges.front().base);
}

// Rejects what BuildMachineFdt cannot express, so emission below cannot fail for any reason but
// space. Also resolves the stdout device into its full path.
absl::StatusOr<std::string> ValidateAndFindStdoutPath(const MachineDescription& machine) {
  if (machine.memory.empty()) return absl::InvalidArgumentError("machine has no memory ranges");
  for (const MachineDescription::MemoryRange& range : machine.memory) {
    if (range.size == 0 || range.base + range.size < range.base) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "memory range 0x%x+0x%x is empty or wraps around", range.base, range.size));
    }
  }
  if (machine.cpu_apic_ids.empty()) return absl::InvalidArgumentError("machine has no CPUs");
  std::set<uint32_t> apic_ids;
  for (uint32_t id : machine.cpu_apic_ids) {
    if (!apic_ids.insert(id).second) {
      return absl::InvalidArgumentError(absl::StrFormat("APIC id %u is listed twice", id));
    }
  }
  RETURN_IF_ERROR(CheckNoNul("the kernel command line", machine.cmdline));

  // Sibling nodes must have distinct names (Devicetree Specification v0.4, 2.2.1). A device name
  // always carries a unit address, so at the root it can only collide with the fixed nodes that
  // have one too: the interrupt controllers and the memory node.
  std::set<std::string> isa_children;
  std::set<std::string> root_children = {
      UnitName("interrupt-controller", kIoapicAddress),
      UnitName("interrupt-controller", kLapicAddress),
      UnitName("memory", machine.memory.front().base),
  };
  std::string stdout_path;
  for (const DeviceDescription& device : machine.devices) {
    RETURN_IF_ERROR(CheckDevice(device));
    const std::string name = DeviceNodeName(device);
    const bool port_io = device.space == DeviceDescription::AddressSpace::kPortIo;
    std::set<std::string>& siblings = port_io ? isa_children : root_children;
    if (!siblings.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two device tree nodes would both be named ", name));
    }
    if (name == machine.stdout_device) stdout_path = (port_io ? "/isa/" : "/") + name;
  }
  if (!machine.stdout_device.empty() && stdout_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("stdout device \"", machine.stdout_device,
                                                   "\" is not among the machine's devices"));
  }
  return stdout_path;
}

// libfdt's sequential-write calls with a sticky error: after the first failure every call is a
// no-op, so the tree is written as straight-line code and the error checked once at the end.
class FdtWriter {
 public:
  explicit FdtWriter(std::span<uint8_t> buffer) : fdt_(buffer.data()) {
    error_ = fdt_create(fdt_, static_cast<int>(buffer.size()));
    if (error_ == 0) error_ = fdt_finish_reservemap(fdt_);  // No /memreserve/ entries.
  }

  void BeginNode(const std::string& name) { Do(fdt_begin_node(fdt_, name.c_str())); }
  void EndNode() { Do(fdt_end_node(fdt_)); }
  void Empty(const char* name) { Do(fdt_property(fdt_, name, nullptr, 0)); }
  void String(const char* name, const std::string& value) {
    Do(fdt_property(fdt_, name, value.c_str(), static_cast<int>(value.size() + 1)));
  }
  // A <stringlist> (Devicetree Specification v0.4, 2.2.4): NUL-terminated strings back to back.
  void StringList(const char* name, const std::vector<std::string>& values) {
    std::string joined;
    for (const std::string& value : values) joined.append(value).push_back('\0');
    Do(fdt_property(fdt_, name, joined.data(), static_cast<int>(joined.size())));
  }
  void Cell(const char* name, uint32_t value) { Cells(name, {value}); }
  // A <prop-encoded-array> of big-endian 32-bit cells (2.2.4).
  void Cells(const char* name, const std::vector<uint32_t>& cells) {
    std::vector<fdt32_t> encoded;
    encoded.reserve(cells.size());
    for (uint32_t cell : cells) encoded.push_back(cpu_to_fdt32(cell));
    Do(fdt_property(fdt_, name, encoded.data(), static_cast<int>(encoded.size() * 4)));
  }
  int Finish() {
    Do(fdt_finish(fdt_));
    return error_;
  }

 private:
  void Do(int result) {
    if (error_ == 0 && result < 0) error_ = result;
  }
  void* fdt_;
  int error_ = 0;
};

void AppendAddress64(std::vector<uint32_t>& cells, uint64_t value) {
  cells.push_back(static_cast<uint32_t>(value >> 32));
  cells.push_back(static_cast<uint32_t>(value));
}

// Properties shared by ISA and MMIO device nodes, after `compatible` and `reg`.
void WriteDeviceCommon(FdtWriter& w, const DeviceDescription& device) {
  if (device.interrupt.has_value()) {
    // Two cells, as #interrupt-cells = <2> of the IOAPIC (the interrupt parent) demands: the pin
    // and the trigger type.
    w.Cells("interrupts", {*device.interrupt, kIrqTypeEdgeRising});
  }
  if (device.clock_frequency.has_value()) w.Cell("clock-frequency", *device.clock_frequency);
}

// Opens an interrupt controller's node with what both of the machine's have, in the bindings
// Linux's x86 device-tree support understands (arch/x86/kernel/devicetree.c; the CE4100 SoC
// introduced them). 2.4.2: an interrupt controller has an empty `interrupt-controller` property and
// #interrupt-cells (<pin trigger-type>). No interrupt-map refers to it, but dtc's
// interrupt_provider check (dtc 1.6) expects an interrupt provider to say how many address cells an
// interrupt specifier's parent address has.
void BeginInterruptController(FdtWriter& w, const char* compatible, uint64_t address) {
  w.BeginNode(UnitName("interrupt-controller", address));
  w.String("compatible", compatible);
  std::vector<uint32_t> reg;
  AppendAddress64(reg, address);
  AppendAddress64(reg, kInterruptControllerWindowBytes);
  w.Cells("reg", reg);
  w.Empty("interrupt-controller");
  w.Cell("#interrupt-cells", 2);
  w.Cell("#address-cells", 0);
}

// The IOAPIC (the interrupt parent of every device) and the local APIC.
void WriteInterruptControllers(FdtWriter& w) {
  BeginInterruptController(w, "intel,ce4100-ioapic", kIoapicAddress);
  w.Cell("phandle", kIoapicPhandle);
  w.EndNode();

  BeginInterruptController(w, "intel,ce4100-lapic", kLapicAddress);
  // Linux (arch/x86/kernel/devicetree.c, dtb_lapic_setup) assumes an IMCR and PIC mode unless this
  // is present; like the MP table's IMCRP bit 0 (MP Spec 1.4, 3.6.2.2), it says virtual wire mode.
  w.Empty("intel,virtual-wire-mode");
  w.EndNode();
}

int WriteTree(std::span<uint8_t> buffer, const MachineDescription& machine,
              const std::string& stdout_path) {
  FdtWriter w(buffer);
  w.BeginNode("");  // The root node has an empty name (Devicetree Specification v0.4, 5.4.1).
  w.String("compatible", "microvm,x86-64");
  // 3.2: `model` is required in the root node.
  w.String("model", "microvm");
  // Two cells for addresses and sizes: RAM and MMIO lie above 4 GiB.
  w.Cell("#address-cells", 2);
  w.Cell("#size-cells", 2);
  // 2.4.1: interrupt-parent is inherited from ancestors, so every device's `interrupts` refers to
  // the IOAPIC.
  w.Cell("interrupt-parent", kIoapicPhandle);

  // 3.6: /chosen carries the command line and the console.
  w.BeginNode("chosen");
  w.String("bootargs", machine.cmdline);
  if (!stdout_path.empty()) w.String("stdout-path", stdout_path);
  w.EndNode();

  // 3.4: one memory node; reg lists every range as <address size>, two cells each.
  w.BeginNode(UnitName("memory", machine.memory.front().base));
  w.String("device_type", "memory");
  std::vector<uint32_t> memory_reg;
  for (const MachineDescription::MemoryRange& range : machine.memory) {
    AppendAddress64(memory_reg, range.base);
    AppendAddress64(memory_reg, range.size);
  }
  w.Cells("reg", memory_reg);
  w.EndNode();

  // 3.7/3.8: CPUs are identified by their local APIC id, one cell, no size.
  w.BeginNode("cpus");
  w.Cell("#address-cells", 1);
  w.Cell("#size-cells", 0);
  for (uint32_t apic_id : machine.cpu_apic_ids) {
    w.BeginNode(UnitName("cpu", apic_id));
    w.String("device_type", "cpu");
    w.Cell("reg", apic_id);
    w.EndNode();
  }
  w.EndNode();

  WriteInterruptControllers(w);

  // The ISA bus (IEEE 1275 ISA binding): address = <space offset>, size = one cell.
  w.BeginNode("isa");
  w.String("compatible", "isa");
  w.Cell("#address-cells", 2);
  w.Cell("#size-cells", 1);
  // Devicetree Specification v0.4, 2.3.8: without `ranges` no child address maps into the parent,
  // so an OS could not resolve the ports. Map I/O space 0-0xffff 1:1 onto parent addresses 0-0xffff:
  // Linux's of_translate_ioport() then yields the port number (pci_address_to_pio() is the identity
  // on x86); the same encoding as MIPS ISA bridges (e.g. loongson rs780e-pch.dtsi).
  w.Cells("ranges",
          {kIsaIoSpace, 0, /*parent address*/ 0, 0, static_cast<uint32_t>(kPortIoSpaceBytes)});
  for (const DeviceDescription& device : machine.devices) {
    if (device.space != DeviceDescription::AddressSpace::kPortIo) continue;
    w.BeginNode(DeviceNodeName(device));
    if (!device.compatible.empty()) w.StringList("compatible", device.compatible);
    std::vector<uint32_t> reg;
    for (const DeviceDescription::Range& range : device.ranges) {
      // Validated to lie below 64 KiB, so the casts are lossless.
      reg.insert(reg.end(), {kIsaIoSpace, static_cast<uint32_t>(range.base),
                             static_cast<uint32_t>(range.size)});
    }
    w.Cells("reg", reg);
    WriteDeviceCommon(w, device);
    w.EndNode();
  }
  w.EndNode();

  // MMIO devices sit directly under the root in its 2+2-cell address space.
  for (const DeviceDescription& device : machine.devices) {
    if (device.space != DeviceDescription::AddressSpace::kMmio) continue;
    w.BeginNode(DeviceNodeName(device));
    if (!device.compatible.empty()) w.StringList("compatible", device.compatible);
    std::vector<uint32_t> reg;
    for (const DeviceDescription::Range& range : device.ranges) {
      AppendAddress64(reg, range.base);
      AppendAddress64(reg, range.size);
    }
    w.Cells("reg", reg);
    WriteDeviceCommon(w, device);
    w.EndNode();
  }

  w.EndNode();  // root
  return w.Finish();
}

}  // namespace

absl::StatusOr<std::vector<uint8_t>> BuildMachineFdt(const MachineDescription& machine) {
  ASSIGN_OR_RETURN(const std::string stdout_path, ValidateAndFindStdoutPath(machine));

  // The sequential-write API cannot grow its buffer itself; start small and double on NOSPACE.
  // A tree that does not fit in a kFdtMaxBytes buffer cannot be packed below kFdtMaxBytes either
  // (fdt_finish only appends the 4-byte FDT_END token), so the last attempt is decisive.
  for (size_t size = kInitialBufferBytes;; size = std::min<size_t>(size * 2, kFdtMaxBytes)) {
    std::vector<uint8_t> buffer(size);
    const int error = WriteTree(buffer, machine, stdout_path);
    if (error == -FDT_ERR_NOSPACE) {
      if (size >= kFdtMaxBytes) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "the device tree needs more than %u bytes (the space reserved for it at 0x%x); "
            "the machine has too many devices or too long a command line",
            kFdtMaxBytes, kFdtAddress));
      }
      continue;
    }
    if (error < 0) {
      return absl::InternalError(
          absl::StrCat("building the device tree failed: ", fdt_strerror(error)));
    }
    // fdt_finish leaves the strings block right after the structure block; fdt_pack makes the
    // "no free space" guarantee explicit regardless of the libfdt version.
    if (const int packed = fdt_pack(buffer.data()); packed < 0) {
      return absl::InternalError(
          absl::StrCat("packing the device tree failed: ", fdt_strerror(packed)));
    }
    const size_t total = fdt_totalsize(buffer.data());
    if (total > kFdtMaxBytes || total > buffer.size()) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the device tree is %u bytes, more than the %u reserved for it", total, kFdtMaxBytes));
    }
    buffer.resize(total);
    return buffer;
  }
}

absl::Status WriteFdtFile(const std::vector<uint8_t>& blob, const std::string& path) {
  if (blob.size() < sizeof(fdt_header) || fdt_check_header(blob.data()) != 0 ||
      fdt_totalsize(blob.data()) != blob.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("refusing to write ", path, ": the data is not a flattened device tree"));
  }
  return sys_util::WriteHostFile(path, blob, "device tree file");
}

}  // namespace vmm::fdt

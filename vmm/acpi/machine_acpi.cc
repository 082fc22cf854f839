#include "vmm/acpi/machine_acpi.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vmm/acpi/aml.h"
#include "vmm/acpi/tables.h"
#include "vmm/machine/acpi_pm_layout.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/host_file.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::acpi {
namespace {

using aml::Bytes;
using aml::NameString;
namespace res = aml::resource;

// 5.2.5.1: the RSDP sits on a 16-byte boundary; the other tables follow it, 16-byte aligned too
// (the FACS on a 64-byte boundary, 5.2.10).
constexpr uint64_t kTableAlignment = 16;
// 5.2.3.2 Generic Address Structure access sizes.
constexpr uint8_t kAccessWord = 2;
constexpr uint8_t kAccessDword = 3;

// The I/O port space is 64 KiB.
constexpr uint64_t kPortIoSpaceBytes = 0x10000;
// MADT: local APIC and IOAPIC ids are 8 bits, 0xff is the broadcast id.
constexpr size_t kMaxCpus = 254;
constexpr uint32_t kIoapicPins = 24;  // KVM's in-kernel IOAPIC (KVM_IOAPIC_NUM_PINS)
// MPS INTI flags (5.2.12.5 Table 5.26): polarity bits 1:0 (01 active high), trigger mode bits 3:2
// (11 level).
constexpr uint16_t kMpsActiveHigh = 0b01;
constexpr uint16_t kMpsLevel = 0b11 << 2;

bool IsCompatible(const DeviceDescription& device, std::string_view compatible) {
  return std::find(device.compatible.begin(), device.compatible.end(), compatible) !=
         device.compatible.end();
}

const DeviceDescription* FindCompatible(const MachineDescription& machine,
                                        std::string_view compatible) {
  for (const DeviceDescription& device : machine.devices) {
    if (IsCompatible(device, compatible)) return &device;
  }
  return nullptr;
}

absl::Status CheckDevice(const DeviceDescription& device) {
  if (device.ranges.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device \"", device.node_name, "\" has no address range"));
  }
  const bool port_io = device.space == DeviceDescription::AddressSpace::kPortIo;
  for (const DeviceDescription::Range& range : device.ranges) {
    const uint64_t limit = port_io ? kPortIoSpaceBytes : (uint64_t{1} << 32);
    if (range.size == 0 || range.base >= limit || range.size > limit - range.base ||
        (port_io && range.size > 0xff)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("device \"%s\": range 0x%x+0x%x cannot be described in ACPI (%s)",
                          device.node_name, range.base, range.size,
                          port_io ? "I/O ranges must lie below 64 KiB, at most 255 ports each"
                                  : "memory ranges must lie below 4 GiB"));
    }
  }
  if (device.interrupt.has_value() && *device.interrupt >= kIoapicPins) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "device \"%s\": interrupt %u is not an IOAPIC pin", device.node_name, *device.interrupt));
  }
  return absl::OkStatus();
}

// A device's _CRS: its ranges, then its interrupt. ISA devices (IRQ < 16) get the legacy IRQ
// descriptor, edge-triggered active-high as on the ISA bus (and as the MP table and FDT say);
// others an extended interrupt descriptor.
Bytes DeviceResources(const DeviceDescription& device) {
  std::vector<Bytes> descriptors;
  for (const DeviceDescription::Range& range : device.ranges) {
    if (device.space == DeviceDescription::AddressSpace::kPortIo) {
      const auto base = static_cast<uint16_t>(range.base);
      descriptors.push_back(res::Io(base, base, 1, static_cast<uint8_t>(range.size)));
    } else {
      descriptors.push_back(
          res::Memory32Fixed(static_cast<uint32_t>(range.base), static_cast<uint32_t>(range.size)));
    }
  }
  if (device.interrupt.has_value()) {
    if (*device.interrupt < 16) {
      descriptors.push_back(res::Irq(static_cast<uint8_t>(*device.interrupt), res::Trigger::kEdge,
                                     res::Polarity::kActiveHigh));
    } else {
      descriptors.push_back(
          res::Interrupt(*device.interrupt, res::Trigger::kEdge, res::Polarity::kActiveHigh));
    }
  }
  return aml::ResourceTemplate(descriptors);
}

absl::StatusOr<Bytes> Hid(std::string_view eisa_id) {
  ASSIGN_OR_RETURN(Bytes id, aml::EisaId(eisa_id));
  return aml::Name("_HID", id);
}

// \_SB.PCI0: the host bridge to PCI bus 0 (6.1.5 _HID PNP0A03, a conventional PCI root bridge:
// configuration mechanism #1, no ECAM, so no PNP0A08/MCFG and no _OSC). Its _CRS (6.2.2) lists the
// bus range, the configuration ports it consumes, and the windows it forwards: all other I/O ports
// (the ISA devices and the IDE compatibility ports sit behind it on a PC, and the BAR window is a
// part of it) split around 0xcf8-0xcff as QEMU's DSDT does, and the BAR memory windows.
absl::StatusOr<Bytes> PciHostBridge(const MachineDescription& machine,
                                    const DeviceDescription& conf1) {
  if (!machine.pci_windows.has_value()) {
    return absl::InvalidArgumentError("the machine has a PCI host bridge but no PCI windows");
  }
  const MachineDescription::PciWindows& windows = *machine.pci_windows;
  const DeviceDescription::Range config = conf1.ranges.front();
  const uint64_t config_end = config.base + config.size;  // Checked to be <= 64 KiB.
  if (windows.io.size == 0 || windows.io.base < config_end ||
      windows.io.size > kPortIoSpaceBytes - windows.io.base) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the PCI I/O window 0x%x+0x%x must lie above the configuration ports and below 64 KiB",
        windows.io.base, windows.io.size));
  }
  const uint64_t mmio32_end = windows.mmio32.base + windows.mmio32.size;
  if (windows.mmio32.size == 0 || mmio32_end > (uint64_t{1} << 32) ||
      mmio32_end < windows.mmio32.base) {
    return absl::InvalidArgumentError("the 32-bit PCI memory window must lie below 4 GiB");
  }
  std::vector<Bytes> crs = {
      res::WordBusNumber(0, 0),
      res::Io(static_cast<uint16_t>(config.base), static_cast<uint16_t>(config.base), 1,
              static_cast<uint8_t>(config.size)),
  };
  if (config.base > 0) crs.push_back(res::WordIo(0, static_cast<uint16_t>(config.base - 1)));
  // QEMU starts the upper window at 0xd00, leaving 0xd00's 256-port block boundary clean; the gap
  // 0xd00 - config_end holds nothing on this machine either.
  const uint64_t upper_start = std::max<uint64_t>(config_end, 0xd00);
  if (upper_start < kPortIoSpaceBytes && windows.io.base >= upper_start) {
    crs.push_back(res::WordIo(static_cast<uint16_t>(upper_start), 0xffff));
  } else {
    crs.push_back(res::WordIo(static_cast<uint16_t>(windows.io.base),
                              static_cast<uint16_t>(windows.io.base + windows.io.size - 1)));
  }
  crs.push_back(res::DWordMemory(static_cast<uint32_t>(windows.mmio32.base),
                                 static_cast<uint32_t>(mmio32_end - 1),
                                 res::Cacheability::kNonCacheable));
  if (windows.mmio64.has_value() && windows.mmio64->size != 0) {
    crs.push_back(res::QWordMemory(windows.mmio64->base,
                                   windows.mmio64->base + windows.mmio64->size - 1,
                                   res::Cacheability::kNonCacheable));
  }
  ASSIGN_OR_RETURN(Bytes hid, Hid("PNP0A03"));
  return aml::Device("PCI0", {
                                 hid,
                                 aml::Name("_SEG", aml::Integer(0)),
                                 aml::Name("_BBN", aml::Integer(0)),
                                 aml::Name("_UID", aml::Integer(0)),
                                 aml::Name("_CRS", aml::ResourceTemplate(crs)),
                             });
}

// The DSDT's definition block.
absl::StatusOr<Bytes> BuildDsdtAml(const MachineDescription& machine) {
  std::vector<Bytes> system_bus;
  uint32_t serial_count = 0;
  uint32_t reservation_count = 0;
  bool have_pci = false;
  for (const DeviceDescription& device : machine.devices) {
    RETURN_IF_ERROR(CheckDevice(device));
    if (IsCompatible(device, kPciConf1Compatible)) {
      if (have_pci) return absl::InvalidArgumentError("the machine has two PCI host bridges");
      have_pci = true;
      ASSIGN_OR_RETURN(Bytes pci, PciHostBridge(machine, device));
      system_bus.push_back(std::move(pci));
      continue;
    }
    if (IsCompatible(device, kI8042Compatible)) {
      // Not described: the controller only implements the reset line (Linux's reboot=k pulses it
      // without a driver), and the FADT tells the OS there is no 8042 to probe (IAPC_BOOT_ARCH).
      // Its ports are the PC's standard keyboard ports, which x86 OSes reserve by themselves.
      continue;
    }
    std::string name;
    std::string hid;
    uint32_t uid = 0;
    if (IsCompatible(device, kSerialCompatible)) {
      // COM1, COM2, ...: Linux's 8250_pnp driver binds PNP0501.
      uid = ++serial_count;
      if (uid > 9) return absl::InvalidArgumentError("more than 9 serial ports");
      name = absl::StrCat("COM", uid);
      hid = "PNP0501";
    } else {
      // PNP0C02: "motherboard resources". The VMM's own ports (debug exit, POST code, the ACPI
      // power-management registers, ...) have no standard driver; listing them keeps the OS from
      // handing their ports to anything else.
      if (reservation_count > 0xff) return absl::InvalidArgumentError("too many devices");
      name = absl::StrFormat("RES%X", reservation_count);
      uid = reservation_count++;
      hid = "PNP0C02";
    }
    ASSIGN_OR_RETURN(NameString device_name, NameString::Parse(name));
    ASSIGN_OR_RETURN(Bytes hid_term, Hid(hid));
    system_bus.push_back(aml::Device(device_name, {
                                                      hid_term,
                                                      aml::Name("_UID", aml::Integer(uid)),
                                                      aml::Name("_CRS", DeviceResources(device)),
                                                  }));
  }

  std::vector<Bytes> root = {aml::Scope("\\_SB", system_bus)};
  if (FindCompatible(machine, kAcpiPmCompatible) != nullptr) {
    // 7.4.2.5 \_S5 (soft off): the SLP_TYP values for PM1a/PM1b; the OS writes SLP_TYPa with SLP_EN
    // to PM1a_CNT (4.8.3.2.1, 7.4.2), where the power-management device decodes it as power-off.
    root.push_back(aml::Name(
        "_S5", aml::Package({aml::Integer(AcpiPmLayout::kSleepTypeS5), aml::Integer(0)})));
  }
  Bytes out;
  for (const Bytes& term : root) out.insert(out.end(), term.begin(), term.end());
  return out;
}

// The "microvm,acpi-pm" device, checked to be the whole fixed-hardware block in port I/O.
absl::StatusOr<const DeviceDescription*> FindPowerManagement(const MachineDescription& machine) {
  const DeviceDescription* pm = FindCompatible(machine, kAcpiPmCompatible);
  if (pm == nullptr) return nullptr;
  using Pm = AcpiPmLayout;
  if (pm->space != DeviceDescription::AddressSpace::kPortIo || pm->ranges.empty() ||
      pm->ranges.front().size != Pm::kBlockSize ||
      pm->ranges.front().base > kPortIoSpaceBytes - Pm::kBlockSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the ACPI power-management device must be one %u-port I/O block", Pm::kBlockSize));
  }
  return pm;
}

// `pm`: the power-management device, or null; `facs_address` is used only with one.
FadtConfig MakeFadt(const MachineDescription& machine, const DeviceDescription* pm,
                    uint64_t dsdt_address, uint64_t facs_address) {
  FadtConfig fadt;
  fadt.dsdt_address = dsdt_address;
  // 5.2.9.3: say what the machine has. Legacy devices: the UART is an ISA-style device. No 8042:
  // the i8042 only implements the reset line (Linux's reboot=k uses it without a driver), and
  // without the flag Linux does not probe for a keyboard controller (a 1.3 s probe that ends in an
  // error). No VGA. MSI works (devices use MSI-X). No PCIe links, so the OS must leave ASPM alone.
  // No CMOS RTC unless one is described.
  fadt.iapc_boot_arch = kBootArchVgaNotPresent | kBootArchPcieAspmControls;
  if (FindCompatible(machine, kSerialCompatible) != nullptr) {
    fadt.iapc_boot_arch |= kBootArchLegacyDevices;
  }
  if (FindCompatible(machine, kRtcCompatible) == nullptr) {
    fadt.iapc_boot_arch |= kBootArchCmosRtcNotPresent;
  }
  if (pm == nullptr) {
    // Nothing to describe as fixed hardware: 4.1 hardware-reduced ACPI (no PM1/GPE blocks, PM
    // timer, SCI or FACS), and no buttons.
    fadt.flags =
        kFadtWbinvd | kFadtProcC1 | kFadtPowerButton | kFadtSleepButton | kFadtHwReducedAcpi;
    return fadt;
  }
  // 4.8 fixed hardware (the PC model, as QEMU's PIIX4 PM): Linux then keeps the 8259 PIC and the
  // identity mapping of ISA IRQs 0-15 to IOAPIC pins, which legacy devices such as the PIIX3 IDE
  // channels (IRQ 14/15 by number) rely on; in hardware-reduced mode it has neither. A fixed-feature
  // power button exists (PM1 PWRBTN_STS/EN: PWR_BUTTON clear), a sleep button does not. The PM
  // timer is 24 bits (TMR_VAL_EXT clear). The FACS is required without HW_REDUCED_ACPI (5.2.10).
  using Pm = AcpiPmLayout;
  const uint64_t base = pm->ranges.front().base;
  fadt.flags = kFadtWbinvd | kFadtProcC1 | kFadtSleepButton | kFadtResetRegSupported;
  fadt.facs_address = static_cast<uint32_t>(facs_address);
  fadt.sci_interrupt = kAcpiSciIrq;
  // ACPICA splits the event block into two 16-bit registers and accesses those, PM1_CNT, 16 bits
  // at a time, and reads the timer as one dword: the access sizes say the same.
  fadt.pm1a_event_block =
      GenericAddress::Port(static_cast<uint16_t>(base + Pm::kPm1EventBlockOffset),
                           Pm::kPm1EventBlockBytes * 8, kAccessWord);
  fadt.pm1a_control_block = GenericAddress::Port(
      static_cast<uint16_t>(base + Pm::kPm1ControlOffset), Pm::kPm1ControlBytes * 8, kAccessWord);
  fadt.pm_timer_block = GenericAddress::Port(static_cast<uint16_t>(base + Pm::kPmTimerOffset),
                                             Pm::kPmTimerBytes * 8, kAccessDword);
  fadt.reset_register = GenericAddress::Port8(static_cast<uint16_t>(base + Pm::kResetOffset));
  fadt.reset_value = Pm::kResetValue;
  return fadt;
}

uint64_t AlignUp(uint64_t value, uint64_t alignment = kTableAlignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

}  // namespace

absl::StatusOr<AcpiTables> BuildMachineAcpi(const MachineDescription& machine, uint64_t base,
                                            uint64_t limit) {
  if (base % kTableAlignment != 0 || limit < base) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ACPI table area 0x%x-0x%x is not 16-byte aligned", base, limit));
  }
  if (machine.cpu_apic_ids.empty() || machine.cpu_apic_ids.size() > kMaxCpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the MADT lists 1 to %u CPUs; the machine has %u", kMaxCpus, machine.cpu_apic_ids.size()));
  }
  MadtConfig madt;
  madt.local_apic_address = static_cast<uint32_t>(kLapicAddress);
  // KVM's in-kernel irqchip includes the two 8259s (masked by the OS once it uses the IOAPIC).
  madt.flags = kMadtPcatCompat;
  std::set<uint32_t> seen;
  for (uint32_t id : machine.cpu_apic_ids) {
    if (id >= 0xff || !seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("APIC id %u is listed twice or does not fit an xAPIC id", id));
    }
    madt.cpu_apic_ids.push_back(static_cast<uint8_t>(id));
  }
  // As in the MP table (vmm/x86/mptable.h): the IOAPIC's id follows the CPUs'.
  madt.ioapic_id = static_cast<uint8_t>(machine.cpu_apic_ids.size());
  madt.ioapic_address = static_cast<uint32_t>(kIoapicAddress);
  madt.ioapic_gsi_base = 0;
  madt.nmi_lint = 1;
  ASSIGN_OR_RETURN(const DeviceDescription* pm, FindPowerManagement(machine));
  if (pm != nullptr) {
    // 5.2.12.5: the SCI is a level-triggered, active-high interrupt on ISA IRQ 9 = GSI 9 (KVM's
    // default routing). Without this override Linux would program the pin the SCI default way,
    // level active-low (ACPI 5.2.9 SCI_INT "sharable, level, active low"), and KVM's IOAPIC, which
    // honours the polarity, would see the device's high level as idle. IRQ 0 needs no override (see
    // the MP table).
    madt.overrides.push_back(
        {.source_irq = kAcpiSciIrq, .gsi = kAcpiSciIrq, .flags = kMpsActiveHigh | kMpsLevel});
  }

  ASSIGN_OR_RETURN(Bytes dsdt_aml, BuildDsdtAml(machine));
  const std::vector<uint8_t> dsdt = BuildDsdt(dsdt_aml);
  const std::vector<uint8_t> madt_bytes = BuildMadt(madt);

  // Addresses: RSDP, XSDT (two entries), FADT, the FACS (with fixed hardware), MADT, DSDT.
  const uint64_t rsdp_address = base;
  const uint64_t xsdt_address = AlignUp(rsdp_address + kRsdpBytes);
  const uint64_t fadt_address = AlignUp(xsdt_address + kTableHeaderBytes + 2 * 8);
  uint64_t next = fadt_address + kFadtBytes;
  uint64_t facs_address = 0;
  if (pm != nullptr) {
    facs_address = AlignUp(next, kFacsAlignment);
    next = facs_address + kFacsBytes;
  }
  const uint64_t madt_address = AlignUp(next);
  const uint64_t dsdt_address = AlignUp(madt_address + madt_bytes.size());
  const uint64_t end = dsdt_address + dsdt.size();
  if (end > limit || facs_address > 0xffff'ffff) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the ACPI tables need 0x%x bytes below 4 GiB; 0x%x are reserved for them "
                        "at 0x%x",
                        end - base, limit - base, base));
  }
  const uint64_t xsdt_entries[] = {fadt_address, madt_address};
  AcpiTables tables;
  tables.tables = {
      {"RSD PTR ", rsdp_address, BuildRsdp(xsdt_address)},
      {"XSDT", xsdt_address, BuildXsdt(xsdt_entries)},
      {"FACP", fadt_address, BuildFadt(MakeFadt(machine, pm, dsdt_address, facs_address))},
  };
  if (pm != nullptr) tables.tables.push_back({"FACS", facs_address, BuildFacs()});
  tables.tables.push_back({"APIC", madt_address, madt_bytes});
  tables.tables.push_back({"DSDT", dsdt_address, dsdt});
  return tables;
}

absl::Status WriteAcpiTables(const GuestMemory& memory, const AcpiTables& tables) {
  for (const AcpiTable& table : tables.tables) {
    if (absl::Status s = memory.Write(GuestAddress(table.address), table.bytes); !s.ok()) {
      return absl::Status(s.code(), absl::StrFormat("ACPI table %s at 0x%x: %s", table.signature,
                                                    table.address, s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteAcpiFiles(const AcpiTables& tables, const std::string& directory) {
  for (const AcpiTable& table : tables.tables) {
    const std::string name =
        table.signature == "RSD PTR " ? "rsdp" : absl::AsciiStrToLower(table.signature);
    RETURN_IF_ERROR(sys_util::WriteHostFile(absl::StrCat(directory, "/", name, ".dat"), table.bytes,
                                            "ACPI table file"));
  }
  return absl::OkStatus();
}

}  // namespace vmm::acpi

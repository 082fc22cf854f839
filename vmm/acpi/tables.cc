#include "vmm/acpi/tables.h"

#include <cstring>

#include "vmm/sys_util/byte_order.h"

namespace vmm::acpi {
namespace {

// 5.2.6 header field offsets.
constexpr size_t kLengthOffset = 4;
constexpr size_t kChecksumOffset = 9;
// 5.2.5.3 RSDP field offsets.
constexpr size_t kRsdpChecksumOffset = 8;
constexpr size_t kRsdpExtendedChecksumOffset = 32;

// 5.2.12 Table 5.21 interrupt controller structure types.
constexpr uint8_t kMadtLocalApic = 0;
constexpr uint8_t kMadtIoApic = 1;
constexpr uint8_t kMadtSourceOverride = 2;
constexpr uint8_t kMadtLocalApicNmi = 4;
// 5.2.12.2 Table 5.23: Local APIC flags bit 0, Enabled.
constexpr uint32_t kLocalApicEnabled = 1;
// 5.2.12.7: processor UID 0xff means every processor.
constexpr uint8_t kAllProcessors = 0xff;

void AppendLe(std::vector<uint8_t>& out, uint64_t value, int bytes) {
  sys_util::AppendLittleEndian(out, value, bytes);
}

void PutLe(std::span<uint8_t> out, size_t offset, uint64_t value, int bytes) {
  sys_util::StoreLittleEndian(value, out.subspan(offset, bytes));
}

void AppendChars(std::vector<uint8_t>& out, std::string_view text) {
  out.insert(out.end(), text.begin(), text.end());
}

void PutGas(std::span<uint8_t> out, size_t offset, const GenericAddress& gas) {
  out[offset + 0] = gas.address_space_id;
  out[offset + 1] = gas.bit_width;
  out[offset + 2] = gas.bit_offset;
  out[offset + 3] = gas.access_size;
  PutLe(out, offset + 4, gas.address, 8);
}

// A fixed-hardware block: its 32-bit port field and length, and its X_ Generic Address Structure.
// The 32-bit fields only exist for system I/O below 4 GiB.
void PutFixedBlock(std::span<uint8_t> out, size_t port_offset, size_t length_offset,
                   size_t gas_offset, const GenericAddress& gas) {
  if (gas.address == 0) return;
  PutGas(out, gas_offset, gas);
  if (gas.address_space_id == GenericAddress::kSystemIo && gas.address <= 0xffff'ffff) {
    PutLe(out, port_offset, gas.address, 4);
    out[length_offset] = static_cast<uint8_t>(gas.bit_width / 8);
  }
}

constexpr uint16_t kNoC2Latency = 0xfff;
constexpr uint16_t kNoC3Latency = 0xfff;

}  // namespace

uint8_t Checksum(std::span<const uint8_t> bytes) {
  uint8_t sum = 0;
  for (uint8_t b : bytes) sum = static_cast<uint8_t>(sum + b);
  return static_cast<uint8_t>(-sum);
}

void FillChecksum(std::span<uint8_t> bytes, size_t checksum_offset) {
  bytes[checksum_offset] = 0;
  bytes[checksum_offset] = Checksum(bytes);
}

std::vector<uint8_t> Table(std::string_view signature, uint8_t revision,
                           std::span<const uint8_t> body) {
  std::vector<uint8_t> out;
  out.reserve(kTableHeaderBytes + body.size());
  AppendChars(out, signature.substr(0, 4));
  AppendLe(out, 0, 4);  // Length, below.
  out.push_back(revision);
  out.push_back(0);  // Checksum, below.
  AppendChars(out, std::string_view(kOemId, 6));
  AppendChars(out, std::string_view(kOemTableId, 8));
  AppendLe(out, kOemRevision, 4);
  AppendChars(out, std::string_view(kCreatorId, 4));
  AppendLe(out, kCreatorRevision, 4);
  out.insert(out.end(), body.begin(), body.end());
  PutLe(out, kLengthOffset, out.size(), 4);
  FillChecksum(out, kChecksumOffset);
  return out;
}

std::vector<uint8_t> BuildRsdp(uint64_t xsdt_address) {
  std::vector<uint8_t> out;
  AppendChars(out, "RSD PTR ");
  out.push_back(0);  // Checksum of the first 20 bytes, below.
  AppendChars(out, std::string_view(kOemId, 6));
  out.push_back(2);     // Revision: 2 for ACPI 2.0 and later
  AppendLe(out, 0, 4);  // RsdtAddress: no RSDT; 64-bit OSes use the XSDT
  AppendLe(out, kRsdpBytes, 4);
  AppendLe(out, xsdt_address, 8);
  out.push_back(0);     // Extended checksum, below.
  AppendLe(out, 0, 3);  // Reserved
  FillChecksum(std::span<uint8_t>(out).first(kRsdpV1ChecksumBytes), kRsdpChecksumOffset);
  FillChecksum(out, kRsdpExtendedChecksumOffset);
  return out;
}

std::vector<uint8_t> BuildXsdt(std::span<const uint64_t> table_addresses) {
  std::vector<uint8_t> body;
  for (uint64_t address : table_addresses) AppendLe(body, address, 8);
  return Table("XSDT", 1, body);
}

std::vector<uint8_t> BuildFadt(const FadtConfig& config) {
  std::vector<uint8_t> table(kFadtBytes, 0);
  std::span<uint8_t> t(table);
  // Header fields are rewritten by Table(); build the body in place, then wrap it.
  PutLe(t, fadt_offset::kFirmwareCtrl, config.facs_address, 4);
  PutLe(t, fadt_offset::kSciInt, config.sci_interrupt, 2);
  // SMI_CMD 0: no SMM; the platform is in ACPI mode from reset (PM1_CNT.SCI_EN reads 1), so an OS
  // never has an ACPI_ENABLE to send (4.8.2.1 "Legacy/ACPI select").
  PutFixedBlock(t, fadt_offset::kPm1aEventBlock, fadt_offset::kPm1EventLength,
                fadt_offset::kXPm1aEventBlock, config.pm1a_event_block);
  PutFixedBlock(t, fadt_offset::kPm1aControlBlock, fadt_offset::kPm1ControlLength,
                fadt_offset::kXPm1aControlBlock, config.pm1a_control_block);
  PutFixedBlock(t, fadt_offset::kPmTimerBlock, fadt_offset::kPmTimerLength,
                fadt_offset::kXPmTimerBlock, config.pm_timer_block);
  // 5.2.9: a P_LVL2_LAT above 100 means C2 is not supported, a P_LVL3_LAT above 1000 that C3 is
  // not (the vCPUs have no P_BLK and no _CST: C1/HLT only).
  PutLe(t, fadt_offset::kC2Latency, kNoC2Latency, 2);
  PutLe(t, fadt_offset::kC3Latency, kNoC3Latency, 2);
  PutLe(t, fadt_offset::kIapcBootArch, config.iapc_boot_arch, 2);
  PutLe(t, fadt_offset::kFlags, config.flags, 4);
  PutGas(t, fadt_offset::kResetReg, config.reset_register);
  t[fadt_offset::kResetValue] = config.reset_value;
  t[fadt_offset::kMinorVersion] = kFadtMinorRevision;
  PutLe(t, fadt_offset::kXDsdt, config.dsdt_address, 8);
  if (config.dsdt_address <= UINT32_MAX) PutLe(t, fadt_offset::kDsdt, config.dsdt_address, 4);
  PutGas(t, fadt_offset::kSleepControlReg, config.sleep_control_register);
  PutGas(t, fadt_offset::kSleepStatusReg, config.sleep_status_register);
  // 5.2.9: "Hypervisor Vendor Identity": an 8-byte identifier of the hypervisor, if any.
  std::memcpy(&table[fadt_offset::kHypervisorVendor], "microvm\0", 8);
  return Table("FACP", kFadtRevision, std::span<const uint8_t>(table).subspan(kTableHeaderBytes));
}

std::vector<uint8_t> BuildFacs() {
  std::vector<uint8_t> out(kFacsBytes, 0);
  std::memcpy(out.data(), "FACS", 4);
  PutLe(out, 4, kFacsBytes, 4);  // Length
  // Hardware signature (8), firmware waking vector (12), global lock (16), flags (20), X firmware
  // waking vector (24): 0. Version at 32; OSPM flags (36) and the reserved rest: 0.
  out[32] = kFacsVersion;
  return out;
}

std::vector<uint8_t> BuildMadt(const MadtConfig& config) {
  std::vector<uint8_t> body;
  AppendLe(body, config.local_apic_address, 4);
  AppendLe(body, config.flags, 4);
  for (size_t i = 0; i < config.cpu_apic_ids.size(); ++i) {
    // 5.2.12.2 Processor Local APIC Structure (8 bytes).
    body.insert(body.end(), {kMadtLocalApic, 8, static_cast<uint8_t>(i), config.cpu_apic_ids[i]});
    AppendLe(body, kLocalApicEnabled, 4);
  }
  // 5.2.12.3 I/O APIC Structure (12 bytes).
  body.insert(body.end(), {kMadtIoApic, 12, config.ioapic_id, 0});
  AppendLe(body, config.ioapic_address, 4);
  AppendLe(body, config.ioapic_gsi_base, 4);
  for (const MadtConfig::SourceOverride& override : config.overrides) {
    // 5.2.12.5 Interrupt Source Override Structure (10 bytes), bus 0 = ISA.
    body.insert(body.end(), {kMadtSourceOverride, 10, 0, override.source_irq});
    AppendLe(body, override.gsi, 4);
    AppendLe(body, override.flags, 2);
  }
  // 5.2.12.7 Local APIC NMI Structure (6 bytes).
  body.insert(body.end(), {kMadtLocalApicNmi, 6, kAllProcessors, 0, 0, config.nmi_lint});
  return Table("APIC", kMadtRevision, body);
}

std::vector<uint8_t> BuildDsdt(std::span<const uint8_t> aml) {
  return Table("DSDT", kDsdtRevision, aml);
}

}  // namespace vmm::acpi

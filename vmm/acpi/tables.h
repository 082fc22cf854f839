#ifndef VMM_ACPI_TABLES_H_
#define VMM_ACPI_TABLES_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// The fixed-layout ACPI tables (ACPI 6.5 chapter 5.2), each built as its bytes with length and
// checksum filled in. The DSDT's AML comes from vmm/acpi/aml.h; machine_acpi.h assembles a
// machine's tables and places them in guest memory.
namespace vmm::acpi {

// Identification written into every table (5.2.6 System Description Table Header) and the RSDP.
inline constexpr char kOemId[] = "MICRVM";         // 6 characters
inline constexpr char kOemTableId[] = "MICROVM ";  // 8 characters
inline constexpr uint32_t kOemRevision = 1;
inline constexpr char kCreatorId[] = "MVMM";  // 4 characters
inline constexpr uint32_t kCreatorRevision = 1;

inline constexpr size_t kTableHeaderBytes = 36;  // 5.2.6
inline constexpr size_t kRsdpBytes = 36;         // 5.2.5.3, revision 2
inline constexpr size_t kFadtBytes = 276;        // 5.2.9, ACPI 6.0 and later

// 5.2.5.3: the RSDP's two checksums: bytes 0-19 sum to 0, and all 36 bytes sum to 0.
inline constexpr size_t kRsdpV1ChecksumBytes = 20;

// The 8-bit checksum that makes `bytes` sum to zero (5.2.6 Checksum, 5.2.5.3).
uint8_t Checksum(std::span<const uint8_t> bytes);
// Sets byte `checksum_offset` of `bytes` so that the whole span sums to zero.
void FillChecksum(std::span<uint8_t> bytes, size_t checksum_offset);

// A table with the 36-byte header: `signature` (4 characters), `revision`, then `body`. Length and
// checksum are filled in.
std::vector<uint8_t> Table(std::string_view signature, uint8_t revision,
                           std::span<const uint8_t> body);

// 5.2.5.3 RSDP, revision 2 (ACPI 2.0+): no RSDT (its address is 0), the XSDT at `xsdt_address`.
std::vector<uint8_t> BuildRsdp(uint64_t xsdt_address);

// 5.2.8 XSDT, revision 1: 64-bit addresses of the other tables (not the DSDT, which the FADT points
// to, nor the FACS).
std::vector<uint8_t> BuildXsdt(std::span<const uint64_t> table_addresses);

// A Generic Address Structure (5.2.3.2) in system I/O space (address space id 1) of `bit_width`
// bits at `port`, accessed with byte accesses. An all-zero structure means "not present".
struct GenericAddress {
  uint8_t address_space_id = 0;
  uint8_t bit_width = 0;
  uint8_t bit_offset = 0;
  uint8_t access_size = 0;  // 1 byte, 2 word, 3 dword, 4 qword
  uint64_t address = 0;
  static GenericAddress Port8(uint16_t port) { return {1, 8, 0, 1, port}; }
};

// 5.2.9 Table 5.10 Fixed ACPI Description Table flags.
inline constexpr uint32_t kFadtWbinvd = 1u << 0;
inline constexpr uint32_t kFadtProcC1 = 1u << 2;
inline constexpr uint32_t kFadtPowerButton = 1u << 4;  // 1: no fixed-feature power button
inline constexpr uint32_t kFadtSleepButton = 1u << 5;  // 1: no fixed-feature sleep button
inline constexpr uint32_t kFadtResetRegSupported = 1u << 10;
inline constexpr uint32_t kFadtHwReducedAcpi = 1u << 20;
// 5.2.9.3 Table 5.11 IA-PC Boot Architecture Flags.
inline constexpr uint16_t kBootArchLegacyDevices = 1u << 0;
inline constexpr uint16_t kBootArch8042 = 1u << 1;
inline constexpr uint16_t kBootArchVgaNotPresent = 1u << 2;
inline constexpr uint16_t kBootArchMsiNotSupported = 1u << 3;
inline constexpr uint16_t kBootArchPcieAspmControls = 1u << 4;
inline constexpr uint16_t kBootArchCmosRtcNotPresent = 1u << 5;

// FADT major revision 6, minor 5: the ACPI 6.5 layout (276 bytes).
inline constexpr uint8_t kFadtRevision = 6;
inline constexpr uint8_t kFadtMinorRevision = 5;

struct FadtConfig {
  uint64_t dsdt_address = 0;  // written to X_DSDT; the 32-bit DSDT field stays 0
  uint32_t flags = 0;
  uint16_t iapc_boot_arch = 0;
  GenericAddress reset_register;
  uint8_t reset_value = 0;
  GenericAddress sleep_control_register;
  GenericAddress sleep_status_register;
};

// Field offsets of the FADT (5.2.9 Table 5.9), for the builder and its tests.
namespace fadt_offset {
inline constexpr size_t kFirmwareCtrl = 36;
inline constexpr size_t kDsdt = 40;
inline constexpr size_t kSciInt = 46;
inline constexpr size_t kIapcBootArch = 109;
inline constexpr size_t kFlags = 112;
inline constexpr size_t kResetReg = 116;
inline constexpr size_t kResetValue = 128;
inline constexpr size_t kMinorVersion = 131;
inline constexpr size_t kXFirmwareCtrl = 132;
inline constexpr size_t kXDsdt = 140;
inline constexpr size_t kSleepControlReg = 244;
inline constexpr size_t kSleepStatusReg = 256;
inline constexpr size_t kHypervisorVendor = 268;
}  // namespace fadt_offset

// 5.2.9 FADT, revision 6.5. Everything not in `config` is zero, as a hardware-reduced platform
// requires (no PM1/PM2/GPE blocks, PM timer, SCI, SMI command port or FACS).
std::vector<uint8_t> BuildFadt(const FadtConfig& config);

// 5.2.12 MADT.
inline constexpr uint8_t kMadtRevision = 5;  // ACPI 6.3+
inline constexpr uint32_t kMadtPcatCompat = 1u << 0;
struct MadtConfig {
  uint32_t local_apic_address = 0;
  uint32_t flags = 0;
  // One Processor Local APIC structure (5.2.12.2) per entry, enabled, processor UID = index.
  std::vector<uint8_t> cpu_apic_ids;
  uint8_t ioapic_id = 0;
  uint32_t ioapic_address = 0;
  uint32_t ioapic_gsi_base = 0;
  struct SourceOverride {  // 5.2.12.5, bus 0 (ISA)
    uint8_t source_irq;
    uint32_t gsi;
    uint16_t flags;  // MPS INTI flags: polarity bits 1:0, trigger bits 3:2; 0 = conforms to ISA
  };
  std::vector<SourceOverride> overrides;
  // 5.2.12.7 Local APIC NMI for every processor (UID 0xff) on this LINT pin, flags 0.
  uint8_t nmi_lint = 1;
};
std::vector<uint8_t> BuildMadt(const MadtConfig& config);

// 5.2.11.1 DSDT, revision 2 (64-bit AML integers) around the definition block `aml`.
inline constexpr uint8_t kDsdtRevision = 2;
std::vector<uint8_t> BuildDsdt(std::span<const uint8_t> aml);

}  // namespace vmm::acpi

#endif  // VMM_ACPI_TABLES_H_

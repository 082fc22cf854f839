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
inline constexpr size_t kFacsBytes = 64;         // 5.2.10
inline constexpr size_t kFacsAlignment = 64;     // 5.2.10: "aligns the FACS on a 64-byte boundary"

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

// A Generic Address Structure (5.2.3.2). An all-zero structure means "not present".
struct GenericAddress {
  static constexpr uint8_t kSystemIo = 1;  // address space id
  uint8_t address_space_id = 0;
  uint8_t bit_width = 0;
  uint8_t bit_offset = 0;
  uint8_t access_size = 0;  // 0 undefined (legacy), 1 byte, 2 word, 3 dword, 4 qword
  uint64_t address = 0;
  // A register block of `bit_width` bits at I/O `port`, accessed `access_size` at a time.
  static GenericAddress Port(uint16_t port, uint8_t bit_width, uint8_t access_size) {
    return {kSystemIo, bit_width, 0, access_size, port};
  }
  static GenericAddress Port8(uint16_t port) { return Port(port, 8, 1); }
};

// 5.2.9 Table 5.10 Fixed ACPI Description Table flags.
inline constexpr uint32_t kFadtWbinvd = 1u << 0;
inline constexpr uint32_t kFadtProcC1 = 1u << 2;
inline constexpr uint32_t kFadtPowerButton = 1u << 4;         // 1: no fixed-feature power button
inline constexpr uint32_t kFadtSleepButton = 1u << 5;         // 1: no fixed-feature sleep button
inline constexpr uint32_t kFadtTimerValueExtended = 1u << 8;  // 1: 32-bit PM timer, 0: 24-bit
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
  // Written to X_DSDT, and below 4 GiB to the 32-bit DSDT field too (5.2.9 lets both hold it; an
  // OSPM that can use X_DSDT ignores DSDT): SeaBIOS parses the DSDT through the 32-bit field only.
  uint64_t dsdt_address = 0;
  // Written to FIRMWARE_CTRL (the FACS must lie below 4 GiB); X_FIRMWARE_CTRL stays 0 (ACPI 6.0
  // 5.2.9: only one of the two may be non-zero). 0: no FACS (hardware-reduced only).
  uint32_t facs_address = 0;
  uint16_t sci_interrupt = 0;  // SCI_INT: an ISA IRQ (the MADT may override its GSI)
  uint32_t flags = 0;
  uint16_t iapc_boot_arch = 0;
  // 4.8.3 fixed-hardware register blocks in system I/O space (absent: all zero). Each is written
  // to both its X_ Generic Address Structure and its 32-bit port field, with the 32-bit length
  // field = bit_width / 8, so the two forms always agree (ACPICA warns of any mismatch). SMI_CMD,
  // the PM1b/PM2/GPE blocks stay 0: no SMM, one PM1 register set, no GPEs.
  GenericAddress pm1a_event_block;    // PM1_STS + PM1_EN, 32 bits
  GenericAddress pm1a_control_block;  // PM1_CNT, 16 bits
  GenericAddress pm_timer_block;      // PM_TMR, 32 bits
  GenericAddress reset_register;
  uint8_t reset_value = 0;
  // Hardware-reduced only (4.8.3.7).
  GenericAddress sleep_control_register;
  GenericAddress sleep_status_register;
};

// Field offsets of the FADT (5.2.9 Table 5.9), for the builder and its tests.
namespace fadt_offset {
inline constexpr size_t kFirmwareCtrl = 36;
inline constexpr size_t kDsdt = 40;
inline constexpr size_t kSciInt = 46;
inline constexpr size_t kSmiCmd = 48;
inline constexpr size_t kPm1aEventBlock = 56;
inline constexpr size_t kPm1aControlBlock = 64;
inline constexpr size_t kPmTimerBlock = 76;
inline constexpr size_t kPm1EventLength = 88;
inline constexpr size_t kPm1ControlLength = 89;
inline constexpr size_t kPmTimerLength = 91;
inline constexpr size_t kGpe0BlockLength = 92;
inline constexpr size_t kC2Latency = 96;
inline constexpr size_t kC3Latency = 98;
inline constexpr size_t kIapcBootArch = 109;
inline constexpr size_t kFlags = 112;
inline constexpr size_t kResetReg = 116;
inline constexpr size_t kResetValue = 128;
inline constexpr size_t kMinorVersion = 131;
inline constexpr size_t kXFirmwareCtrl = 132;
inline constexpr size_t kXDsdt = 140;
inline constexpr size_t kXPm1aEventBlock = 148;
inline constexpr size_t kXPm1aControlBlock = 172;
inline constexpr size_t kXPmTimerBlock = 208;
inline constexpr size_t kSleepControlReg = 244;
inline constexpr size_t kSleepStatusReg = 256;
inline constexpr size_t kHypervisorVendor = 268;
}  // namespace fadt_offset

// 5.2.9 FADT, revision 6.5. Everything not in `config` is zero, except P_LVL2_LAT and P_LVL3_LAT,
// which say "no C2, no C3" (values above 100 and 1000 us).
std::vector<uint8_t> BuildFadt(const FadtConfig& config);

// 5.2.10 FACS, version 2, 64 bytes: no hardware signature, waking vectors and global lock zero (the
// OS owns them from boot), no S4BIOS, no 64-bit wake. The FACS has no table header or checksum.
inline constexpr uint8_t kFacsVersion = 2;
std::vector<uint8_t> BuildFacs();

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

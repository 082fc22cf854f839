#ifndef VMM_MACHINE_LAYOUT_H_
#define VMM_MACHINE_LAYOUT_H_

#include <cstdint>

// The guest-physical layout of the x86-64 machine. docs/machine.md is the human-readable contract;
// keep the two in step.
namespace vmm {

inline constexpr uint64_t kPageSize = 4096;
inline constexpr uint64_t kMinimumRamBytes = 16ull << 20;

// Boot structures in low RAM.
inline constexpr uint64_t kBootGdtAddress = 0x500;
inline constexpr uint64_t kPvhStartInfoAddress = 0x6000;
inline constexpr uint64_t kPvhModuleListAddress = 0x6040;
inline constexpr uint64_t kPvhMemoryMapAddress = 0x6100;
inline constexpr uint64_t kPvhMemoryMapMaxEntries = 64;
inline constexpr uint64_t kZeroPageAddress = 0x7000;
inline constexpr uint64_t kPml4Address = 0x9000;
inline constexpr uint64_t kPdptAddress = 0xa000;
inline constexpr uint64_t kPageDirectoryAddress = 0xb000;  // Four pages: 0xb000-0xefff.
inline constexpr uint64_t kBootStackTop = 0x8ff0;
inline constexpr uint64_t kCmdlineAddress = 0x20000;
inline constexpr uint64_t kCmdlineMaxBytes = 0x10000;  // Including the terminating NUL.
inline constexpr uint64_t kFdtAddress = 0x30000;
inline constexpr uint64_t kFdtMaxBytes = 0x10000;
inline constexpr uint64_t kMpTableAddress = 0x9fc00;
inline constexpr uint64_t kEbdaStart = 0x9fc00;
inline constexpr uint64_t kHighMemoryStart = 0x100000;  // 1 MiB: where kernels load.
// ACPI tables: the RSDP at the start of the BIOS area (16-byte aligned, inside the 0xe0000-0xfffff
// range Linux's legacy RSDP scan searches), then XSDT, FADT, MADT and DSDT. e820 reserves the area.
inline constexpr uint64_t kAcpiTablesAddress = 0xe0000;
inline constexpr uint64_t kAcpiTablesEnd = 0x100000;

// Device MMIO and the RAM above it.
inline constexpr uint64_t kMmioHoleStart = 0xc0000000;  // 3 GiB
inline constexpr uint64_t kIoapicAddress = 0xfec00000;
inline constexpr uint64_t kLapicAddress = 0xfee00000;
inline constexpr uint64_t kHighRamStart = 0x100000000;  // 4 GiB

// Legacy I/O ports.
inline constexpr uint16_t kCom1Port = 0x3f8;
inline constexpr uint8_t kCom1Irq = 4;
inline constexpr uint16_t kI8042DataPort = 0x60;
inline constexpr uint16_t kI8042CommandPort = 0x64;
inline constexpr uint16_t kDebugExitPort = 0xf4;
inline constexpr uint16_t kPostCodePort = 0x80;
// The ACPI fixed hardware the FADT names (docs/machine.md "ACPI tables", devices/legacy/acpi_pm.h), one
// 16-port block laid out as QEMU's PIIX4 PM: PM1a event block (PM1_STS, PM1_EN), PM1a control
// block, PM timer, then the reset register. The SCI is ISA IRQ 9 (level, active high), as on PIIX4.
inline constexpr uint16_t kAcpiPmBase = 0x600;
inline constexpr uint16_t kAcpiPmBlockSize = 0x10;
inline constexpr uint16_t kAcpiPm1EventPort = 0x600;    // 4 bytes
inline constexpr uint16_t kAcpiPm1ControlPort = 0x604;  // 2 bytes
inline constexpr uint16_t kAcpiPmTimerPort = 0x608;     // 4 bytes
inline constexpr uint16_t kAcpiResetPort = 0x60c;       // 1 byte
inline constexpr uint8_t kAcpiSciIrq = 9;
// The CMOS RTC's interrupt (firmware boot only: devices/legacy/cmos.h).
inline constexpr uint8_t kRtcIrq = 8;
// The PIIX3 IDE channels' legacy IRQs (ISA-compatible mode).
inline constexpr uint8_t kIdePrimaryIrq = 14;
inline constexpr uint8_t kIdeSecondaryIrq = 15;  // only with --test-media (tests)

}  // namespace vmm

#endif  // VMM_MACHINE_LAYOUT_H_

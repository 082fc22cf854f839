#ifndef VMM_MACHINE_ACPI_PM_LAYOUT_H_
#define VMM_MACHINE_ACPI_PM_LAYOUT_H_

#include <cstdint>

namespace vmm {

// Where the machine's ACPI fixed hardware sits inside its 16-port power-management block (ACPI 6.5
// 4.8; docs/machine.md "ACPI tables"): one fact shared by the device that implements the registers
// (devices/legacy/acpi_pm.h) and the FADT that points the OS at them (vmm/acpi/machine_acpi.cc),
// so neither depends on the other.
struct AcpiPmLayout {
  static constexpr uint64_t kBlockSize = 16;
  static constexpr uint64_t kPm1StatusOffset = 0x0;
  static constexpr uint64_t kPm1EnableOffset = 0x2;
  static constexpr uint64_t kPm1EventBlockOffset = kPm1StatusOffset;
  static constexpr uint8_t kPm1EventBlockBytes = 4;  // FADT PM1_EVT_LEN: status + enable
  static constexpr uint64_t kPm1ControlOffset = 0x4;
  static constexpr uint8_t kPm1ControlBytes = 2;  // FADT PM1_CNT_LEN
  static constexpr uint64_t kPmTimerOffset = 0x8;
  static constexpr uint8_t kPmTimerBytes = 4;  // FADT PM_TMR_LEN
  static constexpr uint64_t kResetOffset = 0xc;
  // FADT RESET_VALUE: the byte that, written at kResetOffset, resets the machine.
  static constexpr uint8_t kResetValue = 0x42;
  // The SLP_TYP the DSDT's \_S5_ package announces and the device decodes as "power off". (The
  // value is the platform's choice, 7.4.2; 5 is easy to recognise in a register dump.)
  static constexpr uint8_t kSleepTypeS5 = 5;
};

}  // namespace vmm

#endif  // VMM_MACHINE_ACPI_PM_LAYOUT_H_

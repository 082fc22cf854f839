#ifndef VMM_LEGACY_ACPI_PM_H_
#define VMM_LEGACY_ACPI_PM_H_

#include <cstdint>
#include <functional>
#include <span>

#include "vmm/bus.h"

namespace vmm::legacy {

// The hardware-reduced ACPI power-management registers (ACPI 6.5 4.8.3.7 "Sleep Control and Status
// Registers", 4.8.3.6 "Reset Register"), three one-byte I/O registers the FADT points to:
//   offset 0  SLEEP_CONTROL_REG: bits 4:2 SLP_TYPx, bit 5 SLP_EN. Writing SLP_EN with the S5 sleep
//             type (the value \_S5_ gives, kSleepTypeS5) calls `on_power_off`.
//   offset 1  SLEEP_STATUS_REG: bit 7 WAK_STS. Reads 0 (the machine never sleeps and wakes); writes
//             (Linux clears WAK_STS before sleeping) are ignored.
//   offset 2  RESET_REG: writing kResetValue calls `on_reset`.
// Reads of the control and reset registers return 0. Anything else a guest does (other values,
// other sleep types, accesses wider than a byte) is ignored: a hostile guest can only stop the VM
// the two documented ways. The model is Cloud Hypervisor's AcpiShutdownDevice, with the register
// layout of QEMU's hardware-reduced GED (one byte per register).
class AcpiPowerManagement : public BusDevice {
 public:
  static constexpr uint64_t kRegisterCount = 3;
  static constexpr uint64_t kSleepControlOffset = 0;
  static constexpr uint64_t kSleepStatusOffset = 1;
  static constexpr uint64_t kResetOffset = 2;
  // The SLP_TYP the DSDT's \_S5_ package announces and this device decodes as "power off".
  static constexpr uint8_t kSleepTypeS5 = 5;
  static constexpr uint8_t kSleepTypeShift = 2;
  static constexpr uint8_t kSleepTypeMask = 0x07 << kSleepTypeShift;
  static constexpr uint8_t kSleepEnable = 1 << 5;
  // FADT RESET_VALUE.
  static constexpr uint8_t kResetValue = 0x42;

  AcpiPowerManagement(std::function<void()> on_power_off, std::function<void()> on_reset)
      : on_power_off_(std::move(on_power_off)), on_reset_(std::move(on_reset)) {}

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

 private:
  const std::function<void()> on_power_off_;
  const std::function<void()> on_reset_;
};

}  // namespace vmm::legacy

#endif  // VMM_LEGACY_ACPI_PM_H_

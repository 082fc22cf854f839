#include "vmm/legacy/acpi_pm.h"

namespace vmm::legacy {

void AcpiPowerManagement::Read(uint64_t /*offset*/, std::span<uint8_t> data) {
  for (uint8_t& byte : data) byte = 0;
}

void AcpiPowerManagement::Write(uint64_t offset, std::span<const uint8_t> data) {
  // The FADT declares byte access (Generic Address Structure access size 1).
  if (data.size() != 1) return;
  const uint8_t value = data[0];
  switch (offset) {
    case kSleepControlOffset:
      // 4.8.3.7: the sleep state is entered when SLP_EN is written with SLP_TYP. Only S5 exists.
      if ((value & kSleepEnable) != 0 &&
          ((value & kSleepTypeMask) >> kSleepTypeShift) == kSleepTypeS5) {
        on_power_off_();
      }
      break;
    case kResetOffset:
      if (value == kResetValue) on_reset_();
      break;
    default:  // The sleep status register: nothing to clear.
      break;
  }
}

}  // namespace vmm::legacy

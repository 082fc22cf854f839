#include "vmm/legacy/acpi_pm.h"

#include <vector>

#include "gtest/gtest.h"

namespace vmm::legacy {
namespace {

struct Counts {
  int power_offs = 0;
  int resets = 0;
};

class AcpiPowerManagementTest : public ::testing::Test {
 protected:
  void Out(uint64_t offset, uint8_t value) {
    device_.Write(offset, std::span<const uint8_t>(&value, 1));
  }
  Counts counts_;
  AcpiPowerManagement device_{[this] { ++counts_.power_offs; }, [this] { ++counts_.resets; }};
};

TEST_F(AcpiPowerManagementTest, SleepEnableWithS5PowersOff) {
  // What Linux's ACPICA writes for S5 (acpi_hw_extended_sleep): (SLP_TYP << 2) | SLP_EN = 0x34.
  Out(AcpiPowerManagement::kSleepControlOffset, 0x34);
  EXPECT_EQ(counts_.power_offs, 1);
  EXPECT_EQ(counts_.resets, 0);
  // Bits outside SLP_TYP and SLP_EN are reserved and do not change the meaning.
  Out(AcpiPowerManagement::kSleepControlOffset, 0x34 | 0x80 | 0x01);
  EXPECT_EQ(counts_.power_offs, 2);
}

TEST_F(AcpiPowerManagementTest, ResetValueResets) {
  Out(AcpiPowerManagement::kResetOffset, AcpiPowerManagement::kResetValue);
  EXPECT_EQ(counts_.resets, 1);
  EXPECT_EQ(counts_.power_offs, 0);
}

TEST_F(AcpiPowerManagementTest, EverythingElseIsIgnored) {
  for (int value = 0; value < 256; ++value) {
    const uint8_t byte = static_cast<uint8_t>(value);
    const bool s5 = (byte & 0x20) != 0 && ((byte >> 2) & 7) == 5;
    if (!s5) Out(AcpiPowerManagement::kSleepControlOffset, byte);  // other sleep types, no SLP_EN
    if (byte != AcpiPowerManagement::kResetValue) Out(AcpiPowerManagement::kResetOffset, byte);
    Out(AcpiPowerManagement::kSleepStatusOffset, byte);  // WAK_STS clears and garbage
  }
  // Wider accesses, even with the right low byte, and offsets beyond the registers.
  const std::vector<uint8_t> wide = {0x34, 0x00};
  device_.Write(AcpiPowerManagement::kSleepControlOffset, wide);
  const std::vector<uint8_t> wide_reset = {AcpiPowerManagement::kResetValue, 0, 0, 0};
  device_.Write(AcpiPowerManagement::kResetOffset, wide_reset);
  device_.Write(AcpiPowerManagement::kResetOffset, {});
  Out(7, 0x34);
  EXPECT_EQ(counts_.power_offs, 0);
  EXPECT_EQ(counts_.resets, 0);
}

TEST_F(AcpiPowerManagementTest, ReadsReturnZero) {
  std::vector<uint8_t> data(2, 0xff);
  device_.Read(AcpiPowerManagement::kSleepStatusOffset, data);
  EXPECT_EQ(data, (std::vector<uint8_t>{0, 0}));
}

}  // namespace
}  // namespace vmm::legacy

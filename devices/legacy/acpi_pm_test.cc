#include "devices/legacy/acpi_pm.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace devices::legacy {
namespace {

using Pm = AcpiPowerManagement;

// Records every level the device drives.
class RecordingIrqLine : public vmm::IrqLine {
 public:
  void SetLevel(bool asserted) override {
    levels.push_back(asserted);
    level = asserted;
  }
  std::vector<bool> levels;
  bool level = false;
};

class AcpiPowerManagementTest : public ::testing::Test {
 protected:
  uint32_t In(uint64_t offset, size_t size) {
    std::vector<uint8_t> data(size, 0xee);
    device_.Read(offset, data);
    uint32_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= uint32_t{data[i]} << (8 * i);
    return value;
  }
  void Out(uint64_t offset, size_t size, uint32_t value) {
    std::vector<uint8_t> data(size);
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(value >> (8 * i));
    device_.Write(offset, data);
  }
  uint16_t Status() { return static_cast<uint16_t>(In(Pm::kPm1StatusOffset, 2)); }
  // Moves the fake clock by `ticks` periods of the 3.579545 MHz timer (rounded up to whole ns).
  void AdvanceTicks(uint64_t ticks) {
    now_ns_ += (ticks * 1'000'000'000 + Pm::kTimerHz - 1) / Pm::kTimerHz;
  }

  int power_offs_ = 0;
  int resets_ = 0;
  uint64_t now_ns_ = 1'000'000'000'000;  // an arbitrary monotonic start
  std::shared_ptr<RecordingIrqLine> sci_ = std::make_shared<RecordingIrqLine>();
  Pm device_{sci_, [this] { ++power_offs_; }, [this] { ++resets_; }, [this] { return now_ns_; }};
};

TEST_F(AcpiPowerManagementTest, StartsWithNothingPendingAndSciEnabled) {
  EXPECT_EQ(Status(), 0);
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), 0u);
  EXPECT_EQ(In(Pm::kPm1ControlOffset, 2), Pm::kSciEnable) << "always in ACPI mode";
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), 0u);
  EXPECT_TRUE(sci_->levels.empty());
}

TEST_F(AcpiPowerManagementTest, SleepEnableWithS5PowersOff) {
  // What ACPICA's acpi_hw_legacy_sleep writes for \_S5_ = {5, 0}: first SLP_TYP alone (with the
  // preserved SCI_EN), then SLP_TYP | SLP_EN, as 16-bit writes.
  const uint32_t sleep_type = Pm::kSleepTypeS5 << Pm::kSleepTypeShift;
  Out(Pm::kPm1ControlOffset, 2, sleep_type | Pm::kSciEnable);
  EXPECT_EQ(power_offs_, 0);
  EXPECT_EQ(In(Pm::kPm1ControlOffset, 2), sleep_type | Pm::kSciEnable) << "SLP_TYP is kept";
  Out(Pm::kPm1ControlOffset, 2, sleep_type | Pm::kSleepEnable | Pm::kSciEnable);
  EXPECT_EQ(power_offs_, 1);
  EXPECT_EQ(In(Pm::kPm1ControlOffset, 2) & Pm::kSleepEnable, 0u) << "SLP_EN is write-only";
  // The same through the high byte alone (an OS writing bytes).
  Out(Pm::kPm1ControlOffset + 1, 1, (sleep_type | Pm::kSleepEnable) >> 8);
  EXPECT_EQ(power_offs_, 2);
  EXPECT_EQ(resets_, 0);
}

TEST_F(AcpiPowerManagementTest, OtherSleepTypesAndWritesWithoutSleepEnableAreIgnored) {
  for (uint32_t type = 0; type < 8; ++type) {
    Out(Pm::kPm1ControlOffset, 2, type << Pm::kSleepTypeShift);  // no SLP_EN
    if (type != Pm::kSleepTypeS5) {
      Out(Pm::kPm1ControlOffset, 2, (type << Pm::kSleepTypeShift) | Pm::kSleepEnable);
    }
  }
  EXPECT_EQ(power_offs_, 0);
  // Writing 0 to SCI_EN does not leave ACPI mode; GBL_RLS reads 0.
  Out(Pm::kPm1ControlOffset, 2, Pm::kGlobalRelease | Pm::kBusMasterReload);
  EXPECT_EQ(In(Pm::kPm1ControlOffset, 2), uint32_t{Pm::kSciEnable | Pm::kBusMasterReload});
}

TEST_F(AcpiPowerManagementTest, ResetValueAsAByteResets) {
  Out(Pm::kResetOffset, 1, Pm::kResetValue);
  EXPECT_EQ(resets_, 1);
  for (int value = 0; value < 256; ++value) {
    if (value != Pm::kResetValue) Out(Pm::kResetOffset, 1, static_cast<uint32_t>(value));
  }
  // Wider writes, even with the right low byte, and a byte at the wrong offset.
  Out(Pm::kResetOffset, 2, Pm::kResetValue);
  Out(Pm::kResetOffset, 4, Pm::kResetValue);
  Out(Pm::kResetOffset + 1, 1, Pm::kResetValue);
  EXPECT_EQ(resets_, 1);
  EXPECT_EQ(In(Pm::kResetOffset, 1), 0u) << "write-only";
  EXPECT_EQ(power_offs_, 0);
}

TEST_F(AcpiPowerManagementTest, EnableBitsStickAndReservedBitsReadZero) {
  Out(Pm::kPm1EnableOffset, 2, 0xffff);
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), Pm::kEnableBits);
  Out(Pm::kPm1EnableOffset, 2, Pm::kGlobalEnable);  // ACPICA's global lock check
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), Pm::kGlobalEnable);
  // A byte write changes only its byte.
  Out(Pm::kPm1EnableOffset + 1, 1, Pm::kPowerButtonEnable >> 8);
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), uint32_t{Pm::kGlobalEnable | Pm::kPowerButtonEnable});
  EXPECT_EQ(In(Pm::kPm1EnableOffset + 1, 1), uint32_t{Pm::kPowerButtonEnable >> 8});
  // A dword write over the event block writes status (clears nothing pending) and enable.
  Out(Pm::kPm1StatusOffset, 4, uint32_t{Pm::kTimerEnable} << 16);
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), Pm::kTimerEnable);
  EXPECT_EQ(In(Pm::kPm1StatusOffset, 4), uint32_t{Pm::kTimerEnable} << 16);
}

TEST_F(AcpiPowerManagementTest, PowerButtonRaisesTheSciOnlyWhenEnabled) {
  device_.PressPowerButton();
  EXPECT_EQ(Status(), Pm::kPowerButtonStatus) << "status is set whether or not enabled";
  EXPECT_TRUE(sci_->levels.empty());
  Out(Pm::kPm1EnableOffset, 2, Pm::kPowerButtonEnable);
  EXPECT_EQ(sci_->levels, std::vector<bool>{true}) << "enabling a pending event raises the SCI";
  // Writing 0 or other bits clears nothing.
  Out(Pm::kPm1StatusOffset, 2, 0);
  Out(Pm::kPm1StatusOffset, 2, Pm::kWakeStatus | Pm::kTimerStatus);
  EXPECT_EQ(Status(), Pm::kPowerButtonStatus);
  EXPECT_TRUE(sci_->level);
  // The OS's handler clears the status with a 1: the level SCI drops.
  Out(Pm::kPm1StatusOffset, 2, Pm::kPowerButtonStatus);
  EXPECT_EQ(Status(), 0);
  EXPECT_EQ(sci_->levels, (std::vector<bool>{true, false}));
  // Pressed while enabled: straight up. Disabling the event drops the line, status stays.
  device_.PressPowerButton();
  EXPECT_TRUE(sci_->level);
  Out(Pm::kPm1EnableOffset, 2, 0);
  EXPECT_FALSE(sci_->level);
  EXPECT_EQ(Status(), Pm::kPowerButtonStatus);
  EXPECT_EQ(sci_->levels, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(power_offs_, 0) << "the button only tells the OS";
}

TEST_F(AcpiPowerManagementTest, TimerCountsAt3579545HzIn24Bits) {
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), 0u);
  now_ns_ += 1'000'000'000;  // one second
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), Pm::kTimerHz);
  now_ns_ += 1'000'000;  // one millisecond more: 3579.545 ticks
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), Pm::kTimerHz + 3579);
  // Byte and word reads see the same counter.
  EXPECT_EQ(In(Pm::kPmTimerOffset, 2), (Pm::kTimerHz + 3579) & 0xffff);
  EXPECT_EQ(In(Pm::kPmTimerOffset + 2, 1), ((Pm::kTimerHz + 3579) >> 16) & 0xff);
  EXPECT_EQ(In(Pm::kPmTimerOffset + 3, 1), 0u) << "bits 31:24 read 0 (24-bit timer)";
  // It wraps at 2^24 and writes do not change it.
  Out(Pm::kPmTimerOffset, 4, 0);
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), Pm::kTimerHz + 3579);
  now_ns_ += 5ull * 3600 * 1'000'000'000;  // five hours: no 64-bit overflow in the conversion
  const uint64_t ticks = static_cast<uint64_t>(
      static_cast<unsigned __int128>(5ull * 3600 * 1'000'000'000 + 1'001'000'000) * Pm::kTimerHz /
      1'000'000'000);
  EXPECT_EQ(In(Pm::kPmTimerOffset, 4), ticks & Pm::kTimerMask);
}

TEST_F(AcpiPowerManagementTest, TimerStatusWhenBit23ChangesAndItsSci) {
  AdvanceTicks((1u << 23) - 10);
  EXPECT_EQ(Status() & Pm::kTimerStatus, 0);
  AdvanceTicks(20);
  EXPECT_EQ(Status() & Pm::kTimerStatus, Pm::kTimerStatus) << "bit 23 went 0 -> 1";
  Out(Pm::kPm1StatusOffset, 2, Pm::kTimerStatus);
  EXPECT_EQ(Status() & Pm::kTimerStatus, 0);
  EXPECT_TRUE(sci_->levels.empty()) << "TMR_EN is clear";
  Out(Pm::kPm1EnableOffset, 2, Pm::kTimerEnable);
  AdvanceTicks(1u << 23);  // bit 23 goes 1 -> 0 (the counter wraps)
  EXPECT_EQ(Status() & Pm::kTimerStatus, Pm::kTimerStatus);
  EXPECT_TRUE(sci_->level) << "an enabled timer overflow raises the SCI";
  Out(Pm::kPm1StatusOffset, 2, Pm::kTimerStatus);
  EXPECT_FALSE(sci_->level);
}

TEST_F(AcpiPowerManagementTest, BadAccessesAreIgnored) {
  device_.PressPowerButton();
  Out(Pm::kPm1EnableOffset, 2, Pm::kPowerButtonEnable);
  const std::vector<bool> levels = sci_->levels;
  // Sizes other than 1, 2, 4; accesses past the block; offsets far away.
  for (size_t size : {0u, 3u, 5u, 8u}) {
    std::vector<uint8_t> data(size, 0xff);
    device_.Write(Pm::kPm1StatusOffset, data);
    device_.Write(Pm::kPm1ControlOffset, data);
    device_.Read(Pm::kPm1StatusOffset, data);
    for (uint8_t byte : data) EXPECT_EQ(byte, 0);
  }
  Out(Pm::kBlockSize - 1, 2, 0xffff);
  Out(Pm::kBlockSize - 2, 4, 0xffffffff);
  Out(0x1000, 1, Pm::kResetValue);
  Out(~uint64_t{0}, 1, 0xff);
  EXPECT_EQ(In(Pm::kBlockSize - 1, 2), 0u);
  EXPECT_EQ(In(~uint64_t{0}, 4), 0u);
  // Reserved ports.
  Out(0x6, 2, 0xffff);
  Out(0xd, 1, 0xff);
  EXPECT_EQ(In(0x6, 2), 0u);
  EXPECT_EQ(In(0xd, 2), 0u);
  EXPECT_EQ(Status(), Pm::kPowerButtonStatus);
  EXPECT_EQ(In(Pm::kPm1EnableOffset, 2), Pm::kPowerButtonEnable);
  EXPECT_EQ(sci_->levels, levels);
  EXPECT_EQ(power_offs_, 0);
  EXPECT_EQ(resets_, 0);
}

TEST_F(AcpiPowerManagementTest, ButtonFromAnotherThreadWhileVcpusPoll) {
  Out(Pm::kPm1EnableOffset, 2, Pm::kPowerButtonEnable);
  std::atomic<bool> seen{false};
  std::thread vcpu([&] {
    while (!seen) {
      if ((Status() & Pm::kPowerButtonStatus) != 0) {
        Out(Pm::kPm1StatusOffset, 2, Pm::kPowerButtonStatus);
        seen = true;
      }
    }
  });
  device_.PressPowerButton();
  vcpu.join();
  EXPECT_EQ(Status(), 0);
  EXPECT_FALSE(sci_->level);
  EXPECT_EQ(sci_->levels, (std::vector<bool>{true, false}));
}

TEST(AcpiPowerManagementClockTest, RealClockIsMonotonic) {
  const uint64_t first = Pm::MonotonicNanoseconds();
  EXPECT_GE(Pm::MonotonicNanoseconds(), first);
}

}  // namespace
}  // namespace devices::legacy

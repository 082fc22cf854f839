#include "devices/legacy/cmos.h"

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace devices::legacy {
namespace {

// A clock the test moves by hand.
class CmosTest : public ::testing::Test {
 protected:
  CmosTest()
      : now_(absl::FromCivil(absl::CivilSecond(2026, 12, 6, 21, 45, 7), absl::UTCTimeZone()) +
             absl::Milliseconds(300)),
        cmos_([this] { return now_; }) {}

  // Through the ports, as a guest does.
  void Out(uint16_t port, uint8_t value) {
    cmos_.Write(port - Cmos::kPortBase, std::span<const uint8_t>(&value, 1));
  }
  uint8_t In(uint16_t port) {
    uint8_t value = 0;
    cmos_.Read(port - Cmos::kPortBase, std::span<uint8_t>(&value, 1));
    return value;
  }
  uint8_t Get(uint8_t index) {
    Out(0x70, index);
    return In(0x71);
  }
  void Put(uint8_t index, uint8_t value) {
    Out(0x70, index);
    Out(0x71, value);
  }

  absl::Time now_;
  Cmos cmos_;
};

TEST_F(CmosTest, ReadsTheHostsUtcTimeInBcdAnd24HoursByDefault) {
  EXPECT_EQ(Get(Cmos::kSeconds), 0x07);
  EXPECT_EQ(Get(Cmos::kMinutes), 0x45);
  EXPECT_EQ(Get(Cmos::kHours), 0x21);
  EXPECT_EQ(Get(Cmos::kDayOfWeek), 0x01);  // 2026-12-06 is a Sunday
  EXPECT_EQ(Get(Cmos::kDayOfMonth), 0x06);
  EXPECT_EQ(Get(Cmos::kMonth), 0x12);
  EXPECT_EQ(Get(Cmos::kYear), 0x26);
  EXPECT_EQ(Get(Cmos::kCentury), 0x20);
  EXPECT_EQ(Get(Cmos::kRegisterA), Cmos::kRegisterADefault);
  EXPECT_EQ(Get(Cmos::kRegisterB), Cmos::kHour24);
  EXPECT_EQ(Get(Cmos::kRegisterC), 0);
  EXPECT_EQ(Get(Cmos::kRegisterD), Cmos::kValidRamAndTime);
  // The clock follows the host's.
  now_ += absl::Seconds(61);
  EXPECT_EQ(Get(Cmos::kSeconds), 0x08);
  EXPECT_EQ(Get(Cmos::kMinutes), 0x46);
}

TEST_F(CmosTest, BinaryAndTwelveHourFormats) {
  Put(Cmos::kRegisterB, Cmos::kBinary);  // 12-hour, binary
  EXPECT_EQ(Get(Cmos::kHours), 9 | Cmos::kPm);
  EXPECT_EQ(Get(Cmos::kMinutes), 45);
  EXPECT_EQ(Get(Cmos::kYear), 26);
  Put(Cmos::kRegisterB, 0);  // 12-hour, BCD
  EXPECT_EQ(Get(Cmos::kHours), 0x09 | Cmos::kPm);
  now_ += absl::Hours(3);  // 00:45: twelve a.m.
  EXPECT_EQ(Get(Cmos::kHours), 0x12);
  now_ += absl::Hours(12);  // 12:45: twelve p.m.
  EXPECT_EQ(Get(Cmos::kHours), 0x12 | Cmos::kPm);
}

TEST_F(CmosTest, SetFreezesTheRegistersAndClearingItStartsTheClockFromThem) {
  // What Linux's mc146818_set_time does: SET, the fields, SET off.
  Put(Cmos::kRegisterB, Cmos::kSet | Cmos::kHour24);
  Put(Cmos::kSeconds, 0x30);
  Put(Cmos::kMinutes, 0x15);
  Put(Cmos::kHours, 0x08);
  Put(Cmos::kDayOfMonth, 0x29);
  Put(Cmos::kMonth, 0x02);
  Put(Cmos::kYear, 0x24);
  now_ += absl::Seconds(5);  // frozen: no update while SET is on
  EXPECT_EQ(Get(Cmos::kSeconds), 0x30);
  EXPECT_EQ(Get(Cmos::kRegisterA) & Cmos::kUpdateInProgress, 0);
  Put(Cmos::kRegisterB, Cmos::kHour24);
  EXPECT_EQ(Get(Cmos::kSeconds), 0x30);
  EXPECT_EQ(Get(Cmos::kDayOfWeek), 0x05);  // 2024-02-29 was a Thursday
  now_ += absl::Seconds(31);
  EXPECT_EQ(Get(Cmos::kSeconds), 0x01);
  EXPECT_EQ(Get(Cmos::kMinutes), 0x16);
  EXPECT_EQ(Get(Cmos::kDayOfMonth), 0x29);
  EXPECT_EQ(Get(Cmos::kYear), 0x24);
  // A write without SET takes effect at once.
  Put(Cmos::kCentury, 0x19);
  EXPECT_EQ(Get(Cmos::kCentury), 0x19);
  EXPECT_EQ(Get(Cmos::kYear), 0x24);
  EXPECT_EQ(Get(Cmos::kMonth), 0x02);
}

TEST_F(CmosTest, UpdateInProgressInTheLastMomentOfEachSecond) {
  now_ = absl::FromCivil(absl::CivilSecond(2026, 1, 1, 0, 0, 0), absl::UTCTimeZone()) +
         absl::Milliseconds(999) + absl::Microseconds(900);
  EXPECT_EQ(Get(Cmos::kRegisterA), Cmos::kRegisterADefault | Cmos::kUpdateInProgress);
  now_ += absl::Microseconds(200);  // the next second has begun
  EXPECT_EQ(Get(Cmos::kRegisterA), Cmos::kRegisterADefault);
  // Writes keep the divider and rate bits, never UIP.
  Put(Cmos::kRegisterA, 0xff);
  EXPECT_EQ(Get(Cmos::kRegisterA), 0x7f);
}

TEST_F(CmosTest, HostileWritesAreNormalizedAndReadOnlyRegistersStayThem) {
  Put(Cmos::kMonth, 0x99);    // month 99: eight years and three months on
  Put(Cmos::kSeconds, 0xff);  // 165 seconds
  Put(Cmos::kDayOfMonth, 0x00);
  for (uint8_t index = 0; index <= Cmos::kYear; ++index) {
    const uint8_t value = Get(index);
    EXPECT_LE(value & 0x0f, 9) << int{index};  // still two BCD digits
    EXPECT_LE(value >> 4 & 0x7, 9) << int{index};
  }
  Put(Cmos::kDayOfWeek, 0x07);
  Put(Cmos::kRegisterC, 0xff);
  Put(Cmos::kRegisterD, 0x00);
  EXPECT_EQ(Get(Cmos::kRegisterC), 0);
  EXPECT_EQ(Get(Cmos::kRegisterD), Cmos::kValidRamAndTime);
  // Binary mode's whole byte range, the year before year 0 and far after: still digits.
  Put(Cmos::kRegisterB, Cmos::kBinary | Cmos::kHour24);
  Put(Cmos::kCentury, 0);
  Put(Cmos::kYear, 0);
  Put(Cmos::kMonth, 0);  // December of year -1
  EXPECT_EQ(Get(Cmos::kYear), 99);
  Put(Cmos::kCentury, 255);
  EXPECT_EQ(Get(Cmos::kCentury), 25500 / 100 % 100);
}

TEST_F(CmosTest, TheIndexPortSelectsAndMasksNmiAndTheRamKeepsWhatIsWritten) {
  Out(0x70, 0x80 | 0x40);
  EXPECT_TRUE(cmos_.nmi_masked());
  Out(0x71, 0x5a);
  EXPECT_EQ(In(0x71), 0x5a);
  EXPECT_EQ(In(0x70), 0xff);
  Out(0x70, 0x40);
  EXPECT_FALSE(cmos_.nmi_masked());
  EXPECT_EQ(In(0x71), 0x5a);
  // A two-byte write at 0x70: the index, then the data (outw).
  const uint8_t pair[2] = {0x41, 0xa5};
  cmos_.Write(0, pair);
  EXPECT_EQ(cmos_.ReadByte(0x41), 0xa5);
  // Index bit 7 is the NMI mask: 0xc1 selects 0x41.
  Put(0xc1, 0x3c);
  EXPECT_EQ(cmos_.ReadByte(0x41), 0x3c);
}

TEST_F(CmosTest, MemoryLayoutAsSeaBiosReadsIt) {
  // 3 GiB below 4 GiB, 2 GiB above, 4 CPUs.
  cmos_.SetMemoryLayout(uint64_t{3} << 30, uint64_t{2} << 30, 4);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kBaseMemoryLow) | cmos_.ReadByte(Cmos::kBaseMemoryLow + 1) << 8,
            640);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kExtendedMemoryLow) | cmos_.ReadByte(Cmos::kExtendedMemoryLow + 1)
                                                           << 8,
            0xfc00);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kExtendedMemoryLow2) |
                cmos_.ReadByte(Cmos::kExtendedMemoryLow2 + 1) << 8,
            0xfc00);
  const int above_16m =
      cmos_.ReadByte(Cmos::kMemoryAbove16MLow) | cmos_.ReadByte(Cmos::kMemoryAbove16MLow + 1) << 8;
  EXPECT_EQ(above_16m, ((int64_t{3} << 30) - (16 << 20)) / (64 << 10));
  const int above_4g = cmos_.ReadByte(Cmos::kMemoryAbove4GLow) |
                       cmos_.ReadByte(Cmos::kMemoryAbove4GLow + 1) << 8 |
                       cmos_.ReadByte(Cmos::kMemoryAbove4GLow + 2) << 16;
  EXPECT_EQ(above_4g, (int64_t{2} << 30) / (64 << 10));
  EXPECT_EQ(cmos_.ReadByte(Cmos::kCpuCountLess1), 3);
  // A small VM: 8 MiB, nothing above 16 MiB.
  cmos_.SetMemoryLayout(8 << 20, 0, 1);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kExtendedMemoryLow) | cmos_.ReadByte(Cmos::kExtendedMemoryLow + 1)
                                                           << 8,
            7 * 1024);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kMemoryAbove16MLow), 0);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kCpuCountLess1), 0);
  // SetByte never reaches the clock.
  cmos_.SetByte(Cmos::kRegisterB, Cmos::kBinary);
  cmos_.SetByte(Cmos::kCentury, 0x99);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kRegisterB), Cmos::kHour24);
  EXPECT_EQ(cmos_.ReadByte(Cmos::kCentury), 0x20);
}

// IRQ 8 as the interrupt controller sees it.
class RecordingIrqLine : public vmm::IrqLine {
 public:
  void SetLevel(bool asserted) override {
    level = asserted;
    ++edges;
  }
  bool level = false;
  int edges = 0;
};

class CmosInterruptTest : public ::testing::Test {
 protected:
  CmosInterruptTest()
      : now_(absl::FromCivil(absl::CivilSecond(2026, 12, 6, 21, 45, 7), absl::UTCTimeZone()) +
             absl::Milliseconds(300)),
        irq_(std::make_shared<RecordingIrqLine>()),
        cmos_(
            irq_, [this] { ++schedule_changes_; }, [this] { return now_; }) {}

  uint8_t Get(uint8_t index) {
    uint8_t value = index;
    cmos_.Write(0, std::span<const uint8_t>(&value, 1));
    cmos_.Read(1, std::span<uint8_t>(&value, 1));
    return value;
  }
  void Put(uint8_t index, uint8_t value) {
    cmos_.Write(0, std::span<const uint8_t>(&index, 1));
    cmos_.Write(1, std::span<const uint8_t>(&value, 1));
  }
  // The assembly's timer: the clock moves to the next tick the device asked for, which runs.
  absl::Time RunToNextTick() {
    const std::optional<absl::Time> next = cmos_.NextTick();
    EXPECT_TRUE(next.has_value());
    if (!next) return now_;
    EXPECT_GT(*next, now_);
    now_ = *next;
    cmos_.Tick();
    return now_;
  }

  absl::Time now_;
  std::shared_ptr<RecordingIrqLine> irq_;
  int schedule_changes_ = 0;
  Cmos cmos_;
};

TEST_F(CmosInterruptTest, FlagsAreSetWithoutEnablesAndClearedByReadingC) {
  EXPECT_FALSE(cmos_.NextTick().has_value());  // nothing enabled: no timer
  now_ += absl::Seconds(1);
  // A second later: periodic edges (1024 Hz by default) and an update happened; nothing enabled,
  // so no IRQF and no interrupt.
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kPeriodicFlag | Cmos::kUpdateFlag);
  EXPECT_EQ(Get(Cmos::kRegisterC), 0);
  EXPECT_EQ(irq_->edges, 0);
}

TEST_F(CmosInterruptTest, PeriodicInterruptAt1024HzUntilRegisterCIsRead) {
  Put(Cmos::kRegisterB, Cmos::kHour24 | Cmos::kPeriodicInterruptEnable);
  EXPECT_GE(schedule_changes_, 1);
  const absl::Time start = now_;
  const absl::Time tick = RunToNextTick();
  // The next edge of 1/1024 s, counted from the epoch.
  EXPECT_LE(tick - start, absl::Seconds(1) / 1024);
  EXPECT_EQ((tick - absl::UnixEpoch()) % (absl::Seconds(1) / 1024), absl::ZeroDuration());
  EXPECT_TRUE(irq_->level);
  // Raised: nothing more to time until the guest acknowledges.
  EXPECT_FALSE(cmos_.NextTick().has_value());
  const int changes = schedule_changes_;
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kInterruptRequest | Cmos::kPeriodicFlag);
  EXPECT_FALSE(irq_->level);
  EXPECT_GT(schedule_changes_, changes);  // the timer is needed again
  RunToNextTick();
  EXPECT_TRUE(irq_->level);
  // A slower rate (register A's rate 15: 2 Hz) from now on.
  Get(Cmos::kRegisterC);
  Put(Cmos::kRegisterA, 0x2f);
  const absl::Time before = now_;
  EXPECT_EQ(RunToNextTick() - before <= absl::Milliseconds(500), true);
  EXPECT_EQ((now_ - absl::UnixEpoch()) % absl::Milliseconds(500), absl::ZeroDuration());
  // Rate 0 stops the periodic interrupt.
  Get(Cmos::kRegisterC);
  Put(Cmos::kRegisterA, 0x20);
  EXPECT_FALSE(cmos_.NextTick().has_value());
}

TEST_F(CmosInterruptTest, EnablingWithAFlagSetRaisesAtOnceAndDisablingLowers) {
  now_ += absl::Milliseconds(10);  // PF is due
  Put(Cmos::kRegisterB, Cmos::kHour24 | Cmos::kPeriodicInterruptEnable);
  EXPECT_TRUE(irq_->level);
  Put(Cmos::kRegisterB, Cmos::kHour24);
  EXPECT_FALSE(irq_->level);
  // The flag stays until C is read, without IRQF now.
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kPeriodicFlag);
}

TEST_F(CmosInterruptTest, UpdateInterruptEachSecondButNotWhileSetHoldsTheClock) {
  Put(Cmos::kRegisterA, 0x20);  // no periodic signal
  Put(Cmos::kRegisterB, Cmos::kHour24 | Cmos::kUpdateInterruptEnable);
  const absl::Time tick = RunToNextTick();
  EXPECT_EQ(tick, absl::FromUnixSeconds(absl::ToUnixSeconds(tick)));  // a whole second
  EXPECT_EQ(tick - now_, absl::ZeroDuration());
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kInterruptRequest | Cmos::kUpdateFlag);
  // SET stops the updates: no tick, and no flag however long it holds.
  Put(Cmos::kRegisterB, Cmos::kSet | Cmos::kHour24 | Cmos::kUpdateInterruptEnable);
  EXPECT_FALSE(cmos_.NextTick().has_value());
  now_ += absl::Seconds(5);
  EXPECT_EQ(Get(Cmos::kRegisterC), 0);
  // So does a divider in reset (register A bits 6:4 = 110).
  Put(Cmos::kRegisterB, Cmos::kHour24 | Cmos::kUpdateInterruptEnable);
  Get(Cmos::kRegisterC);
  Put(Cmos::kRegisterA, 0x60);
  EXPECT_FALSE(cmos_.NextTick().has_value());
  now_ += absl::Seconds(5);
  EXPECT_EQ(Get(Cmos::kRegisterC), 0);
}

TEST_F(CmosInterruptTest, AlarmAtItsSecondAndDontCareBytesMatchAny) {
  Put(Cmos::kRegisterA, 0x20);
  // 21:45:09 (BCD), two seconds from now.
  Put(Cmos::kHoursAlarm, 0x21);
  Put(Cmos::kMinutesAlarm, 0x45);
  Put(Cmos::kSecondsAlarm, 0x09);
  Put(Cmos::kRegisterB, Cmos::kHour24 | Cmos::kAlarmInterruptEnable);
  RunToNextTick();  // 21:45:08: an update, no alarm
  EXPECT_FALSE(irq_->level);
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kUpdateFlag);
  RunToNextTick();  // 21:45:09
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(Get(Cmos::kRegisterC), Cmos::kInterruptRequest | Cmos::kAlarmFlag | Cmos::kUpdateFlag);
  // "Any hour, any minute, second 10": the next second matches.
  Put(Cmos::kHoursAlarm, Cmos::kAlarmAnyValue);
  Put(Cmos::kMinutesAlarm, 0xff);
  Put(Cmos::kSecondsAlarm, 0x10);
  RunToNextTick();
  EXPECT_TRUE(irq_->level);
}

}  // namespace
}  // namespace devices::legacy

#include "devices/legacy/cmos.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace devices::legacy {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kGiB = 1024 * kMiB;

const absl::TimeZone& Utc() {
  static const absl::TimeZone utc = absl::UTCTimeZone();
  return utc;
}

// The host's time to the whole second: the guest's seconds tick when the host's do.
absl::CivilSecond HostSecond(absl::Time now) { return absl::ToCivilSecond(now, Utc()); }

// Euclidean remainder and quotient by 100: a normalized year before year 0 still gives two
// register digits.
int Mod100(int64_t value) { return static_cast<int>(((value % 100) + 100) % 100); }
int64_t Div100(int64_t value) { return (value - Mod100(value)) / 100; }

// The periodic signal's edges from the epoch to `time`.
int64_t PeriodicEdges(absl::Time time, absl::Duration period) {
  absl::Duration remainder;
  return absl::IDivDuration(time - absl::UnixEpoch(), period, &remainder);
}

}  // namespace

Cmos::Cmos(std::function<absl::Time()> now) : Cmos(nullptr, nullptr, std::move(now)) {}

Cmos::Cmos(std::shared_ptr<vmm::IrqLine> irq, std::function<void()> schedule_changed,
           std::function<absl::Time()> now)
    : now_(std::move(now)), irq_(std::move(irq)), schedule_changed_(std::move(schedule_changed)) {
  absl::MutexLock lock(&mutex_);
  ram_[kRegisterA] = kRegisterADefault;
  ram_[kRegisterB] = kRegisterBDefault;
  evaluated_until_ = now_();
}

bool Cmos::Updating() const {
  // No update while SET holds the registers, nor while the divider is stopped or in reset.
  return (ram_[kRegisterB] & kSet) == 0 && (ram_[kRegisterA] & kDivider) == kDividerRunning;
}

std::optional<absl::Duration> Cmos::PeriodicPeriod() const {
  if ((ram_[kRegisterA] & kDivider) != kDividerRunning) return std::nullopt;
  int rate = ram_[kRegisterA] & kRateSelect;
  if (rate == 0) return std::nullopt;
  // With the 32.768 kHz time base, rates 1 and 2 are those of 8 and 9 (MC146818A, table 5): the
  // period is 2^(rate - 1) cycles of the time base, 3.90625 ms down to 122.07 us... up to 500 ms.
  if (rate <= 2) rate += 7;
  return absl::Seconds(1) * (int64_t{1} << (rate - 1)) / 32768;
}

bool Cmos::AlarmMatches(absl::CivilSecond time) const {
  // An alarm byte of 0xc0-0xff matches any value; the others, in register B's format.
  const uint8_t seconds = ram_[kSecondsAlarm];
  const uint8_t minutes = ram_[kMinutesAlarm];
  const uint8_t hours = ram_[kHoursAlarm];
  const bool any_second = (seconds & kAlarmAnyValue) == kAlarmAnyValue;
  const bool any_minute = (minutes & kAlarmAnyValue) == kAlarmAnyValue;
  const bool any_hour = (hours & kAlarmAnyValue) == kAlarmAnyValue;
  return (any_second || Decode(seconds) == time.second()) &&
         (any_minute || Decode(minutes) == time.minute()) &&
         (any_hour || DecodeHours(hours) == time.hour());
}

void Cmos::UpdateFlags(absl::Time now) {
  if (now <= evaluated_until_) {
    // The host's clock stepped back (or did not move): count the edges from here on, or none
    // would come until it is back where it was.
    evaluated_until_ = now;
    return;
  }
  if (const std::optional<absl::Duration> period = PeriodicPeriod()) {
    // An edge of the periodic signal (counted from the epoch) since the last look.
    if (PeriodicEdges(now, *period) > PeriodicEdges(evaluated_until_, *period)) {
      flags_ |= kPeriodicFlag;
    }
  }
  if (Updating()) {
    const int64_t from = absl::ToUnixSeconds(evaluated_until_);
    const int64_t to = absl::ToUnixSeconds(now);
    if (to > from) {
      flags_ |= kUpdateFlag;
      // The alarm is compared at each update; while AIE is set Tick() runs every second, so only
      // a guest that polls without it (and looks less than once every few seconds) can miss one.
      for (int64_t second = std::max(from + 1, to - 3); second <= to; ++second) {
        if (AlarmMatches(HostSecond(absl::FromUnixSeconds(second) + offset_))) {
          flags_ |= kAlarmFlag;
        }
      }
    }
  }
  evaluated_until_ = now;
}

void Cmos::UpdateLine() {
  // IRQF = PF.PIE + AF.AIE + UF.UIE, and the line follows it.
  const bool request = (flags_ & ram_[kRegisterB] & kInterruptFlags) != 0;
  if (request == line_raised_) return;
  line_raised_ = request;
  if (irq_ != nullptr) irq_->SetLevel(request);
}

std::optional<absl::Time> Cmos::NextTick() {
  absl::MutexLock lock(&mutex_);
  if (irq_ == nullptr || line_raised_) return std::nullopt;
  const absl::Time now = now_();
  std::optional<absl::Time> next;
  const uint8_t enabled = ram_[kRegisterB];
  if ((enabled & kPeriodicInterruptEnable) != 0) {
    if (const std::optional<absl::Duration> period = PeriodicPeriod()) {
      const int64_t edges = PeriodicEdges(now, *period);
      next = absl::UnixEpoch() + *period * (edges + 1);
    }
  }
  if ((enabled & (kUpdateInterruptEnable | kAlarmInterruptEnable)) != 0 && Updating()) {
    const absl::Time second = absl::FromUnixSeconds(absl::ToUnixSeconds(now) + 1);
    if (!next || second < *next) next = second;
  }
  return next;
}

void Cmos::Tick() {
  absl::MutexLock lock(&mutex_);
  UpdateFlags(now_());
  UpdateLine();
}

void Cmos::SetByte(uint8_t index, uint8_t value) {
  index &= kSize - 1;
  if (index <= kRegisterD || index == kCentury) return;  // the clock's
  absl::MutexLock lock(&mutex_);
  ram_[index] = value;
}

void Cmos::SetMemoryLayout(uint64_t ram_below_4g, uint64_t ram_above_4g, unsigned cpus) {
  const auto set16 = [this](uint8_t low, uint64_t value) {
    SetByte(low, static_cast<uint8_t>(value));
    SetByte(low + 1, static_cast<uint8_t>(value >> 8));
  };
  set16(kBaseMemoryLow, 640);
  const uint64_t extended_kib =
      std::min<uint64_t>(ram_below_4g > kMiB ? (ram_below_4g - kMiB) / kKiB : 0, 0xfc00);
  set16(kExtendedMemoryLow, extended_kib);
  set16(kExtendedMemoryLow2, extended_kib);
  const uint64_t below_4g = std::min(ram_below_4g, 4 * kGiB);
  set16(
      kMemoryAbove16MLow,
      std::min<uint64_t>(below_4g > 16 * kMiB ? (below_4g - 16 * kMiB) / (64 * kKiB) : 0, 0xffff));
  const uint64_t above_4g_units = std::min<uint64_t>(ram_above_4g / (64 * kKiB), 0xffffff);
  for (uint8_t i = 0; i < 3; ++i) {
    SetByte(kMemoryAbove4GLow + i, static_cast<uint8_t>(above_4g_units >> (8 * i)));
  }
  SetByte(kCpuCountLess1, static_cast<uint8_t>(std::clamp(cpus, 1u, 256u) - 1));
}

uint8_t Cmos::ReadByte(uint8_t index) {
  absl::MutexLock lock(&mutex_);
  return ReadLocked(index & (kSize - 1));
}

bool Cmos::nmi_masked() const {
  absl::MutexLock lock(&mutex_);
  return nmi_masked_;
}

void Cmos::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < data.size(); ++i) {
    // The index port reads as an open bus (QEMU's too); the data port, the selected byte.
    data[i] = offset + i == 1 ? ReadLocked(index_) : 0xff;
  }
}

void Cmos::Write(uint64_t offset, std::span<const uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < data.size(); ++i) {
    if (offset + i == 0) {
      index_ = data[i] & (kSize - 1);
      nmi_masked_ = (data[i] & 0x80) != 0;
    } else if (offset + i == 1) {
      WriteLocked(index_, data[i]);
    }
  }
}

bool Cmos::IsTimeRegister(uint8_t index) {
  return index == kSeconds || index == kMinutes || index == kHours || index == kDayOfWeek ||
         index == kDayOfMonth || index == kMonth || index == kYear || index == kCentury;
}

absl::CivilSecond Cmos::GuestTime() const { return HostSecond(now_() + offset_); }

void Cmos::FreezeTime() {
  for (uint8_t index :
       {kSeconds, kMinutes, kHours, kDayOfWeek, kDayOfMonth, kMonth, kYear, kCentury}) {
    ram_[index] = ReadLocked(index);
  }
}

void Cmos::StartTime() {
  // The fields as the guest left them, normalized once (a February 30 is March 1 or 2).
  const absl::CivilSecond time(int64_t{Decode(ram_[kCentury])} * 100 + Decode(ram_[kYear]),
                               Decode(ram_[kMonth]), Decode(ram_[kDayOfMonth]),
                               DecodeHours(ram_[kHours]), Decode(ram_[kMinutes]),
                               Decode(ram_[kSeconds]));
  SetTime(time);
}

void Cmos::SetTime(absl::CivilSecond time) {
  offset_ = absl::FromCivil(time, Utc()) - absl::FromCivil(HostSecond(now_()), Utc());
}

uint8_t Cmos::Encode(int value) const {
  value = Mod100(value);
  if ((ram_[kRegisterB] & kBinary) != 0) return static_cast<uint8_t>(value);
  return static_cast<uint8_t>((value / 10) << 4 | (value % 10));
}

int Cmos::Decode(uint8_t value) const {
  if ((ram_[kRegisterB] & kBinary) != 0) return value;
  // A digit above 9 is out of range, not an error: civil time normalizes what it makes.
  return (value >> 4) * 10 + (value & 0xf);
}

uint8_t Cmos::EncodeHours(int hours) const {
  if ((ram_[kRegisterB] & kHour24) != 0) return Encode(hours);
  const int twelve = hours % 12 == 0 ? 12 : hours % 12;
  return static_cast<uint8_t>(Encode(twelve) | (hours >= 12 ? kPm : 0));
}

int Cmos::DecodeHours(uint8_t value) const {
  if ((ram_[kRegisterB] & kHour24) != 0) return Decode(value);
  return Decode(value & ~kPm) % 12 + ((value & kPm) != 0 ? 12 : 0);
}

uint8_t Cmos::ReadLocked(uint8_t index) {
  // While SET holds the clock, its registers are the bytes as they were or as the guest wrote them.
  if ((ram_[kRegisterB] & kSet) != 0 && IsTimeRegister(index)) return ram_[index];
  switch (index) {
    case kSeconds:
      return Encode(GuestTime().second());
    case kMinutes:
      return Encode(GuestTime().minute());
    case kHours:
      return EncodeHours(GuestTime().hour());
    case kDayOfWeek: {
      // absl's weekdays run Monday (0) to Sunday (6); the RTC's Sunday (1) to Saturday (7).
      const int weekday = static_cast<int>(absl::GetWeekday(absl::CivilDay(GuestTime())));
      return Encode((weekday + 1) % 7 + 1);
    }
    case kDayOfMonth:
      return Encode(GuestTime().day());
    case kMonth:
      return Encode(GuestTime().month());
    case kYear:
      return Encode(Mod100(GuestTime().year()));
    case kCentury:
      return Encode(Mod100(Div100(GuestTime().year())));
    case kRegisterA: {
      uint8_t value = ram_[kRegisterA] & ~kUpdateInProgress;
      // No update runs while SET holds the registers (MC146818A, register B).
      if ((ram_[kRegisterB] & kSet) == 0) {
        const absl::Time now = now_();
        const absl::Duration into_second = now - absl::FromCivil(HostSecond(now), Utc());
        if (into_second >= absl::Seconds(1) - kUpdateWindow) value |= kUpdateInProgress;
      }
      return value;
    }
    case kRegisterC: {
      // Reading C returns the flags due by now and clears them, and with them the request.
      UpdateFlags(now_());
      uint8_t value = flags_;
      if ((flags_ & ram_[kRegisterB] & kInterruptFlags) != 0) value |= kInterruptRequest;
      flags_ = 0;
      const bool was_raised = line_raised_;
      UpdateLine();
      if (was_raised && schedule_changed_) schedule_changed_();
      return value;
    }
    case kRegisterD:
      return kValidRamAndTime;
    default:
      return ram_[index];
  }
}

void Cmos::SetTimeField(uint8_t index, uint8_t value) {
  // Without SET, one field changes at once (normalized with the others as they are now).
  const absl::CivilSecond now = GuestTime();
  int64_t year = now.year();
  int month = now.month(), day = now.day(), hour = now.hour(), minute = now.minute(),
      second = now.second();
  switch (index) {
    case kSeconds:
      second = Decode(value);
      break;
    case kMinutes:
      minute = Decode(value);
      break;
    case kHours:
      hour = DecodeHours(value);
      break;
    case kDayOfMonth:
      day = Decode(value);
      break;
    case kMonth:
      month = Decode(value);
      break;
    case kYear:
      year = Div100(year) * 100 + Decode(value);
      break;
    case kCentury:
      year = int64_t{Decode(value)} * 100 + Mod100(year);
      break;
    default:
      return;
  }
  SetTime(absl::CivilSecond(year, month, day, hour, minute, second));
}

void Cmos::WriteLocked(uint8_t index, uint8_t value) {
  if ((ram_[kRegisterB] & kSet) != 0 && IsTimeRegister(index)) {
    ram_[index] = value;  // the clock starts from it when SET goes off
    return;
  }
  if (IsTimeRegister(index) && index != kDayOfWeek) {
    SetTimeField(index, value);
    return;
  }
  switch (index) {
    case kDayOfWeek:  // always the date's
    case kRegisterC:  // read-only
    case kRegisterD:
      return;
    case kRegisterA:
      UpdateFlags(now_());  // what was due under the old rate
      ram_[kRegisterA] = value & ~kUpdateInProgress;
      if (schedule_changed_) schedule_changed_();
      return;
    case kRegisterB: {
      UpdateFlags(now_());
      const bool was_set = (ram_[kRegisterB] & kSet) != 0;
      const bool set = (value & kSet) != 0;
      if (!was_set && set) FreezeTime();  // the registers stop where the clock is, in B's format
      ram_[kRegisterB] = value;
      if (was_set && !set) StartTime();  // and the clock starts from them, in the new format
      // A flag already set raises the line as soon as its enable is set; clearing the enable
      // lowers it.
      UpdateLine();
      if (schedule_changed_) schedule_changed_();
      return;
    }
    default:
      ram_[index] = value;
      return;
  }
}

}  // namespace devices::legacy

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

}  // namespace

Cmos::Cmos(std::function<absl::Time()> now) : now_(std::move(now)) {
  absl::MutexLock lock(&mutex_);
  ram_[kRegisterA] = kRegisterADefault;
  ram_[kRegisterB] = kRegisterBDefault;
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
    case kRegisterC:
      return 0;  // no interrupt flag is ever raised (the class comment)
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
      ram_[kRegisterA] = value & ~kUpdateInProgress;
      return;
    case kRegisterB: {
      const bool was_set = (ram_[kRegisterB] & kSet) != 0;
      const bool set = (value & kSet) != 0;
      if (!was_set && set) FreezeTime();  // the registers stop where the clock is, in B's format
      ram_[kRegisterB] = value;
      if (was_set && !set) StartTime();  // and the clock starts from them, in the new format
      return;
    }
    default:
      ram_[index] = value;
      return;
  }
}

}  // namespace devices::legacy

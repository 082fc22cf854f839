#ifndef DEVICES_LEGACY_CMOS_H_
#define DEVICES_LEGACY_CMOS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/irq_line.h"

namespace devices::legacy {

// The PC's CMOS: a Motorola MC146818A-compatible real-time clock with 128 bytes of battery-backed
// RAM, behind the index/data ports 0x70 and 0x71. Firmware reads the machine's memory size and its
// own settings from the RAM (SeaBIOS: base and extended memory, memory above 16 MiB and 4 GiB, the
// shutdown status), and guests read and set the time.
//
//   0x70  write: bits 6:0 select a byte; bit 7 is the NMI mask of the PC's glue logic (kept, and
//         readable through nmi_masked(), but nothing else: the VMM raises no NMI). Read: 0xff.
//   0x71  read/write the selected byte. The index stays selected after an access.
//
// The clock (MC146818A data sheet: registers 0x00-0x0d; the PC's century byte at 0x32) is the
// host's UTC clock plus an offset the guest sets by writing the time: each read converts the
// current time to the format register B asks for (BCD or binary, 24- or 12-hour with bit 7 for
// p.m.), so the clock never drifts from the host's and costs nothing while unread. Register B's SET
// bit freezes the registers: the guest reads and writes their bytes as they are, and clearing SET
// starts the clock from them, as Linux's and SeaBIOS's setters expect (fields written one by one,
// checked together). A write without SET changes that one field at once. What a
// hostile guest writes cannot break it: fields out of range (month 0x99, a BCD digit of 0xf) are
// normalized as civil time (absl::CivilSecond), the offset saturates (absl::Duration), and the
// weekday is always the date's (writes to register 6 are ignored).
//
// Register A reads the update-in-progress bit in the last 244 microseconds of each second (when
// the data sheet says the registers may not be read), so a guest that polls UIP before reading, as
// Linux does, reads right after an update. Register D reads "valid RAM and time" (bit 7).
//
// Interrupts (IRQ 8). Register C's flags are set as the data sheet says whatever register B
// enables: PF at each periodic edge (register A's rate select; 1024 Hz by default), UF at each
// second's update, AF at the second the alarm registers match (0xc0-0xff: any value). They are
// worked out from the host's clock when the guest reads register C or when Tick() runs, so no
// thread runs for them; reading C returns and clears them. IRQF (C bit 7) and the IRQ line are set
// while a flag B enables is set, until C is read (the line is a level; the PIC and IOAPIC see its
// edge). For an enabled interrupt to come on time, the assembly calls Tick() at NextTick() and
// asks again whenever the device says its schedule changed. Only the 32.768 kHz time base with
// the divider running (register A bits 6:4 = 010) counts; other divider values stop the updates.
//
// Thread-safe: vCPU threads may access it at once, and the assembly's timer call Tick().
class Cmos : public vmm::BusDevice {
 public:
  static constexpr uint16_t kPortBase = 0x70;
  static constexpr uint64_t kPortCount = 2;
  static constexpr size_t kSize = 128;

  // Register indexes (MC146818A; the PC's NVRAM layout as SeaBIOS and QEMU use it).
  static constexpr uint8_t kSeconds = 0x00;
  static constexpr uint8_t kSecondsAlarm = 0x01;
  static constexpr uint8_t kMinutes = 0x02;
  static constexpr uint8_t kMinutesAlarm = 0x03;
  static constexpr uint8_t kHours = 0x04;
  static constexpr uint8_t kHoursAlarm = 0x05;
  static constexpr uint8_t kDayOfWeek = 0x06;  // 1 = Sunday
  static constexpr uint8_t kDayOfMonth = 0x07;
  static constexpr uint8_t kMonth = 0x08;
  static constexpr uint8_t kYear = 0x09;  // within the century
  static constexpr uint8_t kRegisterA = 0x0a;
  static constexpr uint8_t kRegisterB = 0x0b;
  static constexpr uint8_t kRegisterC = 0x0c;
  static constexpr uint8_t kRegisterD = 0x0d;
  static constexpr uint8_t kShutdownStatus = 0x0f;
  static constexpr uint8_t kEquipment = 0x14;
  static constexpr uint8_t kBaseMemoryLow = 0x15;      // KiB below 1 MiB (640), low byte
  static constexpr uint8_t kExtendedMemoryLow = 0x17;  // KiB from 1 MiB, at most 0xfc00
  static constexpr uint8_t kCentury = 0x32;
  static constexpr uint8_t kExtendedMemoryLow2 = 0x30;  // the same, the copy POST keeps
  static constexpr uint8_t kMemoryAbove16MLow = 0x34;   // 64 KiB units from 16 MiB to 4 GiB
  static constexpr uint8_t kMemoryAbove4GLow = 0x5b;    // 64 KiB units above 4 GiB, 3 bytes
  static constexpr uint8_t kCpuCountLess1 = 0x5f;       // QEMU's: CPUs - 1

  // Register A: update in progress, and the divider and rate bits (stored as written).
  static constexpr uint8_t kUpdateInProgress = 0x80;
  static constexpr uint8_t kRegisterADefault = 0x26;  // 32.768 kHz time base, 1024 Hz rate
  static constexpr uint8_t kRateSelect = 0x0f;
  static constexpr uint8_t kDivider = 0x70;
  static constexpr uint8_t kDividerRunning = 0x20;  // 32.768 kHz, not in reset
  // Register B.
  static constexpr uint8_t kSet = 0x80;
  static constexpr uint8_t kPeriodicInterruptEnable = 0x40;
  static constexpr uint8_t kAlarmInterruptEnable = 0x20;
  static constexpr uint8_t kUpdateInterruptEnable = 0x10;
  // Register C: each flag is the same bit as its enable in register B.
  static constexpr uint8_t kInterruptRequest = 0x80;
  static constexpr uint8_t kPeriodicFlag = 0x40;
  static constexpr uint8_t kAlarmFlag = 0x20;
  static constexpr uint8_t kUpdateFlag = 0x10;
  static constexpr uint8_t kInterruptFlags = 0x70;
  // An alarm byte of 0xc0-0xff matches any value of its field.
  static constexpr uint8_t kAlarmAnyValue = 0xc0;
  static constexpr uint8_t kBinary = 0x04;  // DM: binary, not BCD
  static constexpr uint8_t kHour24 = 0x02;
  static constexpr uint8_t kRegisterBDefault = kHour24;
  // Register D.
  static constexpr uint8_t kValidRamAndTime = 0x80;
  // The hours byte's p.m. flag in 12-hour mode.
  static constexpr uint8_t kPm = 0x80;

  // The last part of each second in which register A reads kUpdateInProgress.
  static constexpr absl::Duration kUpdateWindow = absl::Microseconds(244);

  // `now` is the host's clock (tests pass their own). Without an IRQ line, no interrupt is raised
  // (the flags still are).
  explicit Cmos(std::function<absl::Time()> now = absl::Now);
  // `irq`: IRQ 8. `schedule_changed`: called (with the device's lock held: it must not call back)
  // when NextTick() may have changed, so the assembly's timer asks again.
  Cmos(std::shared_ptr<vmm::IrqLine> irq, std::function<void()> schedule_changed,
       std::function<absl::Time()> now = absl::Now);

  // When Tick() must next run for an enabled interrupt to be raised on time: the next periodic
  // edge with PIE, the next second with UIE or AIE. None while no interrupt is enabled, or while
  // the line is already raised (nothing changes until register C is read).
  std::optional<absl::Time> NextTick();
  // Sets the flags due by now and raises the line if an enabled one is set.
  void Tick();

  // The assembly fills the RAM before the guest runs (the time registers are the clock's, not
  // RAM: these set bytes 0x0e and up).
  void SetByte(uint8_t index, uint8_t value);
  // The memory-size bytes firmware reads (SeaBIOS's and QEMU's layout): 640 KiB base memory, the
  // extended memory between 1 and 64 MiB, the 64 KiB units between 16 MiB and `ram_below_4g`
  // and from 4 GiB to 4 GiB + `ram_above_4g`, and the CPU count.
  void SetMemoryLayout(uint64_t ram_below_4g, uint64_t ram_above_4g, unsigned cpus);

  // What the guest reads at `index` now (the test's and the fuzzer's view of the device).
  uint8_t ReadByte(uint8_t index);
  bool nmi_masked() const;

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

 private:
  uint8_t ReadLocked(uint8_t index) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The flags due between evaluated_until_ and `now`; then the line as the flags and enables say.
  void UpdateFlags(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateLine() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool AlarmMatches(absl::CivilSecond time) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The periodic interrupt's period, if register A selects one and the divider runs.
  std::optional<absl::Duration> PeriodicPeriod() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool Updating() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteLocked(uint8_t index, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  static bool IsTimeRegister(uint8_t index);
  // The guest's time now: the host's plus the offset (what the registers show while SET is off).
  absl::CivilSecond GuestTime() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // SET on: the time registers' bytes become RAM the guest reads and writes. SET off: the clock
  // starts from them.
  void FreezeTime() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StartTime() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SetTime(absl::CivilSecond time) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A write of one clock register while the clock runs.
  void SetTimeField(uint8_t index, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // A clock register as register B's format asks for, and back.
  uint8_t Encode(int value) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  int Decode(uint8_t value) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint8_t EncodeHours(int hours) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  int DecodeHours(uint8_t value) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::function<absl::Time()> now_;
  mutable absl::Mutex mutex_;
  std::array<uint8_t, kSize> ram_ ABSL_GUARDED_BY(mutex_){};
  uint8_t index_ ABSL_GUARDED_BY(mutex_) = 0;
  bool nmi_masked_ ABSL_GUARDED_BY(mutex_) = false;
  absl::Duration offset_ ABSL_GUARDED_BY(mutex_);  // guest time minus host time, whole seconds
  const std::shared_ptr<vmm::IrqLine> irq_;
  const std::function<void()> schedule_changed_;
  uint8_t flags_ ABSL_GUARDED_BY(mutex_) = 0;           // register C's PF, AF, UF
  absl::Time evaluated_until_ ABSL_GUARDED_BY(mutex_);  // the flags are due up to here
  bool line_raised_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_CMOS_H_

#ifndef DEVICES_LEGACY_ACPI_PM_H_
#define DEVICES_LEGACY_ACPI_PM_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/acpi_pm_layout.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/irq_line.h"

namespace devices::legacy {

// The ACPI fixed hardware of a PC (ACPI 6.5 4.8 "ACPI Hardware Model", the fixed-hardware model,
// not hardware-reduced): the PM1a event and control blocks, the power-management timer, and the
// FADT's reset register, in one 16-port I/O block the FADT points into (docs/machine.md "ACPI
// tables"). The layout is QEMU's PIIX4 PM (event block, control block, timer at +0/+4/+8), with
// the reset register after the timer:
//
//   +0x0  PM1_STS  16 bits  4.8.3.1.1: write 1 to clear. Bit 0 TMR_STS (bit 23 of the timer
//                           changed), bit 8 PWRBTN_STS (PressPowerButton()), bit 15 WAK_STS
//                           (never set: the machine does not sleep). Other bits read 0.
//   +0x2  PM1_EN   16 bits  4.8.3.1.2: read/write. Bits 0 TMR_EN, 5 GBL_EN, 8 PWRBTN_EN, 9 SLPBTN_EN,
//                           10 RTC_EN, 14 PCIEXP_WAKE_DIS keep what is written (ACPICA reads enable
//                           bits back to check they "stick"); other bits read 0.
//   +0x4  PM1_CNT  16 bits  4.8.3.2.1: bit 0 SCI_EN reads 1 (the machine is always in ACPI mode: no
//                           SMI command port), bit 1 BM_RLD and SLP_TYP (bits 12:10) keep what is
//                           written; GBL_RLS (bit 2) and SLP_EN (bit 13) are write-only and read 0.
//                           Writing SLP_EN with SLP_TYP = kSleepTypeS5 (what \_S5_ announces) calls
//                           `on_power_off`; other sleep types are ignored (no other \_Sx exists).
//   +0x6  reserved          reads 0, writes ignored.
//   +0x8  PM_TMR   32 bits  4.8.3.3: read-only, a 24-bit counter (bits 31:24 read 0; the FADT's
//                           TMR_VAL_EXT flag is clear) at 3.579545 MHz from the monotonic clock.
//   +0xc  RESET    8 bits   4.8.3.6: writing kResetValue, as a single byte, calls `on_reset`.
//   +0xd  reserved          reads 0, writes ignored.
//
// Accesses of 1, 2 or 4 bytes anywhere in the block are served byte by byte from one snapshot of
// the registers (so ACPICA's 16-bit PM1 accesses and 32-bit timer reads, and an OS's byte
// accesses, all work); a multi-byte write applies to each register it covers. Any other size, or
// an access running past the block, reads 0 and writes nothing: a hostile guest can only stop the
// VM the two documented ways.
//
// The SCI: `sci` is driven high while (PM1_STS & PM1_EN) has an event bit set (TMR, GBL, PWRBTN,
// SLPBTN, RTC: 4.8.3.1), low otherwise; the FADT declares it as ISA IRQ 9, level-triggered,
// active-high (MADT interrupt source override). TMR_STS is computed when the device is accessed
// (there is no timer thread), so a guest that enables TMR_EN gets the timer-overflow SCI at its next
// access to the block rather than exactly when bit 23 flips; Linux never enables it.
//
// Thread-safe: Read/Write come from vCPU threads, PressPowerButton from any thread. The callbacks
// are called without the device's lock held; `sci` is driven with it held (so levels reach the
// irqchip in the order the state changed).
// The block's layout (offsets, sizes, the reset value, the S5 sleep type) is the machine's
// (vmm/machine/acpi_pm_layout.h), inherited here so the registers read as AcpiPowerManagement's.
class AcpiPowerManagement : public vmm::BusDevice, public vmm::AcpiPmLayout {
 public:
  // 4.8.3.1.1 PM1 Status bits.
  static constexpr uint16_t kTimerStatus = 1u << 0;
  static constexpr uint16_t kBusMasterStatus = 1u << 4;
  static constexpr uint16_t kGlobalStatus = 1u << 5;
  static constexpr uint16_t kPowerButtonStatus = 1u << 8;
  static constexpr uint16_t kSleepButtonStatus = 1u << 9;
  static constexpr uint16_t kRtcStatus = 1u << 10;
  static constexpr uint16_t kWakeStatus = 1u << 15;
  // 4.8.3.1.2 PM1 Enable bits (an event's enable bit has its status bit's position).
  static constexpr uint16_t kTimerEnable = kTimerStatus;
  static constexpr uint16_t kGlobalEnable = kGlobalStatus;
  static constexpr uint16_t kPowerButtonEnable = kPowerButtonStatus;
  static constexpr uint16_t kSleepButtonEnable = kSleepButtonStatus;
  static constexpr uint16_t kRtcEnable = kRtcStatus;
  static constexpr uint16_t kPciExpressWakeDisable = 1u << 14;
  static constexpr uint16_t kEnableBits = kTimerEnable | kGlobalEnable | kPowerButtonEnable |
                                          kSleepButtonEnable | kRtcEnable | kPciExpressWakeDisable;
  // The status bits that raise the SCI when enabled.
  static constexpr uint16_t kSciEvents =
      kTimerStatus | kGlobalStatus | kPowerButtonStatus | kSleepButtonStatus | kRtcStatus;
  // 4.8.3.2.1 PM1 Control bits.
  static constexpr uint16_t kSciEnable = 1u << 0;
  static constexpr uint16_t kBusMasterReload = 1u << 1;
  static constexpr uint16_t kGlobalRelease = 1u << 2;
  static constexpr int kSleepTypeShift = 10;
  static constexpr uint16_t kSleepTypeMask = 0x7u << kSleepTypeShift;
  static constexpr uint16_t kSleepEnable = 1u << 13;

  // 4.8.3.3: the PM timer runs at 3.579545 MHz and is 24 bits wide here; TMR_STS is set whenever
  // its bit 23 changes.
  static constexpr uint64_t kTimerHz = 3'579'545;
  static constexpr uint32_t kTimerMask = 0x00ff'ffff;
  static constexpr int kTimerStatusBit = 23;

  // Monotonic nanoseconds; the default reads CLOCK_MONOTONIC.
  using Clock = std::function<uint64_t()>;
  static uint64_t MonotonicNanoseconds();

  // `sci` must not be null. The timer counts from 0 at construction.
  AcpiPowerManagement(std::shared_ptr<vmm::IrqLine> sci, std::function<void()> on_power_off,
                      std::function<void()> on_reset, Clock clock = &MonotonicNanoseconds);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // Sets PWRBTN_STS, as pressing the fixed-feature power button does (4.8.2.2.1.1); with PWRBTN_EN
  // set, the SCI rises and an OS (Linux's acpi button driver, acpid/systemd-logind) shuts down.
  void PressPowerButton();

 private:
  // The register block as the guest sees it now.
  struct Registers {
    uint16_t status;
    uint16_t enable;
    uint16_t control;
    uint32_t timer;
  };
  Registers SnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The 24-bit timer value now; sets TMR_STS when bit 23 changed since the last look.
  uint32_t UpdateTimerLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Drives the SCI to (status & enable & kSciEvents) != 0 if that changed.
  void UpdateSciLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::shared_ptr<vmm::IrqLine> sci_;
  const std::function<void()> on_power_off_;
  const std::function<void()> on_reset_;
  const Clock clock_;
  const uint64_t epoch_ns_;

  absl::Mutex mutex_;
  uint16_t status_ ABSL_GUARDED_BY(mutex_) = 0;
  uint16_t enable_ ABSL_GUARDED_BY(mutex_) = 0;
  uint16_t control_ ABSL_GUARDED_BY(mutex_) = kSciEnable;  // stored bits; SCI_EN always reads 1
  // Timer ticks >> kTimerStatusBit at the last look: a change means bit 23 flipped.
  uint64_t timer_period_ ABSL_GUARDED_BY(mutex_) = 0;
  bool sci_level_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_ACPI_PM_H_

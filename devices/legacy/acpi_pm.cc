#include "devices/legacy/acpi_pm.h"

#include <time.h>

#include <array>

#include "vmm/sys_util/byte_order.h"

namespace devices::legacy {
namespace {

constexpr uint64_t kNanosecondsPerSecond = 1'000'000'000;

// The stored (read/write) bits of PM1_CNT.
constexpr uint16_t kControlStoredBits =
    AcpiPowerManagement::kBusMasterReload | AcpiPowerManagement::kSleepTypeMask;

bool IsValidAccess(uint64_t offset, size_t size) {
  return (size == 1 || size == 2 || size == 4) && offset < AcpiPowerManagement::kBlockSize &&
         size <= AcpiPowerManagement::kBlockSize - offset;
}

// The bits of a `width`-byte register at `register_offset` that an access at [offset, offset +
// bytes.size()) covers, and the value it writes there.
struct RegisterWrite {
  uint32_t mask = 0;
  uint32_t value = 0;
};
RegisterWrite Slice(uint64_t register_offset, int width, uint64_t offset,
                    std::span<const uint8_t> bytes) {
  RegisterWrite out;
  for (int i = 0; i < width; ++i) {
    const uint64_t address = register_offset + i;
    if (address < offset || address >= offset + bytes.size()) continue;
    out.mask |= 0xffu << (8 * i);
    out.value |= uint32_t{bytes[address - offset]} << (8 * i);
  }
  return out;
}

}  // namespace

uint64_t AcpiPowerManagement::MonotonicNanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * kNanosecondsPerSecond +
         static_cast<uint64_t>(now.tv_nsec);
}

AcpiPowerManagement::AcpiPowerManagement(std::shared_ptr<vmm::IrqLine> sci,
                                         std::function<void()> on_power_off,
                                         std::function<void()> on_reset, Clock clock)
    : sci_(std::move(sci)),
      on_power_off_(std::move(on_power_off)),
      on_reset_(std::move(on_reset)),
      clock_(std::move(clock)),
      epoch_ns_(clock_()) {}

uint32_t AcpiPowerManagement::UpdateTimerLocked() {
  const uint64_t now = clock_();
  // A clock that went backwards (only a broken or fake one) counts as no time passing.
  const uint64_t elapsed_ns = now >= epoch_ns_ ? now - epoch_ns_ : 0;
  // 128-bit intermediate: elapsed_ns * kTimerHz overflows 64 bits after about 85 minutes.
  const auto ticks = static_cast<uint64_t>(static_cast<unsigned __int128>(elapsed_ns) * kTimerHz /
                                           kNanosecondsPerSecond);
  const uint64_t period = ticks >> kTimerStatusBit;
  if (period != timer_period_) {
    timer_period_ = period;
    status_ |= kTimerStatus;
  }
  return static_cast<uint32_t>(ticks) & kTimerMask;
}

void AcpiPowerManagement::UpdateSciLocked() {
  const bool level = (status_ & enable_ & kSciEvents) != 0;
  if (level == sci_level_) return;
  sci_level_ = level;
  sci_->SetLevel(level);
}

AcpiPowerManagement::Registers AcpiPowerManagement::SnapshotLocked() {
  const uint32_t timer = UpdateTimerLocked();
  return Registers{.status = status_,
                   .enable = enable_,
                   .control = static_cast<uint16_t>(control_ | kSciEnable),
                   .timer = timer};
}

void AcpiPowerManagement::Read(uint64_t offset, std::span<uint8_t> data) {
  for (uint8_t& byte : data) byte = 0;
  if (!IsValidAccess(offset, data.size())) return;
  std::array<uint8_t, kBlockSize> block{};
  {
    absl::MutexLock lock(&mutex_);
    const Registers registers = SnapshotLocked();
    const auto put = [&block](uint64_t at, uint32_t value, int width) {
      sys_util::StoreLittleEndian(value, std::span<uint8_t>(block).subspan(at, width));
    };
    put(kPm1StatusOffset, registers.status, 2);
    put(kPm1EnableOffset, registers.enable, 2);
    put(kPm1ControlOffset, registers.control, 2);
    put(kPmTimerOffset, registers.timer, 4);
    // A read may have found a new TMR_STS.
    UpdateSciLocked();
  }
  for (size_t i = 0; i < data.size(); ++i) data[i] = block[offset + i];
}

void AcpiPowerManagement::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (!IsValidAccess(offset, data.size())) return;
  bool power_off = false;
  bool reset = false;
  {
    absl::MutexLock lock(&mutex_);
    UpdateTimerLocked();
    // PM1_STS: writing 1 clears a bit (4.8.3.1.1); only bits that can be set exist.
    const RegisterWrite status = Slice(kPm1StatusOffset, 2, offset, data);
    status_ &= static_cast<uint16_t>(~(status.value & status.mask));
    // PM1_EN: the defined enable bits keep what is written.
    const RegisterWrite enable = Slice(kPm1EnableOffset, 2, offset, data);
    enable_ = static_cast<uint16_t>((enable_ & ~enable.mask) | (enable.value & enable.mask)) &
              kEnableBits;
    // PM1_CNT: SLP_TYP and BM_RLD are stored; SLP_EN triggers the sleep type being written
    // (4.8.3.2.1 / 7.4.2: OSPM writes SLP_TYPx together with SLP_EN).
    const RegisterWrite control = Slice(kPm1ControlOffset, 2, offset, data);
    if (control.mask != 0) {
      const uint32_t written = control.value & control.mask;
      control_ = static_cast<uint16_t>((control_ & ~control.mask) | written) & kControlStoredBits;
      const uint16_t sleep_type = (control_ & kSleepTypeMask) >> kSleepTypeShift;
      power_off = (written & kSleepEnable) != 0 && sleep_type == kSleepTypeS5;
    }
    // RESET_REG: the FADT declares an 8-bit register; only a byte write of the value resets.
    reset = offset == kResetOffset && data.size() == 1 && data[0] == kResetValue;
    UpdateSciLocked();
  }
  if (power_off) on_power_off_();
  if (reset) on_reset_();
}

void AcpiPowerManagement::PressPowerButton() {
  absl::MutexLock lock(&mutex_);
  status_ |= kPowerButtonStatus;
  UpdateSciLocked();
}

}  // namespace devices::legacy

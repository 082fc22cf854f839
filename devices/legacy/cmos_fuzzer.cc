// Fuzz target for the CMOS RTC/NVRAM (devices/legacy/cmos.h): the input is a hostile guest's or
// firmware's port accesses and the host clock's steps between them. The device must never crash
// or hang, and what it reads back must hold its invariants (checked here, so the plain gcc build
// finds them too): the running clock's registers are two valid digits, register C's low nibble
// reads 0 and its IRQF is set exactly when an enabled flag is, reading it lowers IRQ 8, the line
// is high only while IRQF would read 1, register D reads "valid", and the NVRAM returns what was
// last written.
//
// Input: a list of operations, each one byte of kind (mod 4) followed by its operands:
//   0 write   u8 port offset (mod 2), u8 value
//   1 read    u8 port offset (mod 2)
//   2 access  u8 size (1 or 2) at 0x70: an outw/inw pair of bytes, u8 direction, 2 value bytes
//   3 clock   u32 microseconds the host's clock moves on (bit 31: backwards), then a Tick() as
//             the assembly's timer makes (and NextTick() must lie ahead)
// Built normally this file defines only LLVMFuzzerTestOneInput; with CMOS_FUZZER_SMOKE_MAIN it
// also has a main() that runs hand-made seeds and deterministic pseudo-random inputs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/time/time.h"
#include "devices/legacy/cmos.h"
#include "devices/virtio/test_random.h"

namespace {

using devices::legacy::Cmos;

[[noreturn]] void Fail(const char* what, int index, int value) {
  std::fprintf(stderr, "cmos_fuzzer: %s (index 0x%02x, value 0x%02x)\n", what, index, value);
  std::abort();
}

using Input = devices::virtio::testing::FuzzInput;

bool IsClockRegister(uint8_t index) { return index <= Cmos::kYear || index == Cmos::kCentury; }

bool IsAlarmRegister(uint8_t index) {
  return index == Cmos::kSecondsAlarm || index == Cmos::kMinutesAlarm || index == Cmos::kHoursAlarm;
}

// IRQ 8 as the interrupt controller sees it.
class FakeIrqLine : public vmm::IrqLine {
 public:
  void SetLevel(bool asserted) override {
    if (asserted == level) Fail("the line was set to the level it had", 0, asserted);
    level = asserted;
  }
  bool level = false;
};

// What the guest reads at every index must be possible.
void CheckReadable(Cmos& cmos, const FakeIrqLine& irq,
                   const std::array<int, Cmos::kSize>& written) {
  const uint8_t register_b = cmos.ReadByte(Cmos::kRegisterB);
  for (int i = 0; i < static_cast<int>(Cmos::kSize); ++i) {
    const auto index = static_cast<uint8_t>(i);
    const uint8_t value = cmos.ReadByte(index);
    // While SET holds the clock, its registers are bytes the guest writes as it likes.
    const bool held = (register_b & Cmos::kSet) != 0;
    if (IsClockRegister(index) && !IsAlarmRegister(index) && !held) {
      // 12-hour mode's p.m. flag is the hours byte's bit 7.
      const bool pm_flag = index == Cmos::kHours && (register_b & Cmos::kHour24) == 0;
      const uint8_t digits = pm_flag ? value & 0x7f : value;
      if ((register_b & Cmos::kBinary) == 0) {
        if ((digits & 0xf) > 9 || (digits >> 4) > 9) Fail("a clock register is not BCD", i, value);
      } else if (digits > 99) {
        Fail("a clock register is above 99", i, value);
      }
    } else if (index == Cmos::kRegisterC) {
      if ((value & 0x0f) != 0) Fail("register C's low nibble is set", i, value);
      const bool request = (value & register_b & Cmos::kInterruptFlags) != 0;
      if (((value & Cmos::kInterruptRequest) != 0) != request) Fail("IRQF is wrong", i, value);
      if (irq.level) Fail("reading register C left IRQ 8 raised", i, value);
    } else if (index == Cmos::kRegisterD && value != Cmos::kValidRamAndTime) {
      Fail("register D is not 'valid'", i, value);
    } else if (index > Cmos::kRegisterD && written[i] >= 0 && value != written[i]) {
      Fail("the NVRAM lost what was written", i, value);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::Time now = absl::FromUnixSeconds(1'765'000'000);
  auto irq = std::make_shared<FakeIrqLine>();
  int schedule_changes = 0;
  Cmos cmos(
      irq, [&schedule_changes] { ++schedule_changes; }, [&now] { return now; });
  Input input(data, size);
  std::array<int, Cmos::kSize> written;  // the NVRAM's last write by index, -1 for none
  written.fill(-1);
  uint8_t index = 0;
  const auto write = [&](uint64_t offset, uint8_t value) {
    cmos.Write(offset, std::span<const uint8_t>(&value, 1));
    if (offset == 0) index = value & 0x7f;
    if (offset == 1 && index > Cmos::kRegisterD && index != Cmos::kCentury) written[index] = value;
  };
  while (!input.done()) {
    switch (input.Take(1) % 4) {
      case 0: {
        const uint64_t offset = input.Take(1) % 2;
        write(offset, static_cast<uint8_t>(input.Take(1)));
        break;
      }
      case 1: {
        uint8_t value = 0;
        cmos.Read(input.Take(1) % 2, std::span<uint8_t>(&value, 1));
        break;
      }
      case 2: {
        const bool is_write = (input.Take(1) & 1) != 0;
        const auto low = static_cast<uint8_t>(input.Take(1));
        const auto high = static_cast<uint8_t>(input.Take(1));
        if (is_write) {
          write(0, low);
          write(1, high);
        } else {
          std::array<uint8_t, 2> value{};
          cmos.Read(0, value);
        }
        break;
      }
      case 3: {
        const uint64_t step = input.Take(4);
        const absl::Duration delta = absl::Microseconds(step & 0x7fffffff);
        now = (step & 0x80000000) != 0 ? now - delta : now + delta;
        cmos.Tick();
        if (const std::optional<absl::Time> next = cmos.NextTick(); next && *next <= now) {
          Fail("the next tick is not ahead", 0, 0);
        }
        if (irq->level && cmos.NextTick()) Fail("a tick asked for with the line raised", 0, 0);
        break;
      }
    }
  }
  CheckReadable(cmos, *irq, written);
  return 0;
}

#ifdef CMOS_FUZZER_SMOKE_MAIN

namespace {

void Append(std::vector<uint8_t>& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

void AppendPut(std::vector<uint8_t>& out, uint8_t index, uint8_t value) {
  Append(out, 0, 1);
  Append(out, 0, 1);
  Append(out, index, 1);
  Append(out, 0, 1);
  Append(out, 1, 1);
  Append(out, value, 1);
}

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  {  // Linux's setter in each format, with the clock moving between the steps.
    std::vector<uint8_t> s;
    for (const uint8_t format : {0x02, 0x00, 0x04, 0x06}) {
      AppendPut(s, Cmos::kRegisterB, 0x80 | format);
      for (uint8_t index = 0; index <= Cmos::kYear; ++index) AppendPut(s, index, 0x59);
      AppendPut(s, Cmos::kCentury, 0x21);
      Append(s, 3, 1);
      Append(s, 999'800, 4);
      AppendPut(s, Cmos::kRegisterB, format);
    }
    seeds.push_back(s);
  }
  {  // Every byte at every index, the clock going backwards.
    std::vector<uint8_t> s;
    for (int index = 0; index < 0x100; index += 7) {
      AppendPut(s, static_cast<uint8_t>(index), static_cast<uint8_t>(0xff - index));
      Append(s, 3, 1);
      Append(s, 0x80000000 | 123'456, 4);
    }
    seeds.push_back(s);
  }
  return seeds;
}

}  // namespace

int main() {
  return devices::virtio::testing::RunFuzzSmoke("cmos_fuzzer", Seeds(), 0x70c3057a, 400,
                                                LLVMFuzzerTestOneInput);
}

#endif  // CMOS_FUZZER_SMOKE_MAIN

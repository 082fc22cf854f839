#ifndef DEVICES_LEGACY_I8042_H_
#define DEVICES_LEGACY_I8042_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/bus.h"

namespace devices::legacy {

// The part of an i8042 keyboard controller a guest needs: the status and command registers at 0x64,
// the data port at 0x60, the controller commands Linux's i8042 driver issues while probing (read and
// write the command byte, self tests, port enable/disable) so it finds a controller with no
// keyboard, and command 0xFE (pulse the reset line), the classic way to reboot a PC: it calls
// `on_reset`. Registered as two one-byte devices: offset 0 of each is its port.
class I8042 {
 public:
  explicit I8042(std::function<void()> on_reset) : on_reset_(std::move(on_reset)) {}

  vmm::BusDevice& data_port() { return data_port_; }
  vmm::BusDevice& command_port() { return command_port_; }

 private:
  class Port : public vmm::BusDevice {
   public:
    Port(I8042* controller, bool is_command) : controller_(controller), is_command_(is_command) {}
    void Read(uint64_t offset, std::span<uint8_t> data) override;
    void Write(uint64_t offset, std::span<const uint8_t> data) override;

   private:
    I8042* const controller_;
    const bool is_command_;
  };

  uint8_t ReadStatus();
  uint8_t ReadData();
  void WriteCommand(uint8_t command);
  void WriteData(uint8_t value);

  const std::function<void()> on_reset_;
  Port data_port_{this, false};
  Port command_port_{this, true};

  absl::Mutex mutex_;
  std::optional<uint8_t> output_ ABSL_GUARDED_BY(mutex_);
  std::optional<uint8_t> pending_command_ ABSL_GUARDED_BY(mutex_);  // awaiting its data byte
  uint8_t command_byte_ ABSL_GUARDED_BY(mutex_) = 0x45;  // kbd IRQ, system flag, translation
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_I8042_H_

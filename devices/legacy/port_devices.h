#ifndef DEVICES_LEGACY_PORT_DEVICES_H_
#define DEVICES_LEGACY_PORT_DEVICES_H_

#include <cstdint>
#include <functional>
#include <span>

#include "vmm/machine/bus.h"

namespace devices::legacy {

// A one-byte port whose writes are handed to a callback and whose reads return a constant (0 by
// default). Used for the debug-exit port (the guest's exit status, as QEMU's isa-debug-exit), the
// POST code port 0x80 (boot progress markers the VMM timestamps) and the firmware's debug console
// (QEMU's debugcon, which reads back 0xe9 so firmware knows it is there).
class WriteOnlyPort : public vmm::BusDevice {
 public:
  explicit WriteOnlyPort(std::function<void(uint8_t)> on_write, uint8_t read_value = 0)
      : on_write_(std::move(on_write)), read_value_(read_value) {}
  void Read(uint64_t /*offset*/, std::span<uint8_t> data) override {
    for (uint8_t& byte : data) byte = read_value_;
  }
  void Write(uint64_t /*offset*/, std::span<const uint8_t> data) override {
    if (!data.empty()) on_write_(data[0]);
  }

 private:
  const std::function<void(uint8_t)> on_write_;
  const uint8_t read_value_;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_PORT_DEVICES_H_

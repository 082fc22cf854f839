#ifndef DEVICES_LEGACY_PORT_DEVICES_H_
#define DEVICES_LEGACY_PORT_DEVICES_H_

#include <cstdint>
#include <functional>
#include <span>

#include "vmm/machine/bus.h"

namespace devices::legacy {

// A one-byte port whose writes are handed to a callback and whose reads return 0. Used for the
// debug-exit port (the guest's exit status, as QEMU's isa-debug-exit) and the POST code port 0x80
// (boot progress markers the VMM timestamps).
class WriteOnlyPort : public vmm::BusDevice {
 public:
  explicit WriteOnlyPort(std::function<void(uint8_t)> on_write) : on_write_(std::move(on_write)) {}
  void Read(uint64_t /*offset*/, std::span<uint8_t> data) override {
    for (uint8_t& byte : data) byte = 0;
  }
  void Write(uint64_t /*offset*/, std::span<const uint8_t> data) override {
    if (!data.empty()) on_write_(data[0]);
  }

 private:
  const std::function<void(uint8_t)> on_write_;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_PORT_DEVICES_H_

#include "devices/legacy/i8042.h"

namespace devices::legacy {
namespace {

// Status register bits.
constexpr uint8_t kStatusOutputFull = 0x01;
constexpr uint8_t kStatusSystemFlag = 0x04;
constexpr uint8_t kStatusCommandLast = 0x08;

// Controller commands (written to port 0x64).
constexpr uint8_t kReadCommandByte = 0x20;
constexpr uint8_t kWriteCommandByte = 0x60;
constexpr uint8_t kDisableAux = 0xa7;
constexpr uint8_t kEnableAux = 0xa8;
constexpr uint8_t kTestAux = 0xa9;
constexpr uint8_t kSelfTest = 0xaa;
constexpr uint8_t kTestKeyboard = 0xab;
constexpr uint8_t kDisableKeyboard = 0xad;
constexpr uint8_t kEnableKeyboard = 0xae;
constexpr uint8_t kWriteAux = 0xd4;
constexpr uint8_t kPulseReset = 0xfe;

constexpr uint8_t kSelfTestPassed = 0x55;
constexpr uint8_t kInterfaceTestPassed = 0x00;

}  // namespace

void I8042::Port::Read(uint64_t /*offset*/, std::span<uint8_t> data) {
  if (data.empty()) return;
  data[0] = is_command_ ? controller_->ReadStatus() : controller_->ReadData();
  for (size_t i = 1; i < data.size(); ++i) data[i] = 0xff;
}

void I8042::Port::Write(uint64_t /*offset*/, std::span<const uint8_t> data) {
  if (data.empty()) return;
  if (is_command_) {
    controller_->WriteCommand(data[0]);
  } else {
    controller_->WriteData(data[0]);
  }
}

uint8_t I8042::ReadStatus() {
  absl::MutexLock lock(&mutex_);
  return kStatusSystemFlag | (pending_command_ ? kStatusCommandLast : 0) |
         (output_ ? kStatusOutputFull : 0);
}

uint8_t I8042::ReadData() {
  absl::MutexLock lock(&mutex_);
  const uint8_t value = output_.value_or(0);
  output_.reset();
  return value;
}

void I8042::WriteCommand(uint8_t command) {
  bool reset = false;
  {
    absl::MutexLock lock(&mutex_);
    pending_command_.reset();
    switch (command) {
      case kReadCommandByte:
        output_ = command_byte_;
        break;
      case kWriteCommandByte:
      case kWriteAux:
        pending_command_ = command;
        break;
      case kSelfTest:
        output_ = kSelfTestPassed;
        break;
      case kTestKeyboard:
      case kTestAux:
        output_ = kInterfaceTestPassed;
        break;
      case kDisableAux:
        command_byte_ |= 0x20;
        break;
      case kEnableAux:
        command_byte_ &= static_cast<uint8_t>(~0x20);
        break;
      case kDisableKeyboard:
        command_byte_ |= 0x10;
        break;
      case kEnableKeyboard:
        command_byte_ &= static_cast<uint8_t>(~0x10);
        break;
      case kPulseReset:
        reset = true;
        break;
      default:
        break;  // Other commands (LEDs, output port) have no effect here.
    }
  }
  // Outside the lock: the callback stops the VM and may wait for this vCPU's peers.
  if (reset) on_reset_();
}

void I8042::WriteData(uint8_t value) {
  absl::MutexLock lock(&mutex_);
  if (pending_command_ == kWriteCommandByte) command_byte_ = value;
  // Bytes for the (absent) keyboard or aux device are dropped; no reply means "no device".
  pending_command_.reset();
}

}  // namespace devices::legacy

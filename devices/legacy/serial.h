#ifndef DEVICES_LEGACY_SERIAL_H_
#define DEVICES_LEGACY_SERIAL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/irq_line.h"

namespace devices::legacy {

// A 16550A UART (National Semiconductor PC16550D data sheet): the eight registers, the divisor
// latch, FIFO mode reporting, loopback (Linux's 8250 driver probes it), and the receive-data and
// transmitter-empty interrupts. Transmission is instant, so THR is always empty; bytes the guest
// writes go to `output` at once. Host input queues in the receive FIFO.
class Serial : public vmm::BusDevice {
 public:
  static constexpr uint64_t kRegisterCount = 8;
  // Bounds host input held for a guest that does not read it.
  static constexpr size_t kMaxQueuedInput = 4096;

  using Output = std::function<void(uint8_t)>;
  Serial(std::shared_ptr<vmm::IrqLine> irq, Output output);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

  // Host input (stdin). Bytes beyond kMaxQueuedInput are dropped, as a real UART overruns.
  void QueueInput(std::span<const uint8_t> bytes);

 private:
  uint8_t ReadRegister(uint64_t offset) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteRegister(uint64_t offset, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint8_t InterruptIdentification() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateInterrupt() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::shared_ptr<vmm::IrqLine> irq_;
  const Output output_;

  absl::Mutex mutex_;
  std::deque<uint8_t> receive_fifo_ ABSL_GUARDED_BY(mutex_);
  uint8_t interrupt_enable_ ABSL_GUARDED_BY(mutex_) = 0;
  uint8_t line_control_ ABSL_GUARDED_BY(mutex_) = 0x03;   // 8N1
  uint8_t modem_control_ ABSL_GUARDED_BY(mutex_) = 0x08;  // OUT2
  uint8_t scratch_ ABSL_GUARDED_BY(mutex_) = 0;
  uint8_t fifo_control_ ABSL_GUARDED_BY(mutex_) = 0;
  uint16_t divisor_ ABSL_GUARDED_BY(mutex_) = 12;  // 9600 baud at 1.8432 MHz
  // The transmitter-empty interrupt is pending until the guest reads IIR (reporting it) or writes THR.
  bool thr_empty_interrupt_ ABSL_GUARDED_BY(mutex_) = false;
  bool irq_asserted_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_SERIAL_H_

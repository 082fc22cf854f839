#include "devices/legacy/serial.h"

namespace devices::legacy {
namespace {

// Register offsets (PC16550D table 2).
constexpr uint64_t kData = 0;             // RBR / THR, or DLL with DLAB
constexpr uint64_t kInterruptEnable = 1;  // IER, or DLM with DLAB
constexpr uint64_t kInterruptId = 2;      // IIR on read, FCR on write
constexpr uint64_t kLineControl = 3;
constexpr uint64_t kModemControl = 4;
constexpr uint64_t kLineStatus = 5;
constexpr uint64_t kModemStatus = 6;
constexpr uint64_t kScratch = 7;

constexpr uint8_t kIerReceiveData = 0x01;
constexpr uint8_t kIerThrEmpty = 0x02;
constexpr uint8_t kIerMask = 0x0f;

constexpr uint8_t kIirNoInterrupt = 0x01;
constexpr uint8_t kIirThrEmpty = 0x02;
constexpr uint8_t kIirReceiveData = 0x04;
constexpr uint8_t kIirFifoEnabled = 0xc0;

constexpr uint8_t kFcrEnable = 0x01;
constexpr uint8_t kFcrClearReceive = 0x02;

constexpr uint8_t kLcrDlab = 0x80;

constexpr uint8_t kMcrDtr = 0x01;
constexpr uint8_t kMcrRts = 0x02;
constexpr uint8_t kMcrOut1 = 0x04;
constexpr uint8_t kMcrOut2 = 0x08;
constexpr uint8_t kMcrLoopback = 0x10;

constexpr uint8_t kLsrDataReady = 0x01;
constexpr uint8_t kLsrThrEmpty = 0x20;
constexpr uint8_t kLsrTransmitterEmpty = 0x40;

constexpr uint8_t kMsrCts = 0x10;
constexpr uint8_t kMsrDsr = 0x20;
constexpr uint8_t kMsrRi = 0x40;
constexpr uint8_t kMsrDcd = 0x80;

}  // namespace

Serial::Serial(std::shared_ptr<vmm::IrqLine> irq, Output output)
    : irq_(std::move(irq)), output_(std::move(output)) {}

void Serial::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  // Wider accesses are byte accesses to consecutive registers.
  for (size_t i = 0; i < data.size(); ++i) data[i] = ReadRegister(offset + i);
  UpdateInterrupt();
}

void Serial::Write(uint64_t offset, std::span<const uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < data.size(); ++i) WriteRegister(offset + i, data[i]);
  UpdateInterrupt();
}

void Serial::QueueInput(std::span<const uint8_t> bytes) {
  absl::MutexLock lock(&mutex_);
  for (uint8_t byte : bytes) {
    if (receive_fifo_.size() >= kMaxQueuedInput) break;
    receive_fifo_.push_back(byte);
  }
  UpdateInterrupt();
}

uint8_t Serial::ReadRegister(uint64_t offset) {
  const bool dlab = (line_control_ & kLcrDlab) != 0;
  switch (offset) {
    case kData: {
      if (dlab) return static_cast<uint8_t>(divisor_);
      if (receive_fifo_.empty()) return 0;
      const uint8_t byte = receive_fifo_.front();
      receive_fifo_.pop_front();
      return byte;
    }
    case kInterruptEnable:
      return dlab ? static_cast<uint8_t>(divisor_ >> 8) : interrupt_enable_;
    case kInterruptId: {
      const uint8_t iir = InterruptIdentification();
      // Reading IIR while it reports THR empty acknowledges that interrupt (PC16550D table 4).
      if ((iir & 0x0f) == kIirThrEmpty) thr_empty_interrupt_ = false;
      return iir;
    }
    case kLineControl:
      return line_control_;
    case kModemControl:
      return modem_control_;
    case kLineStatus:
      return kLsrThrEmpty | kLsrTransmitterEmpty | (receive_fifo_.empty() ? 0 : kLsrDataReady);
    case kModemStatus:
      if (modem_control_ & kMcrLoopback) {
        // In loopback the modem outputs feed the modem inputs: DTR->DSR, RTS->CTS, OUT1->RI,
        // OUT2->DCD.
        return ((modem_control_ & kMcrDtr) ? kMsrDsr : 0) |
               ((modem_control_ & kMcrRts) ? kMsrCts : 0) |
               ((modem_control_ & kMcrOut1) ? kMsrRi : 0) |
               ((modem_control_ & kMcrOut2) ? kMsrDcd : 0);
      }
      // A console with carrier, data set ready and clear to send.
      return kMsrDcd | kMsrDsr | kMsrCts;
    case kScratch:
      return scratch_;
    default:
      return 0xff;
  }
}

void Serial::WriteRegister(uint64_t offset, uint8_t value) {
  const bool dlab = (line_control_ & kLcrDlab) != 0;
  switch (offset) {
    case kData:
      if (dlab) {
        divisor_ = static_cast<uint16_t>((divisor_ & 0xff00) | value);
      } else if (modem_control_ & kMcrLoopback) {
        if (receive_fifo_.size() < kMaxQueuedInput) receive_fifo_.push_back(value);
        thr_empty_interrupt_ = true;
      } else {
        output_(value);
        thr_empty_interrupt_ = true;
      }
      break;
    case kInterruptEnable:
      if (dlab) {
        divisor_ = static_cast<uint16_t>((divisor_ & 0x00ff) | (value << 8));
      } else {
        // Enabling the THR-empty interrupt while THR is empty raises it at once, as Linux's 8250
        // driver relies on to start transmission.
        if ((value & kIerThrEmpty) && !(interrupt_enable_ & kIerThrEmpty)) {
          thr_empty_interrupt_ = true;
        }
        interrupt_enable_ = value & kIerMask;
      }
      break;
    case kInterruptId:
      fifo_control_ = value & kFcrEnable;
      if (value & kFcrClearReceive) receive_fifo_.clear();
      break;
    case kLineControl:
      line_control_ = value;
      break;
    case kModemControl:
      modem_control_ = value & 0x1f;
      break;
    case kScratch:
      scratch_ = value;
      break;
    default:
      break;  // LSR and MSR are read-only.
  }
}

uint8_t Serial::InterruptIdentification() const {
  const uint8_t fifo_bits = (fifo_control_ & kFcrEnable) ? kIirFifoEnabled : 0;
  // Priority order (PC16550D table 4): receive data before transmitter empty.
  if ((interrupt_enable_ & kIerReceiveData) && !receive_fifo_.empty()) {
    return fifo_bits | kIirReceiveData;
  }
  if ((interrupt_enable_ & kIerThrEmpty) && thr_empty_interrupt_) return fifo_bits | kIirThrEmpty;
  return fifo_bits | kIirNoInterrupt;
}

void Serial::UpdateInterrupt() {
  const bool pending = (InterruptIdentification() & kIirNoInterrupt) == 0;
  if (pending != irq_asserted_) {
    irq_asserted_ = pending;
    irq_->SetLevel(pending);
  }
}

}  // namespace devices::legacy

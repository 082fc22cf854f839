#include "devices/legacy/serial.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace devices::legacy {
namespace {

class FakeIrqLine : public vmm::IrqLine {
 public:
  void SetLevel(bool asserted) override {
    level = asserted;
    if (asserted) ++rising_edges;
  }
  bool level = false;
  int rising_edges = 0;
};

class SerialTest : public ::testing::Test {
 protected:
  SerialTest()
      : irq_(std::make_shared<FakeIrqLine>()),
        serial_(irq_, [this](uint8_t byte) { output_.push_back(static_cast<char>(byte)); }) {}

  uint8_t In(uint64_t offset) {
    uint8_t value = 0;
    serial_.Read(offset, std::span<uint8_t>(&value, 1));
    return value;
  }
  void Out(uint64_t offset, uint8_t value) {
    serial_.Write(offset, std::span<const uint8_t>(&value, 1));
  }

  std::shared_ptr<FakeIrqLine> irq_;
  std::string output_;
  Serial serial_;
};

TEST_F(SerialTest, TransmitsBytes) {
  for (char c : std::string("hi\n")) Out(0, static_cast<uint8_t>(c));
  EXPECT_EQ(output_, "hi\n");
  // THR and the transmitter are always empty: output is instant.
  EXPECT_EQ(In(5) & 0x60, 0x60);
  EXPECT_FALSE(irq_->level);  // No interrupts enabled.
}

TEST_F(SerialTest, DivisorLatchAndScratch) {
  Out(3, 0x80);  // DLAB
  Out(0, 0x01);
  Out(1, 0x02);
  EXPECT_EQ(In(0), 0x01);
  EXPECT_EQ(In(1), 0x02);
  Out(3, 0x03);
  EXPECT_EQ(In(3), 0x03);
  Out(0, 'x');  // Not a divisor write any more.
  EXPECT_EQ(output_, "x");
  Out(7, 0xa5);
  EXPECT_EQ(In(7), 0xa5);
}

TEST_F(SerialTest, ReceivesInputWithInterrupt) {
  Out(1, 0x01);  // Receive-data interrupt.
  EXPECT_FALSE(irq_->level);
  EXPECT_EQ(In(2) & 0x0f, 0x01);
  const std::vector<uint8_t> input = {'o', 'k'};
  serial_.QueueInput(input);
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(In(2) & 0x0f, 0x04);
  EXPECT_EQ(In(5) & 0x01, 0x01);
  EXPECT_EQ(In(0), 'o');
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(In(0), 'k');
  EXPECT_FALSE(irq_->level);
  EXPECT_EQ(In(5) & 0x01, 0x00);
}

TEST_F(SerialTest, ThrEmptyInterruptFollowsTheDataSheet) {
  Out(1, 0x02);  // Enabling it while THR is empty raises it.
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(In(2) & 0x0f, 0x02);  // Reading IIR acknowledges it...
  EXPECT_FALSE(irq_->level);
  EXPECT_EQ(In(2) & 0x0f, 0x01);
  Out(0, 'a');  // ...and a write to THR raises it again once the byte is gone.
  EXPECT_TRUE(irq_->level);
  EXPECT_EQ(irq_->rising_edges, 2);
  Out(1, 0x00);
  EXPECT_FALSE(irq_->level);
}

TEST_F(SerialTest, FifoModeIsReported) {
  Out(2, 0x07);
  EXPECT_EQ(In(2) & 0xc0, 0xc0);
  Out(2, 0x00);
  EXPECT_EQ(In(2) & 0xc0, 0x00);
}

TEST_F(SerialTest, LoopbackAsLinuxProbesIt) {
  Out(4, 0x10 | 0x0a);            // Loopback with RTS and OUT2.
  EXPECT_EQ(In(6) & 0xf0, 0x90);  // CTS and DCD.
  Out(4, 0x10 | 0x05);            // DTR and OUT1.
  EXPECT_EQ(In(6) & 0xf0, 0x60);  // DSR and RI.
  Out(0, 'z');
  EXPECT_TRUE(output_.empty());
  EXPECT_EQ(In(0), 'z');
  Out(4, 0x0b);
  EXPECT_EQ(In(6) & 0xf0, 0xb0);
}

TEST_F(SerialTest, InputIsBounded) {
  std::vector<uint8_t> flood(Serial::kMaxQueuedInput + 100, 'q');
  serial_.QueueInput(flood);
  size_t received = 0;
  while (In(5) & 0x01) {
    In(0);
    ++received;
  }
  EXPECT_EQ(received, Serial::kMaxQueuedInput);
}

}  // namespace
}  // namespace devices::legacy

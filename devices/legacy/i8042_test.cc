#include "devices/legacy/i8042.h"

#include "devices/legacy/port_devices.h"
#include "gtest/gtest.h"

namespace devices::legacy {
namespace {

uint8_t In(vmm::BusDevice& port) {
  uint8_t value = 0;
  port.Read(0, std::span<uint8_t>(&value, 1));
  return value;
}
void Out(vmm::BusDevice& port, uint8_t value) {
  port.Write(0, std::span<const uint8_t>(&value, 1));
}

TEST(I8042Test, ResetCommandCallsBack) {
  int resets = 0;
  I8042 controller([&] { ++resets; });
  // Linux's kb_wait() polls for the input buffer to be empty before writing the command.
  EXPECT_EQ(In(controller.command_port()) & 0x02, 0);
  Out(controller.command_port(), 0xfe);
  EXPECT_EQ(resets, 1);
}

TEST(I8042Test, AnswersTheProbeCommandsLinuxSends) {
  I8042 controller([] {});
  EXPECT_EQ(In(controller.command_port()) & 0x01, 0);
  Out(controller.command_port(), 0x20);  // Read the command byte.
  EXPECT_EQ(In(controller.command_port()) & 0x01, 0x01);
  EXPECT_EQ(In(controller.data_port()), 0x45);
  EXPECT_EQ(In(controller.command_port()) & 0x01, 0);
  Out(controller.command_port(), 0x60);  // Write it.
  EXPECT_EQ(In(controller.command_port()) & 0x08, 0x08);
  Out(controller.data_port(), 0x65);
  Out(controller.command_port(), 0x20);
  EXPECT_EQ(In(controller.data_port()), 0x65);
  Out(controller.command_port(), 0xaa);  // Self test.
  EXPECT_EQ(In(controller.data_port()), 0x55);
  Out(controller.command_port(), 0xab);  // Keyboard interface test.
  EXPECT_EQ(In(controller.data_port()), 0x00);
}

TEST(WriteOnlyPortTest, HandsWritesToTheCallback) {
  std::vector<uint8_t> seen;
  WriteOnlyPort port([&](uint8_t value) { seen.push_back(value); });
  Out(port, 7);
  Out(port, 0);
  EXPECT_EQ(seen, (std::vector<uint8_t>{7, 0}));
  EXPECT_EQ(In(port), 0);
}

}  // namespace
}  // namespace devices::legacy

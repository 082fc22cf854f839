#include "devices/ide/atapi.h"

#include "gtest/gtest.h"

namespace devices::ide {
namespace {

Packet P(std::initializer_list<uint8_t> bytes) {
  Packet p{};
  std::copy(bytes.begin(), bytes.end(), p.begin());
  return p;
}

TEST(AtapiTest, PlanPacket) {
  const uint64_t max = 8 << 20;
  EXPECT_EQ(PlanPacket(P({0x00}), max).direction, PacketDirection::kNone);
  EXPECT_EQ(PlanPacket(P({0x1e, 0, 0, 0, 1}), max).direction, PacketDirection::kNone);
  const PacketPlan read = PlanPacket(P({0x28, 0, 0, 0, 0, 0, 0, 0, 64}), max);
  EXPECT_EQ(read.direction, PacketDirection::kIn);
  EXPECT_EQ(read.in_buffer, 64u * 2048);
  EXPECT_EQ(PlanPacket(P({0x28, 0, 0, 0, 0, 0, 0, 0xff, 0xff}), max).in_buffer, max);
  EXPECT_EQ(PlanPacket(P({0xa8, 0, 0, 0, 0, 0, 0, 0, 0, 3}), max).in_buffer, 3u * 2048);
  EXPECT_EQ(PlanPacket(P({0xbe, 0, 0, 0, 0, 0, 0, 0, 2, 0x10}), max).in_buffer, 2u * 2048);
  EXPECT_EQ(PlanPacket(P({0x12, 0, 0, 0, 36}), max).in_buffer, 65536u);
  const PacketPlan select = PlanPacket(P({0x55, 0x10, 0, 0, 0, 0, 0, 0x01, 0x02}), max);
  EXPECT_EQ(select.direction, PacketDirection::kOut);
  EXPECT_EQ(select.out_length, 0x102u);
  EXPECT_EQ(PlanPacket(P({0x15, 0x10, 0, 0, 28}), max).out_length, 28u);
}

TEST(AtapiTest, DrqBlockSize) {
  EXPECT_EQ(DrqBlockSize(2048, 1000), 1000u);
  EXPECT_EQ(DrqBlockSize(48, 1000), 48u);
  EXPECT_EQ(DrqBlockSize(9, 1000), 9u);        // the last block may be odd
  EXPECT_EQ(DrqBlockSize(2048, 1001), 1000u);  // odd limit: one less
  EXPECT_EQ(DrqBlockSize(100000, 0), 0xfffeu);
  EXPECT_EQ(DrqBlockSize(100000, 0xffff), 0xfffeu);
  EXPECT_EQ(DrqBlockSize(100, 1), 2u);  // never 0
}

TEST(AtapiTest, ErrorRegister) {
  EXPECT_EQ(PacketErrorRegister(scsi::sense::kMediumNotPresent), 0x20);
  EXPECT_EQ(PacketErrorRegister(scsi::sense::kNotReadyToReadyChange), 0x60);
  EXPECT_EQ(PacketErrorRegister(scsi::sense::kInvalidFieldInCdb), 0x54);
  EXPECT_EQ(kPacketTransportError, 0xb4);
}

}  // namespace
}  // namespace devices::ide

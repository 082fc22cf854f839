#include "devices/ide/identify.h"

#include "gtest/gtest.h"

namespace devices::ide {
namespace {

DeviceSettings Disk(uint64_t sectors) {
  DeviceSettings s;
  s.kind = DeviceKind::kDisk;
  s.model = "MICROVM HARDDISK";
  s.serial = "disk0";
  s.firmware = "1.0";
  s.sectors = sectors;
  s.default_geometry = DefaultGeometry(sectors);
  s.geometry = s.default_geometry;
  return s;
}

uint8_t ByteSum(const IdentifyWords& w) {
  uint8_t sum = 0;
  for (uint16_t word : w) sum += static_cast<uint8_t>(word) + static_cast<uint8_t>(word >> 8);
  return sum;
}

TEST(IdentifyTest, DiskCapacityAndFeatures) {
  const uint64_t sectors = (uint64_t{1} << 33) + 5;  // beyond LBA28 and 32 bits
  IdentifyWords w = BuildIdentifyDevice(Disk(sectors));
  EXPECT_EQ(w[0] & 0x8000, 0);
  EXPECT_EQ(w[60] | w[61] << 16, 0x0fffffff);  // LBA28 capacity saturates
  EXPECT_EQ(
      uint64_t{w[100]} | uint64_t{w[101]} << 16 | uint64_t{w[102]} << 32 | uint64_t{w[103]} << 48,
      sectors);
  EXPECT_NE(w[49] & 0x0200, 0);     // LBA
  EXPECT_NE(w[49] & 0x0100, 0);     // DMA
  EXPECT_NE(w[83] & (1 << 10), 0);  // 48-bit
  EXPECT_NE(w[86] & (1 << 10), 0);
  EXPECT_NE(w[83] & (1 << 13), 0);  // FLUSH CACHE EXT
  EXPECT_NE(w[83] & (1 << 12), 0);  // FLUSH CACHE
  EXPECT_NE(w[84] & (1 << 6), 0);   // WRITE DMA FUA EXT
  EXPECT_NE(w[87] & (1 << 6), 0);
  EXPECT_NE(w[85] & (1 << 5), 0);  // write cache enabled
  EXPECT_EQ(w[88], 0x203f);        // UDMA 0-5, mode 5 selected
  EXPECT_EQ(w[63], 0x0007);
  EXPECT_EQ(w[47], 0x8010);
  EXPECT_EQ(w[59], 0x0110);
  EXPECT_EQ(GetAtaString(w, 27, 20), "MICROVM HARDDISK");
  EXPECT_EQ(GetAtaString(w, 10, 10), "disk0");
  EXPECT_EQ(GetAtaString(w, 23, 4), "1.0");
  EXPECT_EQ(w[255] & 0xff, 0xa5);
  EXPECT_EQ(ByteSum(w), 0);
}

TEST(IdentifyTest, WriteCacheAndTransferModeFollowSettings) {
  DeviceSettings s = Disk(2048);
  s.write_cache = false;
  s.transfer_mode = xfer::kMultiwordDma | 2;
  s.multiple = 0;
  IdentifyWords w = BuildIdentifyDevice(s);
  EXPECT_EQ(w[85] & (1 << 5), 0);
  EXPECT_NE(w[82] & (1 << 5), 0);  // still supported
  EXPECT_EQ(w[63], 0x0407);
  EXPECT_EQ(w[88], 0x003f);
  EXPECT_EQ(w[59], 0x0100);
  EXPECT_EQ(ByteSum(w), 0);
}

TEST(IdentifyTest, PacketDevice) {
  DeviceSettings s;
  s.kind = DeviceKind::kCdRom;
  s.model = "MICROVM DVD-ROM";
  s.serial = "cd0";
  s.firmware = "1.0";
  IdentifyWords w = BuildIdentifyPacketDevice(s);
  EXPECT_EQ(w[0], 0x85c0);
  EXPECT_EQ(w[49], 0x0300);
  EXPECT_EQ(w[53], 0x0007);
  EXPECT_EQ(w[63], 0x0007);
  EXPECT_EQ(w[88], 0x203f);
  EXPECT_NE(w[82] & (1 << 4), 0);  // PACKET
  EXPECT_EQ(GetAtaString(w, 27, 20), "MICROVM DVD-ROM");
  EXPECT_EQ(ByteSum(w), 0);
  s.transfer_mode = xfer::kMultiwordDma | 2;  // what Linux's ata_piix selects on a PIIX3
  w = BuildIdentifyPacketDevice(s);
  EXPECT_EQ(w[63], 0x0407);
  EXPECT_EQ(w[88], 0x003f);
}

TEST(IdentifyTest, StringsAreSwappedAndPadded) {
  IdentifyWords w{};
  PutAtaString(w, 0, 3, "ABC");
  EXPECT_EQ(w[0], 'A' << 8 | 'B');
  EXPECT_EQ(w[1], 'C' << 8 | ' ');
  EXPECT_EQ(w[2], ' ' << 8 | ' ');
  std::vector<uint8_t> bytes = IdentifyBytes(w);
  EXPECT_EQ(bytes[0], 'B');
  EXPECT_EQ(bytes[1], 'A');
}

}  // namespace
}  // namespace devices::ide

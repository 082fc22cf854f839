#include "devices/ide/task_file.h"

#include "devices/ide/ata.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

TEST(TaskFileTest, WritesKeepThePreviousValueAsHighOrderByte) {
  TaskFile tf;
  // libata's 48-bit load: HOB bytes first, then the low ones (ATA8-ACS 4.x).
  tf.Write(reg::kCount, 0x12);
  tf.Write(reg::kLbaLow, 0x56);
  tf.Write(reg::kLbaMid, 0x34);
  tf.Write(reg::kLbaHigh, 0x02);
  tf.Write(reg::kCount, 0x34);
  tf.Write(reg::kLbaLow, 0x78);
  tf.Write(reg::kLbaMid, 0x9a);
  tf.Write(reg::kLbaHigh, 0xbc);
  EXPECT_EQ(tf.Lba48(), 0x023456bc9a78u);
  EXPECT_EQ(tf.Count48(), 0x1234u);
  EXPECT_EQ(tf.Read(reg::kCount, /*hob=*/false), 0x34);
  EXPECT_EQ(tf.Read(reg::kCount, /*hob=*/true), 0x12);
  EXPECT_EQ(tf.Read(reg::kLbaHigh, /*hob=*/true), 0x02);
}

TEST(TaskFileTest, ZeroCountsMeanTheMaximum) {
  TaskFile tf;
  EXPECT_EQ(tf.Count28(), 256u);
  EXPECT_EQ(tf.Count48(), 65536u);
}

TEST(TaskFileTest, Lba28UsesDeviceBits) {
  TaskFile tf;
  tf.Write(reg::kLbaLow, 0x44);
  tf.Write(reg::kLbaMid, 0x33);
  tf.Write(reg::kLbaHigh, 0x22);
  tf.Write(reg::kDevice, 0xe1);
  EXPECT_TRUE(tf.lba_mode());
  EXPECT_EQ(tf.Lba28(), 0x1223344u);
}

TEST(TaskFileTest, ChsTranslation) {
  const ChsGeometry geometry{100, 16, 63};
  TaskFile tf;
  tf.Write(reg::kLbaLow, 1);     // sector 1 = the first
  tf.Write(reg::kLbaMid, 2);     // cylinder 2
  tf.Write(reg::kDevice, 0xa3);  // head 3
  EXPECT_EQ(tf.ChsToLba(geometry), (2u * 16 + 3) * 63);
  tf.Write(reg::kLbaLow, 0);  // sector 0 does not exist
  EXPECT_FALSE(tf.ChsToLba(geometry).has_value());
  tf.Write(reg::kLbaLow, 64);
  EXPECT_FALSE(tf.ChsToLba(geometry).has_value());
  tf.Write(reg::kLbaLow, 1);
  tf.Write(reg::kLbaMid, 100);  // cylinder 100 of 100
  EXPECT_FALSE(tf.ChsToLba(geometry).has_value());
}

TEST(TaskFileTest, Signatures) {
  TaskFile tf;
  tf.device = 0xb0;
  tf.SetSignature(/*packet_device=*/true);
  EXPECT_EQ(tf.count, 1);
  EXPECT_EQ(tf.lba_low, 1);
  EXPECT_EQ(tf.lba_mid, 0x14);
  EXPECT_EQ(tf.lba_high, 0xeb);
  EXPECT_EQ(tf.device, 0xb0);  // the selection stays
  tf.SetSignature(/*packet_device=*/false);
  EXPECT_EQ(tf.lba_mid, 0);
  EXPECT_EQ(tf.lba_high, 0);
}

TEST(TaskFileTest, SetLba) {
  TaskFile tf;
  tf.device = 0xe0;
  tf.SetLba(0x0abcdef, /*lba48=*/false);
  EXPECT_EQ(tf.Lba28(), 0x0abcdefu);
  tf.SetLba(0x123456789abcu, /*lba48=*/true);
  EXPECT_EQ(tf.Lba48(), 0x123456789abcu);
}

TEST(TaskFileTest, DefaultGeometry) {
  EXPECT_EQ(DefaultGeometry(2048).cylinders, 2u);
  EXPECT_EQ(DefaultGeometry(100).cylinders, 1u);
  EXPECT_EQ(DefaultGeometry(uint64_t{1} << 40).cylinders, 16383u);
}

}  // namespace
}  // namespace devices::ide

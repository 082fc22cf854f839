#include "devices/ide/ata_command_set.h"

#include "devices/ide/ata.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

using Kind = AtaOutcome::Kind;

DeviceSettings Disk(uint64_t sectors = 1 << 20) {
  DeviceSettings s;
  s.kind = DeviceKind::kDisk;
  s.sectors = sectors;
  s.default_geometry = DefaultGeometry(sectors);
  s.geometry = s.default_geometry;
  return s;
}

DeviceSettings Cd() {
  DeviceSettings s;
  s.kind = DeviceKind::kCdRom;
  return s;
}

TaskFile Lba28(uint64_t lba, uint8_t count) {
  TaskFile tf;
  tf.Write(reg::kCount, count);
  tf.Write(reg::kLbaLow, static_cast<uint8_t>(lba));
  tf.Write(reg::kLbaMid, static_cast<uint8_t>(lba >> 8));
  tf.Write(reg::kLbaHigh, static_cast<uint8_t>(lba >> 16));
  tf.Write(reg::kDevice, static_cast<uint8_t>(0xe0 | ((lba >> 24) & 0xf)));
  return tf;
}

TEST(AtaCommandSetTest, ReadSectorsDecodes) {
  DeviceSettings s = Disk();
  AtaOutcome o = ExecuteAtaCommand(cmd::kReadSectors, Lba28(100, 0), s);
  ASSERT_EQ(o.kind, Kind::kTransfer);
  EXPECT_FALSE(o.transfer.write);
  EXPECT_FALSE(o.transfer.dma);
  EXPECT_EQ(o.transfer.lba, 100u);
  EXPECT_EQ(o.transfer.sectors, 256u);
  EXPECT_EQ(o.transfer.block_sectors, 1u);
}

TEST(AtaCommandSetTest, OutOfRangeIsIdnf) {
  DeviceSettings s = Disk(1000);
  AtaOutcome o = ExecuteAtaCommand(cmd::kReadDma, Lba28(999, 2), s);
  EXPECT_EQ(o.kind, Kind::kError);
  EXPECT_EQ(o.error, error::kIdnf);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kReadDma, Lba28(998, 2), s).kind, Kind::kTransfer);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kReadVerifySectors, Lba28(1000, 1), s).error, error::kIdnf);
}

TEST(AtaCommandSetTest, MultipleNeedsMultipleMode) {
  DeviceSettings s = Disk();
  TaskFile tf = Lba28(0, 8);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kReadMultiple, tf, s).transfer.block_sectors, 16u);
  TaskFile set;
  set.Write(reg::kCount, 0);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetMultipleMode, set, s).kind, Kind::kComplete);
  EXPECT_EQ(s.multiple, 0);
  AtaOutcome o = ExecuteAtaCommand(cmd::kWriteMultiple, tf, s);
  EXPECT_EQ(o.kind, Kind::kError);
  EXPECT_EQ(o.error, error::kAbrt);
  set.Write(reg::kCount, 3);  // not a power of two
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetMultipleMode, set, s).error, error::kAbrt);
  set.Write(reg::kCount, 32);  // beyond word 47
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetMultipleMode, set, s).error, error::kAbrt);
  set.Write(reg::kCount, 4);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetMultipleMode, set, s).kind, Kind::kComplete);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kWriteMultiple, tf, s).transfer.block_sectors, 4u);
}

TEST(AtaCommandSetTest, FuaFromCommandOrDisabledCache) {
  DeviceSettings s = Disk();
  TaskFile tf = Lba28(0, 1);
  EXPECT_TRUE(ExecuteAtaCommand(cmd::kWriteDmaFuaExt, tf, s).transfer.fua);
  EXPECT_TRUE(ExecuteAtaCommand(cmd::kWriteMultipleFuaExt, tf, s).transfer.fua);
  EXPECT_FALSE(ExecuteAtaCommand(cmd::kWriteDmaExt, tf, s).transfer.fua);
  TaskFile off;
  off.Write(reg::kFeature, feature::kDisableWriteCache);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetFeatures, off, s).kind, Kind::kComplete);
  EXPECT_FALSE(s.write_cache);
  EXPECT_TRUE(ExecuteAtaCommand(cmd::kWriteDmaExt, tf, s).transfer.fua);
  EXPECT_FALSE(ExecuteAtaCommand(cmd::kReadDmaExt, tf, s).transfer.fua);
}

TEST(AtaCommandSetTest, ReadOnlyDiskAbortsWrites) {
  DeviceSettings s = Disk();
  s.read_only = true;
  EXPECT_EQ(ExecuteAtaCommand(cmd::kWriteSectors, Lba28(0, 1), s).error, error::kAbrt);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kReadSectors, Lba28(0, 1), s).kind, Kind::kTransfer);
}

TEST(AtaCommandSetTest, SetTransferMode) {
  DeviceSettings s = Disk();
  TaskFile tf;
  tf.Write(reg::kFeature, feature::kSetTransferMode);
  tf.Write(reg::kCount, 0x22);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetFeatures, tf, s).kind, Kind::kComplete);
  EXPECT_EQ(s.transfer_mode, 0x22);
  tf.Write(reg::kCount, 0x0c);  // PIO 4: DMA selection unchanged
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetFeatures, tf, s).kind, Kind::kComplete);
  EXPECT_EQ(s.transfer_mode, 0x22);
  for (uint8_t bad : {0x23, 0x46, 0x0d, 0x02, 0x80}) {
    tf.Write(reg::kCount, bad);
    EXPECT_EQ(ExecuteAtaCommand(cmd::kSetFeatures, tf, s).error, error::kAbrt) << int{bad};
  }
  tf.Write(reg::kFeature, 0x99);  // unknown subcommand
  EXPECT_EQ(ExecuteAtaCommand(cmd::kSetFeatures, tf, s).error, error::kAbrt);
}

TEST(AtaCommandSetTest, PacketCommandsOnlyOnPacketDevices) {
  DeviceSettings disk = Disk();
  DeviceSettings cd = Cd();
  TaskFile tf;
  for (uint8_t c : {cmd::kPacket, cmd::kIdentifyPacketDevice, cmd::kDeviceReset}) {
    EXPECT_EQ(ExecuteAtaCommand(c, tf, disk).error, error::kAbrt);
  }
  tf.Write(reg::kFeature, kPacketFeatureDma);
  AtaOutcome packet = ExecuteAtaCommand(cmd::kPacket, tf, cd);
  EXPECT_EQ(packet.kind, Kind::kPacket);
  EXPECT_TRUE(packet.packet_dma);
  AtaOutcome identify = ExecuteAtaCommand(cmd::kIdentifyDevice, tf, cd);
  EXPECT_EQ(identify.error, error::kAbrt);
  EXPECT_TRUE(identify.signature);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kReadDma, Lba28(0, 1), cd).error, error::kAbrt);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kIdentifyPacketDevice, tf, cd).data.size(), 512u);
}

TEST(AtaCommandSetTest, MiscCommands) {
  DeviceSettings s = Disk();
  TaskFile tf;
  EXPECT_EQ(ExecuteAtaCommand(cmd::kNop, tf, s).error, error::kAbrt);
  EXPECT_EQ(ExecuteAtaCommand(0x5a, tf, s).error, error::kAbrt);  // unknown
  AtaOutcome power = ExecuteAtaCommand(cmd::kCheckPowerMode, tf, s);
  EXPECT_EQ(power.kind, Kind::kComplete);
  EXPECT_EQ(power.count, 0xff);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kFlushCacheExt, tf, s).kind, Kind::kFlush);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kIdleImmediate, tf, s).kind, Kind::kComplete);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kExecuteDeviceDiagnostic, tf, s).kind, Kind::kDiagnostic);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kIdentifyDevice, tf, s).data.size(), 512u);
}

TEST(AtaCommandSetTest, InitializeDeviceParametersAndChs) {
  DeviceSettings s = Disk(16 * 63 * 100);
  TaskFile tf;
  tf.Write(reg::kCount, 32);
  tf.Write(reg::kDevice, 0xa7);  // 8 heads
  EXPECT_EQ(ExecuteAtaCommand(cmd::kInitializeDeviceParameters, tf, s).kind, Kind::kComplete);
  EXPECT_EQ(s.geometry.heads, 8u);
  EXPECT_EQ(s.geometry.sectors, 32u);
  // CHS read: cylinder 1, head 2, sector 3.
  TaskFile chs;
  chs.Write(reg::kCount, 1);
  chs.Write(reg::kLbaLow, 3);
  chs.Write(reg::kLbaMid, 1);
  chs.Write(reg::kDevice, 0xa2);
  AtaOutcome o = ExecuteAtaCommand(cmd::kReadSectors, chs, s);
  ASSERT_EQ(o.kind, Kind::kTransfer);
  EXPECT_EQ(o.transfer.lba, (1u * 8 + 2) * 32 + 2);
  TaskFile zero;
  zero.Write(reg::kCount, 0);
  EXPECT_EQ(ExecuteAtaCommand(cmd::kInitializeDeviceParameters, zero, s).error, error::kAbrt);
}

}  // namespace
}  // namespace devices::ide

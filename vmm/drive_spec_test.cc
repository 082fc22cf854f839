#include "vmm/drive_spec.h"

#include "gtest/gtest.h"

namespace vmm {
namespace {

TEST(DriveSpecTest, ParsesDisksWithOptions) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kDisk, "/var/disk.img,cache=none,fua=emulate,readonly");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->path, "/var/disk.img");
  EXPECT_EQ(spec->cache_mode, block::CacheMode::kNone);
  EXPECT_EQ(spec->fua_mode, block::FuaMode::kEmulate);
  EXPECT_TRUE(spec->read_only);
  auto plain = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->cache_mode, block::CacheMode::kWriteback);
  EXPECT_EQ(plain->fua_mode, block::FuaMode::kNative);
  EXPECT_FALSE(plain->read_only);
}

TEST(DriveSpecTest, CdromsAreReadOnlyAndMayBeEmpty) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->path.empty());
  EXPECT_TRUE(spec->read_only);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,cache=none").ok());
}

TEST(DriveSpecTest, IdePlacement) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,channel=1,unit=0", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->bus, DriveSpec::Bus::kIde);
  EXPECT_EQ(spec->ide_channel, 1);
  EXPECT_EQ(spec->ide_unit, 0);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,channel=2", DriveSpec::Bus::kIde).ok());
  // Placement means nothing on virtio-scsi.
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,channel=0").ok());
}

TEST(DriveSpecTest, HostDrivePassthrough) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "host:/dev/sr0,channel=1", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->host_drive);
  EXPECT_EQ(spec->path, "/dev/sr0");
  auto plain = ParseDriveSpec(DriveSpec::Kind::kCdrom, "/dev/sr0");  // detected when opened
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->host_drive);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "host:").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "host:/dev/sr0,probe-delay-us=5").ok());
  // A disk named host:... is a file of that name.
  auto disk = ParseDriveSpec(DriveSpec::Kind::kDisk, "host:d.img");
  ASSERT_TRUE(disk.ok());
  EXPECT_EQ(disk->path, "host:d.img");
}

TEST(DriveSpecTest, SimulatedHostDrive) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,probe-delay-us=1000", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->probe_delay_us, 1000);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,probe-delay-us=-1").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,probe-delay-us=5").ok());
}

TEST(DriveSpecTest, RejectsBadInput) {
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,cache=fast").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,fua=maybe").ok());
  auto unknown = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,turbo");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("turbo"), std::string::npos);
}

}  // namespace
}  // namespace vmm

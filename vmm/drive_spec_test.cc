#include "vmm/drive_spec.h"

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace vmm {
namespace {

TEST(DriveSpecTest, ParsesDisksWithOptions) {
  auto spec =
      ParseDriveSpec(DriveSpec::Kind::kDisk, "/var/disk.img,cache=none,fua=emulate,readonly");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->path, "/var/disk.img");
  EXPECT_EQ(spec->cache_mode, block::CacheMode::kNone);
  EXPECT_EQ(spec->fua_mode, block::FuaMode::kEmulate);
  EXPECT_TRUE(spec->read_only);
  auto plain = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->cache_mode, block::CacheMode::kWriteback);
  EXPECT_EQ(plain->fua_mode, block::FuaMode::kAuto);
  EXPECT_FALSE(plain->read_only);
}

TEST(DriveSpecTest, EveryDriveMayBeNamed) {
  auto disk = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,id=root-disk.1,cache=none");
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(disk->id, "root-disk.1");
  auto cd = ParseDriveSpec(DriveSpec::Kind::kCdrom, ",id=installer", DriveSpec::Bus::kIde);
  ASSERT_TRUE(cd.ok()) << cd.status();
  EXPECT_EQ(cd->id, "installer");
  EXPECT_TRUE(cd->path.empty());
  EXPECT_TRUE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img").value().id.empty());
  for (const char* bad :
       {"", "1disk", "a b", "a/b", "a,b", "-x", "x:y", "abcdefghijklmnopqrstuvwxyz0123456"}) {
    EXPECT_FALSE(IsValidDriveId(bad)) << bad;
  }
  const auto refused = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,id=9lives");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(
      refused.status().message(),
      "--disk=d.img,id=9lives: id \"9lives\" is not a drive name (1 to 32 letters, digits, '.', "
      "'_' or '-', starting with a letter)");
}

TEST(DriveSpecTest, IoLimitsAndGroups) {
  auto disk =
      ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,burst=2,iops=500,bps=10M,group=tenant-a");
  ASSERT_TRUE(disk.ok()) << disk.status();
  EXPECT_EQ(
      disk->limits,
      (block::IoLimits{
          .iops = 500, .bytes_per_second = 10 << 20, .iops_burst = 1000, .bytes_burst = 20 << 20}));
  EXPECT_EQ(disk->group, "tenant-a");
  auto cd = ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,bps=4096", DriveSpec::Bus::kIde);
  ASSERT_TRUE(cd.ok()) << cd.status();
  EXPECT_EQ(cd->limits.bytes_per_second, 4096u);
  EXPECT_TRUE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img").value().limits.unlimited());
  const struct {
    const char* text;
    const char* message;
  } refused[] = {
      {"d.img,iops=0",
       "--disk=d.img,iops=0: iops must be 1 to 10000000 operations a second, not \"0\""},
      {"d.img,bps=lots",
       "--disk=d.img,bps=lots: bps must be bytes a second, 1 to 1T (K, M, G: KiB, MiB, GiB), not "
       "\"lots\""},
      {"d.img,burst=0",
       "--disk=d.img,burst=0: burst must be seconds of the rate (more than 0, at most 3600), not "
       "\"0\""},
      {"d.img,burst=1", "--disk=d.img,burst=1: burst needs iops= or bps="},
      {"d.img,group=", "--disk=d.img,group=: group \"\" is not a group name"},
  };
  for (const auto& c : refused) {
    const auto spec = ParseDriveSpec(DriveSpec::Kind::kDisk, c.text);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_EQ(spec.status().message(), c.message);
  }
}

TEST(DriveSpecTest, IoGroups) {
  auto group = ParseIoGroupSpec("tenant,iops=1000,burst=0.5");
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ(group->name, "tenant");
  EXPECT_EQ(group->limits, (block::IoLimits{.iops = 1000, .iops_burst = 500}));
  EXPECT_EQ(ParseIoGroupSpec("tenant").status().message(),
            "--io-group=tenant: a group needs iops= or bps=");
  EXPECT_EQ(ParseIoGroupSpec("iops=5").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseIoGroupSpec("t,cache=none").status().message(),
            "--io-group=t,cache=none: unknown option \"cache=none\" (--io-group takes iops=, bps=, "
            "burst=)");
}

TEST(DriveSpecTest, CdromsAreReadOnlyAndMayBeEmpty) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "");
  ASSERT_TRUE(spec.ok());
  EXPECT_TRUE(spec->path.empty());
  EXPECT_TRUE(spec->read_only);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,cache=none").ok());
}

TEST(DriveSpecTest, IdePlacement) {
  auto spec =
      ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,channel=1,unit=0", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->bus, DriveSpec::Bus::kIde);
  EXPECT_EQ(spec->ide_channel, 1);
  EXPECT_EQ(spec->ide_unit, 0);
  EXPECT_FALSE(
      ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,channel=2", DriveSpec::Bus::kIde).ok());
  // Placement means nothing on virtio-scsi.
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,channel=0").ok());
}

TEST(DriveSpecTest, HostDrivePassthrough) {
  auto spec =
      ParseDriveSpec(DriveSpec::Kind::kCdrom, "host:/dev/sr0,channel=1", DriveSpec::Bus::kIde);
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
  auto spec =
      ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,probe-delay-us=1000", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->probe_delay_us, 1000);
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso,probe-delay-us=-1").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,probe-delay-us=5").ok());
}

TEST(DriveSpecTest, RejectsBadInput) {
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,cache=fast").ok());
  EXPECT_FALSE(ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,fua=maybe").ok());
  auto automatic = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,fua=auto");
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  EXPECT_EQ(automatic->fua_mode, block::FuaMode::kAuto);
  auto unknown = ParseDriveSpec(DriveSpec::Kind::kDisk, "d.img,turbo");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("turbo"), std::string::npos);
}

// Issue 17: every message names the flag the drive came from (--ide-cdrom, not --cdrom) and what
// was typed.
TEST(DriveSpecTest, MessagesNameTheFlagAndTheText) {
  const struct {
    DriveSpec::Kind kind;
    DriveSpec::Bus bus;
    const char* text;
    const char* message;
  } cases[] = {
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "",
       "--disk: needs the image's path (--disk=PATH[,cache=, fua=, readonly, id=, iops=, bps=, "
       "burst=, group=])"},
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kIde, ",cache=none",
       "--ide-disk=,cache=none: needs the image's path"},
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "d.img,cache=fast",
       "--disk=d.img,cache=fast: unknown cache mode \"fast\""},
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "a.iso,unit=2",
       "--ide-cdrom=a.iso,unit=2: unit must be 0 or 1, not \"2\""},
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde,
       "host:", "--ide-cdrom=host:: host: needs the drive's device node (host:/dev/sr0)"},
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "a.iso,cache=none",
       "--ide-cdrom=a.iso,cache=none: unknown option \"cache=none\" (--ide-cdrom takes channel=, "
       "unit=, probe-delay-us=, id=, iops=, bps=, burst=, group=)"},
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "d.img,channel=0",
       "--disk=d.img,channel=0: unknown option \"channel=0\" (channel= and unit= place IDE drives: "
       "--ide-disk)"},
  };
  for (const auto& c : cases) {
    auto spec = ParseDriveSpec(c.kind, c.text, c.bus);
    ASSERT_FALSE(spec.ok()) << c.text;
    EXPECT_TRUE(absl::StartsWith(spec.status().message(), c.message)) << spec.status();
  }
}

TEST(DriveSpecTest, ErrorsAboutTheFileLeadWithTheFlag) {
  auto spec = ParseDriveSpec(DriveSpec::Kind::kCdrom, "a.iso", DriveSpec::Bus::kIde);
  ASSERT_TRUE(spec.ok());
  spec->path = "/srv/dir/a.iso";  // made absolute, as the launchers do
  EXPECT_EQ(
      DriveError(*spec, absl::NotFoundError("/srv/dir/a.iso: no such file or directory")).message(),
      "--ide-cdrom=a.iso: no such file or directory");
  EXPECT_EQ(DriveError(*spec, absl::PermissionDeniedError("open /srv/dir/a.iso: Permission denied"))
                .message(),
            "--ide-cdrom=a.iso: Permission denied");
  EXPECT_EQ(
      DriveError(*spec, absl::FailedPreconditionError("/srv/dir/a.iso is a directory")).message(),
      "--ide-cdrom=a.iso is a directory");
  EXPECT_EQ(DriveError(*spec, absl::InternalError("io_uring_setup: out of memory")).message(),
            "--ide-cdrom=a.iso: io_uring_setup: out of memory");
  EXPECT_EQ(DriveError(*spec, absl::NotFoundError("x")).code(), absl::StatusCode::kNotFound);
  auto host = ParseDriveSpec(DriveSpec::Kind::kCdrom, "host:/dev/sr9");
  ASSERT_TRUE(host.ok());
  EXPECT_EQ(DriveError(*host, absl::InvalidArgumentError("/dev/sr9: not a CD-ROM drive")).message(),
            "--cdrom=host:/dev/sr9: not a CD-ROM drive");
}

TEST(DriveSpecTest, NameTheFlagLeavesOtherErrorsAlone) {
  const absl::Status kvm = absl::FailedPreconditionError("/dev/kvm does not exist: no KVM");
  EXPECT_EQ(NameTheFlag("--kvm-device", "/dev/kvm", "/dev/kvm", kvm).message(),
            "--kvm-device=/dev/kvm does not exist: no KVM");
  EXPECT_EQ(NameTheFlag("--kernel", "k", "/abs/k", kvm), kvm);
  const absl::Status token = absl::InvalidArgumentError("--api-token-file /t: the token is empty");
  EXPECT_EQ(NameTheFlag("--api-token-file", "/t", "/t", token).message(),
            "--api-token-file=/t: the token is empty");
  const absl::Status inside =
      absl::PermissionDeniedError("cannot open /dev/kvm: Permission denied");
  EXPECT_EQ(NameTheFlag("--kvm-device", "/dev/kvm", "/dev/kvm", inside).message(),
            "--kvm-device=/dev/kvm: cannot open /dev/kvm: Permission denied");
  EXPECT_TRUE(NameTheFlag("--kernel", "k", "/k", absl::OkStatus()).ok());
}

}  // namespace
}  // namespace vmm

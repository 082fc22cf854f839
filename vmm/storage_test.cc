// The VMM's storage without KVM: the CD/DVD medium size rule at every entry (--cdrom, --ide-cdrom,
// --media-dir, the control API's Insert), the drive errors' wording, and the paths the API reports
// (issue 17). The API is the real server over BackendApiControl, as vhost-user-scsi runs it.
#include "vmm/storage.h"

#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "api/api_server.h"
#include "block/simulated_cdrom.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"
#include "vmm/backend_api.h"
#include "vmm/cd_medium.h"
#include "vmm/drive_spec.h"
#include "vmm/media_directory.h"

namespace vmm {
namespace {

using ::testing::HasSubstr;

class StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under /tmp: the API's socket path must fit sun_path.
    char name[] = "/tmp/storage_test.XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
    WriteFile("empty.iso", 0);
    WriteFile("small.iso", 2047);
    WriteFile("one-block.iso", 2048);
    WriteFile("disc.iso", 64 << 10);
    WriteFile("disk.img", 1 << 20);
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  void WriteFile(const std::string& name, size_t size) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << std::string(size, 'c');
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // The drive as the launchers parse it: typed as `text`, the path made absolute.
  DriveSpec Drive(DriveSpec::Kind kind, DriveSpec::Bus bus, const std::string& text) const {
    DriveSpec spec = *ParseDriveSpec(kind, text, bus);
    if (!spec.path.empty() && spec.path[0] != '/') spec.path = Path(spec.path);
    return spec;
  }

  absl::StatusOr<std::unique_ptr<Storage>> Create(const DriveSpec& spec) {
    StorageConfig config;
    config.drives = {spec};
    return Storage::Create(config);
  }

  std::string dir_;
};

TEST_F(StorageTest, CdMediumSizeRule) {
  EXPECT_TRUE(CheckCdMediumSize(2048, "a.iso").ok());
  const absl::Status small = CheckCdMediumSize(2047, "a.iso");
  EXPECT_EQ(small.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      small.message(),
      "a.iso: 2047 bytes is too small for a CD/DVD medium (the minimum is one 2048-byte block)");
}

TEST_F(StorageTest, OpenMediumRefusesLessThanOneBlock) {
  for (const char* name : {"empty.iso", "small.iso"}) {
    auto medium = Storage::OpenMedium(Path(name), CdMediumFileOptions(1));
    ASSERT_FALSE(medium.ok()) << name;
    EXPECT_EQ(medium.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(medium.status().message()),
                HasSubstr("the minimum is one 2048-byte block"));
  }
  auto one = Storage::OpenMedium(Path("one-block.iso"), CdMediumFileOptions(1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)->info().size_bytes, 2048u);

  auto directory = MediaDirectory::Open(dir_);
  ASSERT_TRUE(directory.ok()) << directory.status();
  auto relative = (*directory)->OpenMedium("small.iso", CdMediumFileOptions(1));
  ASSERT_FALSE(relative.ok());
  EXPECT_EQ(relative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(relative.status().message(),
            "small.iso: 2047 bytes is too small for a CD/DVD medium (the minimum is one 2048-byte "
            "block)");
  EXPECT_TRUE((*directory)->OpenMedium("one-block.iso", CdMediumFileOptions(1)).ok());
}

TEST_F(StorageTest, DriveErrorsNameTheirFlag) {
  const struct {
    DriveSpec::Kind kind;
    DriveSpec::Bus bus;
    const char* text;
    absl::StatusCode code;
    const char* message;
  } cases[] = {
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, "empty.iso",
       absl::StatusCode::kInvalidArgument,
       "--cdrom=empty.iso: 0 bytes is too small for a CD/DVD medium (the minimum is one 2048-byte "
       "block)"},
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "small.iso",
       absl::StatusCode::kInvalidArgument,
       "--ide-cdrom=small.iso: 2047 bytes is too small for a CD/DVD medium"},
      {DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "missing.iso", absl::StatusCode::kNotFound,
       "--ide-cdrom=missing.iso: no such file or directory"},
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kIde, "missing.img", absl::StatusCode::kNotFound,
       "--ide-disk=missing.img: no such file or directory"},
      {DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, ".", absl::StatusCode::kFailedPrecondition,
       "--disk=. is a directory"},
  };
  for (const auto& c : cases) {
    auto storage = Create(Drive(c.kind, c.bus, c.text));
    ASSERT_FALSE(storage.ok()) << c.text;
    EXPECT_EQ(storage.status().code(), c.code) << storage.status();
    EXPECT_TRUE(absl::StartsWith(storage.status().message(), c.message)) << storage.status();
  }
  // One block is a medium.
  auto storage = Create(Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "one-block.iso"));
  ASSERT_TRUE(storage.ok()) << storage.status();
  EXPECT_EQ((*storage)->drives()[0].media->Current()->source, Path("one-block.iso"));
}

// Named drives keep their names; the others are named by their position among the drives of their
// kind, named ones counted; one name twice is refused, naming both drives.
TEST_F(StorageTest, DrivesAreNamedByIdOrPosition) {
  StorageConfig config;
  config.drives = {
      Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "disk.img,id=root,readonly"),
      Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, ""),
      Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kIde, "disk.img,readonly"),
      Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "disc.iso,id=seed")};
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  std::vector<std::string> names;
  for (const AttachedDrive& drive : (*storage)->drives()) names.push_back(drive.name);
  EXPECT_EQ(names, (std::vector<std::string>{"root", "cd0", "disk1", "seed"}));
  EXPECT_TRUE((*storage)->Find("seed").has_value());

  config.drives = {Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "disk.img,readonly"),
                   Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, "disc.iso,id=disk0")};
  auto clash = Storage::Create(config);
  ASSERT_FALSE(clash.ok());
  EXPECT_EQ(clash.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      clash.status().message(),
      "--cdrom=disc.iso: the drive name disk0 is taken by --disk=disk.img (its position gives "
      "it that name)");
}

// I/O limits from the command line reach the drives; a group is one budget its drives share; a
// drive naming a group no --io-group defines is refused.
TEST_F(StorageTest, DrivesGetTheirLimitsAndGroups) {
  StorageConfig config;
  config.io_groups = {{.name = "tenant", .limits = {.iops = 1000}}};
  config.drives = {Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi,
                         "disk.img,readonly,iops=100,group=tenant"),
                   Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, "disc.iso,group=tenant"),
                   Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "disc.iso")};
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  const auto& drives = (*storage)->drives();
  EXPECT_EQ(drives[0].drive->limits().iops, 100u);
  ASSERT_EQ((*storage)->io_groups().size(), 1u);
  const std::shared_ptr<block::Throttle> tenant = (*storage)->io_groups().at("tenant");
  EXPECT_EQ(drives[0].drive->group(), tenant);
  EXPECT_EQ(drives[1].drive->group(), tenant);
  EXPECT_TRUE(drives[1].drive->limits().unlimited());
  EXPECT_EQ(drives[2].drive->group(), nullptr);
  EXPECT_EQ(tenant->limits().iops, 1000u);

  config.io_groups.clear();
  auto missing = Storage::Create(config);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(),
            "--disk=disk.img: group=tenant: no --io-group=tenant,iops=...,bps=... defines it");
}

// probe-delay-us needs a simulated drive, which only the test build of the launcher supplies: the
// product (no factory) refuses the option, naming the flag; with a factory the drive is used.
// Hot-plug on a VM that has only the controller (--scsi-controller): names and LUNs chosen or
// refused, the image locked while attached and free once detached, IDE drives and CD-ROMs kept.
TEST_F(StorageTest, DisksAttachAndDetachWhileRunning) {
  StorageConfig bare;
  auto none = Storage::Create(bare);
  ASSERT_TRUE(none.ok());
  DriveSpec spec;
  spec.path = Path("disk.img");
  auto image = block::raw::RawFileBackend::Open(spec.path, (*none)->DiskFileOptions(spec));
  ASSERT_TRUE(image.ok());
  const absl::Status no_controller = (*none)->AttachDisk(spec, std::nullopt, *image).status();
  EXPECT_EQ(no_controller.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(no_controller.message(), HasSubstr("--scsi-controller"));
  image->reset();

  WriteFile("second.img", 1 << 20);
  StorageConfig config;
  config.scsi_controller = true;
  config.drives = {Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "disc.iso"),
                   Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, "disc.iso")};
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  ASSERT_NE((*storage)->TakeScsiDevice(), nullptr);  // with the controller gone, the targets change

  auto open = [&](const std::string& name) {
    DriveSpec disk;
    disk.path = Path(name);
    return block::raw::RawFileBackend::Open(disk.path, (*storage)->DiskFileOptions(disk));
  };
  auto first = (*storage)->AttachDisk(spec, std::nullopt, *open("disk.img"));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->name, "disk0");
  EXPECT_EQ(first->lun, 1);  // cd0 has LUN 0
  // The image is locked against another writer while attached.
  EXPECT_FALSE(open("disk.img").ok());
  first = absl::CancelledError("the test keeps no reference");

  DriveSpec named = spec;
  named.path = Path("second.img");
  named.id = "data";
  EXPECT_EQ((*storage)->AttachDisk(named, uint16_t{1}, *open("second.img")).status().code(),
            absl::StatusCode::kAlreadyExists);
  named.id = "disk0";
  EXPECT_EQ((*storage)->AttachDisk(named, std::nullopt, *open("second.img")).status().code(),
            absl::StatusCode::kAlreadyExists);
  named.id = "9lives";
  EXPECT_EQ((*storage)->AttachDisk(named, std::nullopt, *open("second.img")).status().code(),
            absl::StatusCode::kInvalidArgument);
  named.id = "data";
  named.group = "nobody";
  EXPECT_EQ((*storage)->AttachDisk(named, std::nullopt, *open("second.img")).status().code(),
            absl::StatusCode::kInvalidArgument);
  named.group.clear();
  auto second = (*storage)->AttachDisk(named, uint16_t{300}, *open("second.img"));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->lun, 300);
  EXPECT_EQ((*storage)->drives().size(), 4u);

  EXPECT_EQ((*storage)->DetachDisk("cd0").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*storage)->DetachDisk("cd1").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*storage)->DetachDisk("nothing").status().code(), absl::StatusCode::kNotFound);
  {
    auto detached = (*storage)->DetachDisk("disk0");
    ASSERT_TRUE(detached.ok()) << detached.status();
    EXPECT_EQ(detached->name, "disk0");
    EXPECT_FALSE(open("disk.img").ok()) << "the caller still holds the drive";
  }
  // Nothing else holds it: the image and its lock are free for another user.
  EXPECT_TRUE(open("disk.img").ok());
  EXPECT_FALSE((*storage)->Find("disk0").has_value());
  // Online resize: the virtio-scsi disk grows; IDE drives and CD-ROMs do not resize.
  auto grown = (*storage)->ResizeDisk("data", uint64_t{3} << 20);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(*grown, uint64_t{3} << 20);
  EXPECT_EQ((*storage)->Find("data")->drive->info().size_bytes, uint64_t{3} << 20);
  EXPECT_EQ((*storage)->ResizeDisk("data", uint64_t{1} << 19).status().code(),
            absl::StatusCode::kFailedPrecondition);  // data past the new end
  EXPECT_EQ((*storage)->ResizeDisk("cd0", 1 << 20).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*storage)->ResizeDisk("nothing", 1 << 20).status().code(),
            absl::StatusCode::kNotFound);
  // The name and the LUN are free again.
  auto again = (*storage)->AttachDisk(spec, std::nullopt, *open("disk.img"));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->name, "disk0");
  EXPECT_EQ(again->lun, 1);
}

// The process's open descriptors and threads.
size_t CountEntries(const char* directory) {
  size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory)) ++count;
  return count;
}

// Refused attaches and attach/detach cycles leave nothing behind: no descriptor (image, rings,
// queues' epoll and timer fds), no thread, no lock.
TEST_F(StorageTest, HotPlugLeaksNothing) {
  StorageConfig config;
  config.scsi_controller = true;
  config.iothreads = 2;
  config.drives = {Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "disk.img,id=boot")};
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  WriteFile("data.img", 1 << 20);
  DriveSpec spec;
  spec.path = Path("data.img");
  spec.id = "data";
  const size_t fds = CountEntries("/proc/self/fd");
  const size_t threads = CountEntries("/proc/self/task");
  for (int round = 0; round < 3; ++round) {
    {
      // The image locked by another user (here the boot disk's own open file).
      auto locked =
          block::raw::RawFileBackend::Open(Path("disk.img"), (*storage)->DiskFileOptions(spec));
      EXPECT_EQ(locked.status().code(), absl::StatusCode::kFailedPrecondition);
      DriveSpec taken = spec;
      taken.id = "boot";
      auto image = block::raw::RawFileBackend::Open(spec.path, (*storage)->DiskFileOptions(spec));
      ASSERT_TRUE(image.ok());
      EXPECT_EQ((*storage)->AttachDisk(taken, std::nullopt, *image).status().code(),
                absl::StatusCode::kAlreadyExists);
      EXPECT_EQ((*storage)->AttachDisk(spec, uint16_t{0}, *image).status().code(),
                absl::StatusCode::kAlreadyExists);
      auto attached = (*storage)->AttachDisk(spec, std::nullopt, *std::move(image));
      ASSERT_TRUE(attached.ok()) << attached.status();
      EXPECT_EQ((*storage)->DetachDisk("data").status().code(), absl::StatusCode::kOk);
      EXPECT_EQ((*storage)->DetachDisk("boot").status().code(), absl::StatusCode::kOk);
      DriveSpec boot = spec;
      boot.path = Path("disk.img");
      boot.id = "boot";
      auto again = block::raw::RawFileBackend::Open(boot.path, (*storage)->DiskFileOptions(boot));
      ASSERT_TRUE(again.ok()) << "the detached boot disk is still locked: " << again.status();
      ASSERT_TRUE((*storage)->AttachDisk(boot, uint16_t{0}, *std::move(again)).ok());
    }
    EXPECT_EQ(CountEntries("/proc/self/fd"), fds) << "round " << round;
    EXPECT_EQ(CountEntries("/proc/self/task"), threads) << "round " << round;
  }
}

// The drive after the last one a VM may have (256, the virtio-scsi controller's and the API's
// bound) is RESOURCE_EXHAUSTED, says why, and leaves no drive behind; the API passes the code on
// (api/api_server.cc) and vmmctl prints the message.
TEST_F(StorageTest, OneDriveTooManyIsResourceExhausted) {
  StorageConfig config;
  config.scsi_controller = true;
  config.drives = {Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "disk.img")};
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  // One descriptor per image and a few per drive queue: more than the default 1,024.
  rlimit files{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &files), 0);
  files.rlim_cur = files.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &files), 0);
  std::filesystem::create_directories(Path("many"));
  absl::Status last;
  for (int i = 0; i < 300 && last.ok(); ++i) {
    const std::string image_name = "many/" + std::to_string(i) + ".img";
    WriteFile(image_name, 4096);
    DriveSpec spec;
    spec.path = Path(image_name);
    auto image = block::raw::RawFileBackend::Open(spec.path, (*storage)->DiskFileOptions(spec));
    ASSERT_TRUE(image.ok()) << image.status();
    last = (*storage)->AttachDisk(spec, std::nullopt, *std::move(image)).status();
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted) << last;
  EXPECT_EQ(last.message(), "the VM has 256 drives, the most it may have");
  EXPECT_EQ((*storage)->drives().size(), 256u);
}

TEST_F(StorageTest, ProbeDelayNeedsTheTestBuild) {
  auto refused =
      Create(Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "disc.iso,probe-delay-us=1000"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(refused.status().message(),
                               "--ide-cdrom=disc.iso: probe-delay-us simulates a "
                               "slow host drive for tests and benchmarks"))
      << refused.status();

  StorageConfig config;
  config.drives = {
      Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde, "disc.iso,probe-delay-us=0")};
  std::string simulated_path;
  config.simulated_drive = [&](const std::string& path, std::chrono::microseconds) {
    simulated_path = path;
    return std::unique_ptr<block::CdromDevice>(
        std::make_unique<block::SimulatedCdromDevice>(path, std::chrono::microseconds(0)));
  };
  auto storage = Storage::Create(config);
  ASSERT_TRUE(storage.ok()) << storage.status();
  EXPECT_EQ(simulated_path, Path("disc.iso"));
  const AttachedDrive cd = (*storage)->drives()[0];  // a copy: drives() returns one
  ASSERT_NE(cd.host_drive, nullptr);
  EXPECT_EQ(cd.host_drive->stats().probes, 2u);  // status and capacity, once, at start
}

// The control API's Insert goes through the same rule (INVALID_ARGUMENT, the size and the
// minimum), and a relative path is made absolute against the VMM's working directory.
class StorageApiTest : public StorageTest {
 protected:
  void SetUp() override {
    StorageTest::SetUp();
    StorageConfig config;
    config.drives = {Drive(DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi, ""),
                     Drive(DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi, "disk.img")};
    auto storage = Storage::Create(config);
    ASSERT_TRUE(storage.ok()) << storage.status();
    storage_ = *std::move(storage);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
    server_.reset();
    control_.reset();
    storage_.reset();
    StorageTest::TearDown();
  }

  void Start(const MediaDirectory* media_dir = nullptr) {
    control_ = std::make_unique<BackendApiControl>(
        *storage_, "test", absl::Now(), getpid(), [] {}, media_dir);
    api::ApiServerOptions options;
    options.unix_socket_path = Path("api.sock");
    umask(0177);  // the launchers' (vmm/command_line.h): the server binds its socket under it
    auto server = api::ApiServer::Start(options, *control_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    media_ = vmm::v1::MediaService::NewStub(grpc::CreateChannel(
        "unix:" + options.unix_socket_path, grpc::InsecureChannelCredentials()));
  }

  grpc::Status Insert(const std::string& path, vmm::v1::DriveStatus* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    vmm::v1::InsertRequest request;
    request.set_drive("cd0");
    request.set_path(path);
    return media_->Insert(&context, request, out);
  }

  std::unique_ptr<Storage> storage_;
  std::unique_ptr<BackendApiControl> control_;
  std::unique_ptr<api::ApiServer> server_;
  std::unique_ptr<vmm::v1::MediaService::Stub> media_;
};

TEST_F(StorageApiTest, InsertRefusesMediaSmallerThanOneBlock) {
  Start();
  vmm::v1::DriveStatus status;
  for (const auto& [name, size] :
       {std::pair<std::string, int>{"empty.iso", 0}, {"small.iso", 2047}}) {
    const grpc::Status refused = Insert(Path(name), &status);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_EQ(refused.error_message(),
              "insert: " + Path(name) + ": " + std::to_string(size) +
                  " bytes is too small for a CD/DVD medium (the minimum is one 2048-byte block)");
  }
  EXPECT_FALSE(storage_->drives()[0].media->Current()->present);
  ASSERT_TRUE(Insert(Path("one-block.iso"), &status).ok());
  EXPECT_EQ(status.size_bytes(), 2048u);
}

TEST_F(StorageApiTest, InsertWithAMediaDirectoryRefusesThemToo) {
  auto directory = MediaDirectory::Open(dir_);
  ASSERT_TRUE(directory.ok());
  Start(directory->get());
  vmm::v1::DriveStatus status;
  const grpc::Status refused = Insert("small.iso", &status);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("insert: small.iso: 2047 bytes is too small"));
  // Relative to the directory, and reported absolute (the directory joined to it), as an insert
  // by absolute path under the directory is.
  ASSERT_TRUE(Insert("disc.iso", &status).ok());
  EXPECT_EQ(status.source(), Path("disc.iso"));
}

// --media-dir given relative: absolute paths under it work too, and sources are absolute.
TEST_F(StorageApiTest, ARelativeMediaDirectoryTakesAbsolutePathsUnderIt) {
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  ASSERT_EQ(mkdir("media", 0755), 0);
  ASSERT_EQ(rename("disc.iso", "media/disc.iso"), 0);
  auto directory = MediaDirectory::Open("./media/");
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(directory.ok()) << directory.status();
  EXPECT_EQ((*directory)->path(), Path("media"));
  Start(directory->get());
  vmm::v1::DriveStatus status;
  EXPECT_EQ(Insert(Path("one-block.iso"), &status).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(Insert(Path("media/disc.iso"), &status).ok());
  EXPECT_EQ(status.source(), Path("media/disc.iso"));
}

TEST_F(StorageApiTest, RelativePathsAreReportedAbsolute) {
  Start();
  char cwd[PATH_MAX];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(dir_.c_str()), 0);
  vmm::v1::DriveStatus status;
  const grpc::Status inserted = Insert("./disc.iso", &status);
  ASSERT_EQ(chdir(cwd), 0);
  ASSERT_TRUE(inserted.ok()) << inserted.error_message();
  EXPECT_EQ(status.source(), Path("disc.iso"));
  // The disk's source is the absolute path the launcher made of "disk.img".
  grpc::ClientContext context;
  vmm::v1::ListDrivesResponse drives;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ASSERT_TRUE(media_->ListDrives(&context, vmm::v1::ListDrivesRequest(), &drives).ok());
  ASSERT_EQ(drives.drives_size(), 2);
  EXPECT_EQ(drives.drives(1).source(), Path("disk.img"));
}

}  // namespace
}  // namespace vmm

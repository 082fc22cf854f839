// vmmctl against an in-process fake of the control API (the real server is tested end to end in
// tests/integration/api_test.cc): the command line, human and JSON output, the exit statuses
// (0 ok, 1 RPC error, 2 usage, 3 cannot connect), deadlines, and media watch.
#include "api/vmmctl_lib.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"

namespace vmmctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using vmm::v1::DriveStatus;

// A socket path must fit sun_path (108 bytes); Bazel's TEST_TMPDIR is longer: use a short private
// directory under /tmp.
std::string TempPath(const std::string& name) {
  static const std::string* dir = [] {
    char pattern[] = "/tmp/vmmctl-test-XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made == nullptr) return new std::string("/tmp");
    atexit([] { std::filesystem::remove_all(*dir); });
    return new std::string(made);
  }();
  return *dir + "/" + name;
}

// A fake VMM: one CD-ROM (cd0) and one disk (disk0), the media rules of vmm.proto.
class FakeVmm final : public vmm::v1::MediaService::Service, public vmm::v1::VmService::Service {
 public:
  FakeVmm() {
    DriveStatus cd;
    cd.set_name("cd0");
    cd.set_kind(DriveStatus::CDROM);
    cd.set_bus("virtio-scsi");
    cd.set_address("0:1");
    cd.set_removable(true);
    cd.set_medium_present(true);
    cd.set_size_bytes(8 << 20);
    cd.set_generation(1);
    cd.set_source("/images/old.iso");
    cd.set_read_only(true);
    drives_.push_back(cd);
    DriveStatus disk;
    disk.set_name("disk0");
    disk.set_kind(DriveStatus::DISK);
    disk.set_bus("virtio-scsi");
    disk.set_address("0:0");
    disk.set_medium_present(true);
    disk.set_size_bytes(64 << 20);
    disk.set_source("/images/disk.img");
    disk.set_cache_mode("none");
    drives_.push_back(disk);
  }

  void set_locked(bool locked) {
    absl::MutexLock lock(&mutex_);
    drives_[0].set_locked(locked);
  }
  void set_guest_agrees(bool agrees) {
    absl::MutexLock lock(&mutex_);
    guest_agrees_ = agrees;
  }
  std::string last_insert_path() {
    absl::MutexLock lock(&mutex_);
    return last_insert_path_;
  }
  int watchers() {
    absl::MutexLock lock(&mutex_);
    return watchers_;
  }
  void Emit(vmm::v1::MediaEvent::Type type, bool by_guest) {
    absl::MutexLock lock(&mutex_);
    vmm::v1::MediaEvent event;
    event.set_type(type);
    event.set_drive("cd0");
    event.set_by_guest(by_guest);
    *event.mutable_status() = drives_[0];
    event.set_time_unix_nanos(1764517921123000000);
    events_.push_back(event);
  }
  void set_delay(absl::Duration delay) {
    absl::MutexLock lock(&mutex_);
    delay_ = delay;
  }

  grpc::Status ListDrives(grpc::ServerContext*, const vmm::v1::ListDrivesRequest*,
                          vmm::v1::ListDrivesResponse* response) override {
    absl::MutexLock lock(&mutex_);
    for (const DriveStatus& d : drives_) *response->add_drives() = d;
    return grpc::Status::OK;
  }
  grpc::Status GetStatus(grpc::ServerContext*, const vmm::v1::GetStatusRequest* request,
                         DriveStatus* response) override {
    absl::Duration delay;
    {
      absl::MutexLock lock(&mutex_);
      delay = delay_;
    }
    absl::SleepFor(delay);
    absl::MutexLock lock(&mutex_);
    DriveStatus* d = Find(request->drive());
    if (d == nullptr) return NotFound(request->drive());
    *response = *d;
    return grpc::Status::OK;
  }
  grpc::Status Insert(grpc::ServerContext*, const vmm::v1::InsertRequest* request,
                      DriveStatus* response) override {
    absl::MutexLock lock(&mutex_);
    DriveStatus* d = Find(request->drive());
    if (d == nullptr) return NotFound(request->drive());
    if (!d->removable())
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "disk0 is not removable");
    if (d->medium_present())
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "cd0 has a medium");
    last_insert_path_ = request->path();
    d->set_medium_present(true);
    d->set_tray_open(false);
    d->set_source(request->path());
    d->set_generation(d->generation() + 1);
    *response = *d;
    return grpc::Status::OK;
  }
  grpc::Status Eject(grpc::ServerContext*, const vmm::v1::EjectRequest* request,
                     DriveStatus* response) override {
    absl::MutexLock lock(&mutex_);
    DriveStatus* d = Find(request->drive());
    if (d == nullptr) return NotFound(request->drive());
    if (!d->removable()) {  // the real server's words (api/api_server.cc)
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          request->drive() + " is a disk: it has no removable medium to insert, eject or watch");
    }
    if (d->locked() && !request->force()) {
      // The real server asks the guest (block/media.h); a guest that agrees unlocks and opens the tray.
      if (guest_agrees_) {
        d->set_locked(false);
        d->set_tray_open(true);
        vmm::v1::MediaEvent opened;
        opened.set_type(vmm::v1::MediaEvent::TRAY_OPENED);
        opened.set_drive(d->name());
        opened.set_by_guest(true);
        *opened.mutable_status() = *d;
        events_.push_back(opened);
      }
      return grpc::Status(
          grpc::StatusCode::FAILED_PRECONDITION,
          "cd0: the guest has locked the drive; it was asked to eject the medium, and the tray "
          "opens if it agrees (use force to eject now)");
    }
    if (d->medium_present()) d->set_generation(d->generation() + 1);
    d->set_medium_present(false);
    d->set_tray_open(true);
    d->clear_source();
    d->set_size_bytes(0);
    *response = *d;
    return grpc::Status::OK;
  }
  grpc::Status SetTray(grpc::ServerContext*, const vmm::v1::SetTrayRequest* request,
                       DriveStatus* response) override {
    absl::MutexLock lock(&mutex_);
    DriveStatus* d = Find(request->drive());
    if (d == nullptr) return NotFound(request->drive());
    d->set_tray_open(request->open());
    *response = *d;
    return grpc::Status::OK;
  }
  grpc::Status Watch(grpc::ServerContext* context, const vmm::v1::WatchRequest*,
                     grpc::ServerWriter<vmm::v1::MediaEvent>* writer) override {
    {
      absl::MutexLock lock(&mutex_);
      ++watchers_;
      authorizations_.push_back(Authorization(*context));
    }
    writer->SendInitialMetadata();  // subscribed (as the real server does)
    while (!context->IsCancelled()) {
      std::optional<vmm::v1::MediaEvent> next;
      {
        absl::MutexLock lock(&mutex_);
        mutex_.AwaitWithTimeout(
            absl::Condition(
                +[](std::deque<vmm::v1::MediaEvent>* q) { return !q->empty(); }, &events_),
            absl::Milliseconds(20));
        if (!events_.empty()) {
          next = events_.front();
          events_.pop_front();
        }
      }
      if (next && !writer->Write(*next)) break;
    }
    absl::MutexLock lock(&mutex_);
    --watchers_;
    return grpc::Status::OK;
  }

  grpc::Status GetInfo(grpc::ServerContext* context, const vmm::v1::GetInfoRequest*,
                       vmm::v1::VmInfo* info) override {
    absl::MutexLock lock(&mutex_);
    authorizations_.push_back(Authorization(*context));
    info->set_state(vmm::v1::VmInfo::RUNNING);
    info->set_vcpus(2);
    info->set_memory_bytes(128 << 20);
    info->set_kernel("/guest.elf");
    info->set_cmdline("test=hello");
    info->set_uptime_ms(1234);
    info->set_pid(4242);
    info->set_media_dir(media_dir_);
    for (const DriveStatus& d : drives_) *info->add_drives() = d;
    return grpc::Status::OK;
  }
  grpc::Status Pause(grpc::ServerContext*, const vmm::v1::PauseRequest*,
                     vmm::v1::VmInfo* info) override {
    info->set_state(vmm::v1::VmInfo::PAUSED);
    return grpc::Status::OK;
  }
  grpc::Status Resume(grpc::ServerContext*, const vmm::v1::ResumeRequest*,
                      vmm::v1::VmInfo* info) override {
    info->set_state(vmm::v1::VmInfo::RUNNING);
    return grpc::Status::OK;
  }
  grpc::Status Shutdown(grpc::ServerContext*, const vmm::v1::ShutdownRequest* request,
                        vmm::v1::VmInfo* info) override {
    absl::MutexLock lock(&mutex_);
    last_shutdown_ = *request;
    info->set_state(vmm::v1::VmInfo::STOPPING);
    return grpc::Status::OK;
  }
  grpc::Status SetDriveLimits(grpc::ServerContext*, const vmm::v1::SetDriveLimitsRequest* request,
                              vmm::v1::DriveLimits* reply) override {
    absl::MutexLock lock(&mutex_);
    last_limits_ = *request;
    reply->set_drive(request->drive());
    reply->set_group(request->group());
    *reply->mutable_limits() = request->limits();
    return grpc::Status::OK;
  }
  vmm::v1::SetDriveLimitsRequest last_limits() {
    absl::MutexLock lock(&mutex_);
    return last_limits_;
  }
  grpc::Status AttachDisk(grpc::ServerContext*, const vmm::v1::AttachDiskRequest* request,
                          DriveStatus* reply) override {
    absl::MutexLock lock(&mutex_);
    last_attach_ = *request;
    reply->set_name(request->id().empty() ? "disk1" : request->id());
    reply->set_kind(DriveStatus::DISK);
    reply->set_bus("virtio-scsi");
    reply->set_address(absl::StrCat("0:0:", request->has_lun() ? request->lun() : 1));
    reply->set_medium_present(true);
    reply->set_size_bytes(1 << 20);
    reply->set_source(request->path());
    reply->set_cache_mode(request->cache_mode().empty() ? "writeback" : request->cache_mode());
    return grpc::Status::OK;
  }
  grpc::Status DetachDisk(grpc::ServerContext*, const vmm::v1::DetachDiskRequest* request,
                          DriveStatus* reply) override {
    if (request->drive() != "disk0") return NotFound(request->drive());
    reply->set_name("disk0");
    reply->set_source("/images/disk0.img");
    return grpc::Status::OK;
  }
  grpc::Status ResizeDisk(grpc::ServerContext*, const vmm::v1::ResizeDiskRequest* request,
                          DriveStatus* reply) override {
    absl::MutexLock lock(&mutex_);
    last_resize_ = *request;
    reply->set_name(request->drive());
    reply->set_kind(DriveStatus::DISK);
    reply->set_bus("virtio-scsi");
    reply->set_address("0:0:1");
    reply->set_medium_present(true);
    reply->set_size_bytes(request->size_bytes());
    return grpc::Status::OK;
  }
  vmm::v1::AttachDiskRequest last_attach() {
    absl::MutexLock lock(&mutex_);
    return last_attach_;
  }
  vmm::v1::ResizeDiskRequest last_resize() {
    absl::MutexLock lock(&mutex_);
    return last_resize_;
  }
  grpc::Status GetStats(grpc::ServerContext*, const vmm::v1::GetStatsRequest* request,
                        vmm::v1::GetStatsResponse* response) override {
    if (!request->drive().empty() && request->drive() != "cd0" && request->drive() != "disk0") {
      return NotFound(request->drive());
    }
    auto* s = response->add_drives();
    s->set_drive("cd0");
    s->set_read_requests(4096 / 64);
    s->set_read_bytes(8 << 20);
    s->set_latency_mean_us(41.5);
    s->set_latency_p50_us(40);
    s->set_latency_p99_us(90);
    s->set_latency_max_us(300);
    return grpc::Status::OK;
  }

  void set_media_dir(const std::string& directory) {
    absl::MutexLock lock(&mutex_);
    media_dir_ = directory;
  }
  vmm::v1::ShutdownRequest last_shutdown() {
    absl::MutexLock lock(&mutex_);
    return last_shutdown_;
  }
  // The "authorization" metadata of each GetInfo and Watch call so far ("" for none).
  std::vector<std::string> authorizations() {
    absl::MutexLock lock(&mutex_);
    return authorizations_;
  }

 private:
  std::string media_dir_ ABSL_GUARDED_BY(mutex_);
  vmm::v1::SetDriveLimitsRequest last_limits_ ABSL_GUARDED_BY(mutex_);
  vmm::v1::AttachDiskRequest last_attach_ ABSL_GUARDED_BY(mutex_);
  vmm::v1::ResizeDiskRequest last_resize_ ABSL_GUARDED_BY(mutex_);
  DriveStatus* Find(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    for (DriveStatus& d : drives_) {
      if (d.name() == name) return &d;
    }
    return nullptr;
  }
  static std::string Authorization(const grpc::ServerContext& context) {
    std::string all;
    const auto [begin, end] = context.client_metadata().equal_range("authorization");
    for (auto it = begin; it != end; ++it)
      absl::StrAppend(&all, std::string(it->second.data(), it->second.size()));
    return all;
  }
  static grpc::Status NotFound(const std::string& name) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND, "no drive \"" + name + "\"");
  }

  absl::Mutex mutex_;
  std::vector<DriveStatus> drives_ ABSL_GUARDED_BY(mutex_);
  std::string last_insert_path_ ABSL_GUARDED_BY(mutex_);
  std::deque<vmm::v1::MediaEvent> events_ ABSL_GUARDED_BY(mutex_);
  int watchers_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Duration delay_ ABSL_GUARDED_BY(mutex_);
  bool guest_agrees_ ABSL_GUARDED_BY(mutex_) = false;
  vmm::v1::ShutdownRequest last_shutdown_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> authorizations_ ABSL_GUARDED_BY(mutex_);
};

// An output stream's buffer that a test can wait on: the text written so far, and a wait for the
// number of complete lines in it (the watch's printed events).
class LineSignallingBuffer : public std::streambuf {
 public:
  bool WaitForLines(int lines, absl::Duration timeout) {
    absl::MutexLock lock(&mutex_);
    wanted_lines_ = lines;
    return mutex_.AwaitWithTimeout(absl::Condition(this, &LineSignallingBuffer::HasWantedLines),
                                   timeout);
  }
  std::string text() {
    absl::MutexLock lock(&mutex_);
    return text_;
  }

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char ch = traits_type::to_char_type(c);
      xsputn(&ch, 1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    absl::MutexLock lock(&mutex_);
    text_.append(data, static_cast<size_t>(size));
    return size;
  }

 private:
  absl::Mutex mutex_;
  std::string text_ ABSL_GUARDED_BY(mutex_);
  int wanted_lines_ ABSL_GUARDED_BY(mutex_) = 0;

  bool HasWantedLines() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return std::count(text_.begin(), text_.end(), '\n') >= wanted_lines_;
  }
};

struct Result {
  int status;
  std::string out, err;
};

class VmmctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    socket_ = TempPath("fake-vmm.sock");
    unlink(socket_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(static_cast<vmm::v1::MediaService::Service*>(&fake_));
    builder.RegisterService(static_cast<vmm::v1::VmService::Service*>(&fake_));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ResetWatchCancellationForTesting();
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  }

  Result Vmmctl(std::vector<std::string> args, bool with_api = true) {
    if (with_api) args.insert(args.begin(), {"--api", "unix:" + socket_});
    std::ostringstream out, err;
    const int status = vmmctl::Run(args, out, err);
    return {status, out.str(), err.str()};
  }

  std::string socket_;
  FakeVmm fake_;
  std::unique_ptr<grpc::Server> server_;
};

TEST(ParseTest, Addresses) {
  auto a = ParseApiAddress("unix:/run/vm.sock");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->is_unix);
  EXPECT_EQ(a->path, "/run/vm.sock");
  EXPECT_EQ(a->target, "unix:/run/vm.sock");
  EXPECT_EQ(ParseApiAddress("unix:///run/vm.sock")->path, "/run/vm.sock");
  EXPECT_EQ(ParseApiAddress("/run/vm.sock")->target, "unix:/run/vm.sock");
  EXPECT_EQ(ParseApiAddress("./vm.sock")->path, "./vm.sock");
  EXPECT_EQ(ParseApiAddress("unix:vm.sock")->path, "vm.sock");
  auto tcp = ParseApiAddress("127.0.0.1:7000");
  ASSERT_TRUE(tcp.ok());
  EXPECT_FALSE(tcp->is_unix);
  EXPECT_EQ(tcp->target, "127.0.0.1:7000");
  EXPECT_EQ(ParseApiAddress("[::1]:7000")->target, "[::1]:7000");
  EXPECT_EQ(ParseApiAddress("localhost:7000")->target, "localhost:7000");
  // A bare file name or a relative path is a unix socket, as ./vm.sock (issue 17).
  EXPECT_EQ(ParseApiAddress("vm.sock")->target, "unix:vm.sock");
  EXPECT_TRUE(ParseApiAddress("vm.sock")->is_unix);
  EXPECT_EQ(ParseApiAddress("run/vm.sock")->path, "run/vm.sock");
  EXPECT_TRUE(ParseApiAddress("localhost")->is_unix);  // no port: a file name (connecting says so)
  EXPECT_FALSE(ParseApiAddress("").ok());
  EXPECT_FALSE(ParseApiAddress("unix:").ok());
  EXPECT_FALSE(ParseApiAddress("localhost:0").ok());
  EXPECT_FALSE(ParseApiAddress("localhost:99999").ok());
  auto bad = ParseApiAddress("host:port");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("--api=host:port: expected a unix socket"));
  EXPECT_FALSE(ParseApiAddress("unix:/" + std::string(200, 'x')).ok());  // beyond sun_path
}

TEST(ParseTest, OptionsAnywhere) {
  auto cl = ParseCommandLine(
      {"media", "--json", "eject", "cd0", "--force", "--api=unix:/s", "--timeout", "2.5"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  EXPECT_EQ(cl->api, "unix:/s");
  EXPECT_TRUE(cl->json);
  EXPECT_EQ(cl->timeout, absl::Milliseconds(2500));
  EXPECT_THAT(cl->words, ::testing::ElementsAre("media", "eject", "cd0"));
  EXPECT_EQ(cl->options.count("force"), 1u);
  auto dashdash = ParseCommandLine({"media", "insert", "cd0", "--", "--weird.iso"});
  ASSERT_TRUE(dashdash.ok());
  EXPECT_THAT(dashdash->words, ::testing::ElementsAre("media", "insert", "cd0", "--weird.iso"));
  EXPECT_FALSE(ParseCommandLine({"--bogus"}).ok());
  EXPECT_FALSE(ParseCommandLine({"--api"}).ok());
  EXPECT_FALSE(ParseCommandLine({"--force=yes"}).ok());
  EXPECT_FALSE(ParseCommandLine({"--timeout", "0"}).ok());
  EXPECT_FALSE(ParseCommandLine({"-x"}).ok());
}

TEST(OutputTest, Sizes) {
  EXPECT_EQ(HumanSize(512), "512 B");
  EXPECT_EQ(HumanSize(8 << 20), "8.0 MiB");
  EXPECT_EQ(HumanSize(3ull << 30), "3.0 GiB");
  EXPECT_EQ(HumanSize(1536), "1.5 KiB");
}

TEST_F(VmmctlTest, UsageErrorsExitTwoWithoutConnecting) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},
           {"media"},
           {"media", "frobnicate"},
           {"media", "eject"},
           {"media", "eject", "cd0", "extra"},
           {"media", "eject", "cd0", "--grace-ms", "5"},
           {"media", "tray", "cd0", "sideways"},
           {"media", "insert", "cd0"},
           {"vm", "shutdown", "--grace-ms", "soon"},
           {"media", "watch", "--count", "0"},
           {"media", "eject", ""},
           {"--nope", "vm", "info"},
           {"drive", "limit", "disk0", "--iops", "many"},
           {"drive", "limit", "disk0", "--burst", "1"},
           {"drive", "limit"},
       }) {
    Result r = Vmmctl(args);
    EXPECT_EQ(r.status, kExitUsage) << ::testing::PrintToString(args) << "\n" << r.err;
    EXPECT_FALSE(r.err.empty());
  }
  // No address at all (and none in the environment).
  unsetenv("VMMCTL_API");
  Result r = Vmmctl({"vm", "info"}, /*with_api=*/false);
  EXPECT_EQ(r.status, kExitUsage);
  EXPECT_THAT(r.err, HasSubstr("--api"));
  Result help = Vmmctl({"--help"}, false);
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("media eject DRIVE [--force | --wait]"));
}

TEST_F(VmmctlTest, DriveLimitSetsADrivesOrAGroupsBudget) {
  Result drive =
      Vmmctl({"drive", "limit", "disk0", "--iops", "1000", "--bps", "10M", "--burst", "0.5"});
  ASSERT_EQ(drive.status, 0) << drive.err;
  EXPECT_EQ(drive.out, "disk0: 1000 IOPS, 10.0 MiB/s, burst 500 ops, burst 5.0 MiB\n");
  vmm::v1::SetDriveLimitsRequest sent = fake_.last_limits();
  EXPECT_EQ(sent.drive(), "disk0");
  EXPECT_EQ(sent.limits().bytes_per_second(), 10u << 20);
  Result group = Vmmctl({"drive", "limit", "tenant", "--group", "--iops", "200"});
  ASSERT_EQ(group.status, 0) << group.err;
  EXPECT_EQ(group.out, "group tenant: 200 IOPS\n");
  EXPECT_EQ(fake_.last_limits().group(), "tenant");
  EXPECT_TRUE(fake_.last_limits().drive().empty());
  Result lifted = Vmmctl({"drive", "limit", "disk0"});
  ASSERT_EQ(lifted.status, 0) << lifted.err;
  EXPECT_EQ(lifted.out, "disk0: unlimited\n");
}

TEST_F(VmmctlTest, DiskAddRemoveResize) {
  Result add =
      Vmmctl({"disk", "add", "/srv/data.img", "--id", "data", "--cache", "none", "--fua", "emulate",
              "--lun", "7", "--iops", "300", "--io-group", "tenant", "--read-only"});
  ASSERT_EQ(add.status, 0) << add.err;
  EXPECT_NE(add.out.find("data disk virtio-scsi 0:0:7"), std::string::npos) << add.out;
  const vmm::v1::AttachDiskRequest sent = fake_.last_attach();
  EXPECT_EQ(sent.path(), "/srv/data.img");
  EXPECT_EQ(sent.id(), "data");
  EXPECT_EQ(sent.cache_mode(), "none");
  EXPECT_EQ(sent.fua_mode(), "emulate");
  ASSERT_TRUE(sent.has_lun());
  EXPECT_EQ(sent.lun(), 7u);
  EXPECT_EQ(sent.limits().iops(), 300u);
  EXPECT_EQ(sent.io_group(), "tenant");
  EXPECT_TRUE(sent.read_only());
  // A relative path goes absolute (the VMM has its own working directory); no LUN: none sent.
  Result relative = Vmmctl({"disk", "add", "data.img"});
  ASSERT_EQ(relative.status, 0) << relative.err;
  EXPECT_EQ(fake_.last_attach().path(), std::filesystem::current_path().string() + "/data.img");
  EXPECT_FALSE(fake_.last_attach().has_lun());
  EXPECT_EQ(Vmmctl({"disk", "add", "d.img", "--lun", "16384"}).status, 2);
  EXPECT_EQ(Vmmctl({"disk", "add"}).status, 2);

  Result remove = Vmmctl({"disk", "remove", "disk0"});
  ASSERT_EQ(remove.status, 0) << remove.err;
  EXPECT_EQ(remove.out, "disk0: detached (/images/disk0.img)\n");
  EXPECT_EQ(Vmmctl({"disk", "remove", "disk9"}).status, 1);

  Result resize = Vmmctl({"disk", "resize", "disk0", "48M"});
  ASSERT_EQ(resize.status, 0) << resize.err;
  EXPECT_EQ(fake_.last_resize().size_bytes(), 48u << 20);
  ASSERT_EQ(Vmmctl({"disk", "resize", "disk0"}).status, 0);
  EXPECT_EQ(fake_.last_resize().size_bytes(), 0u);  // the image's size on the host
  EXPECT_EQ(Vmmctl({"disk", "resize", "disk0", "lots"}).status, 2);
  EXPECT_EQ(Vmmctl({"disk", "resize", "disk0", "0"}).status, 2);
}

TEST_F(VmmctlTest, AddressFromTheEnvironment) {
  setenv("VMMCTL_API", ("unix:" + socket_).c_str(), 1);
  Result r = Vmmctl({"vm", "info"}, /*with_api=*/false);
  unsetenv("VMMCTL_API");
  EXPECT_EQ(r.status, 0) << r.err;
}

// --api-token-file (else $MICROVM_API_TOKEN_FILE) sends "authorization: Bearer <token>" with
// every call, watches included; without one, nothing is sent.
TEST_F(VmmctlTest, SendsTheTokenFromItsFile) {
  unsetenv("MICROVM_API_TOKEN_FILE");
  const std::string token_file = TempPath("token");
  std::ofstream(token_file) << "s3cret-token\n";
  chmod(token_file.c_str(), 0640);  // a client may share the file with a group
  const std::string other_file = TempPath("other-token");
  std::ofstream(other_file) << "other-token";

  EXPECT_EQ(Vmmctl({"vm", "info"}).status, 0);
  EXPECT_EQ(Vmmctl({"--api-token-file", token_file, "vm", "info"}).status, 0);
  setenv("MICROVM_API_TOKEN_FILE", other_file.c_str(), 1);
  EXPECT_EQ(Vmmctl({"vm", "info"}).status, 0);
  EXPECT_EQ(Vmmctl({"--api-token-file=" + token_file, "vm", "info"}).status, 0);  // the flag wins
  unsetenv("MICROVM_API_TOKEN_FILE");
  Result watch;
  std::thread watcher([&] {
    watch = Vmmctl({"media", "watch", "--count", "1", "--api-token-file", token_file});
  });
  for (int i = 0; i < 500 && fake_.watchers() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  fake_.Emit(vmm::v1::MediaEvent::TRAY_OPENED, false);
  watcher.join();
  EXPECT_EQ(watch.status, 0) << watch.err;
  EXPECT_EQ(fake_.authorizations(),
            (std::vector<std::string>{"", "Bearer s3cret-token", "Bearer other-token",
                                      "Bearer s3cret-token", "Bearer s3cret-token"}));

  // A token file that cannot be used is a usage error, before connecting.
  Result missing = Vmmctl({"--api-token-file", TempPath("no-such-token"), "vm", "info"});
  EXPECT_EQ(missing.status, kExitUsage);
  EXPECT_THAT(missing.err, HasSubstr("--api-token-file"));
  const std::string empty_file = TempPath("empty-token");
  std::ofstream(empty_file) << "\n";
  Result empty = Vmmctl({"--api-token-file", empty_file, "vm", "info"});
  EXPECT_EQ(empty.status, kExitUsage);
  EXPECT_THAT(empty.err, HasSubstr("empty"));
  EXPECT_EQ(fake_.authorizations().size(), 5u);
}

// `--api vm.sock` is the socket vm.sock in the working directory, as ./vm.sock is.
TEST_F(VmmctlTest, ABareSocketNameIsAPath) {
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  const std::string directory = socket_.substr(0, socket_.rfind('/'));
  ASSERT_EQ(chdir(directory.c_str()), 0);
  const std::string name = socket_.substr(socket_.rfind('/') + 1);
  Result r = Vmmctl({"--api", name, "vm", "info"}, false);
  Result missing = Vmmctl({"--api", "no-such.sock", "vm", "info"}, false);
  ASSERT_EQ(chdir(cwd), 0);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(missing.status, kExitCannotConnect);
  EXPECT_THAT(missing.err,
              HasSubstr("cannot connect to unix:no-such.sock: No such file or directory "
                        "(taken as a unix socket path; TCP is HOST:PORT)"));
}

TEST_F(VmmctlTest, CannotConnectExitsThree) {
  Result missing = Vmmctl({"--api", "unix:" + TempPath("nothing-here.sock"), "vm", "info"}, false);
  EXPECT_EQ(missing.status, kExitCannotConnect);
  EXPECT_THAT(missing.err, HasSubstr("No such file or directory"));

  const std::string regular = TempPath("regular-file");
  std::ofstream(regular) << "not a socket";
  Result file = Vmmctl({"--api", regular, "vm", "info"}, false);
  EXPECT_EQ(file.status, kExitCannotConnect);
  EXPECT_THAT(file.err, HasSubstr("not a socket"));

  // A socket nobody listens on any more.
  const std::string stale = TempPath("stale.sock");
  unlink(stale.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  strncpy(sun.sun_path, stale.c_str(), sizeof(sun.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)), 0);
  close(fd);
  const absl::Time start = absl::Now();
  Result refused = Vmmctl({"--api", "unix:" + stale, "vm", "info"}, false);
  EXPECT_EQ(refused.status, kExitCannotConnect);
  EXPECT_THAT(refused.err, HasSubstr("Connection refused"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "a stale socket must fail at once";

  // Nothing listening on a loopback TCP port: bounded by --connect-timeout.
  Result tcp = Vmmctl({"--api", "127.0.0.1:1", "--connect-timeout", "0.5", "vm", "info"}, false);
  EXPECT_EQ(tcp.status, kExitCannotConnect);
}

TEST_F(VmmctlTest, MediaListAndStatus) {
  Result list = Vmmctl({"media", "list"});
  ASSERT_EQ(list.status, 0) << list.err;
  EXPECT_THAT(list.out, HasSubstr("NAME"));
  EXPECT_THAT(list.out, HasSubstr("cd0"));
  EXPECT_THAT(list.out, HasSubstr("/images/old.iso"));
  EXPECT_THAT(list.out, HasSubstr("disk0"));

  Result status = Vmmctl({"media", "status", "cd0"});
  ASSERT_EQ(status.status, 0) << status.err;
  EXPECT_THAT(status.out, HasSubstr("kind:"));
  EXPECT_THAT(status.out, HasSubstr("cdrom"));
  EXPECT_THAT(status.out, HasSubstr("8388608 bytes (8.0 MiB)"));
  EXPECT_THAT(status.out, HasSubstr("generation:"));

  Result json = Vmmctl({"--json", "media", "status", "cd0"});
  ASSERT_EQ(json.status, 0) << json.err;
  DriveStatus parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  EXPECT_EQ(parsed.name(), "cd0");
  EXPECT_EQ(parsed.size_bytes(), 8u << 20);
  EXPECT_THAT(json.out, HasSubstr("\"trayOpen\": false"));  // zero values are printed too

  Result unknown = Vmmctl({"media", "status", "cd9"});
  EXPECT_EQ(unknown.status, kExitRpcFailed);
  EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
  EXPECT_THAT(unknown.err, HasSubstr("cd9"));
  EXPECT_TRUE(unknown.out.empty());
}

TEST_F(VmmctlTest, EjectInsertTrayAndTheLock) {
  fake_.set_locked(true);
  Result refused = Vmmctl({"media", "eject", "cd0"});
  EXPECT_EQ(refused.status, kExitRpcFailed);
  EXPECT_THAT(refused.err, HasSubstr("FAILED_PRECONDITION"));
  // The server's "(use force to eject now)" in vmmctl's terms.
  EXPECT_THAT(
      refused.err,
      HasSubstr("cd0: the guest has locked the drive; it was asked to eject the medium, and "
                "the tray opens if it agrees (--wait waits for that, --force ejects now)\n"));
  EXPECT_THAT(refused.err, Not(HasSubstr("use force")));
  // A guest that never answers: --wait ends at --timeout with DEADLINE_EXCEEDED, the drive unchanged.
  Result waited = Vmmctl({"--timeout", "1", "media", "eject", "cd0", "--wait"});
  EXPECT_EQ(waited.status, kExitRpcFailed);
  EXPECT_THAT(waited.err, HasSubstr("was asked to eject; waiting up to 1s"));
  EXPECT_THAT(waited.err,
              HasSubstr("DEADLINE_EXCEEDED: cd0: the guest did not open the tray within 1s"));
  EXPECT_THAT(Vmmctl({"media", "eject", "cd0", "--wait", "--force"}).err,
              HasSubstr("exclude each other"));
  // A disk has no medium: the hint says so, not that --force would help (issue 17).
  Result disk_eject = Vmmctl({"media", "eject", "disk0"});
  EXPECT_EQ(disk_eject.status, kExitRpcFailed);
  EXPECT_THAT(disk_eject.err, HasSubstr("disk0 is a disk"));
  EXPECT_THAT(disk_eject.err,
              HasSubstr("(only CD/DVD drives have media: vmmctl media list shows which)"));
  EXPECT_THAT(disk_eject.err, Not(HasSubstr("--force")));
  Result forced = Vmmctl({"media", "eject", "cd0", "--force"});
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_THAT(forced.out,
              HasSubstr("cd0 cdrom virtio-scsi 0:1: no medium, tray open, locked, generation 2"));

  // A relative path is sent absolute (the VMM has its own working directory).
  Result inserted = Vmmctl({"media", "insert", "cd0", "new.iso"});
  ASSERT_EQ(inserted.status, 0) << inserted.err;
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  EXPECT_EQ(fake_.last_insert_path(), std::string(cwd) + "/new.iso");
  EXPECT_THAT(inserted.out, HasSubstr("tray closed"));

  Result again = Vmmctl({"media", "insert", "cd0", "/other.iso"});
  EXPECT_EQ(again.status, kExitRpcFailed);
  EXPECT_THAT(again.err, HasSubstr("FAILED_PRECONDITION"));
  // --force: ejects (through the lock) first.
  Result replaced = Vmmctl({"--json", "media", "insert", "cd0", "/other.iso", "--force"});
  ASSERT_EQ(replaced.status, 0) << replaced.err;
  EXPECT_EQ(fake_.last_insert_path(), "/other.iso");
  DriveStatus parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(replaced.out, &parsed).ok())
      << replaced.out;
  EXPECT_EQ(parsed.generation(), 5u);  // eject, insert, eject, insert

  Result disk = Vmmctl({"media", "insert", "disk0", "/x.iso"});
  EXPECT_EQ(disk.status, kExitRpcFailed);
  Result tray = Vmmctl({"media", "tray", "cd0", "open"});
  ASSERT_EQ(tray.status, 0) << tray.err;
  EXPECT_THAT(tray.out, HasSubstr("tray open"));

  // A VMM with --media-dir takes a relative path relative to that directory: sent as typed.
  fake_.set_media_dir("/srv/media");
  Result confined = Vmmctl({"media", "insert", "cd0", "discs/two.iso", "--force"});
  ASSERT_EQ(confined.status, 0) << confined.err;
  EXPECT_EQ(fake_.last_insert_path(), "discs/two.iso");
  EXPECT_THAT(Vmmctl({"vm", "info"}).out, HasSubstr("media dir:  /srv/media"));
}

// --wait: the guest agrees to the eject request (it opens the tray, which the watch shows), and
// vmmctl then ejects.
TEST_F(VmmctlTest, EjectWaitsForTheGuestToAgree) {
  fake_.set_locked(true);
  fake_.set_guest_agrees(true);
  Result waited = Vmmctl({"media", "eject", "cd0", "--wait"});
  ASSERT_EQ(waited.status, 0) << waited.err;
  EXPECT_THAT(waited.err, HasSubstr("cd0: the guest has locked the drive and was asked to eject"));
  EXPECT_THAT(waited.out, HasSubstr("cd0 cdrom virtio-scsi 0:1: no medium, tray open"));
  EXPECT_THAT(waited.out, HasSubstr(", unlocked"));
  // Unlocked now: --wait ejects at once, without a word on stderr.
  Result plain = Vmmctl({"media", "eject", "cd0", "--wait"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_TRUE(plain.err.empty()) << plain.err;
}

TEST_F(VmmctlTest, VmCommands) {
  Result info = Vmmctl({"vm", "info"});
  ASSERT_EQ(info.status, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("RUNNING"));
  EXPECT_THAT(info.out, HasSubstr("4242"));
  EXPECT_THAT(info.out, HasSubstr("128.0 MiB"));
  EXPECT_THAT(info.out, HasSubstr("cd0"));
  Result json = Vmmctl({"vm", "info", "--json"});
  ASSERT_EQ(json.status, 0);
  vmm::v1::VmInfo parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json.out, &parsed).ok()) << json.out;
  EXPECT_EQ(parsed.pid(), 4242u);
  EXPECT_EQ(parsed.drives_size(), 2);

  EXPECT_THAT(Vmmctl({"vm", "pause"}).out, HasSubstr("PAUSED"));
  EXPECT_THAT(Vmmctl({"vm", "resume"}).out, HasSubstr("RUNNING"));
  Result stats = Vmmctl({"vm", "stats"});
  ASSERT_EQ(stats.status, 0);
  EXPECT_THAT(stats.out, HasSubstr("DRIVE"));
  EXPECT_THAT(stats.out, HasSubstr("8.0 MiB"));
  EXPECT_EQ(Vmmctl({"vm", "stats", "nope"}).status, kExitRpcFailed);

  Result shutdown = Vmmctl({"vm", "shutdown", "--grace-ms", "250"});
  ASSERT_EQ(shutdown.status, 0) << shutdown.err;
  EXPECT_THAT(shutdown.out, HasSubstr("STOPPING"));
  EXPECT_EQ(fake_.last_shutdown().grace_period_ms(), 250u);
  EXPECT_FALSE(fake_.last_shutdown().force());
  Vmmctl({"vm", "shutdown", "--force"});
  EXPECT_TRUE(fake_.last_shutdown().force());
}

TEST_F(VmmctlTest, DeadlineOnUnaryCalls) {
  fake_.set_delay(absl::Seconds(3));
  const absl::Time start = absl::Now();
  Result r = Vmmctl({"--timeout", "0.3", "media", "status", "cd0"});
  EXPECT_EQ(r.status, kExitRpcFailed);
  EXPECT_THAT(r.err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  fake_.set_delay(absl::ZeroDuration());
}

TEST_F(VmmctlTest, WatchPrintsOneLinePerEvent) {
  Result r;
  std::thread watcher([&] { r = Vmmctl({"media", "watch", "--count", "2"}); });
  for (int i = 0; i < 500 && fake_.watchers() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(fake_.watchers(), 1);
  fake_.Emit(vmm::v1::MediaEvent::MEDIUM_REMOVED, false);
  fake_.Emit(vmm::v1::MediaEvent::EJECT_REQUESTED, true);
  watcher.join();
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cd0 MEDIUM_REMOVED by host: cd0 cdrom"));
  EXPECT_THAT(r.out, HasSubstr("cd0 EJECT_REQUESTED by guest"));
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);

  // JSON: one object per line; ended by CancelWatch (SIGINT in vmmctl), status 0.
  for (int i = 0; i < 500 && fake_.watchers() != 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(fake_.watchers(), 0) << "the first watch's stream is still open on the server";
  Result j;
  LineSignallingBuffer json_out;
  std::thread json_watcher([&] {
    std::ostream out(&json_out);
    std::ostringstream err;
    j.status =
        vmmctl::Run({"--api", "unix:" + socket_, "--json", "media", "watch", "cd0"}, out, err);
    j.err = err.str();
  });
  for (int i = 0; i < 500 && fake_.watchers() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  fake_.Emit(vmm::v1::MediaEvent::TRAY_OPENED, true);
  // Cancelled once the client has printed the event (not after a guess at how long that takes).
  EXPECT_TRUE(json_out.WaitForLines(1, absl::Seconds(30))) << "the event never reached the output";
  CancelWatch();
  json_watcher.join();
  j.out = json_out.text();
  EXPECT_EQ(j.status, 0) << j.err;
  ASSERT_FALSE(j.out.empty());
  EXPECT_EQ(std::count(j.out.begin(), j.out.end(), '\n'), 1) << j.out;
  vmm::v1::MediaEvent event;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(j.out, &event).ok()) << j.out;
  EXPECT_EQ(event.type(), vmm::v1::MediaEvent::TRAY_OPENED);
  EXPECT_TRUE(event.by_guest());
}

TEST_F(VmmctlTest, WatchEndsWithAnErrorWhenTheServerGoesAway) {
  Result r;
  std::thread watcher([&] { r = Vmmctl({"media", "watch"}); });
  for (int i = 0; i < 500 && fake_.watchers() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
  server_.reset();
  watcher.join();
  // Either the server finished the stream (OK) or the connection broke: never a hang.
  EXPECT_TRUE(r.status == 0 || r.status == kExitRpcFailed) << r.status << " " << r.err;
}

// Issue 17: the real vmmctl, its stdout a pipe nobody reads. Once the pipe is full vmmctl is blocked
// writing an event, where no cancellation reaches it; SIGTERM must still end it, with the status
// of an interrupted watch.
TEST_F(VmmctlTest, WatchEndsOnSigtermWhileItsOutputIsBlocked) {
  const std::string vmmctl =
      absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/api/vmmctl");
  int out[2];
  int err[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
  const int capacity = fcntl(out[1], F_SETPIPE_SZ, 4096);  // fills after a few dozen events
  ASSERT_GT(capacity, 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    execl(vmmctl.c_str(), "vmmctl", "--api", ("unix:" + socket_).c_str(), "media", "watch",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  // "vmmctl: watching ..." once the stream is subscribed.
  std::string seen;
  char c;
  while (seen.find("watching") == std::string::npos && read(err[0], &c, 1) == 1) seen += c;
  ASSERT_THAT(seen, HasSubstr("watching"));
  // Events until the pipe is full: within a line of its capacity (a line is about 170 bytes; a
  // write that does not fit waits for room). Bounded in case it never fills.
  const int full = capacity - 512;
  int queued = 0;
  for (int i = 0; i < 3000 && queued < full; ++i) {
    fake_.Emit(i % 2 == 0 ? vmm::v1::MediaEvent::TRAY_OPENED : vmm::v1::MediaEvent::TRAY_CLOSED,
               false);
    if (i % 50 == 49) {
      absl::SleepFor(absl::Milliseconds(20));
      ASSERT_EQ(ioctl(out[0], FIONREAD, &queued), 0);
    }
  }
  for (int i = 0; i < 1000 && queued < full; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
    ASSERT_EQ(ioctl(out[0], FIONREAD, &queued), 0);
  }
  ASSERT_GE(queued, full) << "vmmctl's stdout never filled";
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  // Generous: only a vmmctl that ignores the signal comes near it.
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < 3000 && done == 0; ++i) {
    done = waitpid(pid, &status, WNOHANG);
    if (done == 0) absl::SleepFor(absl::Milliseconds(10));
  }
  if (done == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  close(out[0]);
  close(err[0]);
  ASSERT_NE(done, 0) << "vmmctl media watch ignored SIGTERM while its stdout was blocked";
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), kExitOk);
}

}  // namespace
}  // namespace vmmctl

// The control API end to end (docs/api.md): boots the test guest (tests/guest) in microvm with
// --api-socket and drives the VMM through a real gRPC client (the generated vmm.v1 stubs) and through
// vmmctl as a subprocess, while the guest runs:
// - eject and insert while the guest reads (virtio-scsi and IDE CD-ROMs): the guest's scsi-media /
//   ide-media tests print "@@EJECT cd" and "@@INSERT cd", the test answers with Eject(cd0) and
//   Insert(cd0, new.iso), and the guest must see NOT READY, UNIT ATTENTION 06/28/00 and the new data;
// - eject while the guest holds the lock (guest test scsi-lock): refused (FAILED_PRECONDITION)
//   without force, and nothing changes; forced, the guest sees the medium gone;
// - guest-initiated ejects (START STOP UNIT LoEj) reach the Watch stream (EJECT_REQUESTED while
//   locked, TRAY_OPENED by the guest otherwise);
// - 8 threads x 100 mixed calls on an idle CD-ROM while the guest reads another one: no deadlock,
//   the final state matches the last successful change, and the Watch stream saw every change;
// - malformed and hostile requests (unknown and empty drive names, overlong paths, directories,
//   FIFOs, missing or unreadable files, garbage bytes, a flood of watchers), the socket's mode 0600,
//   and socket paths that exist (a file, a directory, a live socket: refused; a stale socket: reused);
// - vmmctl from the shell: media list/status/eject/insert/tray/watch, vm info --json, vm stats,
//   pause/resume, shutdown.
// Skips without /dev/kvm or python3 (tools/make-pattern-image).
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "api/vmmctl_lib.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/test_util.h"
#include "tests/support/skip.h"

extern char** environ;

namespace tests {
namespace {

namespace pb = ::vmm::v1;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kMicrovm[] = "vmm/microvm";
constexpr char kGuest[] = "tests/guest/test_guest";
constexpr char kPatternTool[] = "tools/make-pattern-image";
constexpr char kVmmctl[] = "api/vmmctl";

// The images (the seeds and sizes of scsi_test.cc and qemu_scsi_test.sh).
constexpr uint32_t kCdSeed = 22;
constexpr uint64_t kCdBytes = 8ull << 20;  // 4096 sectors
constexpr uint32_t kNewCdSeed = 33;
constexpr uint64_t kNewCdBytes = 3ull << 20;  // 1536 sectors
constexpr uint32_t kOtherCdSeed = 44;
constexpr uint64_t kOtherCdBytes = 2ull << 20;
constexpr uint32_t kDiskSeed = 11;
constexpr uint64_t kDiskBytes = 16ull << 20;

std::string Describe(const grpc::Status& status) {
  return absl::StrCat(vmmctl::StatusCodeName(status.error_code()), ": ", status.error_message());
}

std::string Show(const google::protobuf::Message& message) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json);
  return json;
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// The generated stubs over one channel; every unary call has a deadline.
class Client {
 public:
  explicit Client(const std::string& socket_path, absl::Duration deadline = absl::Seconds(10))
      : deadline_(deadline) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
    channel_ =
        grpc::CreateCustomChannel("unix:" + socket_path, grpc::InsecureChannelCredentials(), args);
    media = pb::MediaService::NewStub(channel_);
    vm = pb::VmService::NewStub(channel_);
  }

  bool Connected(absl::Duration timeout = absl::Seconds(10)) {
    return channel_->WaitForConnected(DeadlineAfter(timeout));
  }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }

  grpc::Status Status(const std::string& drive, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Prepare(context);
    pb::GetStatusRequest request;
    request.set_drive(drive);
    return media->GetStatus(&context, request, out);
  }
  grpc::Status Insert(const std::string& drive, const std::string& path, pb::DriveStatus* out,
                      const std::string& format = "") {
    grpc::ClientContext context;
    Prepare(context);
    pb::InsertRequest request;
    request.set_drive(drive);
    request.set_path(path);
    request.set_format(format);
    return media->Insert(&context, request, out);
  }
  grpc::Status Eject(const std::string& drive, bool force, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Prepare(context);
    pb::EjectRequest request;
    request.set_drive(drive);
    request.set_force(force);
    return media->Eject(&context, request, out);
  }
  grpc::Status Tray(const std::string& drive, bool open, bool force, pb::DriveStatus* out) {
    grpc::ClientContext context;
    Prepare(context);
    pb::SetTrayRequest request;
    request.set_drive(drive);
    request.set_open(open);
    request.set_force(force);
    return media->SetTray(&context, request, out);
  }
  grpc::Status List(pb::ListDrivesResponse* out) {
    grpc::ClientContext context;
    Prepare(context);
    return media->ListDrives(&context, pb::ListDrivesRequest(), out);
  }
  grpc::Status Stats(const std::string& drive, pb::GetStatsResponse* out) {
    grpc::ClientContext context;
    Prepare(context);
    pb::GetStatsRequest request;
    request.set_drive(drive);
    return vm->GetStats(&context, request, out);
  }
  grpc::Status Info(pb::VmInfo* out) {
    grpc::ClientContext context;
    Prepare(context);
    return vm->GetInfo(&context, pb::GetInfoRequest(), out);
  }
  grpc::Status Shutdown(bool force, uint32_t grace_ms, pb::VmInfo* out) {
    grpc::ClientContext context;
    Prepare(context);
    pb::ShutdownRequest request;
    request.set_force(force);
    request.set_grace_period_ms(grace_ms);
    return vm->Shutdown(&context, request, out);
  }

  std::unique_ptr<pb::MediaService::Stub> media;
  std::unique_ptr<pb::VmService::Stub> vm;

 private:
  void Prepare(grpc::ClientContext& context) { context.set_deadline(DeadlineAfter(deadline_)); }
  absl::Duration deadline_;
  std::shared_ptr<grpc::Channel> channel_;
};

// A Watch stream read on its own thread; the events are kept for the test to look at.
class EventLog {
 public:
  EventLog(Client& client, const std::string& drive) {
    pb::WatchRequest request;
    request.set_drive(drive);
    reader_ = client.media->Watch(&context_, request);
    thread_ = std::thread([this] {
      // The server sends its initial metadata once the stream is subscribed.
      reader_->WaitForInitialMetadata();
      {
        absl::MutexLock lock(&mutex_);
        subscribed_ = true;
      }
      pb::MediaEvent event;
      while (reader_->Read(&event)) {
        absl::MutexLock lock(&mutex_);
        events_.push_back(event);
      }
      grpc::Status status = reader_->Finish();
      absl::MutexLock lock(&mutex_);
      finished_ = true;
      final_status_ = status;
    });
  }
  ~EventLog() {
    context_.TryCancel();
    thread_.join();
  }

  bool WaitSubscribed(absl::Duration timeout = absl::Seconds(10)) {
    absl::MutexLock lock(&mutex_);
    return mutex_.AwaitWithTimeout(absl::Condition(this, &EventLog::SubscribedOrFinished),
                                   timeout) &&
           subscribed_ && !finished_;
  }
  // Index of the first event at or after `from` that matches, waiting up to `timeout`; -1 if none.
  int WaitFor(const std::function<bool(const pb::MediaEvent&)>& match,
              absl::Duration timeout = absl::Seconds(10), size_t from = 0) {
    const absl::Time deadline = absl::Now() + timeout;
    absl::MutexLock lock(&mutex_);
    size_t next = from;
    while (true) {
      for (; next < events_.size(); ++next) {
        if (match(events_[next])) return static_cast<int>(next);
      }
      if (finished_) return -1;
      const auto more = [this, &next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
        return events_.size() > next || finished_;
      };
      if (mutex_.AwaitWithDeadline(absl::Condition(&more), deadline)) continue;
      for (; next < events_.size(); ++next) {
        if (match(events_[next])) return static_cast<int>(next);
      }
      return -1;
    }
  }
  std::vector<pb::MediaEvent> Events() {
    absl::MutexLock lock(&mutex_);
    return events_;
  }
  // The stream's final status, once it ended (within `timeout`).
  std::optional<grpc::Status> WaitFinished(absl::Duration timeout) {
    absl::MutexLock lock(&mutex_);
    if (!mutex_.AwaitWithTimeout(absl::Condition(&finished_), timeout)) return std::nullopt;
    return final_status_;
  }
  std::string Dump() {
    std::string text;
    for (const pb::MediaEvent& event : Events()) absl::StrAppend(&text, "  ", Show(event), "\n");
    return text.empty() ? "  (no events)\n" : text;
  }

 private:
  bool SubscribedOrFinished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return subscribed_ || finished_;
  }

  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReader<pb::MediaEvent>> reader_;
  std::thread thread_;
  absl::Mutex mutex_;
  bool subscribed_ ABSL_GUARDED_BY(mutex_) = false;
  bool finished_ ABSL_GUARDED_BY(mutex_) = false;
  grpc::Status final_status_ ABSL_GUARDED_BY(mutex_);
  std::vector<pb::MediaEvent> events_ ABSL_GUARDED_BY(mutex_);
};

std::function<bool(const pb::MediaEvent&)> Is(pb::MediaEvent::Type type, const std::string& drive,
                                              std::optional<bool> by_guest = std::nullopt) {
  return [=](const pb::MediaEvent& e) {
    return e.type() == type && e.drive() == drive && (!by_guest || e.by_guest() == *by_guest);
  };
}

// A process in the background, as `cmd > out 2> err &` in a shell; stopped with a signal.
class Background {
 public:
  Background(const std::vector<std::string>& argv, const std::string& out_path,
             const std::string& err_path) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    if (posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Background() {
    if (pid_ > 0) Stop(SIGKILL);
  }
  bool running() const { return pid_ > 0; }
  // Sends `signal` and waits (up to 10 s, then SIGKILL): the exit status, or 128 + the signal.
  int Stop(int signal) {
    if (pid_ <= 0) return -1;
    kill(pid_, signal);
    int status = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

 private:
  pid_t pid_ = -1;
};

bool WaitForFileContent(const std::string& path, const std::string& text, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (absl::StrContains(ReadFile(path), text)) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::StrContains(ReadFile(path), text);
}

// A listening unix socket of our own (a "live" socket someone else owns).
class Listener {
 public:
  explicit Listener(const std::string& path) {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    strncpy(sun.sun_path, path.c_str(), sizeof(sun.sun_path) - 1);
    ok_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) == 0 &&
          listen(fd_, 4) == 0;
  }
  ~Listener() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

bool ConnectsTo(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  strncpy(sun.sun_path, path.c_str(), sizeof(sun.sun_path) - 1);
  const bool connected = connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) == 0;
  close(fd);
  return connected;
}

// A socket file nobody listens on (a VMM that died without cleaning up).
bool MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sun{};
  sun.sun_family = AF_UNIX;
  strncpy(sun.sun_path, path.c_str(), sizeof(sun.sun_path) - 1);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun)) == 0;
  close(fd);
  return bound;
}

struct Images {
  bool ready = false;
  std::string error;
  std::string python;
  std::string cd, new_cd, other_cd, disk;
};

class ApiTest : public ::testing::Test {
 protected:
  static Images& images() {
    static Images images;
    return images;
  }

  void SetUp() override {
    Images& im = images();
    if (std::string why = GuestSkipReason(&im.python); !why.empty()) MICROVM_SKIP(why);
    if (!im.ready && im.error.empty()) {
      struct {
        std::string* path;
        const char* name;
        uint32_t seed;
        uint64_t bytes;
      } wanted[] = {
          {&im.cd, "cd.iso", kCdSeed, kCdBytes},
          {&im.new_cd, "new.iso", kNewCdSeed, kNewCdBytes},
          {&im.other_cd, "other.iso", kOtherCdSeed, kOtherCdBytes},
          {&im.disk, "disk.img", kDiskSeed, kDiskBytes},
      };
      for (auto& w : wanted) {
        *w.path = TempPath(w.name);
        ProcessResult r = RunProcess({im.python, kPatternTool, "--seed", std::to_string(w.seed),
                                      "--size", std::to_string(w.bytes), *w.path});
        if (!r.exited || r.exit_status != 0) {
          im.error = absl::StrCat("make-pattern-image for ", w.name, " failed: ", r.err);
          break;
        }
      }
      im.ready = im.error.empty();
    }
    ASSERT_TRUE(im.error.empty()) << im.error;
  }

  // Boots the guest with `cmdline`; `on_line` sees every line of the console (and its answer goes to
  // the guest's serial input).
  static ProcessResult RunVm(const std::string& cmdline, const std::vector<std::string>& flags,
                             std::function<std::string(const std::string&)> on_line = nullptr,
                             absl::Duration timeout = absl::Seconds(60),
                             bool without_file_capabilities = false) {
    // Outside the jail: these tests insert media from anywhere (a FIFO, /dev/null, unreadable
    // files) to check the API's answers; jailed, only --media-dir is reachable (the jail's own
    // tests: vmm/sandbox:jail_test, the nested tier's "jail" and media scenarios).
    std::vector<std::string> argv = {kMicrovm, std::string("--kernel=") + kGuest,
                                     "--cmdline=" + cmdline, "--memory=128M", "--jail=off"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ProcessOptions options;
    options.timeout = timeout;
    options.without_file_capabilities = without_file_capabilities;
    options.keep_stdin_open = true;
    options.on_output_line = std::move(on_line);
    return RunProcess(argv, options);
  }

  static void ExpectPassed(const ProcessResult& r, const std::string& test) {
    EXPECT_FALSE(r.timed_out) << "microvm did not finish\nstdout:\n"
                              << r.out << "\nstderr:\n"
                              << r.err;
    EXPECT_TRUE(r.exited) << "killed by signal " << r.term_signal << "\nstderr:\n" << r.err;
    EXPECT_EQ(r.exit_status, 0) << "stdout:\n" << r.out << "\nstderr:\n" << r.err;
    EXPECT_THAT(r.out, HasSubstr("TEST " + test + ": PASS")) << r.out << "\nstderr:\n" << r.err;
    EXPECT_THAT(r.out, Not(HasSubstr(": FAIL")));
    EXPECT_THAT(r.err, Not(HasSubstr("fatal")));
  }

  // vmmctl --api unix:SOCKET ARGS...
  // Its limits are generous: they catch a hang, and the test may run in L1, under emulation, where
  // a busy moment lasts seconds (vmmctl's own 5 s connect limit was reached there once).
  static ProcessResult Vmmctl(const std::string& socket, const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        kVmmctl, "--api", "unix:" + socket, "--connect-timeout", "60", "--timeout", "60"};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcessOptions options;
    options.timeout = absl::Seconds(180);
    return RunProcess(argv, options);
  }
};

// ---- Eject and insert while the guest reads ------------------------------------------------------

TEST_F(ApiTest, EjectAndInsertWhileTheGuestReadsScsi) {
  const std::string sock = SocketPath("scsi-media.sock");
  std::unique_ptr<Client> client;
  std::unique_ptr<EventLog> events;
  pb::DriveStatus before, ejected, inserted;
  std::optional<grpc::Status> eject_status, insert_status;
  auto on_line = [&](const std::string& line) -> std::string {
    if (line == "@@EJECT cd") {
      client = std::make_unique<Client>(sock);
      EXPECT_TRUE(client->Connected()) << "no API on " << sock;
      events = std::make_unique<EventLog>(*client, "");
      EXPECT_TRUE(events->WaitSubscribed());
      EXPECT_TRUE(client->Status("cd0", &before).ok());
      eject_status = client->Eject("cd0", /*force=*/false, &ejected);
    } else if (line == "@@INSERT cd" && client != nullptr) {
      insert_status = client->Insert("cd0", images().new_cd, &inserted);
    }
    return "";
  };
  ProcessResult r = RunVm(absl::StrCat("test=scsi-media seed=", kCdSeed, " newseed=", kNewCdSeed),
                          {"--cdrom=" + images().cd, "--api-socket=" + sock}, on_line);
  ExpectPassed(r, "scsi-media");
  ASSERT_TRUE(eject_status.has_value()) << "the guest never printed @@EJECT cd\n" << r.out;
  ASSERT_TRUE(insert_status.has_value()) << "the guest never printed @@INSERT cd\n" << r.out;
  EXPECT_TRUE(eject_status->ok()) << Describe(*eject_status);
  EXPECT_TRUE(insert_status->ok()) << Describe(*insert_status);

  // What the API answered.
  EXPECT_EQ(before.name(), "cd0");
  EXPECT_EQ(before.kind(), pb::DriveStatus::CDROM);
  EXPECT_EQ(before.bus(), "virtio-scsi");
  EXPECT_TRUE(before.removable());
  EXPECT_TRUE(before.medium_present());
  EXPECT_FALSE(before.locked()) << "scsi-media allows removal before @@EJECT";
  EXPECT_EQ(before.size_bytes(), kCdBytes);
  EXPECT_EQ(before.source(), images().cd);
  EXPECT_FALSE(ejected.medium_present()) << Show(ejected);
  EXPECT_TRUE(ejected.tray_open()) << Show(ejected);
  EXPECT_GT(ejected.generation(), before.generation());
  EXPECT_TRUE(inserted.medium_present()) << Show(inserted);
  EXPECT_FALSE(inserted.tray_open()) << Show(inserted);
  EXPECT_EQ(inserted.size_bytes(), kNewCdBytes);
  EXPECT_EQ(inserted.source(), images().new_cd);
  EXPECT_TRUE(inserted.read_only());
  EXPECT_GT(inserted.generation(), ejected.generation());

  // What the guest saw: NOT READY, then UNIT ATTENTION, then the new disc's data.
  EXPECT_THAT(r.out, HasSubstr("CHECK CONDITION 02/3A/"));
  EXPECT_THAT(r.out, HasSubstr("CHECK CONDITION 06/28/00"));
  EXPECT_THAT(r.out, HasSubstr("new medium: 1536 sectors (was 4096)"));
  EXPECT_THAT(r.out, HasSubstr("read and verified 1536 sectors (3072 KiB) from LBA 0"));
  EXPECT_THAT(r.out, HasSubstr("seed 33"));

  // What the Watch stream said, in order; the stream ends (OK) when the VMM stops.
  ASSERT_NE(events, nullptr);
  const int removed = events->WaitFor(Is(pb::MediaEvent::MEDIUM_REMOVED, "cd0", false));
  const int added = events->WaitFor(Is(pb::MediaEvent::MEDIUM_INSERTED, "cd0", false));
  ASSERT_GE(removed, 0) << events->Dump();
  ASSERT_GE(added, 0) << events->Dump();
  EXPECT_LT(removed, added) << events->Dump();
  const std::vector<pb::MediaEvent> seen = events->Events();
  EXPECT_FALSE(seen[removed].status().medium_present());
  EXPECT_EQ(seen[added].status().source(), images().new_cd);
  EXPECT_GT(seen[added].time_unix_nanos(), 0);
  EXPECT_GE(events->WaitFor(Is(pb::MediaEvent::TRAY_CLOSED, "cd0", false), absl::Seconds(5), added),
            0)
      << events->Dump();
  auto finished = events->WaitFinished(absl::Seconds(5));
  ASSERT_TRUE(finished.has_value()) << "the Watch stream outlived the VMM";
  EXPECT_TRUE(finished->ok()) << Describe(*finished);
}

TEST_F(ApiTest, EjectAndInsertWhileTheGuestReadsIde) {
  const std::string sock = SocketPath("ide-media.sock");
  std::unique_ptr<Client> client;
  pb::DriveStatus before, ejected, inserted;
  std::optional<grpc::Status> eject_status, insert_status;
  auto on_line = [&](const std::string& line) -> std::string {
    if (line == "@@EJECT cd") {
      client = std::make_unique<Client>(sock);
      EXPECT_TRUE(client->Connected()) << "no API on " << sock;
      EXPECT_TRUE(client->Status("cd0", &before).ok());
      eject_status = client->Eject("cd0", /*force=*/false, &ejected);
    } else if (line == "@@INSERT cd" && client != nullptr) {
      insert_status = client->Insert("cd0", images().new_cd, &inserted);
    }
    return "";
  };
  ProcessResult r = RunVm(absl::StrCat("test=ide-media seed=", kCdSeed, " newseed=", kNewCdSeed),
                          {"--ide-cdrom=" + images().cd, "--api-socket=" + sock}, on_line);
  ExpectPassed(r, "ide-media");
  ASSERT_TRUE(eject_status.has_value()) << r.out;
  ASSERT_TRUE(insert_status.has_value()) << r.out;
  EXPECT_TRUE(eject_status->ok()) << Describe(*eject_status);
  EXPECT_TRUE(insert_status->ok()) << Describe(*insert_status);
  EXPECT_EQ(before.bus(), "ide");
  EXPECT_EQ(before.address(), "1:0");  // secondary master
  EXPECT_EQ(before.kind(), pb::DriveStatus::CDROM);
  EXPECT_FALSE(ejected.medium_present());
  EXPECT_EQ(inserted.size_bytes(), kNewCdBytes);
  EXPECT_GT(inserted.generation(), ejected.generation());
  EXPECT_THAT(r.out, HasSubstr("02/3A"));
  EXPECT_THAT(r.out, HasSubstr("06/28/00"));
  EXPECT_THAT(r.out, HasSubstr("ide-media: new medium: 1536 sectors (was 4096)"));
  EXPECT_THAT(r.out, HasSubstr("seed 33"));
}

// ---- The guest's lock ----------------------------------------------------------------------------

TEST_F(ApiTest, EjectWhileLockedIsRefusedUnlessForced) {
  const std::string sock = SocketPath("locked.sock");
  std::unique_ptr<Client> client;
  pb::DriveStatus locked;
  bool forced = false, inserted = false;
  auto on_line = [&](const std::string& line) -> std::string {
    if (line == "@@LOCKED cd") {
      client = std::make_unique<Client>(sock);
      if (!client->Connected()) {
        ADD_FAILURE() << "no API on " << sock;
        return "done\n";
      }
      EXPECT_TRUE(client->Status("cd0", &locked).ok());
      EXPECT_TRUE(locked.locked()) << "the guest sent PREVENT MEDIUM REMOVAL: " << Show(locked);
      EXPECT_TRUE(locked.medium_present());
      pb::DriveStatus unused;
      grpc::Status refused = client->Eject("cd0", /*force=*/false, &unused);
      EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(refused);
      grpc::Status tray = client->Tray("cd0", /*open=*/true, /*force=*/false, &unused);
      EXPECT_EQ(tray.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << Describe(tray);
      // Nothing half-done.
      pb::DriveStatus after;
      EXPECT_TRUE(client->Status("cd0", &after).ok());
      EXPECT_TRUE(after.medium_present());
      EXPECT_FALSE(after.tray_open());
      EXPECT_EQ(after.generation(), locked.generation());
      EXPECT_EQ(after.source(), locked.source());
      // The same refusal through vmmctl: exit status 1, the code name on stderr.
      ProcessResult cli = Vmmctl(sock, {"media", "eject", "cd0"});
      EXPECT_EQ(cli.exit_status, 1) << cli.out << cli.err;
      EXPECT_THAT(cli.err, HasSubstr("FAILED_PRECONDITION"));
      return "tur\n";  // the guest still reads its medium
    }
    if (absl::StartsWith(line, "scsi-lock: tur -> ") && !forced) {
      EXPECT_THAT(line, HasSubstr("GOOD")) << "the refused eject changed what the guest sees";
      forced = true;
      pb::DriveStatus out;
      grpc::Status status = client->Eject("cd0", /*force=*/true, &out);
      EXPECT_TRUE(status.ok()) << Describe(status);
      EXPECT_FALSE(out.medium_present()) << Show(out);
      EXPECT_TRUE(out.tray_open()) << Show(out);
      EXPECT_GT(out.generation(), locked.generation());
      return "gone\n";  // the guest polls until NOT READY 02/3A
    }
    if (absl::StartsWith(line, "scsi-lock: gone -> ")) {
      EXPECT_THAT(line, HasSubstr("02/3A"));
      pb::DriveStatus out;
      grpc::Status status = client->Insert("cd0", images().new_cd, &out);
      EXPECT_TRUE(status.ok()) << Describe(status);
      inserted = status.ok();
      return "ready\n";
    }
    if (absl::StartsWith(line, "scsi-lock: ready -> ")) return "done\n";
    return "";
  };
  ProcessResult r = RunVm("test=scsi-lock hold_ms=20000",
                          {"--cdrom=" + images().cd, "--api-socket=" + sock}, on_line);
  ExpectPassed(r, "scsi-lock");
  EXPECT_TRUE(forced);
  EXPECT_TRUE(inserted);
  EXPECT_THAT(r.out, HasSubstr("06/28/00")) << "the guest saw no UNIT ATTENTION after the insert";
}

// ---- Guest-initiated eject -----------------------------------------------------------------------

TEST_F(ApiTest, GuestInitiatedEjectReachesTheWatchStream) {
  const std::string sock = SocketPath("guest-eject.sock");
  std::unique_ptr<Client> client;
  std::unique_ptr<EventLog> all, only_cd0;
  int loej = 0;
  std::vector<std::string> steps;  // what was checked, for the failure message
  auto on_line = [&](const std::string& line) -> std::string {
    if (line == "@@LOCKED cd") {
      client = std::make_unique<Client>(sock);
      if (!client->Connected()) {
        ADD_FAILURE() << "no API on " << sock;
        return "done\n";
      }
      all = std::make_unique<EventLog>(*client, "");
      only_cd0 = std::make_unique<EventLog>(*client, "cd0");
      EXPECT_TRUE(all->WaitSubscribed());
      EXPECT_TRUE(only_cd0->WaitSubscribed());
      return "loej\n";  // START STOP UNIT LoEj while locked
    }
    if (absl::StartsWith(line, "scsi-lock: loej -> ") && ++loej == 1) {
      EXPECT_THAT(line, HasSubstr("05/53/02")) << "MEDIUM REMOVAL PREVENTED";
      const int i = all->WaitFor(Is(pb::MediaEvent::EJECT_REQUESTED, "cd0", true));
      EXPECT_GE(i, 0) << "no EJECT_REQUESTED by the guest\n" << all->Dump();
      if (i >= 0) {
        const pb::MediaEvent e = all->Events()[i];
        EXPECT_TRUE(e.status().medium_present()) << Show(e);
        EXPECT_TRUE(e.status().locked()) << Show(e);
      }
      pb::DriveStatus now;
      EXPECT_TRUE(client->Status("cd0", &now).ok());
      EXPECT_FALSE(now.tray_open()) << "a refused guest eject opened the tray";
      steps.push_back("EJECT_REQUESTED");
      return "unlock\n";
    }
    if (absl::StartsWith(line, "scsi-lock: unlock -> ")) {
      const int i = all->WaitFor([](const pb::MediaEvent& e) {
        return e.type() == pb::MediaEvent::LOCK_CHANGED && e.drive() == "cd0" && e.by_guest() &&
               !e.status().locked();
      });
      EXPECT_GE(i, 0) << "no LOCK_CHANGED (unlocked) by the guest\n" << all->Dump();
      steps.push_back("LOCK_CHANGED");
      return "loej\n";  // now allowed
    }
    if (absl::StartsWith(line, "scsi-lock: loej -> ") && loej == 2) {
      EXPECT_THAT(line, HasSubstr("GOOD"));
      const int i = all->WaitFor(Is(pb::MediaEvent::TRAY_OPENED, "cd0", true));
      EXPECT_GE(i, 0) << "no TRAY_OPENED by the guest\n" << all->Dump();
      if (i >= 0) {
        EXPECT_TRUE(all->Events()[i].status().tray_open());
      }
      pb::DriveStatus now;
      EXPECT_TRUE(client->Status("cd0", &now).ok());
      EXPECT_TRUE(now.tray_open()) << Show(now);
      steps.push_back("TRAY_OPENED");
      return "tur\n";
    }
    if (absl::StartsWith(line, "scsi-lock: tur -> ")) {
      EXPECT_THAT(line, HasSubstr("02/3A")) << "an open tray is NOT READY";
      return "load\n";
    }
    if (absl::StartsWith(line, "scsi-lock: load -> ")) {
      EXPECT_GE(all->WaitFor(Is(pb::MediaEvent::TRAY_CLOSED, "cd0", true)), 0) << all->Dump();
      steps.push_back("TRAY_CLOSED");
      return "ready\n";
    }
    if (absl::StartsWith(line, "scsi-lock: ready -> ")) return "done\n";
    return "";
  };
  ProcessResult r = RunVm("test=scsi-lock hold_ms=20000",
                          {"--cdrom=" + images().cd, "--cdrom=", "--api-socket=" + sock}, on_line);
  ExpectPassed(r, "scsi-lock");
  EXPECT_EQ(absl::StrJoin(steps, " "), "EJECT_REQUESTED LOCK_CHANGED TRAY_OPENED TRAY_CLOSED");
  ASSERT_NE(only_cd0, nullptr);
  // A Watch for cd0 sees cd0's events and nothing else.
  EXPECT_GE(only_cd0->WaitFor(Is(pb::MediaEvent::EJECT_REQUESTED, "cd0", true)), 0)
      << only_cd0->Dump();
  for (const pb::MediaEvent& e : only_cd0->Events()) EXPECT_EQ(e.drive(), "cd0") << Show(e);
}

// ---- Many concurrent calls -----------------------------------------------------------------------

struct Observation {
  uint64_t generation;
  bool present;
  std::string source;
};

TEST_F(ApiTest, ManyConcurrentCallsKeepTheStateConsistent) {
  constexpr int kThreads = 8;
  constexpr int kCallsPerThread = 100;
  const std::string sock = SocketPath("concurrent.sock");
  const std::vector<std::string> isos = {images().new_cd, images().other_cd};
  bool hammered = false;
  std::optional<grpc::Status> shutdown_status;
  auto on_line = [&](const std::string& line) -> std::string {
    // The guest reads cd0 (IDE) in a loop; each pass prints a line. After the first, cd1 is hammered.
    if (hammered || !absl::StrContains(line, "kib_per_s=")) return "";
    hammered = true;
    Client client(sock);
    if (!client.Connected()) {
      ADD_FAILURE() << "no API on " << sock;
      return "";
    }
    pb::DriveStatus initial;
    EXPECT_TRUE(client.Status("cd1", &initial).ok());
    EXPECT_FALSE(initial.medium_present());
    EventLog events(client, "cd1");
    EXPECT_TRUE(events.WaitSubscribed());

    struct PerThread {
      std::vector<std::string> errors;
      std::vector<uint64_t> generations;  // every generation this thread saw, in order
      std::vector<Observation> changes;   // responses of successful Inserts and Ejects
      int inserts = 0, insert_refused = 0, ejects = 0, reads = 0;
    };
    std::vector<PerThread> results(kThreads);
    std::atomic<int> finished{0};
    const absl::Time start = absl::Now();
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        PerThread& me = results[t];
        Client c(sock, /*deadline=*/absl::Seconds(5));
        std::mt19937 rng(1000 + t);
        auto note = [&](const pb::DriveStatus& s) { me.generations.push_back(s.generation()); };
        for (int i = 0; i < kCallsPerThread; ++i) {
          const int op = static_cast<int>(rng() % 7);
          grpc::Status status;
          pb::DriveStatus drive;
          if (op == 0 || op == 1) {
            status = c.Status("cd1", &drive);
            if (status.ok()) note(drive);
            ++me.reads;
          } else if (op == 2) {
            pb::ListDrivesResponse list;
            status = c.List(&list);
            for (const auto& d : list.drives()) {
              if (d.name() == "cd1") note(d);
            }
            ++me.reads;
          } else if (op == 3) {
            pb::GetStatsResponse stats;
            status = c.Stats(i % 2 ? "cd1" : "", &stats);
            ++me.reads;
          } else if (op == 4) {
            pb::VmInfo info;
            status = c.Info(&info);
            ++me.reads;
          } else if (op == 5) {
            const std::string& iso = isos[rng() % 2];
            status = c.Insert("cd1", iso, &drive);
            if (status.ok()) {
              ++me.inserts;
              note(drive);
              me.changes.push_back({drive.generation(), drive.medium_present(), drive.source()});
            } else if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) {
              ++me.insert_refused;  // a medium is present: expected
              status = grpc::Status::OK;
            }
          } else {
            status = c.Eject("cd1", /*force=*/rng() % 2 == 0, &drive);
            if (status.ok()) {
              ++me.ejects;
              note(drive);
              me.changes.push_back({drive.generation(), drive.medium_present(), drive.source()});
            }
          }
          if (!status.ok()) {
            me.errors.push_back(absl::StrCat("call ", i, " op ", op, ": ", Describe(status)));
            if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                status.error_code() == grpc::StatusCode::UNAVAILABLE) {
              break;  // a stuck or dead server: stop here, the test fails below
            }
          }
        }
        ++finished;
      });
    }
    for (std::thread& thread : threads) thread.join();
    const absl::Duration took = absl::Now() - start;
    EXPECT_EQ(finished.load(), kThreads);
    EXPECT_LT(took, absl::Seconds(60)) << "8 x 100 calls took " << took;
    std::cerr << "api_test: " << kThreads << " x " << kCallsPerThread << " mixed calls in " << took
              << "\n";

    int inserts = 0, ejects = 0, refused = 0;
    uint64_t max_generation = initial.generation();
    std::optional<Observation> last_change;
    for (int t = 0; t < kThreads; ++t) {
      const PerThread& me = results[t];
      EXPECT_TRUE(me.errors.empty()) << "thread " << t << ":\n" << absl::StrJoin(me.errors, "\n");
      // A thread's successive answers never go back in time.
      EXPECT_TRUE(std::is_sorted(me.generations.begin(), me.generations.end()))
          << "thread " << t << " saw generations " << absl::StrJoin(me.generations, " ");
      inserts += me.inserts;
      ejects += me.ejects;
      refused += me.insert_refused;
      for (const Observation& o : me.changes) {
        if (o.generation >= max_generation) {
          max_generation = o.generation;
          last_change = o;
        }
      }
      for (uint64_t g : me.generations) max_generation = std::max(max_generation, g);
    }
    EXPECT_GT(inserts, 0);
    EXPECT_GT(ejects, 0);
    EXPECT_GT(refused, 0) << "no Insert ever met a medium: the mix did not race";

    // The final state is the last successful change's.
    pb::DriveStatus final_status;
    EXPECT_TRUE(client.Status("cd1", &final_status).ok());
    EXPECT_EQ(final_status.generation(), max_generation) << Show(final_status);
    if (last_change.has_value() && last_change->generation == final_status.generation()) {
      EXPECT_EQ(final_status.medium_present(), last_change->present) << Show(final_status);
      if (last_change->present) {
        EXPECT_EQ(final_status.source(), last_change->source);
      }
    }
    pb::ListDrivesResponse list;
    EXPECT_TRUE(client.List(&list).ok());
    for (const auto& d : list.drives()) {
      if (d.name() == "cd1") {
        EXPECT_EQ(Show(d), Show(final_status));
      }
    }

    // Every change reached the Watch stream, in order: inserted and removed alternate, and the
    // generation counts them all.
    const int removals = inserts - (final_status.medium_present() ? 1 : 0);
    const uint64_t changes = final_status.generation() - initial.generation();
    EXPECT_EQ(changes, static_cast<uint64_t>(inserts + removals))
        << inserts << " inserts, " << removals << " removals";
    int seen_inserted = 0, seen_removed = 0;
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    std::vector<pb::MediaEvent> seen;
    while (absl::Now() < deadline) {
      seen = events.Events();
      seen_inserted = seen_removed = 0;
      for (const auto& e : seen) {
        seen_inserted += e.type() == pb::MediaEvent::MEDIUM_INSERTED;
        seen_removed += e.type() == pb::MediaEvent::MEDIUM_REMOVED;
      }
      if (seen_inserted >= inserts && seen_removed >= removals) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_EQ(seen_inserted, inserts);
    EXPECT_EQ(seen_removed, removals);
    bool expect_insert = true;
    uint64_t last_generation = initial.generation();
    for (const auto& e : seen) {
      if (e.type() != pb::MediaEvent::MEDIUM_INSERTED && e.type() != pb::MediaEvent::MEDIUM_REMOVED)
        continue;
      EXPECT_EQ(e.type() == pb::MediaEvent::MEDIUM_INSERTED, expect_insert) << Show(e);
      EXPECT_GT(e.status().generation(), last_generation) << Show(e);
      expect_insert = !expect_insert;
      last_generation = e.status().generation();
    }
    std::cerr << "api_test: " << inserts << " inserts (" << refused
              << " refused: a medium was in), " << ejects << " ejects, " << seen.size()
              << " events\n";

    // Still serving, and the guest still reading: a graceful shutdown ends the VMM (the test guest
    // ignores the request, so the VMM stops it after the grace period).
    pb::VmInfo info;
    EXPECT_TRUE(client.Info(&info).ok());
    EXPECT_EQ(info.state(), pb::VmInfo::RUNNING);
    shutdown_status = client.Shutdown(/*force=*/false, /*grace_ms=*/300, &info);
    return "";
  };
  const absl::Time boot = absl::Now();
  ProcessResult r = RunVm("test=ide-bench passes=100000 verify=1",
                          {"--ide-cdrom=" + images().cd, "--cdrom=", "--api-socket=" + sock},
                          on_line, absl::Seconds(90));
  EXPECT_TRUE(hammered) << r.out << r.err;
  EXPECT_FALSE(r.timed_out) << "the VMM did not stop after Shutdown\n" << r.err;
  EXPECT_TRUE(r.exited) << "killed by signal " << r.term_signal;
  ASSERT_TRUE(shutdown_status.has_value());
  // The VMM may close the connection before its answer arrives.
  EXPECT_THAT(shutdown_status->error_code(),
              AnyOf(grpc::StatusCode::OK, grpc::StatusCode::UNAVAILABLE))
      << Describe(*shutdown_status);
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL"))) << "the guest's reads went wrong under the API load";
  EXPECT_THAT(r.out, HasSubstr("verified"));
  EXPECT_THAT(r.err, Not(HasSubstr("fatal")));
  std::cerr << "api_test: VMM exit status " << r.exit_status << " after a graceful shutdown, "
            << (absl::Now() - boot) << " after boot\n";
}

// ---- Malformed and hostile requests --------------------------------------------------------------

TEST_F(ApiTest, MalformedAndHostileRequests) {
  const std::string sock = SocketPath("hostile.sock");
  const std::string disk = TempPath("hostile-disk.img");
  ASSERT_TRUE(CopyFile(images().disk, disk)) << strerror(errno);
  bool checked = false;
  auto on_line = [&](const std::string& line) -> std::string {
    if (line != "echo: ready") return "";
    checked = true;
    Client client(sock);
    if (!client.Connected()) {
      ADD_FAILURE() << "no API on " << sock;
      return "bye\n";
    }
    // The socket: mode 0600, a socket.
    struct stat st {};
    EXPECT_EQ(lstat(sock.c_str(), &st), 0);
    EXPECT_TRUE(S_ISSOCK(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0600u) << std::oct << (st.st_mode & 07777);

    pb::DriveStatus cd0_before, cd1_before, out;
    if (!client.Status("cd0", &cd0_before).ok() || !client.Status("cd1", &cd1_before).ok()) {
      ADD_FAILURE() << "GetStatus of cd0 or cd1 failed";
      return "bye\n";
    }
    auto expect_code = [&](const grpc::Status& status, std::set<grpc::StatusCode> allowed,
                           const std::string& what, const std::string& mentions = "") {
      std::vector<std::string> names;
      for (grpc::StatusCode code : allowed) names.push_back(vmmctl::StatusCodeName(code));
      EXPECT_TRUE(allowed.count(status.error_code()))
          << what << ": got " << Describe(status) << ", expected " << absl::StrJoin(names, " or ");
      if (!mentions.empty()) {
        EXPECT_THAT(status.error_message(), HasSubstr(mentions)) << what;
      }
      EXPECT_LT(status.error_message().size(), 4096u)
          << what << ": the error echoes the whole request";
    };
    using C = grpc::StatusCode;

    // Unknown, empty and overlong drive names.
    const std::string long_name(64 * 1024, 'x');
    for (const std::string& name :
         {std::string("cd9"), std::string(""), long_name, std::string("cd0\n"), std::string("cd0 "),
          std::string("../cd0")}) {
      const std::string what =
          absl::StrCat("drive '", name.substr(0, 16), "' (", name.size(), " bytes)");
      const std::set<C> codes =
          name.empty() ? std::set<C>{C::INVALID_ARGUMENT, C::NOT_FOUND} : std::set<C>{C::NOT_FOUND};
      expect_code(client.Status(name, &out), codes, "GetStatus " + what,
                  name == "cd9" ? "cd9" : "");
      expect_code(client.Eject(name, true, &out), codes, "Eject " + what);
      expect_code(client.Insert(name, images().new_cd, &out), codes, "Insert " + what);
      expect_code(client.Tray(name, true, true, &out), codes, "SetTray " + what);
      pb::GetStatsResponse stats;
      if (!name.empty()) expect_code(client.Stats(name, &stats), codes, "GetStats " + what);
    }
    {
      EventLog watch(client, "cd9");
      auto status = watch.WaitFinished(absl::Seconds(5));
      EXPECT_TRUE(status.has_value()) << "Watch(cd9) did not end";
      if (status.has_value()) expect_code(*status, {C::NOT_FOUND}, "Watch cd9");
    }

    // Bad paths: overlong, NUL bytes, missing, a directory, a FIFO (opening it would block), a
    // character device, an unsupported format. Each names the path (or says what is wrong).
    const std::string missing = TempPath("no-such.iso");
    const std::string directory = TempPath("a-directory");
    std::filesystem::create_directories(directory);
    const std::string fifo = TempPath("a-fifo");
    unlink(fifo.c_str());
    EXPECT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    const std::string long_component = TempPath(std::string(300, 'n') + ".iso");  // > NAME_MAX
    std::string deep_path = "/";
    while (deep_path.size() < 5000) deep_path += "deep/";
    deep_path += "x.iso";
    expect_code(client.Insert("cd1", "", &out), {C::INVALID_ARGUMENT}, "empty path");
    expect_code(client.Insert("cd1", deep_path, &out), {C::INVALID_ARGUMENT, C::NOT_FOUND},
                "5000-byte path");
    expect_code(client.Insert("cd1", long_component, &out), {C::INVALID_ARGUMENT, C::NOT_FOUND},
                "a 300-byte file name");
    expect_code(
        client.Insert("cd1", std::string(images().new_cd) + std::string(1, '\0') + "junk", &out),
        {C::INVALID_ARGUMENT}, "a path with a NUL byte");
    expect_code(client.Insert("cd1", missing, &out), {C::NOT_FOUND, C::INVALID_ARGUMENT},
                "a missing file", missing);
    expect_code(client.Insert("cd1", directory, &out), {C::INVALID_ARGUMENT}, "a directory",
                directory);
    const absl::Time fifo_start = absl::Now();
    expect_code(client.Insert("cd1", fifo, &out), {C::INVALID_ARGUMENT}, "a FIFO", fifo);
    EXPECT_LT(absl::Now() - fifo_start, absl::Seconds(5)) << "inserting a FIFO blocked the server";
    {
      // If the server did open the FIFO, a writer lets that open return.
      const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
    }
    expect_code(client.Insert("cd1", "/dev/null", &out), {C::INVALID_ARGUMENT},
                "a character device");
    expect_code(client.Insert("cd1", images().new_cd, &out, "qcow2"), {C::INVALID_ARGUMENT},
                "format qcow2");
    // 8 MiB of path: beyond gRPC's 4 MiB message limit.
    expect_code(client.Insert("cd1", "/" + std::string(8 << 20, 'p'), &out),
                {C::RESOURCE_EXHAUSTED, C::INVALID_ARGUMENT}, "an 8 MiB path");

    // Permissions: an unreadable file, a file in a directory without search permission. The VMM
    // runs without the capabilities that let root read both (without_file_capabilities below).
    const std::string unreadable = TempPath("unreadable.iso");
    std::filesystem::copy_file(images().new_cd, unreadable,
                               std::filesystem::copy_options::overwrite_existing);
    chmod(unreadable.c_str(), 0000);
    const std::string locked_dir = TempPath("no-search");
    std::filesystem::create_directories(locked_dir);
    std::filesystem::copy_file(images().new_cd, locked_dir + "/in.iso",
                               std::filesystem::copy_options::overwrite_existing);
    chmod(locked_dir.c_str(), 0600);
    for (const std::string& path : {unreadable, locked_dir + "/in.iso"}) {
      expect_code(client.Insert("cd1", path, &out), {C::PERMISSION_DENIED}, "an unreadable file",
                  path);
    }
    chmod(locked_dir.c_str(), 0700);

    // Media rules: a disk has no removable medium; a drive with a medium takes no other.
    expect_code(client.Insert("disk0", images().new_cd, &out),
                {C::FAILED_PRECONDITION, C::ALREADY_EXISTS}, "Insert into a disk");
    expect_code(client.Eject("disk0", true, &out), {C::FAILED_PRECONDITION, C::INVALID_ARGUMENT},
                "Eject a disk");
    expect_code(client.Tray("disk0", true, true, &out),
                {C::FAILED_PRECONDITION, C::INVALID_ARGUMENT}, "SetTray on a disk");
    expect_code(client.Insert("cd0", images().new_cd, &out), {C::FAILED_PRECONDITION},
                "Insert over a medium");

    // Bytes that are no protobuf at all, and a method that does not exist.
    {
      grpc::GenericStub generic(client.channel());
      auto raw_call = [&](const std::string& method, const std::string& bytes) {
        grpc::ClientContext context;
        context.set_deadline(DeadlineAfter(absl::Seconds(10)));
        grpc::Slice slice(bytes);
        grpc::ByteBuffer request(&slice, 1), response;
        std::promise<grpc::Status> done;
        generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                          [&](grpc::Status s) { done.set_value(s); });
        return done.get_future().get();
      };
      grpc::Status garbage =
          raw_call("/vmm.v1.MediaService/Insert", std::string("\xff\xff\xff\xff\x0f garbage", 13));
      EXPECT_FALSE(garbage.ok()) << "garbage bytes were accepted as an InsertRequest";
      std::string bad_utf8;
      bad_utf8 += '\x0a';  // field 1 (drive), length-delimited
      bad_utf8 += '\x04';
      bad_utf8 += "cd\xc3\x28";
      grpc::Status utf8 = raw_call("/vmm.v1.MediaService/GetStatus", bad_utf8);
      EXPECT_FALSE(utf8.ok()) << "a drive name that is not UTF-8 matched a drive";
      grpc::Status unknown = raw_call("/vmm.v1.MediaService/Format", "");
      EXPECT_EQ(unknown.error_code(), C::UNIMPLEMENTED) << Describe(unknown);
    }

    // A flood of watchers: each either subscribes or is refused (RESOURCE_EXHAUSTED); unary calls
    // keep working meanwhile.
    {
      std::vector<std::unique_ptr<EventLog>> watchers;
      for (int i = 0; i < 48; ++i)
        watchers.push_back(std::make_unique<EventLog>(client, i % 2 ? "cd0" : ""));
      for (auto& w : watchers)
        w->WaitSubscribed(absl::Seconds(10));  // answered, one way or the other
      absl::SleepFor(absl::Milliseconds(500));
      int subscribed = 0, refused = 0;
      for (auto& w : watchers) {
        auto status = w->WaitFinished(absl::ZeroDuration());
        if (!status.has_value()) {
          ++subscribed;  // still open
        } else {
          EXPECT_EQ(status->error_code(), C::RESOURCE_EXHAUSTED) << Describe(*status);
          ++refused;
        }
      }
      std::cerr << "api_test: 48 Watch streams at once: " << subscribed << " subscribed, "
                << refused << " refused\n";
      EXPECT_GT(subscribed, 0);
      Client fresh(sock, absl::Seconds(5));
      EXPECT_TRUE(fresh.Status("cd0", &out).ok())
          << "unary calls starve while many streams are open";
    }

    // Nothing changed; the server still serves.
    pb::DriveStatus cd0_after, cd1_after;
    EXPECT_TRUE(client.Status("cd0", &cd0_after).ok());
    EXPECT_TRUE(client.Status("cd1", &cd1_after).ok());
    EXPECT_EQ(Show(cd0_after), Show(cd0_before));
    EXPECT_EQ(Show(cd1_after), Show(cd1_before));
    EXPECT_FALSE(cd1_after.medium_present());
    pb::ListDrivesResponse list;
    EXPECT_TRUE(client.List(&list).ok());
    EXPECT_EQ(list.drives_size(), 3);
    return "bye\n";
  };
  ProcessResult r =
      RunVm("test=echo timeout_ms=60000",
            {"--disk=" + disk, "--cdrom=" + images().cd, "--cdrom=", "--api-socket=" + sock},
            on_line, absl::Seconds(60), /*without_file_capabilities=*/true);
  EXPECT_TRUE(checked) << r.out << r.err;
  ExpectPassed(r, "echo");
  EXPECT_THAT(r.out, HasSubstr("echo: bye"));
}

// ---- The socket path -----------------------------------------------------------------------------

TEST_F(ApiTest, SocketPathThatExistsIsRefusedStaleSocketIsReused) {
  auto refused = [&](const std::string& path, const std::string& what) {
    SCOPED_TRACE(what);
    const absl::Time start = absl::Now();
    ProcessResult r = RunVm("test=hello", {"--api-socket=" + path}, nullptr, absl::Seconds(20));
    EXPECT_FALSE(r.timed_out);
    EXPECT_TRUE(r.exited);
    EXPECT_NE(r.exit_status, 0) << "the VMM started on " << what << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(path)) << "the error does not name the path";
    EXPECT_THAT(r.out, Not(HasSubstr("TEST hello: PASS")))
        << "the guest ran although the API could not start";
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    std::cerr << "api_test: " << what << ": " << r.err;
  };

  // A regular file: refused, and left alone.
  const std::string file = SocketPath("a-file");
  std::ofstream(file) << "precious";
  refused(file, "a regular file");
  EXPECT_EQ(ReadFile(file), "precious");

  // A directory, a path in a missing directory, and a path too long for a unix socket.
  const std::string directory = SocketPath("a-directory");
  std::filesystem::create_directories(directory);
  refused(directory, "a directory");
  EXPECT_TRUE(std::filesystem::is_directory(directory));
  refused(SocketPath("missing-dir/api.sock"), "a path in a missing directory");
  refused(SocketPath(std::string(120, 's') + ".sock"), "a path beyond sun_path");

  // A live socket (someone listens on it): refused, and still theirs.
  const std::string live = SocketPath("live.sock");
  Listener listener(live);
  ASSERT_TRUE(listener.ok());
  refused(live, "a live socket");
  EXPECT_TRUE(ConnectsTo(live)) << "the VMM took over a live socket";

  // A stale socket (nobody listens): reused.
  const std::string stale = SocketPath("stale.sock");
  ASSERT_TRUE(MakeStaleSocket(stale));
  ASSERT_FALSE(ConnectsTo(stale));
  bool served = false;
  ProcessResult r =
      RunVm("test=echo timeout_ms=30000", {"--api-socket=" + stale}, [&](const std::string& line) {
        if (line != "echo: ready") return std::string();
        Client client(stale);
        EXPECT_TRUE(client.Connected());
        pb::VmInfo info;
        grpc::Status status = client.Info(&info);
        EXPECT_TRUE(status.ok()) << Describe(status);
        served = status.ok();
        EXPECT_EQ(info.cmdline(), "test=echo timeout_ms=30000");
        struct stat st {};
        EXPECT_EQ(lstat(stale.c_str(), &st), 0);
        EXPECT_EQ(st.st_mode & 07777, 0600u);
        return std::string("bye\n");
      });
  ExpectPassed(r, "echo");
  EXPECT_TRUE(served);
  // The VMM removes its socket when it exits (api/api_server.h), so the next one starts clean.
  EXPECT_FALSE(std::filesystem::exists(stale)) << "the socket outlived the VMM";
}

// ---- vmmctl from the shell -----------------------------------------------------------------------

TEST_F(ApiTest, VmmctlDrivesItFromTheShell) {
  const std::string sock = SocketPath("vmmctl.sock");
  const std::string watch_out = TempPath("watch.out"), watch_err = TempPath("watch.err");
  const std::string json_out = TempPath("watch-json.out"), json_err = TempPath("watch-json.err");
  std::unique_ptr<Background> watch, json_watch;
  int watch_status = -1, json_watch_status = -1;
  bool finished = false;
  std::string log;  // every vmmctl call, for failure messages
  auto vmmctl = [&](const std::vector<std::string>& args) {
    ProcessResult r = Vmmctl(sock, args);
    absl::StrAppend(&log, "$ vmmctl ", absl::StrJoin(args, " "), "  -> ", r.exit_status, "\n",
                    r.out, r.err);
    return r;
  };
  auto on_line = [&](const std::string& line) -> std::string {
    if (line == "@@LOCKED cd") {
      Client client(sock);
      EXPECT_TRUE(client.Connected());
      // Two watchers in the background, as `vmmctl ... media watch > file &`.
      watch = std::make_unique<Background>(
          std::vector<std::string>{kVmmctl, "--api", "unix:" + sock, "--connect-timeout", "60",
                                   "media", "watch"},
          watch_out, watch_err);
      json_watch = std::make_unique<Background>(
          std::vector<std::string>{kVmmctl, "--api", "unix:" + sock, "--connect-timeout", "60",
                                   "--json", "media", "watch", "cd0"},
          json_out, json_err);
      EXPECT_TRUE(watch->running() && json_watch->running());
      EXPECT_TRUE(WaitForFileContent(watch_err, "watching", absl::Seconds(10)))
          << ReadFile(watch_err);
      EXPECT_TRUE(WaitForFileContent(json_err, "watching", absl::Seconds(10)))
          << ReadFile(json_err);

      ProcessResult list = vmmctl({"media", "list"});
      EXPECT_EQ(list.exit_status, 0) << log;
      EXPECT_THAT(list.out, HasSubstr("cd0"));
      EXPECT_THAT(list.out, HasSubstr("cd1"));
      EXPECT_THAT(list.out, HasSubstr("locked"));
      ProcessResult status = vmmctl({"media", "status", "cd0", "--json"});
      pb::DriveStatus parsed;
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(status.out, &parsed).ok()) << log;
      EXPECT_TRUE(parsed.locked());
      EXPECT_EQ(parsed.source(), images().cd);

      EXPECT_EQ(vmmctl({"media", "tray", "cd1", "open"}).exit_status, 0) << log;
      EXPECT_EQ(vmmctl({"media", "tray", "cd1", "close"}).exit_status, 0) << log;

      ProcessResult refused = vmmctl({"media", "eject", "cd0"});
      EXPECT_EQ(refused.exit_status, 1) << log;
      EXPECT_THAT(refused.err, HasSubstr("FAILED_PRECONDITION"));
      ProcessResult forced = vmmctl({"media", "eject", "cd0", "--force"});
      EXPECT_EQ(forced.exit_status, 0) << log;
      EXPECT_THAT(forced.out, HasSubstr("no medium"));
      EXPECT_THAT(forced.out, HasSubstr("tray open"));
      return "gone\n";
    }
    if (absl::StartsWith(line, "scsi-lock: gone -> ")) {
      ProcessResult inserted = vmmctl({"media", "insert", "cd0", images().new_cd});
      EXPECT_EQ(inserted.exit_status, 0) << log;
      EXPECT_THAT(inserted.out, HasSubstr(images().new_cd));
      EXPECT_THAT(inserted.out, HasSubstr("3.0 MiB"));
      ProcessResult again = vmmctl({"media", "insert", "cd0", images().other_cd});
      EXPECT_EQ(again.exit_status, 1) << log;
      EXPECT_THAT(again.err, HasSubstr("FAILED_PRECONDITION"));
      ProcessResult unknown = vmmctl({"media", "status", "cd7"});
      EXPECT_EQ(unknown.exit_status, 1) << log;
      EXPECT_THAT(unknown.err, HasSubstr("NOT_FOUND"));
      EXPECT_EQ(vmmctl({"media", "eject"}).exit_status, 2) << log;
      ProcessResult nowhere =
          RunProcess({kVmmctl, "--api", "unix:" + SocketPath("nobody.sock"), "vm", "info"});
      EXPECT_EQ(nowhere.exit_status, 3) << nowhere.err;
      return "ready\n";
    }
    if (absl::StartsWith(line, "scsi-lock: ready -> ")) return "read\n";  // something for vm stats
    if (absl::StartsWith(line, "scsi-lock: read -> ")) {
      ProcessResult info = vmmctl({"vm", "info", "--json"});
      EXPECT_EQ(info.exit_status, 0) << log;
      pb::VmInfo parsed;
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(info.out, &parsed).ok()) << info.out;
      EXPECT_EQ(parsed.state(), pb::VmInfo::RUNNING);
      EXPECT_EQ(parsed.vcpus(), 1u);
      EXPECT_EQ(parsed.memory_bytes(), 128ull << 20);
      EXPECT_EQ(parsed.cmdline(), "test=scsi-lock hold_ms=20000");
      EXPECT_GT(parsed.pid(), 0u);
      EXPECT_EQ(parsed.drives_size(), 2);
      EXPECT_TRUE(parsed.firmware().empty());
      EXPECT_THAT(vmmctl({"vm", "info"}).out, HasSubstr("RUNNING"));
      // A kernel booted directly reads no boot order.
      ProcessResult boot_order = vmmctl({"vm", "boot-order", "cd0"});
      EXPECT_EQ(boot_order.exit_status, 1) << log;
      EXPECT_THAT(boot_order.err, HasSubstr("FAILED_PRECONDITION"));
      EXPECT_THAT(boot_order.err, HasSubstr("nothing reads a boot order"));

      ProcessResult stats = vmmctl({"vm", "stats"});
      EXPECT_EQ(stats.exit_status, 0) << log;
      EXPECT_THAT(stats.out, HasSubstr("cd0"));
      ProcessResult stats_json = vmmctl({"--json", "vm", "stats", "cd0"});
      pb::GetStatsResponse parsed_stats;
      EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(stats_json.out, &parsed_stats).ok())
          << log;
      EXPECT_EQ(parsed_stats.drives_size(), 1);
      if (parsed_stats.drives_size() == 1) {
        EXPECT_EQ(parsed_stats.drives(0).drive(), "cd0");
        EXPECT_GT(parsed_stats.drives(0).read_requests(), 0u) << "the guest read 16 sectors";
        EXPECT_GE(parsed_stats.drives(0).read_bytes(), 16u * 2048);
      }

      EXPECT_THAT(vmmctl({"vm", "pause"}).out, HasSubstr("PAUSED")) << log;
      EXPECT_THAT(vmmctl({"vm", "info"}).out, HasSubstr("PAUSED")) << log;
      EXPECT_THAT(vmmctl({"vm", "resume"}).out, HasSubstr("RUNNING")) << log;

      // The watchers saw it all; Ctrl-C ends them with status 0.
      EXPECT_TRUE(WaitForFileContent(watch_out, "cd0 MEDIUM_INSERTED", absl::Seconds(5)))
          << ReadFile(watch_out);
      EXPECT_TRUE(WaitForFileContent(json_out, "MEDIUM_INSERTED", absl::Seconds(5)))
          << ReadFile(json_out);
      watch_status = watch->Stop(SIGINT);
      json_watch_status = json_watch->Stop(SIGINT);
      finished = true;
      // And the VM goes away on request.
      ProcessResult shutdown = vmmctl({"vm", "shutdown", "--force"});
      EXPECT_EQ(shutdown.exit_status, 0) << log;
      return "";
    }
    return "";
  };
  ProcessResult r = RunVm("test=scsi-lock hold_ms=20000",
                          {"--cdrom=" + images().cd, "--cdrom=", "--api-socket=" + sock}, on_line);
  EXPECT_TRUE(finished) << r.out << "\n" << log;
  EXPECT_FALSE(r.timed_out) << "vmmctl vm shutdown --force did not stop the VMM";
  EXPECT_TRUE(r.exited);
  EXPECT_THAT(r.err, Not(HasSubstr("fatal")));
  EXPECT_EQ(watch_status, 0) << ReadFile(watch_err);
  EXPECT_EQ(json_watch_status, 0) << ReadFile(json_err);

  // One line per event, in order.
  const std::string events = ReadFile(watch_out);
  std::vector<std::string> lines = absl::StrSplit(events, '\n', absl::SkipEmpty());
  std::vector<std::string> kinds;
  for (const std::string& l : lines) {
    std::vector<std::string> fields = absl::StrSplit(l, ' ');
    ASSERT_GE(fields.size(), 4u) << l;
    kinds.push_back(fields[1] + " " + fields[2]);
  }
  const std::string sequence = absl::StrJoin(kinds, ", ");
  EXPECT_THAT(sequence, HasSubstr("cd1 TRAY_OPENED, cd1 TRAY_CLOSED")) << events;
  EXPECT_THAT(sequence, HasSubstr("cd0 TRAY_OPENED, cd0 MEDIUM_REMOVED")) << events;
  EXPECT_THAT(sequence, HasSubstr("cd0 MEDIUM_INSERTED, cd0 TRAY_CLOSED")) << events;
  EXPECT_THAT(events, HasSubstr("by host"));
  // JSON: one MediaEvent per line, cd0 only.
  int parsed_lines = 0;
  for (absl::string_view l : absl::StrSplit(ReadFile(json_out), '\n', absl::SkipEmpty())) {
    pb::MediaEvent e;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(std::string(l), &e).ok()) << l;
    EXPECT_EQ(e.drive(), "cd0");
    ++parsed_lines;
  }
  EXPECT_GE(parsed_lines, 4);
}

}  // namespace
}  // namespace tests

// vhost-user-scsi: the VMM's virtio-scsi controller, SCSI target and block layer served to another
// VMM (QEMU's -device vhost-user-scsi-pci) over the vhost-user protocol. See
// docs/vhost-user-scsi.md.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/listen_address.h"
#include "devices/virtio/vhost_user/server.h"
#include "vmm/backend_api.h"
#include "vmm/command_line.h"
#include "vmm/launch_sequence.h"
#include "vmm/storage.h"
#include "vmm/storage_flags.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

ABSL_FLAG(std::string, socket, "",
          "The vhost-user socket to listen on (required; QEMU: -chardev socket,path=...). Created "
          "with mode 0600.");
ABSL_FLAG(uint32_t, scsi_queues, 64,
          "virtio-scsi request queues the device offers, 1 to 254: QEMU's num_queues (by default "
          "one per vCPU) may not exceed it. Rings the front end does not set up cost nothing.");
// --disk, --cdrom, --iothreads and --poll-max-ns: vmm/storage_flags.cc, shared with microvm.

namespace {

std::vector<vmm::HelpFlag> DriveHelp() {
  std::vector<vmm::HelpFlag> flags = vmm::SharedStorageHelp();
  flags.push_back({"scsi-queues", "N"});
  return flags;
}

const vmm::ProgramHelp& Help() {
  static const auto* help = new vmm::ProgramHelp{
      .program = "vhost-user-scsi",
      .summary =
          "serves virtio-scsi to a vhost-user front end such as QEMU's "
          "vhost-user-scsi-pci (docs/vhost-user-scsi.md).",
      .usage =
          "vhost-user-scsi --socket=PATH --disk=IMAGE [--cdrom[=ISO]]... "
          "[--scsi-queues=N --iothreads=M]\n                       [--api-socket=PATH]",
      .groups =
          {
              {"Vhost-user", {{"socket", "PATH"}}},
              {"Drives (LUN 0, 1, ... in order)", DriveHelp()},
              {"Control API (docs/api.md)",
               {{"api-socket", "PATH"},
                {"api-tcp", "HOST:PORT"},
                {"api-listen-any", ""},
                {"api-token-file", "FILE"},
                {"api-tcp-insecure", ""},
                {"media-dir", "DIR"}}},
              {"Sandbox (docs/security.md)",
               {{"seccomp", "trap|log|off"},
                {"jail", "auto|on|off"},
                {"jail-user", "UID:GID"},
                {"jail-cgroup", "FILE=VALUE,..."},
                {"jail-cgroup-parent", "PATH"}}},
          },
      .epilogue =
          "Flags take --name=value or --name value (switches: --name, --name=false, --noname), "
          "once "
          "each; dashes and underscores are the same. Exit "
          "status: 0 when the front end disconnects or on SIGINT/SIGTERM/SIGHUP; 1 for an error, "
          "printed "
          "as \"vhost-user-scsi: --flag=value: what is wrong\" (docs/errors.md lists them).",
  };
  return *help;
}

// The flags' values, checked before anything is opened; errors name the flag and the value.
absl::Status ConfigureStorage(const std::vector<vmm::DriveSpec>& drives,
                              vmm::StorageConfig& config) {
  if (absl::GetFlag(FLAGS_socket).empty()) {
    return absl::InvalidArgumentError(
        "--socket=PATH is required: the vhost-user socket the front end connects to");
  }
  if (drives.empty()) {
    return absl::InvalidArgumentError("no drives: give at least one --disk or --cdrom");
  }
  for (const vmm::DriveSpec& spec : drives) {
    if (spec.bus != vmm::DriveSpec::Bus::kScsi) {
      return absl::InvalidArgumentError(absl::StrCat(
          vmm::DriveFlag(spec), "=", spec.given_path,
          ": IDE drives belong to microvm; this back end serves virtio-scsi (--disk, --cdrom)"));
    }
  }
  config.drives = drives;
  config.scsi_queues = absl::GetFlag(FLAGS_scsi_queues);
  // vhost-user addresses rings with 8 bits (SET_VRING_KICK/CALL): control, event and 254 more.
  RETURN_IF_ERROR(vmm::CheckRange("--scsi-queues", config.scsi_queues, 1, 254,
                                  "vhost-user ring indices are 8 bits"));
  return vmm::IoThreadFlagsInto(config);
}

// A signal stops the server; the watcher itself ends when the server stops for another reason
// (Join tells it to, then waits for it).
class SignalWatcher {
 public:
  static absl::StatusOr<std::unique_ptr<SignalWatcher>> Start(
      int signal_fd, devices::virtio::vhost_user::VhostUserServer& server) {
    ASSIGN_OR_RETURN(sys_util::ScopedFd stop, sys_util::MakeEventFd());
    auto watcher = std::make_unique<SignalWatcher>(std::move(stop));
    SignalWatcher* self = watcher.get();
    ASSIGN_OR_RETURN(watcher->thread_,
                     sys_util::StartThread({.name = "signal-watcher"}, [self, signal_fd, &server] {
                       pollfd fds[2] = {{signal_fd, POLLIN, 0}, {self->stop_.get(), POLLIN, 0}};
                       while (poll(fds, 2, -1) < 0 && errno == EINTR) {
                       }
                       if (fds[0].revents != 0) {
                         signalfd_siginfo info{};
                         if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
                           absl::FPrintF(stderr, "vhost-user-scsi: %s, stopping\n",
                                         strsignal(info.ssi_signo));
                         }
                       }
                       server.Stop();
                     }));
    return watcher;
  }

  explicit SignalWatcher(sys_util::ScopedFd stop) : stop_(std::move(stop)) {}

  void Join() {
    if (!thread_.joinable()) return;
    sys_util::SignalEventFd(stop_.get());
    thread_.join();
  }
  ~SignalWatcher() { Join(); }

 private:
  sys_util::ScopedFd stop_;
  std::thread thread_;
};

// vhost-user-scsi's steps of the launch sequence (vmm/launch_sequence.h).
class VhostUserScsiProgram : public vmm::LauncherProgram {
 public:
  const char* name() const override { return "vhost-user-scsi"; }
  const vmm::ProgramHelp& help() const override { return Help(); }

  absl::Status Configure(const vmm::ParsedCommandLine& parsed) override {
    config_.io_groups = parsed.io_groups;
    socket_path_ = absl::GetFlag(FLAGS_socket);
    return ConfigureStorage(parsed.drives, config_);
  }

  std::string UnixSocketPath() const override { return socket_path_; }

  // A stale socket replaced, a live one refused: connect() tells them apart, which the filter
  // refuses. Then the socket itself, owner-only from its first instant (the launcher's umask),
  // left to the janitor to remove. Listening from here on, before the drives are open, is
  // harmless: nothing is accepted until Run, and a front end that connects early waits.
  absl::Status BeforeSandbox(const vmm::LaunchContext& context) override {
    // Every io_uring the drives and media will use: no thread may make one in the sandbox.
    RETURN_IF_ERROR(vmm::MakeRingPool(config_));
    absl::Status ready = api::PrepareUnixSocketPath(socket_path_, "--socket");
    if (!ready.ok()) return vmm::NameTheFlag("--socket", socket_path_, socket_path_, ready);
    struct stat identity {};
    // A backlog of one: the back end serves one front end at a time.
    auto listener = api::ListenOnUnixSocket(socket_path_, "--socket", 1, &identity);
    if (!listener.ok()) {
      return vmm::NameTheFlag("--socket", socket_path_, socket_path_, listener.status());
    }
    listener_ = *std::move(listener);
    return context.socket_janitor->Register(socket_path_, identity);
  }

  absl::StatusOr<Next> Build(const vmm::LaunchContext& context) override {
    // A front end that goes away mid-write must cost an error, not the process.
    signal(SIGPIPE, SIG_IGN);
    config_.iothread_start = context.sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kIo);
    ASSIGN_OR_RETURN(storage_, vmm::Storage::Create(config_));
    device_ = storage_->TakeScsiDevice();
    if (device_ == nullptr) return absl::InternalError("no virtio-scsi device was built");
    server_ = std::make_unique<devices::virtio::vhost_user::VhostUserServer>(std::move(listener_),
                                                                             *device_);
    for (const vmm::AttachedDrive& drive : storage_->drives()) names_.push_back(drive.name);
    return Next::kRun;
  }

  api::VmControl& ApiControl(const vmm::LaunchContext& context) override {
    control_ = std::make_unique<vmm::BackendApiControl>(
        *storage_,
        absl::StrFormat("vhost-user-scsi on %s: %s", socket_path_, absl::StrJoin(names_, ", ")),
        context.launch_time, context.sandbox->supervised.host_pid, [this] { server_->Stop(); },
        context.media_dir);
    return *control_;
  }

  absl::Status BeforeJail(const vmm::LaunchContext& context) override {
    ASSIGN_OR_RETURN(watcher_, SignalWatcher::Start(context.stop_signal_fd, *server_));
    return absl::OkStatus();
  }

  absl::StatusOr<int> Run(const vmm::LaunchContext&) override {
    absl::FPrintF(
        stderr, "vhost-user-scsi: listening on %s (%s; %d request queue(s), %d iothread(s))\n",
        socket_path_, absl::StrJoin(names_, ", "), config_.scsi_queues, config_.iothreads);
    RETURN_IF_ERROR(server_->Run());
    return 0;
  }

  void Stop() override {
    if (server_ != nullptr) server_->Stop();
    if (watcher_ != nullptr) watcher_->Join();
  }

 private:
  vmm::StorageConfig config_;
  std::string socket_path_;
  sys_util::ScopedFd listener_;  // bound in BeforeSandbox, served from Build on
  std::unique_ptr<vmm::Storage> storage_;
  std::unique_ptr<devices::virtio::scsi::VirtioScsi> device_;
  std::unique_ptr<devices::virtio::vhost_user::VhostUserServer> server_;
  std::vector<std::string> names_;
  std::unique_ptr<vmm::BackendApiControl> control_;
  std::unique_ptr<SignalWatcher> watcher_;
};

}  // namespace

int main(int argc, char** argv) {
  VhostUserScsiProgram program;
  return vmm::RunLauncher(program, argc, argv);
}

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
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "api/api_server.h"
#include "api/api_token.h"
#include "api/listen_address.h"
#include "block/scoped_fd.h"
#include "devices/virtio/vhost_user/server.h"
#include "vmm/backend_api.h"
#include "vmm/command_line.h"
#include "vmm/media_directory.h"
#include "vmm/storage.h"
#include "vmm/sandbox/sandbox_flags.h"
#include "vmm/thread_stacks.h"

ABSL_FLAG(std::string, socket, "", "The vhost-user socket to listen on (QEMU: -chardev socket,path=...).");
ABSL_FLAG(uint32_t, scsi_queues, 64,
          "virtio-scsi request queues the device offers, at most 254: QEMU's num_queues (by default "
          "one per vCPU) may not exceed it. Rings the front end does not set up cost nothing.");
ABSL_FLAG(uint32_t, iothreads, 1, "iothreads serving the request queues (queue i on i % N).");
ABSL_FLAG(int64_t, poll_max_ns, 32768,
          "Adaptive polling of the rings and block completions before an iothread sleeps (0: off).");
ABSL_FLAG(std::string, api_socket, "", "Serve the gRPC control API (media, stats) on this unix socket.");
ABSL_FLAG(std::string, api_tcp, "",
          "Serve the control API on HOST:PORT (loopback only). Needs --api-token-file (or "
          "--api-tcp-insecure).");
ABSL_FLAG(std::string, api_token_file, "",
          "Every control-API call must carry the secret in this file (docs/api.md), on every "
          "listener. The file must belong to this process's user and be readable by it alone.");
ABSL_FLAG(bool, api_tcp_insecure, false,
          "DANGEROUS: allow --api-tcp without --api-token-file; every local user then controls "
          "the back end.");
ABSL_FLAG(std::string, media_dir, "",
          "The control API takes CD/DVD media from this directory only (docs/api.md).");
// --disk and --cdrom may repeat; they are taken out of argv before absl parses it.
ABSL_FLAG(std::string, disk, "",
          "A disk: PATH[,cache=none|writeback|writethrough|directsync|unsafe][,fua=native|emulate]"
          "[,readonly]. Repeat for more (LUN 0, 1, ...).");
ABSL_FLAG(std::string, cdrom, "", "A CD/DVD-ROM with the ISO at PATH (empty: no medium). Repeats.");

namespace {

int Fail(const std::string& message) {
  absl::FPrintF(stderr, "vhost-user-scsi: %s\n", message);
  return 1;
}

absl::StatusOr<block::ScopedFd> Listen(const std::string& path) {
  // The socket hands out guest memory and the disks: owner only, like the API socket. The
  // iothreads already run, so no process-wide umask: it is bound in a private directory and
  // moved into place once it is mode 0600 (api::StagedUnixSocket).
  auto staged = api::StagedUnixSocket::Create(path, "vhost-user socket");
  if (!staged.ok()) return staged.status();
  block::ScopedFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return block::ErrnoStatus(errno, "socket(AF_UNIX)");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, staged->bind_path().data(), staged->bind_path().size());
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return block::ErrnoStatus(errno, absl::StrCat("binding ", path));
  }
  if (listen(listener.get(), 1) != 0) return block::ErrnoStatus(errno, absl::StrCat("listening on ", path));
  if (absl::Status published = staged->Publish(); !published.ok()) return published;
  return listener;
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Time launch_time = absl::Now();
  if (absl::Status stacks = vmm::UseSmallThreadStacks(); !stacks.ok()) {
    return Fail(std::string(stacks.message()));
  }
  absl::SetProgramUsageMessage(
      "Serves virtio-scsi to a vhost-user front end.\n  vhost-user-scsi --socket=PATH "
      "--disk=IMAGE [--cdrom=ISO] [--scsi-queues=N --iothreads=M] [--api-socket=PATH]");
  auto drives = vmm::ParseFlagsAndDrives(argc, argv);
  if (!drives.ok()) return Fail(std::string(drives.status().message()));
  // Before any thread starts: every thread inherits the process's filter (docs/security.md).
  auto sandbox = vmm::sandbox::EnableSandboxFromFlags();
  if (!sandbox.ok()) return Fail(std::string(sandbox.status().message()));

  // A front end that goes away mid-write must cost an error, not the process.
  signal(SIGPIPE, SIG_IGN);
  const std::string socket_path = absl::GetFlag(FLAGS_socket);
  if (socket_path.empty()) return Fail("--socket is required");
  if (drives->empty()) return Fail("no drives: give at least one --disk or --cdrom");
  for (const vmm::DriveSpec& spec : *drives) {
    if (spec.bus != vmm::DriveSpec::Bus::kScsi) return Fail("IDE drives cannot be served here");
  }
  vmm::StorageConfig config;
  config.drives = *drives;
  config.scsi_queues = absl::GetFlag(FLAGS_scsi_queues);
  // vhost-user addresses rings with 8 bits (SET_VRING_KICK/CALL): control, event and 254 more.
  if (config.scsi_queues == 0 || config.scsi_queues > 254) {
    return Fail("--scsi-queues must be between 1 and 254 (vhost-user ring indices are 8 bits)");
  }
  config.iothreads = absl::GetFlag(FLAGS_iothreads);
  config.poll_max_ns = absl::GetFlag(FLAGS_poll_max_ns);
  config.iothread_start = sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kIo);

  // SIGINT/SIGTERM end the server through a signalfd: block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  block::ScopedFd signal_fd(signalfd(-1, &stop_signals, SFD_CLOEXEC));

  auto storage = vmm::Storage::Create(config);
  if (!storage.ok()) return Fail(std::string(storage.status().message()));
  std::unique_ptr<devices::virtio::scsi::VirtioScsi> device = (*storage)->TakeScsiDevice();
  if (device == nullptr) return Fail("no virtio-scsi device was built");

  auto listener = Listen(socket_path);
  if (!listener.ok()) return Fail(std::string(listener.status().message()));
  devices::virtio::vhost_user::VhostUserServer server(*std::move(listener), *device);

  std::vector<std::string> names;
  for (const vmm::AttachedDrive& drive : (*storage)->drives()) names.push_back(drive.name);
  std::unique_ptr<vmm::MediaDirectory> media_dir;
  if (!absl::GetFlag(FLAGS_media_dir).empty()) {
    auto opened = vmm::MediaDirectory::Open(absl::GetFlag(FLAGS_media_dir));
    if (!opened.ok()) {
      unlink(socket_path.c_str());
      return Fail(std::string(opened.status().message()));
    }
    media_dir = *std::move(opened);
  }
  vmm::BackendApiControl control(
      **storage,
      absl::StrFormat("vhost-user-scsi on %s: %s", socket_path, absl::StrJoin(names, ", ")),
      launch_time, [&server] { server.Stop(); }, media_dir.get());
  std::unique_ptr<api::ApiServer> api_server;
  api::ApiServerOptions api_options;
  api_options.unix_socket_path = absl::GetFlag(FLAGS_api_socket);
  api_options.tcp_address = absl::GetFlag(FLAGS_api_tcp);
  api_options.tcp_insecure = absl::GetFlag(FLAGS_api_tcp_insecure);
  if (api_options.tcp_insecure && api_options.tcp_address.empty()) {
    unlink(socket_path.c_str());
    return Fail("--api-tcp-insecure applies to --api-tcp, which is not given");
  }
  if (const std::string token_file = absl::GetFlag(FLAGS_api_token_file); !token_file.empty()) {
    auto token =
        api::ReadApiTokenFile(token_file, "--api-token-file", api::TokenFileCheck::kOwnerOnly);
    if (!token.ok() || (api_options.unix_socket_path.empty() && api_options.tcp_address.empty())) {
      unlink(socket_path.c_str());
      return Fail(token.ok() ? "--api-token-file applies to --api-socket and --api-tcp; neither "
                               "is given"
                             : std::string(token.status().message()));
    }
    api_options.auth_token = *std::move(token);
  }
  if (!api_options.unix_socket_path.empty() || !api_options.tcp_address.empty()) {
    auto started = api::ApiServer::Start(api_options, control);
    if (!started.ok()) {
      unlink(socket_path.c_str());  // the vhost-user socket made above: nothing will serve it
      return Fail(absl::StrCat("control API: ", started.status().message()));
    }
    api_server = *std::move(started);
    if (!api_server->unix_socket_path().empty()) {
      absl::FPrintF(stderr, "vhost-user-scsi: control API on unix:%s\n",
                    api_server->unix_socket_path());
    }
    if (api_server->tcp_port() != 0) {
      absl::FPrintF(stderr, "vhost-user-scsi: control API on %s (port %d)\n",
                    api_options.tcp_address, api_server->tcp_port());
    }
  }

  // A signal stops the server; the watcher itself ends when the server stops for another reason.
  block::ScopedFd watcher_stop(eventfd(0, EFD_CLOEXEC));
  std::thread signal_watcher([&] {
    pollfd fds[2] = {{signal_fd.get(), POLLIN, 0}, {watcher_stop.get(), POLLIN, 0}};
    while (poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    if (fds[0].revents != 0) {
      signalfd_siginfo info{};
      if (read(signal_fd.get(), &info, sizeof(info)) == sizeof(info)) {
        absl::FPrintF(stderr, "vhost-user-scsi: %s, stopping\n", strsignal(info.ssi_signo));
      }
    }
    server.Stop();
  });

  // Everything is open (disks, the sockets): into the jail before a front end connects.
  if (sandbox->jail.has_value()) {
    if (absl::Status jailed = vmm::sandbox::EnterJail(*sandbox->jail); !jailed.ok()) {
      server.Stop();
      eventfd_write(watcher_stop.get(), 1);
      signal_watcher.join();
      if (api_server != nullptr) api_server->Stop();
      unlink(socket_path.c_str());
      return Fail(absl::StrCat("--jail: ", jailed.message()));
    }
  }
  absl::FPrintF(stderr, "vhost-user-scsi: listening on %s (%s; %d request queue(s), %d iothread(s))\n",
                socket_path, absl::StrJoin(names, ", "), config.scsi_queues, config.iothreads);
  const absl::Status served = server.Run();
  eventfd_write(watcher_stop.get(), 1);
  signal_watcher.join();
  if (api_server != nullptr) api_server->Stop();
  unlink(socket_path.c_str());
  if (!served.ok()) return Fail(std::string(served.message()));
  return 0;
}

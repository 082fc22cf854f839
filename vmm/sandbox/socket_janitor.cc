#include "vmm/sandbox/socket_janitor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "vmm/sys_util/descriptors.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

// One message on the channel, fixed-size (a SOCK_SEQPACKET socket keeps each whole).
struct Message {
  uint32_t kind = 0;
  uint32_t path_length = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t changed_seconds = 0;  // st_ctim
  int64_t changed_nanoseconds = 0;
  char path[sizeof(sockaddr_un::sun_path)] = {};
};

// A path the janitor may remove, fixed before the fork.
struct AllowedPath {
  char path[sizeof(sockaddr_un::sun_path)] = {};
};

constexpr uint32_t kRegister = 1;
constexpr uint32_t kSeal = 2;

// Reads one message. 1: got one; 0: a record of another size (ignored); -1: end-of-file or an
// error, either way the launcher is gone.
int ReadMessage(int fd, Message& message) {
  for (;;) {
    const ssize_t n = read(fd, &message, sizeof(message));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    return n == static_cast<ssize_t>(sizeof(message)) ? 1 : 0;
  }
}

// `fd` moved to 3 or above: a launcher started with stdin, stdout or stderr closed gets those
// numbers from socketpair() and pipe2(), which the janitor closes.
int AboveStdio(int fd) {
  if (fd < 0 || fd > 2) return fd;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return moved;
}

// The janitor's whole life after the fork: no allocation, no library state. `allowed` (the
// paths Start was given) is the only thing a registration may name, each once: a registration
// forged on the channel by a compromised thread before the seal can name no other file.
[[noreturn]] void RunJanitor(int requests, const AllowedPath* allowed, int allowed_count) {
  Message sockets[SocketJanitor::kMaxSockets];
  bool registered[SocketJanitor::kMaxSockets] = {};
  bool sealed = false;
  Message message;
  for (int got; (got = ReadMessage(requests, message)) >= 0;) {
    if (got == 0 || sealed) continue;  // after the seal: read, never acted on
    if (message.kind == kSeal) {
      sealed = true;
    } else if (message.kind == kRegister && message.path_length > 0 &&
               message.path_length < sizeof(message.path)) {
      message.path[message.path_length] = '\0';
      for (int i = 0; i < allowed_count; ++i) {
        if (!registered[i] && std::strcmp(allowed[i].path, message.path) == 0) {
          registered[i] = true;
          sockets[i] = message;
          break;
        }
      }
    }
  }
  for (int i = 0; i < allowed_count; ++i) {
    if (!registered[i]) continue;
    struct stat st {};
    // Only the socket registered: a file that took its place since (another process's socket, a
    // file an attacker put there) stays. The change time tells a new socket that got the old
    // one's inode number (the old one unlinked by the next VMM started on the path) from it.
    if (lstat(sockets[i].path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        static_cast<uint64_t>(st.st_dev) == sockets[i].device &&
        static_cast<uint64_t>(st.st_ino) == sockets[i].inode &&
        static_cast<int64_t>(st.st_ctim.tv_sec) == sockets[i].changed_seconds &&
        static_cast<int64_t>(st.st_ctim.tv_nsec) == sockets[i].changed_nanoseconds) {
      unlink(sockets[i].path);
    }
  }
  sys_util::ExitNow(0);
}

}  // namespace

SyscallAllowlist JanitorAllowlist() {
  SyscallAllowlist list;
  list.AllowAll({__NR_read, __NR_newfstatat, __NR_lstat, __NR_unlink, __NR_close, __NR_rt_sigreturn,
                 __NR_restart_syscall, __NR_exit, __NR_exit_group});
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer's interceptors may map their own memory (test builds only).
  list.AllowAll({__NR_mmap, __NR_munmap, __NR_madvise, __NR_sigaltstack});
#endif
  return list;
}

absl::StatusOr<SocketJanitor> SocketJanitor::Start(std::vector<std::string> paths,
                                                   const SeccompSetting& seccomp) {
  if (paths.size() > static_cast<size_t>(kMaxSockets)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the socket janitor removes at most %d sockets", kMaxSockets));
  }
  AllowedPath allowed[kMaxSockets];
  for (size_t i = 0; i < paths.size(); ++i) {
    if (paths[i].empty() || paths[i].size() >= sizeof(sockaddr_un::sun_path)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: not a unix socket's path (1 to %d bytes)", paths[i],
                          sizeof(sockaddr_un::sun_path) - 1));
    }
    std::memcpy(allowed[i].path, paths[i].data(), paths[i].size());
  }
  const int allowed_count = static_cast<int>(paths.size());
  int channel[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) != 0) {
    return absl::ErrnoToStatus(errno, "the socket janitor's channel");
  }
  sys_util::ScopedFd ours(AboveStdio(channel[0]));
  sys_util::ScopedFd janitors(AboveStdio(channel[1]));
  int exited[2];
  if (pipe2(exited, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "the socket janitor's pipe");
  sys_util::ScopedFd exited_read(AboveStdio(exited[0]));
  sys_util::ScopedFd exited_write(AboveStdio(exited[1]));
  if (!ours.valid() || !janitors.valid() || !exited_read.valid() || !exited_write.valid()) {
    return absl::ErrnoToStatus(errno, "the socket janitor's descriptors");
  }
  // Compiled before the fork.
  std::vector<sock_filter> program;
  if (seccomp.enabled) {
    auto compiled = CompileFilter(JanitorAllowlist(), seccomp.action);
    if (!compiled.ok()) return compiled.status();
    program = *std::move(compiled);
  }
  const pid_t child = fork();
  if (child < 0) return absl::ErrnoToStatus(errno, "fork (the socket janitor)");
  if (child == 0) {
    const pid_t janitor = fork();
    if (janitor != 0) sys_util::ExitNow(janitor < 0 ? 1 : 0);
    // Its own session and no terminal signals: a Ctrl-C or hang-up that stops the VMM must not
    // stop the process that cleans up after it.
    setsid();
    for (int signal : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
      ::signal(signal, SIG_IGN);
    }
    prctl(PR_SET_NAME, "socket-janitor");  // what ps and /proc/PID/comm show
    // A copy of the launcher's memory (the API's token among it): no core dump, no ptrace or
    // /proc/PID/mem by other processes of the same user.
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    // Nothing but its channel and its pipe, not even stdio: a harness reading the launcher's
    // output to its end must not wait for the janitor too.
    const int requests = janitors.get();
    const int gone = exited_write.get();
    sys_util::CloseAllDescriptorsBut({requests, gone});
    for (int fd = 0; fd < 3; ++fd) close(fd);
    // Without its filter it does not run: the launcher's next Register says the janitor is gone.
    if (seccomp.enabled && !InstallFilter(program).ok()) sys_util::ExitNow(2);
    RunJanitor(requests, allowed, allowed_count);
  }
  janitors.Reset();
  exited_write.Reset();
  int status = 0;
  while (waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return absl::ErrnoToStatus(errno, "waitpid (the socket janitor)");
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError("the socket janitor did not start (its second fork failed)");
  }
  return SocketJanitor(std::move(ours), std::move(exited_read), std::move(paths));
}

SocketJanitor::~SocketJanitor() { Finish(); }

absl::Status SocketJanitor::Send(uint32_t kind, const std::string& path,
                                 const struct stat* identity) {
  if (!requests_.valid()) return absl::FailedPreconditionError("the socket janitor has finished");
  Message message;
  message.kind = kind;
  message.path_length = static_cast<uint32_t>(path.size());
  if (identity != nullptr) {
    message.device = static_cast<uint64_t>(identity->st_dev);
    message.inode = static_cast<uint64_t>(identity->st_ino);
    message.changed_seconds = static_cast<int64_t>(identity->st_ctim.tv_sec);
    message.changed_nanoseconds = static_cast<int64_t>(identity->st_ctim.tv_nsec);
  }
  std::memcpy(message.path, path.data(), path.size());
  ssize_t n;
  do {
    // MSG_NOSIGNAL: a janitor that is gone is an error here, not a SIGPIPE.
    n = send(requests_.get(), &message, sizeof(message), MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof(message))) {
    return absl::UnavailableError(
        "the socket janitor is gone (its seccomp filter could not be installed?)");
  }
  return absl::OkStatus();
}

absl::Status SocketJanitor::Register(const std::string& path, const struct stat& identity) {
  if (sealed_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: the socket janitor takes no socket after the launch", path));
  }
  if (std::find(paths_.begin(), paths_.end(), path) == paths_.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: not a path the socket janitor was started for", path));
  }
  if (std::find(registered_.begin(), registered_.end(), path) != registered_.end()) {
    return absl::AlreadyExistsError(absl::StrFormat("%s: registered already", path));
  }
  if (absl::Status sent = Send(kRegister, path, &identity); !sent.ok()) return sent;
  registered_.push_back(path);
  return absl::OkStatus();
}

absl::Status SocketJanitor::Seal() {
  if (sealed_) return absl::OkStatus();
  sealed_ = true;
  return Send(kSeal, "", nullptr);
}

void SocketJanitor::Finish(absl::Duration timeout) {
  requests_.Reset();
  if (!exited_.valid()) return;
  // The janitor's end of `exited_` closes when it exits: POLLHUP.
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    pollfd gone{exited_.get(), POLLIN, 0};
    const int ready = poll(&gone, 1, static_cast<int>(left));
    if (ready > 0 || (ready < 0 && errno != EINTR)) break;
  }
  exited_.Reset();
}

}  // namespace vmm::sandbox

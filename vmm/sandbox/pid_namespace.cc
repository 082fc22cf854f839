#include "vmm/sandbox/pid_namespace.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/sandbox/seccomp_filter.h"
#include "vmm/sys_util/descriptors.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

// Signals whose default action ends a process. The VMM takes SIGINT, SIGTERM and SIGHUP itself (a
// clean stop through its signalfd: vmm::StopSignalFd); as PID 1 of its namespace it would ignore
// the others, so the supervisor ends it with SIGKILL and then dies of the signal it got, as the
// VMM would have.
constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kOtherFatalSignals[] = {SIGQUIT, SIGUSR1, SIGUSR2,   SIGALRM, SIGPIPE,
                                      SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF};

bool IsOneOf(int signal, const auto& list) {
  return std::find(std::begin(list), std::end(list), signal) != std::end(list);
}

[[noreturn]] void DieLike(int signal) {
  // The status a shell shows for the VMM: the same signal. Core dumps are off (RLIMIT_CORE 0):
  // the supervisor's memory is a copy of the launcher's before the VM existed, nothing to keep.
  struct sigaction action {};
  action.sa_handler = SIG_DFL;
  sigaction(signal, &action, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, signal);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  kill(getpid(), signal);
  sys_util::ExitNow(128 + signal);  // a signal that does not end a process (not expected)
}

// Every signal the supervisor waits for rather than handles; job control (SIGTSTP, SIGCONT, ...)
// keeps its default action, so Ctrl-Z still stops the supervisor with the VMM.
sigset_t WaitedSignals() {
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGCHLD);
  for (int signal : kStopSignals) sigaddset(&waited, signal);
  for (int signal : kOtherFatalSignals) sigaddset(&waited, signal);
  return waited;
}

// Runs in the parent after the fork, with WaitedSignals() blocked since before it (a SIGCHLD of
// a child that ended at once would otherwise be discarded, and the wait would never end).
[[noreturn]] void Supervise(pid_t child, sys_util::ScopedFd alive,
                            const PidNamespaceOptions& options) {
  const sigset_t waited = WaitedSignals();
  const int cgroup_fd = options.cgroup.has_value() ? options.cgroup->parent_fd() : -1;
  sys_util::CloseAllDescriptorsBut({alive.get(), cgroup_fd});
  const rlimit no_core{0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  // The child's pid tells it its id on the outside; the pipe stays open while the supervisor lives.
  const int32_t host_pid = child;
  if (write(alive.get(), &host_pid, sizeof(host_pid)) != sizeof(host_pid)) {
    kill(child, SIGKILL);
  }
  if (options.seccomp.enabled) {
    auto program = CompileFilter(SupervisorAllowlist(), options.seccomp.action);
    if (!program.ok() || !InstallFilter(*program).ok()) {
      absl::FPrintF(stderr, "supervisor: cannot install its seccomp filter\n");
      kill(child, SIGKILL);
    }
  }
  int fatal_signal = 0;
  int status = 0;
  for (;;) {
    siginfo_t info{};
    const int signal = sigwaitinfo(&waited, &info);
    if (signal < 0) continue;
    if (signal == SIGCHLD) {
      const pid_t done = waitpid(child, &status, WNOHANG);
      if (done == child && (WIFEXITED(status) || WIFSIGNALED(status))) break;
      continue;
    }
    if (IsOneOf(signal, kStopSignals)) {
      // A terminal's Ctrl-C or hang-up (SI_KERNEL) reached the VMM already: it is in the same
      // process group.
      if (info.si_code != SI_KERNEL) kill(child, signal);
    } else if (fatal_signal == 0) {
      fatal_signal = signal;
      kill(child, SIGKILL);
    }
  }
  if (options.cgroup.has_value()) {
    if (absl::Status removed = options.cgroup->Remove(); !removed.ok()) {
      absl::FPrintF(stderr, "supervisor: %s\n", removed.message());
    }
  }
  if (fatal_signal != 0) DieLike(fatal_signal);
  if (WIFSIGNALED(status)) DieLike(WTERMSIG(status));
  sys_util::ExitNow(WEXITSTATUS(status));
}

}  // namespace

SyscallAllowlist SupervisorAllowlist() {
  SyscallAllowlist list;
  list.AllowAll({__NR_rt_sigtimedwait, __NR_wait4, __NR_kill, __NR_unlinkat, __NR_rmdir,
                 __NR_rt_sigaction, __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_restart_syscall,
                 __NR_getpid, __NR_gettid, __NR_tgkill, __NR_write, __NR_exit, __NR_exit_group});
#if defined(__SANITIZE_ADDRESS__)
  list.Allow(__NR_sigaltstack);  // the sanitizer's sigaction interceptor (test builds only)
#endif
  return list;
}

bool SupervisorGone(int supervisor_alive) {
  pollfd alive{supervisor_alive, POLLIN, 0};
  // Nothing more is ever written: readable or hung up both mean the write end has closed.
  return poll(&alive, 1, 0) != 0;
}

absl::StatusOr<SupervisedChild> ForkIntoPidNamespace(PidNamespaceOptions options) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return sys_util::ErrnoStatus(errno, "pipe2");
  sys_util::ScopedFd read_end(ends[0]);
  sys_util::ScopedFd write_end(ends[1]);
  const sigset_t waited = WaitedSignals();
  sigset_t before;
  sigprocmask(SIG_BLOCK, &waited, &before);
  const pid_t child = fork();
  if (child < 0) {
    const int error = errno;
    sigprocmask(SIG_SETMASK, &before, nullptr);
    return sys_util::ErrnoStatus(error, "fork (into the new PID namespace)");
  }
  if (child > 0) {
    read_end.Reset();
    Supervise(child, std::move(write_end), options);
  }
  sigprocmask(SIG_SETMASK, &before, nullptr);
  write_end.Reset();
  // The supervisor's death ends the VMM: nobody would be left to stop it or remove its cgroup.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    return sys_util::ErrnoStatus(errno, "PR_SET_PDEATHSIG");
  }
  SupervisedChild result;
  int32_t host_pid = 0;
  ssize_t got;
  while ((got = read(read_end.get(), &host_pid, sizeof(host_pid))) < 0 && errno == EINTR) {
  }
  if (got != sizeof(host_pid)) {
    return absl::AbortedError("the supervisor ended before the VMM started");
  }
  result.host_pid = host_pid;
  result.supervisor_alive = std::move(read_end);
  if (options.cgroup.has_value()) {
    absl::Status joined = options.cgroup->Join();
    options.cgroup->CloseForTheJail();
    if (!joined.ok()) return joined;
  }
  return result;
}

}  // namespace vmm::sandbox

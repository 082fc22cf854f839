#ifndef VMM_SANDBOX_PID_NAMESPACE_H_
#define VMM_SANDBOX_PID_NAMESPACE_H_

#include <sys/types.h>

#include <optional>

#include "absl/status/statusor.h"
#include "vmm/sandbox/cgroup.h"
#include "vmm/sandbox/thread_policy.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm::sandbox {

// The jailed VMM as the first process (PID 1) of a PID namespace of its own (pid_namespaces(7)):
// it sees no other process, so it can signal none, and when it exits the kernel ends anything
// left in the namespace. A process never enters a new PID namespace itself, only its children
// do, so the launcher forks once, early, while it has a single thread:
//
// - the child is the VMM and carries on with the launch;
// - the parent becomes the supervisor, the VMM's stand-in for whoever started it (a shell, an
//   orchestrator holding its pid): it forwards SIGINT, SIGTERM and SIGHUP (the VMM's stop signals; as
//   PID 1 the VMM would ignore any signal it does not take, so the other terminating ones end
//   it with SIGKILL), waits for it, removes its cgroup, and exits as it did (the same status, or
//   the same signal). Its own filter allows nothing else; it holds no descriptor but stdio.
//
// Firecracker's jailer does the same with --new-pid-ns, minus the supervisor (it daemonizes).

// What the VMM keeps from the fork.
struct SupervisedChild {
  // The VMM's process id in the PID namespace of whoever started it (the API reports it; inside,
  // getpid() is 1).
  pid_t host_pid = 0;
  // Reads end-of-file once the supervisor is gone (the write end is the supervisor's alone).
  // The VMM asks the kernel for SIGKILL when the supervisor dies (PR_SET_PDEATHSIG), and sets
  // that again after changing its user, which clears it; this tells whether it died in between.
  sys_util::ScopedFd supervisor_alive;
};

struct PidNamespaceOptions {
  SeccompSetting seccomp;        // the supervisor's filter follows --seccomp
  std::optional<Cgroup> cgroup;  // joined by the VMM, removed by the supervisor
};

// After unshare(CLONE_NEWPID), with one thread: forks. Returns in the child (the VMM) only; the
// parent supervises and never returns. The child has joined the cgroup, if any, and closed it.
absl::StatusOr<SupervisedChild> ForkIntoPidNamespace(PidNamespaceOptions options);

// Everything the supervisor may do once it has forked (its filter; docs/security.md's table).
SyscallAllowlist SupervisorAllowlist();

// True when the supervisor is gone (its end of `supervisor_alive` closed).
bool SupervisorGone(int supervisor_alive);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_PID_NAMESPACE_H_

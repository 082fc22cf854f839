#ifndef VMM_SANDBOX_JAIL_H_
#define VMM_SANDBOX_JAIL_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/sandbox/cgroup.h"
#include "vmm/sandbox/pid_namespace.h"
#include "vmm/sandbox/thread_policy.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm::sandbox {

// The jail (docs/security.md, "The jail"): Firecracker's jailer done in process, in two steps,
// so that nothing has to be copied into the jail first:
//
// 1. EnterNamespaces(), while the process has one thread (namespaces belong to threads: one
//    started before would stay outside, in the host's): new mount, IPC, UTS, PID and (unless the
//    API listens on TCP) network namespaces; every mount made private, so nothing the jail
//    mounts reaches the host; the controlling terminal let go; the cgroup made; then the fork
//    that makes the VMM PID 1 of its namespace, its parent its supervisor (pid_namespace.h).
//    Then BuildJailRoot(), before the filter: the new root, a tmpfs holding only the places of
//    what the VM still opens by path, made but attached nowhere yet.
// 2. EnterJail(), once every file is open (kernel, disks, /dev/kvm, the API's socket): that
//    tmpfs becomes the root, the shared directories mounted in it, the old root is detached, and
//    the process becomes an unprivileged user.

// What the jailed VMM still reaches by path.
struct JailOptions {
  // The user and group the VMM becomes (numbers: nothing can be looked up in the jail). One of its
  // own per VM is best; the default is nobody/nogroup.
  uid_t uid = 65534;
  gid_t gid = 65534;
  // RLIMIT_NOFILE once jailed: descriptors the process may still open (inserted media, API
  // connections). 0 keeps the current limit.
  uint64_t max_open_files = 4096;
  // Host directories bind-mounted at the same path inside the jail, nosuid, nodev and noexec
  // (--media-dir: the API names media by their host paths, which keep working).
  std::vector<std::string> shared_directories;
  // Device nodes the VMM opens again by path (a passed-through host CD-ROM drive, reopened when its
  // disc changes): made anew inside the jail, the same kind and numbers, owned by the jail's user
  // with mode 0600, so the host's node keeps its own owner and mode.
  std::vector<std::string> device_nodes;
  // SupervisedChild::supervisor_alive (-1: not supervised): changing the user clears the
  // parent-death signal, which is set again, and the supervisor's death checked for, after it.
  int supervisor_alive = -1;
};

// What EnterNamespaces does besides the namespaces.
struct NamespaceOptions {
  // False keeps the host's network namespace (a TCP listener for the API, which gRPC binds later,
  // must be reachable).
  bool new_network = true;
  SeccompSetting seccomp;        // the supervisor's filter
  std::optional<Cgroup> cgroup;  // the VM's cgroup, made beforehand (--jail-cgroup)
};

// True when the process runs in the initial user namespace, where root's capabilities are real.
// In another one (a container's, Bazel's sandbox) the jail cannot change to its user (only the
// ids mapped there exist) nor drop supplementary groups (setgroups is often denied).
bool InInitialUserNamespace();

// Parses --jail-user=UID:GID (numbers, neither 0) into `options`.
absl::Status ParseJailUser(const std::string& text, JailOptions& options);

// Step 1 above. Needs CAP_SYS_ADMIN and a single thread. Returns in the VMM, PID 1 of the new
// PID namespace; the process that called it supervises and never returns.
absl::StatusOr<SupervisedChild> EnterNamespaces(NamespaceOptions options);

// Between the steps, after EnterNamespaces() and before the process's filter (which allows none
// of the calls that make files: mkdir, mknod, chown, chmod, symlink): the jail's new root, a
// tmpfs still detached from every path, with the directories the shared ones are mounted on
// (mode 0755, whatever the umask) and the device nodes. Checks the options first (InvalidArgument
// for root as the jail's user, or a path that is not absolute and plain).
absl::StatusOr<sys_util::ScopedFd> BuildJailRoot(const JailOptions& options);

// Step 2 above, with BuildJailRoot's `root` (closed once it is the root: a descriptor of the
// jail's root is nothing the VMM needs): attached over the old root, the shared directories
// bind-mounted in it, then made the root (pivot_root, or chroot where the old root is the
// initramfs, which cannot be pivoted); then RLIMIT_NOFILE and RLIMIT_CORE lowered,
// PR_SET_DUMPABLE 0 (no core dump of guest memory, no ptrace by the same user), supplementary
// groups dropped, gid and uid changed (every capability goes with uid 0; checked), the
// parent-death signal again, NO_NEW_PRIVS. Any thread may call it; glibc changes the ids of all.
absl::Status EnterJail(const JailOptions& options, sys_util::ScopedFd root);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_JAIL_H_

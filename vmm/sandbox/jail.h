#ifndef VMM_SANDBOX_JAIL_H_
#define VMM_SANDBOX_JAIL_H_

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vmm::sandbox {

// Where the VMM goes once it has opened everything it needs (kernel, initrd, disks, /dev/kvm, the
// API socket, the media directory): Firecracker's jailer, done in process, so the files need not
// be copied into the jail first.
struct JailOptions {
  // The new root directory (chroot): an empty directory the VMM's user cannot write is best.
  std::string root;
  // The user and group to run as; both or neither. Without them the process keeps its ids (a jail
  // as root is weak: root can leave a chroot).
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  // RLIMIT_NOFILE once jailed: descriptors the process may still open (inserted media, API
  // connections). 0 keeps the current limit.
  uint64_t max_open_files = 4096;
};

// Parses --jail-user=UID:GID (numbers: a jailed process cannot look names up).
absl::Status ParseJailUser(const std::string& text, JailOptions& options);

// Confines the whole process (every thread): chroot into `root` and chdir("/"); drop
// supplementary groups, set the real, effective and saved gid and uid; verify no capability is
// left; no core dumps and no ptrace by the same user (PR_SET_DUMPABLE 0: guest memory stays out
// of reach); NO_NEW_PRIVS; RLIMIT_NOFILE lowered. Call from one thread after
// everything is open and before the vCPUs run. Needs CAP_SYS_CHROOT (root).
absl::Status EnterJail(const JailOptions& options);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_JAIL_H_

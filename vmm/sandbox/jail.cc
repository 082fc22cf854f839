#include "vmm/sandbox/jail.h"

#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::sandbox {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrFormat("jail: %s: %s", what, strerror(errno)));
}

// True when the calling thread holds no capability at all (permitted, effective, inheritable).
absl::StatusOr<bool> HoldsNoCapability() {
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &header, data) != 0) return Errno("capget");
  for (const auto& word : data) {
    if (word.permitted != 0 || word.effective != 0 || word.inheritable != 0) return false;
  }
  return true;
}

// Lowers both the soft and the hard limit to at most `value` (the hard one too: an unprivileged
// process could otherwise raise its soft limit again).
absl::Status LowerLimit(int resource, const char* name, rlim_t value) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0) return Errno(absl::StrFormat("getrlimit(%s)", name));
  limit.rlim_cur = std::min(limit.rlim_cur, value);  // RLIM_INFINITY is the largest rlim_t
  limit.rlim_max = std::min(limit.rlim_max, value);
  if (setrlimit(resource, &limit) != 0) return Errno(absl::StrFormat("setrlimit(%s)", name));
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseJailUser(const std::string& text, JailOptions& options) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  uint32_t uid = 0;
  uint32_t gid = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &uid) || !absl::SimpleAtoi(parts[1], &gid)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jail-user=%s: expected UID:GID (numbers, e.g. 65534:65534)", text));
  }
  if (uid == 0 || gid == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jail-user=%s: a jail runs as a user other than root", text));
  }
  options.uid = uid;
  options.gid = gid;
  return absl::OkStatus();
}

absl::Status EnterJail(const JailOptions& options) {
  if (options.uid.has_value() != options.gid.has_value()) {
    return absl::InvalidArgumentError("jail: give both a uid and a gid, or neither");
  }
  if (options.root.empty()) return absl::InvalidArgumentError("jail: no root directory");
  struct stat root_stat {};
  if (stat(options.root.c_str(), &root_stat) != 0 || !S_ISDIR(root_stat.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("jail: %s is not a directory", options.root));
  }
  if (chroot(options.root.c_str()) != 0) return Errno(absl::StrFormat("chroot(%s)", options.root));
  if (chdir("/") != 0) return Errno("chdir(/)");

  if (options.max_open_files != 0) {
    RETURN_IF_ERROR(LowerLimit(RLIMIT_NOFILE, "RLIMIT_NOFILE", options.max_open_files));
  }
  // No core dumps of guest memory, and no ptrace or /proc/PID/mem by processes of the same user.
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CORE, "RLIMIT_CORE", 0));
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return Errno("PR_SET_DUMPABLE");

  if (options.uid.has_value()) {
    // Groups first: once the uid is not root, the groups can no longer change. glibc applies each
    // of these to every thread of the process.
    if (setgroups(0, nullptr) != 0) return Errno("setgroups");
    if (setresgid(*options.gid, *options.gid, *options.gid) != 0) return Errno("setresgid");
    if (setresuid(*options.uid, *options.uid, *options.uid) != 0) return Errno("setresuid");
    // With every uid non-zero the kernel has cleared the capability sets (capabilities(7),
    // "Effect of user ID changes on capabilities"); check rather than trust.
    ASSIGN_OR_RETURN(const bool none, HoldsNoCapability());
    if (!none) return absl::InternalError("jail: capabilities remain after changing the uid");
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  return absl::OkStatus();
}

}  // namespace vmm::sandbox

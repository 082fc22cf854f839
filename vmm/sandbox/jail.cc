#include "vmm/sandbox/jail.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::sandbox {
namespace {

absl::Status Errno(const std::string& what) { return absl::ErrnoToStatus(errno, what); }

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

// The terminal the VMM was started from stays the operator's: TIOCSTI into a terminal that is not
// the caller's controlling one is refused by the kernel itself (H16 of docs/security.md;
// the filters refuse it too). Firecracker's jailer calls setsid(), which would also take the VMM
// out of its shell's foreground process group, so that Ctrl-C no longer reached it; TIOCNOTTY
// keeps the group. A session leader (started by setsid) keeps its terminal: letting go would hang
// up its own foreground group.
absl::Status LetGoOfTheTerminal() {
  sys_util::ScopedFd terminal(open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!terminal.valid()) return absl::OkStatus();  // ENXIO: no controlling terminal
  if (getsid(0) == getpid()) return absl::OkStatus();
  if (ioctl(terminal.get(), TIOCNOTTY) != 0) return Errno("TIOCNOTTY");
  return absl::OkStatus();
}

absl::StatusOr<int> CountThreads() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return Errno("/proc/self/task");
  int count = 0;
  while (const dirent* entry = readdir(tasks)) count += entry->d_name[0] != '.';
  closedir(tasks);
  return count;
}

// `path` (absolute, no "." or ".." component) as a path relative to the jail's root.
absl::StatusOr<std::string> InsideTheJail(const std::string& path) {
  std::vector<std::string> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  const bool plain = !path.empty() && path[0] == '/' && !parts.empty() &&
                     std::none_of(parts.begin(), parts.end(), [](const std::string& part) {
                       return part == "." || part == "..";
                     });
  if (!plain) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: expected an absolute path without \".\" or \"..\" components", path));
  }
  return absl::StrJoin(parts, "/");
}

// Creates the directory `relative` under `root`, mode 0755 whatever the umask (the launchers'
// 0177 would leave it 0600, which the jail's user could not pass through).
absl::Status MakeDirectory(int root, const std::string& relative) {
  if (mkdirat(root, relative.c_str(), 0755) != 0 && errno != EEXIST) {
    return Errno(absl::StrFormat("mkdir /%s in the jail", relative));
  }
  if (fchmodat(root, relative.c_str(), 0755, 0) != 0) {
    return Errno(absl::StrFormat("chmod /%s in the jail", relative));
  }
  return absl::OkStatus();
}

// Creates the directories leading to `relative` (not itself) under `root`, mode 0755.
absl::Status MakeParents(int root, const std::string& relative) {
  std::string prefix;
  std::vector<std::string> parts = absl::StrSplit(relative, '/');
  parts.pop_back();
  for (const std::string& part : parts) {
    prefix += prefix.empty() ? part : "/" + part;
    RETURN_IF_ERROR(MakeDirectory(root, prefix));
  }
  return absl::OkStatus();
}

// `path` with every symbolic link and "." or ".." resolved (realpath); errors name it.
absl::StatusOr<std::string> Resolve(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  if (real == nullptr) return Errno(path);
  std::string resolved = real;
  std::free(real);
  return resolved;
}

// The place of the host directory `path` inside the jail: the same path, a directory to mount on.
absl::Status MakeMountPoint(int root, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string resolved, Resolve(path));
  ASSIGN_OR_RETURN(const std::string inside, InsideTheJail(resolved));
  RETURN_IF_ERROR(MakeParents(root, inside));
  return MakeDirectory(root, inside);
}

// Bind-mounts the host directory `path` at the same path inside the jail (MakeMountPoint made
// it): nosuid, nodev, noexec, and only that directory (not the mounts beneath it).
absl::Status ShareDirectory(int root, const std::string& path) {
  ASSIGN_OR_RETURN(const std::string resolved, Resolve(path));
  ASSIGN_OR_RETURN(const std::string inside, InsideTheJail(resolved));
  sys_util::ScopedFd tree(
      open_tree(AT_FDCWD, resolved.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree.valid()) return Errno(absl::StrFormat("open_tree(%s)", resolved));
  mount_attr attributes{};
  attributes.attr_set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  if (mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attributes, sizeof(attributes)) != 0) {
    return Errno(absl::StrFormat("mount_setattr(%s)", resolved));
  }
  if (move_mount(tree.get(), "", root, inside.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return Errno(absl::StrFormat("bind-mounting %s into the jail", resolved));
  }
  return absl::OkStatus();
}

// Makes the device node `path` names again inside the jail (at its resolved path, with a symlink
// at `path` when that is one: block/host_cdrom.cc tells drives apart by the resolved name), owned
// by the jail's user, mode 0600.
absl::Status CopyDeviceNode(int root, const std::string& path, uid_t uid, gid_t gid) {
  ASSIGN_OR_RETURN(const std::string resolved, Resolve(path));
  struct stat node {};
  if (stat(resolved.c_str(), &node) != 0) return Errno(absl::StrFormat("stat(%s)", resolved));
  if (!S_ISBLK(node.st_mode) && !S_ISCHR(node.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is not a device node", resolved));
  }
  ASSIGN_OR_RETURN(const std::string inside, InsideTheJail(resolved));
  RETURN_IF_ERROR(MakeParents(root, inside));
  if (mknodat(root, inside.c_str(), (node.st_mode & S_IFMT) | 0600, node.st_rdev) != 0 &&
      errno != EEXIST) {
    return Errno(absl::StrFormat("mknod %s (%u:%u) in the jail", resolved, major(node.st_rdev),
                                 minor(node.st_rdev)));
  }
  if (fchownat(root, inside.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return Errno(absl::StrFormat("chown %s in the jail", resolved));
  }
  if (path != resolved) {
    ASSIGN_OR_RETURN(const std::string link, InsideTheJail(path));
    RETURN_IF_ERROR(MakeParents(root, link));
    if (symlinkat(resolved.c_str(), root, link.c_str()) != 0 && errno != EEXIST) {
      return Errno(absl::StrFormat("symlink %s -> %s in the jail", path, resolved));
    }
  }
  return absl::OkStatus();
}

// Makes `root` (attached over the old root) the process's root and working directory, for every
// thread (they share one file-system context). pivot_root puts the old root away and detaches it,
// so that not even a mount of it is left in the namespace. An initramfs root cannot be pivoted
// (the kernel's rootfs has no parent mount: EINVAL); there the new root, mounted over it, becomes
// the process's root with chroot, and the old one stays beneath it, with no path leading there.
absl::Status SwitchRoot(int root) {
  if (fchdir(root) != 0) return Errno("fchdir(the jail's root)");
  if (syscall(SYS_pivot_root, ".", ".") == 0) {
    // pivot_root(2), "new_root and put_old may be the same directory": the old root is now
    // mounted over ".", and the detach takes it away.
    if (umount2(".", MNT_DETACH) != 0) return Errno("detaching the old root");
  } else if (errno == EINVAL) {
    if (chroot(".") != 0) return Errno("chroot(the jail's root)");
  } else {
    return Errno("pivot_root");
  }
  if (chdir("/") != 0) return Errno("chdir(/)");
  return absl::OkStatus();
}

}  // namespace

bool InInitialUserNamespace() {
  // user_namespaces(7): the initial namespace maps all 2^32 - 1 ids onto themselves.
  FILE* map = fopen("/proc/self/uid_map", "re");
  if (map == nullptr) return false;
  unsigned long inside = 1, outside = 1, count = 0;
  const bool identity = fscanf(map, "%lu %lu %lu", &inside, &outside, &count) == 3 && inside == 0 &&
                        outside == 0 && count == 4294967295UL;
  fclose(map);
  return identity;
}

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

absl::StatusOr<SupervisedChild> EnterNamespaces(NamespaceOptions options) {
  // IPC and UTS too: System V objects and the host name are the host's business, and cost nothing
  // to leave behind.
  // Namespaces belong to threads: unshare() moves the calling thread only (and gives it its own
  // root and working directory), so a thread started before would stay in the host's namespaces,
  // outside the jail. The kernel allows it; we do not. The fork below needs one thread too.
  ASSIGN_OR_RETURN(const int threads, CountThreads());
  if (threads != 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the process already runs %d threads (the namespaces come before any)", threads));
  }
  const int flags = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWPID |
                    (options.new_network ? CLONE_NEWNET : 0);
  if (unshare(flags) != 0)
    return Errno("unshare (new mount, IPC, UTS, PID and network namespaces)");
  // Private, recursively: the jail's mounts stay in this namespace, and pivot_root refuses a
  // shared mount (systemd makes / shared).
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return Errno("making every mount private");
  }
  RETURN_IF_ERROR(LetGoOfTheTerminal());
  return ForkIntoPidNamespace({.seccomp = options.seccomp, .cgroup = std::move(options.cgroup)});
}

absl::StatusOr<sys_util::ScopedFd> BuildJailRoot(const JailOptions& options) {
  if (options.uid == 0 || options.gid == 0) {
    return absl::InvalidArgumentError("the jail's user and group must not be root");
  }
  // Every path checked before anything is made.
  for (const auto* paths : {&options.shared_directories, &options.device_nodes}) {
    for (const std::string& path : *paths) RETURN_IF_ERROR(InsideTheJail(path).status());
  }
  // The new root: an empty tmpfs of root's, mode 0755 (the jail's user cannot write to it), no
  // set-uid programs, nothing executable, device nodes only where some were asked for. Detached
  // (no path reaches it) until EnterJail attaches it.
  sys_util::ScopedFd context(fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!context.valid()) return Errno("fsopen(tmpfs)");
  for (const auto& [key, value] :
       {std::pair{"mode", "0755"}, {"size", "1m"}, {"nr_inodes", "256"}}) {
    if (fsconfig(context.get(), FSCONFIG_SET_STRING, key, value, 0) != 0) {
      return Errno(absl::StrFormat("fsconfig(tmpfs, %s=%s)", key, value));
    }
  }
  if (fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return Errno("fsconfig(tmpfs, create)");
  }
  const unsigned attributes =
      MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | (options.device_nodes.empty() ? MOUNT_ATTR_NODEV : 0);
  sys_util::ScopedFd root(fsmount(context.get(), FSMOUNT_CLOEXEC, attributes));
  if (!root.valid()) return Errno("fsmount(tmpfs)");
  for (const std::string& directory : options.shared_directories) {
    RETURN_IF_ERROR(MakeMountPoint(root.get(), directory));
  }
  for (const std::string& node : options.device_nodes) {
    RETURN_IF_ERROR(CopyDeviceNode(root.get(), node, options.uid, options.gid));
  }
  return root;
}

absl::Status EnterJail(const JailOptions& options, sys_util::ScopedFd root_fd) {
  const int root = root_fd.get();
  if (options.uid == 0 || options.gid == 0) {
    return absl::InvalidArgumentError("the jail's user and group must not be root");
  }
  // Attached over the old root: pivot_root and the bind mounts below need it in the namespace.
  // Absolute paths still resolve in the old root until the pivot (a lookup starts beneath it).
  if (move_mount(root, "", AT_FDCWD, "/", MOVE_MOUNT_F_EMPTY_PATH) != 0) {
    return Errno("attaching the jail's root");
  }
  for (const std::string& directory : options.shared_directories) {
    RETURN_IF_ERROR(ShareDirectory(root, directory));
  }
  RETURN_IF_ERROR(SwitchRoot(root));
  root_fd.Reset();

  if (options.max_open_files != 0) {
    RETURN_IF_ERROR(LowerLimit(RLIMIT_NOFILE, "RLIMIT_NOFILE", options.max_open_files));
  }
  // No core dumps of guest memory, and no ptrace or /proc/PID/mem by processes of the same user.
  RETURN_IF_ERROR(LowerLimit(RLIMIT_CORE, "RLIMIT_CORE", 0));
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return Errno("PR_SET_DUMPABLE");
  // Groups first: once the uid is not root, the groups can no longer change. glibc applies each of
  // these to every thread of the process.
  if (setgroups(0, nullptr) != 0) return Errno("setgroups");
  if (setresgid(options.gid, options.gid, options.gid) != 0) return Errno("setresgid");
  if (setresuid(options.uid, options.uid, options.uid) != 0) return Errno("setresuid");
  // The change of user cleared the parent-death signal (prctl(2), PR_SET_PDEATHSIG).
  if (options.supervisor_alive >= 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return Errno("PR_SET_PDEATHSIG");
    if (SupervisorGone(options.supervisor_alive)) {
      return absl::AbortedError("the supervisor ended while the VMM entered the jail");
    }
  }
  // With every uid non-zero the kernel has cleared the capability sets (capabilities(7), "Effect of
  // user ID changes on capabilities"); check rather than trust.
  ASSIGN_OR_RETURN(const bool none, HoldsNoCapability());
  if (!none) return absl::InternalError("capabilities remain after changing the uid");
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return Errno("PR_SET_NO_NEW_PRIVS");
  return absl::OkStatus();
}

}  // namespace vmm::sandbox

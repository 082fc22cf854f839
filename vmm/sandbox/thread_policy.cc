#include "vmm/sandbox/thread_policy.h"

#include <linux/cdrom.h>
#include <linux/fs.h>
#include <linux/io_uring.h>
#include <linux/kvm.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/kvm/kvm_abi.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::sandbox {
namespace {

// The KVM requests a running vCPU thread makes (linux/kvm.h): KVM_RUN; KVM_IRQ_LINE from the
// legacy devices it emulates; KVM_IOEVENTFD, KVM_IRQFD and KVM_SET_GSI_ROUTING when the guest
// activates a virtio device or programs its MSI-X table; KVM_GET_REGS/KVM_GET_SREGS for the
// report of a fatal exit. Not every 0xAE request: KVM_CREATE_VM, KVM_CREATE_VCPU, memory slots or
// another vCPU's registers are none of a running thread's business (H15 of
// docs/security.md). KVM_SET_GSI_ROUTING as the kernel numbers it: the header's macro is wrong in C++
// (vmm/kvm/kvm_abi.h).
void AllowVcpuKvmIoctls(SyscallAllowlist& list) {
  for (uint32_t request :
       {static_cast<uint32_t>(KVM_RUN), static_cast<uint32_t>(KVM_IRQ_LINE),
        static_cast<uint32_t>(KVM_IOEVENTFD), static_cast<uint32_t>(KVM_IRQFD),
        static_cast<uint32_t>(kvm_abi::kSetGsiRouting), static_cast<uint32_t>(KVM_GET_REGS),
        static_cast<uint32_t>(KVM_GET_SREGS)}) {
    list.AllowIf(__NR_ioctl, {{.index = 1, .value = request}});
  }
}

// What any thread does once running: memory (malloc arenas, thread stacks), synchronization and
// time (absl::Mutex, condition variables, sleeps), signals (the vCPU kick, abort()), thread exit,
// and I/O on file descriptors it already holds.
void AddRunningThreadBasics(SyscallAllowlist& list) {
  // clang-format off
  list.AllowAll({
      __NR_futex, __NR_read, __NR_write, __NR_readv, __NR_writev, __NR_pread64, __NR_pwrite64,
      __NR_preadv, __NR_pwritev, __NR_preadv2, __NR_pwritev2, __NR_close, __NR_lseek, __NR_fstat,
      __NR_newfstatat, __NR_fcntl, __NR_epoll_wait, __NR_epoll_pwait, __NR_epoll_ctl, __NR_poll,
      __NR_ppoll, __NR_eventfd2, __NR_sched_yield, __NR_nanosleep, __NR_clock_nanosleep,
      __NR_clock_gettime, __NR_clock_getres, __NR_gettimeofday, __NR_getpid, __NR_gettid,
      __NR_getrandom, __NR_mmap, __NR_munmap, __NR_mprotect, __NR_mremap, __NR_madvise, __NR_brk,
      __NR_rt_sigprocmask, __NR_rt_sigreturn, __NR_sigaltstack, __NR_exit,
      __NR_exit_group, __NR_restart_syscall, __NR_rseq, __NR_set_robust_list, __NR_membarrier,
      __NR_sched_getaffinity, __NR_getcpu,
  });
  // clang-format on
  // Signals to our own threads only (the vCPU kick, abort()): tgkill's first argument is the
  // thread group. Any other process, another VMM of the same jailed user included, is out of
  // reach (H18 of docs/security.md).
  list.AllowIf(__NR_tgkill, {{.index = 0, .value = static_cast<uint32_t>(getpid())}});
  // Thread names: set at start, read by the violation report.
  list.AllowIf(__NR_prctl, {{.index = 0, .value = PR_SET_NAME}});
  list.AllowIf(__NR_prctl, {{.index = 0, .value = PR_GET_NAME}});
#if defined(__SANITIZE_ADDRESS__)
  // Test builds only: the sanitizer runtime's own calls on any thread (its memory probes use a
  // pipe; its reports read /proc).
  list.AllowAll(
      {__NR_pipe2, __NR_pipe, __NR_getdents, __NR_getdents64, __NR_readlink, __NR_prlimit64});
#endif
}

// glibc's setuid family runs the call on every thread of the process (its SIGSETXID broadcast).
void AddIdChanges(SyscallAllowlist& list) {
  list.AllowAll({__NR_setresuid, __NR_setresgid, __NR_setgroups, __NR_setuid, __NR_setgid});
}

// Refused, not fatal: glibc may look up locale, time-zone or CPU-count files on a rare path (an
// error message), and a failed open is what that code handles. The call itself never happens.
void RefuseFilesAndSockets(SyscallAllowlist& list) {
  list.Refuse(__NR_openat, EACCES)
      .Refuse(__NR_open, EACCES)
      .Refuse(__NR_openat2, EACCES)
      .Refuse(__NR_socket, EACCES);
}

// A thread that drops an image's or a medium's last reference gives its rings back to the pool
// (block/raw/uring_ops.h), and the image must be let go of then: a ring that kept it registered
// would keep the file open, its lock held and a removed host drive referenced (the drive then came
// back under another name, and the VMM, watching the old one, never saw it: nested CI of
// 2026-12-07). Unregistering only takes away: a thread that may do it gains nothing.
void AllowUnregisteringFiles(SyscallAllowlist& list) {
  list.AllowIf(__NR_io_uring_register, {{.index = 1, .value = IORING_UNREGISTER_FILES}});
}

SyscallAllowlist VcpuAllowlist(const SandboxOptions& /*options*/) {
  SyscallAllowlist list;
  // KVM_RUN first: the hot path.
  AllowVcpuKvmIoctls(list);
  AddRunningThreadBasics(list);
  AllowUnregisteringFiles(list);
  RefuseFilesAndSockets(list);
  return list;
}

SyscallAllowlist IoAllowlist(const SandboxOptions& options) {
  SyscallAllowlist list;
  list.AllowAll({__NR_io_uring_enter, __NR_epoll_wait, __NR_read, __NR_write, __NR_futex});
  // Queues are created on their iothread when the guest activates the device, on rings the
  // control thread made and locked down when it opened the file (block/raw/uring_ops.h): a new
  // ring would be one without the restrictions, able to open files and sockets by itself
  // (IORING_OP_OPENAT, IORING_OP_SOCKET), so none can be made or changed here.
  list.AllowAll({__NR_fsync, __NR_fdatasync, __NR_fallocate, __NR_epoll_create1});
  // I/O limits: every drive queue, made on its iothread, has a timer for when its waiting requests
  // may go (block/drive.cc), on the throttles' clock; any thread sharing a budget may arm it.
  list.AllowIf(__NR_timerfd_create, {{.index = 0, .value = CLOCK_REALTIME}});
  list.Allow(__NR_timerfd_settime);
  AllowUnregisteringFiles(list);
  list.Refuse(__NR_io_uring_setup, EPERM).Refuse(__NR_io_uring_register, EPERM);
  // Legacy interrupt lines (IDE) are KVM_IRQ_LINE ioctls on the VM fd; nothing else of KVM.
  list.AllowIf(__NR_ioctl, {{.index = 1, .value = static_cast<uint32_t>(KVM_IRQ_LINE)}});
  AddRunningThreadBasics(list);
  if (options.jail) AddIdChanges(list);
  RefuseFilesAndSockets(list);
  return list;
}

// ioctl on the control threads, by request: a filter cannot see what kind of descriptor a request
// goes to, but the request number names its driver (the "type" byte, bits 8-15, is KVM's 0xAE for
// every KVM request; Documentation/userspace-api/ioctl/ioctl-number.rst). What the VMM issues
// after the sandbox is on: KVM set-up (the VM, its memory, vCPUs and interrupt routing), the size
// of a block device, a host CD-ROM drive's tray, lock and status (block/host_cdrom.cc), the
// terminal check glibc's stdio makes, and the descriptor flags libraries set. Every other request
// is refused with ENOTTY, what a driver answers to a request it does not know: no loop device
// (LOOP_SET_FD), file attributes (FS_IOC_SETFLAGS), console (KD*, VT_*) or SCSI (SG_IO) request
// reaches a driver, whatever descriptor a compromised thread finds.
void AllowControlIoctls(SyscallAllowlist& list, const SandboxOptions& options) {
  auto request = [](unsigned long number) {
    return ArgCondition{.index = 1, .value = static_cast<uint32_t>(number)};
  };
  // Terminal requests that act on someone else's session, refused by name first so that the
  // violation says what was tried: TIOCSTI pushes input into a terminal (a command typed into the
  // operator's shell, H16 of docs/security.md), TIOCLINUX and TIOCCONS reach the console,
  // TIOCSCTTY and TIOCSETD take over or re-plumb a terminal.
  for (unsigned long number :
       std::initializer_list<unsigned long>{TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSCTTY, TIOCSETD}) {
    list.Add({__NR_ioctl, {request(number)}, EPERM});
  }
  list.AllowIf(__NR_ioctl, {{.index = 1, .mask = 0xff00, .value = KVMIO << 8}});
  for (unsigned long number : std::initializer_list<unsigned long>{
           BLKGETSIZE64, BLKSSZGET, CDROM_GET_CAPABILITY, CDROM_DRIVE_STATUS, CDROM_LOCKDOOR,
           CDROMEJECT, CDROMCLOSETRAY, TCGETS, TIOCGWINSZ, FIONBIO, FIONREAD, FIOCLEX, FIONCLEX}) {
    list.AllowIf(__NR_ioctl, {request(number)});
  }
  // The jail lets go of the launching terminal (vmm/sandbox/jail.cc).
  if (options.jail) list.AllowIf(__NR_ioctl, {request(TIOCNOTTY)});
  list.Refuse(__NR_ioctl, ENOTTY);
}

// Everything the process does, set-up included, minus what a VMM never needs: exec, fork,
// ptrace, mounts, namespaces, modules, kexec, BPF, keyrings, perf, userfaultfd. The listed calls
// a compromised thread would reach for first are absent from this list, so they trap.
SyscallAllowlist ControlAllowlist(const SandboxOptions& options) {
  SyscallAllowlist list;
  AddRunningThreadBasics(list);
  AllowControlIoctls(list, options);
  // Nothing in a VMM sends data with a connection attempt: sendto/sendmsg with MSG_FASTOPEN would
  // open a TCP connection although connect() is refused (H16 of docs/security.md). Before the rules that allow them.
  list.Add({__NR_sendto, {{.index = 3, .mask = MSG_FASTOPEN, .value = MSG_FASTOPEN}}, EACCES});
  list.Add({__NR_sendmsg, {{.index = 2, .mask = MSG_FASTOPEN, .value = MSG_FASTOPEN}}, EACCES});
  // clang-format off
  list.AllowAll({
      // Files: kernel, initrd, disks, media inserted through the API, the API socket's path.
      // Opened, read and written; never re-moded, linked, renamed or removed (below).
      __NR_open, __NR_openat, __NR_openat2, __NR_stat, __NR_lstat, __NR_statx, __NR_access,
      __NR_faccessat, __NR_faccessat2, __NR_readlink, __NR_readlinkat, __NR_getdents64,
      __NR_getcwd,
      __NR_statfs, __NR_fstatfs, __NR_flock, __NR_ftruncate, __NR_fallocate, __NR_fsync,
      __NR_fdatasync, __NR_fadvise64, __NR_dup, __NR_dup2, __NR_dup3, __NR_pipe2,
      __NR_memfd_create,
      // Event loops: the API, signals, timers; the rings of the pool (bound to an image with
      // io_uring_register, never made: below).
      __NR_epoll_create1, __NR_signalfd4, __NR_timerfd_create, __NR_timerfd_settime,
      __NR_io_uring_enter, __NR_io_uring_register,
      // The control API, the vhost-user socket and uevents: serving, never connecting out.
      __NR_bind, __NR_listen, __NR_accept, __NR_accept4, __NR_getsockname, __NR_getpeername,
      __NR_setsockopt, __NR_getsockopt, __NR_shutdown, __NR_sendmsg, __NR_recvmsg, __NR_sendto,
      __NR_recvfrom, __NR_socketpair,
      // Threads, priorities and limits.
      __NR_set_tid_address, __NR_sched_getparam, __NR_sched_getscheduler, __NR_sched_setaffinity,
      __NR_getpriority, __NR_setpriority, __NR_getrusage, __NR_sysinfo, __NR_uname, __NR_prlimit64,
      __NR_getuid, __NR_geteuid, __NR_getgid, __NR_getegid, __NR_getppid, __NR_rt_sigaction,
      __NR_rt_sigtimedwait, __NR_arch_prctl,
      // Narrowing further: a thread stacks its own role's filter.
      __NR_seccomp,
  });
  // clang-format on
  // No file is removed, and no directory made: the launch binds its sockets where the umask
  // (0177, set before any thread) makes them mode 0600, and the socket janitor, a process of its
  // own, removes them (vmm/sandbox/socket_janitor.h). Refused rather than trapped, as library
  // code tidies up after itself (gRPC unlinks a unix socket at its path when it binds or stops;
  // EPERM leaves it in place). chmod, fchmod, fchmodat, link, linkat, rename, renameat, renameat2,
  // symlink and umask are not listed at all: they trap (H18: an unjailed root VMM made a setuid
  // copy of a program through these before).
  for (int number : {__NR_unlink, __NR_unlinkat, __NR_rmdir, __NR_mkdir, __NR_mkdirat}) {
    list.Refuse(number, EPERM);
  }
  // No new io_uring: a fresh ring carries no restriction, and its entries reach what this filter
  // refuses (IORING_OP_UNLINKAT, RENAMEAT, LINKAT, MKDIRAT, SYMLINKAT, SOCKET, CONNECT: H19 of
  // docs/security.md). Every ring the VMM uses was made before the sandbox and locked down
  // (block/raw/uring_ops.h, RingPool). Refused rather than trapped: a library may probe for it.
  list.Refuse(__NR_io_uring_setup, EPERM);
  // prctl: what the sandbox itself does (NO_NEW_PRIVS, and dumpable 0 in the jail), never the
  // reverse: PR_SET_DUMPABLE 1 would let the same user ptrace the VMM and read guest memory again
  // (H18). The rest is refused quietly, as library code may probe.
  list.AllowIf(__NR_prctl, {{.index = 0, .value = PR_SET_NO_NEW_PRIVS}});
  list.AllowIf(__NR_prctl, {{.index = 0, .value = PR_SET_DUMPABLE}, {.index = 1, .value = 0}});
  list.AllowIf(__NR_prctl, {{.index = 0, .value = PR_GET_DUMPABLE}});
  // Any other dumpable value is refused before the sanitizer's allowance below, so an ASan build
  // keeps N7's guarantee too (its CI pass runs the same death test).
  list.Add({__NR_prctl, {{.index = 0, .value = PR_SET_DUMPABLE}}, EPERM});
  // In the jail: the supervisor's death ends the VMM, set again after the change of user clears it
  // (vmm/sandbox/pid_namespace.h). Only that signal, so a compromised thread cannot turn it off.
  if (options.jail) {
    list.AllowIf(__NR_prctl,
                 {{.index = 0, .value = PR_SET_PDEATHSIG}, {.index = 1, .value = SIGKILL}});
  }
#if defined(__SANITIZE_ADDRESS__)
  list.Allow(__NR_prctl);  // the sanitizer runtime's own calls (test builds only)
#endif
  list.Refuse(__NR_prctl, EPERM);
  // AF_NETLINK: the kernel's uevents for passed-through CD-ROM drives (block/uevent_monitor.h).
  // No IPv4 or IPv6 socket at all, --api-tcp or not: the API's TCP listeners are bound before the
  // sandbox (vmm/launch_sequence.h), and nothing else in a VMM has a use for one (a compromised
  // thread would reach the host's loopback services, or send datagrams without connecting: H16).
  // Refused, not trapped, as a library probing for IPv6 expects.
  for (int domain : {AF_UNIX, AF_NETLINK}) {
    list.AllowIf(__NR_socket, {{.index = 0, .value = static_cast<uint32_t>(domain)}});
  }
  for (int domain : {AF_INET, AF_INET6}) {
    list.Add({__NR_socket, {{.index = 0, .value = static_cast<uint32_t>(domain)}}, EACCES});
  }
  list.Refuse(__NR_socket, EAFNOSUPPORT);
  // Nothing in a VMM connects out (a resolver looking for nscd gets an error and goes on).
  list.Refuse(__NR_connect, EACCES);
  // Threads only: a clone without CLONE_THREAD would be a new process.
  list.AllowIf(__NR_clone, {{.index = 0, .mask = CLONE_THREAD, .value = CLONE_THREAD}});
  // glibc tries clone3 first and falls back to clone on ENOSYS; clone3's flags are in memory a
  // filter cannot read.
  list.Refuse(__NR_clone3, ENOSYS);
  if (options.jail) {
    // EnterJail (vmm/sandbox/jail.cc) runs after threads exist: the new root (a tmpfs built
    // before this filter, directories and device nodes in it) attached, the bind mounts,
    // pivot_root or chroot, and the change of user. Once it is done the process holds no
    // capability, and each of these fails with EPERM. Nothing makes a file here: no mkdir,
    // mknod, chown or symlink.
    AddIdChanges(list);
    list.AllowAll({__NR_chroot, __NR_chdir, __NR_fchdir, __NR_capget, __NR_capset, __NR_move_mount,
                   __NR_open_tree, __NR_mount_setattr, __NR_pivot_root, __NR_umount2});
  }
#if defined(__SANITIZE_ADDRESS__)
  // Test builds only: LeakSanitizer stops the world at exit from a traced helper task, which lists
  // the threads with getdents (measured with --seccomp=log).
  list.AllowAll({__NR_clone, __NR_ptrace, __NR_wait4, __NR_kill});
#endif
  return list;
}

}  // namespace

SyscallAllowlist AllowlistFor(ThreadRole role, const SandboxOptions& options) {
  switch (role) {
    case ThreadRole::kVcpu:
      return VcpuAllowlist(options);
    case ThreadRole::kIo:
      return IoAllowlist(options);
    case ThreadRole::kControl:
      break;
  }
  return ControlAllowlist(options);
}

absl::Status ConfineThisThread(ThreadRole role, const SandboxOptions& options) {
  ASSIGN_OR_RETURN(const std::vector<sock_filter> program,
                   CompileFilter(AllowlistFor(role, options), options.action));
  return InstallFilter(program);
}

absl::StatusOr<SeccompSetting> ParseSeccompSetting(const std::string& text) {
  if (text == "trap") return SeccompSetting{true, ViolationAction::kTrap};
  if (text == "log") return SeccompSetting{true, ViolationAction::kLog};
  if (text == "off") return SeccompSetting{false, ViolationAction::kTrap};
  return absl::InvalidArgumentError(
      absl::StrFormat("--seccomp=%s: expected trap, log or off", text));
}

absl::StatusOr<ProcessSandbox> ProcessSandbox::Enable(const SeccompSetting& setting,
                                                      const SandboxOptions& options) {
  SandboxOptions effective = options;
  effective.action = setting.action;
  if (!setting.enabled) return ProcessSandbox(false, effective);
  RETURN_IF_ERROR(InstallViolationReporter());
  RETURN_IF_ERROR(ConfineThisThread(ThreadRole::kControl, effective));
  return ProcessSandbox(true, effective);
}

std::function<absl::Status()> ProcessSandbox::ThreadStart(ThreadRole role) const {
  if (!enabled_) return {};
  const SandboxOptions options = options_;
  return [role, options] { return ConfineThisThread(role, options); };
}

}  // namespace vmm::sandbox

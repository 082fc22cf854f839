#include "vmm/sandbox/seccomp_filter.h"

#include <errno.h>  // program_invocation_short_name
#include <linux/audit.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

// x32 system calls carry this bit in their number; the filter refuses them all (the VMM is x86-64).
constexpr uint32_t kX32SyscallBit = 0x40000000;

// The offsets of struct seccomp_data's fields (linux/seccomp.h).
constexpr uint32_t kNumberOffset = offsetof(seccomp_data, nr);
constexpr uint32_t kArchOffset = offsetof(seccomp_data, arch);
constexpr uint32_t ArgLowOffset(int index) {
  // Little-endian: the low 32 bits of args[index] come first.
  return static_cast<uint32_t>(offsetof(seccomp_data, args) + 8 * index);
}

sock_filter Statement(uint16_t code, uint32_t k) { return sock_filter{code, 0, 0, k}; }
sock_filter Jump(uint16_t code, uint32_t k, uint8_t jump_true, uint8_t jump_false) {
  return sock_filter{code, jump_true, jump_false, k};
}

uint32_t ViolationVerdict(ViolationAction action) {
  return action == ViolationAction::kLog ? SECCOMP_RET_LOG : SECCOMP_RET_TRAP;
}

// The names the violation report can give: the system calls the policies mention, and those a
// compromised thread would reach for first.
// clang-format off
#define VMM_SANDBOX_NAMED_SYSCALLS(X)                                                             \
  X(read) X(write) X(open) X(close) X(stat) X(fstat) X(lstat) X(poll) X(lseek) X(mmap)            \
  X(mprotect) X(munmap) X(brk) X(rt_sigaction) X(rt_sigprocmask) X(rt_sigreturn) X(ioctl)         \
  X(pread64) X(pwrite64) X(readv) X(writev) X(access) X(pipe) X(select) X(sched_yield) X(mremap)  \
  X(msync) X(madvise) X(dup) X(dup2) X(nanosleep) X(getpid) X(sendfile) X(socket) X(connect)      \
  X(accept) X(sendto) X(recvfrom) X(sendmsg) X(recvmsg) X(shutdown) X(bind) X(listen)             \
  X(getsockname) X(getpeername) X(socketpair) X(setsockopt) X(getsockopt) X(clone) X(fork)        \
  X(vfork) X(execve) X(exit) X(wait4) X(kill) X(uname) X(fcntl) X(flock) X(fsync) X(fdatasync)    \
  X(truncate) X(ftruncate) X(getdents64) X(getcwd) X(chdir) X(fchdir) X(rename) X(mkdir)          \
  X(rmdir) X(link) X(unlink) X(symlink) X(readlink) X(chmod) X(fchmod) X(chown) X(fchown)         \
  X(umask) X(getrlimit) X(getrusage) X(sysinfo) X(ptrace) X(getuid) X(getgid) X(setuid)           \
  X(setgid) X(geteuid) X(getegid) X(setpgid) X(getppid) X(setsid) X(setresuid) X(setresgid)       \
  X(setgroups) X(capget) X(capset) X(sigaltstack) X(mknod) X(personality) X(statfs) X(fstatfs)    \
  X(getpriority) X(setpriority) X(sched_getparam) X(sched_getscheduler) X(mlock) X(prctl)         \
  X(arch_prctl) X(setrlimit) X(chroot) X(mount) X(umount2) X(pivot_root) X(reboot)               \
  X(init_module) X(delete_module) X(gettid) X(tkill) X(futex) X(sched_setaffinity)                \
  X(sched_getaffinity) X(io_setup) X(getdents) X(set_tid_address) X(restart_syscall)              \
  X(fadvise64) X(clock_gettime) X(clock_getres) X(clock_nanosleep) X(exit_group) X(epoll_wait)    \
  X(epoll_ctl) X(tgkill) X(waitid) X(openat) X(mkdirat) X(newfstatat) X(unlinkat) X(renameat)     \
  X(readlinkat) X(fchmodat) X(faccessat) X(pselect6) X(ppoll) X(unshare) X(set_robust_list)       \
  X(splice) X(sync_file_range) X(epoll_pwait) X(signalfd4) X(timerfd_create) X(eventfd2)          \
  X(fallocate) X(timerfd_settime) X(accept4) X(epoll_create1) X(dup3) X(pipe2) X(preadv)          \
  X(pwritev) X(prlimit64) X(name_to_handle_at) X(open_by_handle_at) X(setns) X(getcpu)            \
  X(process_vm_readv) X(process_vm_writev) X(kcmp) X(finit_module) X(renameat2) X(seccomp)        \
  X(getrandom) X(memfd_create) X(kexec_file_load) X(bpf) X(execveat) X(userfaultfd) X(membarrier) \
  X(mlock2) X(copy_file_range) X(preadv2) X(pwritev2) X(pkey_mprotect) X(statx) X(rseq)           \
  X(io_uring_setup) X(io_uring_enter) X(io_uring_register) X(open_tree) X(move_mount) X(fsopen)   \
  X(pidfd_open) X(clone3) X(openat2) X(pidfd_getfd) X(faccessat2) X(process_madvise)              \
  X(epoll_pwait2) X(mount_setattr) X(memfd_secret) X(fsconfig) X(fsmount) X(mknodat)            \
  X(fchownat) X(symlinkat) X(gettimeofday) X(linkat) X(rt_sigtimedwait)
// clang-format on

struct NamedSyscall {
  int number;
  const char* name;
};
#define VMM_SANDBOX_NAME_ENTRY(name) NamedSyscall{__NR_##name, #name},
constexpr NamedSyscall kNamedSyscalls[] = {VMM_SANDBOX_NAMED_SYSCALLS(VMM_SANDBOX_NAME_ENTRY)};
#undef VMM_SANDBOX_NAME_ENTRY
#undef VMM_SANDBOX_NAMED_SYSCALLS

// Async-signal-safe: write(2) only, no allocation, no stdio.
void WriteAll(const char* text) { (void)!write(STDERR_FILENO, text, strlen(text)); }

void WriteNumber(long value) {
  char digits[24];
  int length = 0;
  unsigned long magnitude = value < 0 ? -static_cast<unsigned long>(value) : value;
  do {
    digits[length++] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0 && length < 20);
  if (value < 0) digits[length++] = '-';
  char text[24];
  for (int i = 0; i < length; ++i) text[i] = digits[length - 1 - i];
  text[length] = '\0';
  WriteAll(text);
}

void WriteHex(unsigned long value) {
  char text[19] = {'0', 'x'};
  int length = 2;
  bool leading = true;
  for (int shift = 60; shift >= 0; shift -= 4) {
    const unsigned digit = (value >> shift) & 0xf;
    if (leading && digit == 0 && shift != 0) continue;
    leading = false;
    text[length++] = "0123456789abcdef"[digit];
  }
  text[length] = '\0';
  WriteAll(text);
}

void ReportViolation(int /*signal*/, siginfo_t* info, void* context) {
  char thread_name[17] = {};
  prctl(PR_GET_NAME, thread_name, 0, 0, 0);
  const int number = info->si_syscall;
  WriteAll(program_invocation_short_name);
  WriteAll(": seccomp: thread \"");
  WriteAll(thread_name);
  WriteAll("\" made the forbidden system call ");
  WriteNumber(number);
  WriteAll(" (");
  WriteAll(SyscallName(number));
  // Its first three arguments (x86-64: rdi, rsi, rdx at the trap): an ioctl's request, a
  // socket's domain and type, a prctl's option.
  const auto* registers = static_cast<const ucontext_t*>(context)->uc_mcontext.gregs;
  WriteAll(", arguments ");
  WriteHex(static_cast<unsigned long>(registers[REG_RDI]));
  WriteAll(" ");
  WriteHex(static_cast<unsigned long>(registers[REG_RSI]));
  WriteAll(" ");
  WriteHex(static_cast<unsigned long>(registers[REG_RDX]));
  WriteAll("); stopping (docs/security.md)\n");
  // The system call itself, not _exit(): a sanitizer runtime intercepts _exit and would run its
  // exit-time work (a leak check) inside this handler, under the very filter that just trapped.
  sys_util::ExitNow(kSeccompViolationExitStatus);
}

}  // namespace

SyscallAllowlist& SyscallAllowlist::AllowAll(const std::vector<int>& numbers) {
  for (int number : numbers) Allow(number);
  return *this;
}

SyscallAllowlist& SyscallAllowlist::Add(SyscallRule rule) {
  rules_.push_back(std::move(rule));
  return *this;
}

bool SyscallAllowlist::Mentions(int number) const {
  for (const SyscallRule& rule : rules_) {
    if (rule.number == number) return true;
  }
  return false;
}

absl::StatusOr<std::vector<sock_filter>> CompileFilter(const SyscallAllowlist& allowlist,
                                                       ViolationAction action) {
  const uint32_t violation = ViolationVerdict(action);
  std::vector<sock_filter> program = {
      Statement(BPF_LD | BPF_W | BPF_ABS, kArchOffset),
      Jump(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      Statement(BPF_RET | BPF_K, violation),
      Statement(BPF_LD | BPF_W | BPF_ABS, kNumberOffset),
      Jump(BPF_JMP | BPF_JGE | BPF_K, kX32SyscallBit, 0, 1),
      Statement(BPF_RET | BPF_K, violation),
  };
  // Each rule is one block that falls through to the next rule when it does not apply, with the
  // system call number in the accumulator on entry:
  //   jeq number, 0, <skip block>
  //   (per condition: ld arg; and mask; jeq value, 0, <to reload>)
  //   ret verdict
  //   ld nr                        (only with conditions: a failed condition lands here)
  // Blocks are short, so every jump fits BPF's 8-bit offsets.
  for (const SyscallRule& rule : allowlist.rules()) {
    if (rule.number < 0) return absl::InvalidArgumentError("seccomp rule without a system call");
    if (rule.conditions.size() > 5) {
      return absl::InvalidArgumentError("seccomp rule with more than 5 conditions");
    }
    const uint32_t verdict =
        rule.errno_value != 0
            ? SECCOMP_RET_ERRNO | (static_cast<uint32_t>(rule.errno_value) & SECCOMP_RET_DATA)
            : SECCOMP_RET_ALLOW;
    const size_t conditions = rule.conditions.size();
    // Instructions after the jeq: 3 per condition, the ret, and the reload when conditional.
    const size_t block = 3 * conditions + 1 + (conditions > 0 ? 1 : 0);
    program.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, static_cast<uint32_t>(rule.number), 0,
                           static_cast<uint8_t>(block)));
    for (size_t i = 0; i < conditions; ++i) {
      const ArgCondition& condition = rule.conditions[i];
      if (condition.index < 0 || condition.index > 5) {
        return absl::InvalidArgumentError(
            absl::StrFormat("seccomp rule for %d: argument %d", rule.number, condition.index));
      }
      // From this condition's jeq, the reload is the last instruction of the block.
      const size_t to_reload = 3 * (conditions - 1 - i) + 1;
      program.push_back(Statement(BPF_LD | BPF_W | BPF_ABS, ArgLowOffset(condition.index)));
      program.push_back(Statement(BPF_ALU | BPF_AND | BPF_K, condition.mask));
      program.push_back(Jump(BPF_JMP | BPF_JEQ | BPF_K, condition.value & condition.mask, 0,
                             static_cast<uint8_t>(to_reload)));
    }
    program.push_back(Statement(BPF_RET | BPF_K, verdict));
    if (conditions > 0) program.push_back(Statement(BPF_LD | BPF_W | BPF_ABS, kNumberOffset));
  }
  program.push_back(Statement(BPF_RET | BPF_K, violation));
  if (program.size() > BPF_MAXINSNS) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "seccomp filter of %d instructions (at most %d)", program.size(), BPF_MAXINSNS));
  }
  return program;
}

absl::Status InstallFilter(const std::vector<sock_filter>& program) {
  // Without NO_NEW_PRIVS an unprivileged thread may not install a filter, and an exec could
  // regain privileges; set it even where CAP_SYS_ADMIN would allow otherwise.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    return absl::InternalError(absl::StrFormat("PR_SET_NO_NEW_PRIVS: %s", strerror(errno)));
  }
  sock_fprog fprog{};
  fprog.len = static_cast<unsigned short>(program.size());
  fprog.filter = const_cast<sock_filter*>(program.data());
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) != 0) {
    return absl::InternalError(absl::StrFormat("seccomp(SET_MODE_FILTER): %s", strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status InstallViolationReporter() {
  struct sigaction action {};
  action.sa_sigaction = ReportViolation;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGSYS, &action, nullptr) != 0) {
    return absl::InternalError(absl::StrFormat("sigaction(SIGSYS): %s", strerror(errno)));
  }
  return absl::OkStatus();
}

const char* SyscallName(int number) {
  for (const NamedSyscall& entry : kNamedSyscalls) {
    if (entry.number == number) return entry.name;
  }
  return "unknown";
}

}  // namespace vmm::sandbox

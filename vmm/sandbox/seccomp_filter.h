#ifndef VMM_SANDBOX_SECCOMP_FILTER_H_
#define VMM_SANDBOX_SECCOMP_FILTER_H_

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vmm::sandbox {

// What a system call outside the allowlist gets.
enum class ViolationAction {
  // SIGSYS, and the handler InstallViolationReporter() sets prints the thread and the system call
  // and ends the process (exit status kSeccompViolationExitStatus). The default.
  kTrap,
  // The kernel lets the call through and logs it (SECCOMP_RET_LOG: the audit log / dmesg). For
  // finding what a new code path needs; no protection.
  kLog,
};

// The exit status of a process stopped by a forbidden system call (kTrap).
inline constexpr int kSeccompViolationExitStatus = 159;  // 128 + SIGSYS, as a shell would show it

// One condition on a system call argument: (arg[index] & mask) == value. Compared on the low 32
// bits only, which is what the kernel uses for every argument this project filters (ioctl request
// numbers are unsigned int inside the kernel, clone flags and socket domains fit in 32 bits).
struct ArgCondition {
  int index = 0;  // 0..5
  uint32_t mask = 0xffffffff;
  uint32_t value = 0;
};

// A system call a thread may make: when every condition holds (none: always), the call gets
// `errno_value` if non-zero (refused quietly, e.g. clone3 -> ENOSYS so glibc falls back to clone),
// else runs. Several rules for one number: the first whose conditions hold decides; none holding
// is a violation.
struct SyscallRule {
  int number = -1;
  std::vector<ArgCondition> conditions;
  int errno_value = 0;
};

// A thread's allowlist, in the order the filter tests it (put the hot calls first: the kernel
// caches only verdicts that do not depend on arguments).
class SyscallAllowlist {
 public:
  SyscallAllowlist& Allow(int number) { return Add({number, {}, 0}); }
  SyscallAllowlist& AllowAll(const std::vector<int>& numbers);
  SyscallAllowlist& AllowIf(int number, std::vector<ArgCondition> conditions) {
    return Add({number, std::move(conditions), 0});
  }
  SyscallAllowlist& Refuse(int number, int errno_value) { return Add({number, {}, errno_value}); }
  SyscallAllowlist& Add(SyscallRule rule);

  const std::vector<SyscallRule>& rules() const { return rules_; }
  // True when some rule names `number` (whatever its conditions).
  bool Mentions(int number) const;

 private:
  std::vector<SyscallRule> rules_;
};

// Compiles the allowlist into a classic BPF program for seccomp (Documentation/userspace-api/
// seccomp_filter.rst): x86-64 only (any other audit architecture, and x32 system call numbers,
// are violations), then the rules in order, then the violation action.
absl::StatusOr<std::vector<sock_filter>> CompileFilter(const SyscallAllowlist& allowlist,
                                                       ViolationAction action);

// Sets PR_SET_NO_NEW_PRIVS and installs `program` on the calling thread, stacked on any filter it
// already has (the kernel applies every filter; the strictest verdict wins). Threads created
// later by this thread inherit it.
absl::Status InstallFilter(const std::vector<sock_filter>& program);

// Installs the process's SIGSYS handler for ViolationAction::kTrap: it writes "<program>: seccomp:
// thread "<name>" made the forbidden system call <n> (<name>)" to stderr with async-signal-safe
// calls only and ends the process with kSeccompViolationExitStatus.
absl::Status InstallViolationReporter();

// The name of an x86-64 system call number ("unknown" if this table does not have it).
const char* SyscallName(int number);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_SECCOMP_FILTER_H_

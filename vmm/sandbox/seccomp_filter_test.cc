#include "vmm/sandbox/seccomp_filter.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

using ::sys_util::ExitNow;

// Filters cannot be removed, so every test confines a death-test child (gtest forks it), which
// ends with _exit: 0 when its checks held.

// What the child itself needs besides the call under test.
SyscallAllowlist ChildBasics() {
  SyscallAllowlist list;
  list.AllowAll(
      {__NR_write, __NR_exit, __NR_exit_group, __NR_rt_sigreturn, __NR_prctl, __NR_getpid});
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer runtime's own calls in the child (its alternate signal stack, its allocator).
  list.AllowAll({__NR_sigaltstack, __NR_mmap, __NR_munmap, __NR_madvise, __NR_rt_sigprocmask,
                 __NR_futex, __NR_sched_yield});
#endif
  return list;
}

void ConfineOrDie(const SyscallAllowlist& list, ViolationAction action) {
  auto program = CompileFilter(list, action);
  if (!program.ok() || !InstallViolationReporter().ok() || !InstallFilter(*program).ok()) {
    ExitNow(2);
  }
}

TEST(SeccompFilterDeathTest, AllowedCallsRunAndOthersEndTheProcessWithAReport) {
  EXPECT_EXIT(
      {
        ConfineOrDie(ChildBasics(), ViolationAction::kTrap);
        if (syscall(__NR_getpid) <= 0) ExitNow(3);
        syscall(__NR_getppid);  // not in the list
        ExitNow(0);
      },
      ::testing::ExitedWithCode(kSeccompViolationExitStatus),
      "seccomp: thread \".*\" made the forbidden system call 110 \\(getppid, arguments 0x");
}

TEST(SeccompFilterDeathTest, RefusedCallsFailWithTheirErrno) {
  EXPECT_EXIT(
      {
        SyscallAllowlist list = ChildBasics();
        list.Refuse(__NR_getppid, EPERM);
        ConfineOrDie(list, ViolationAction::kTrap);
        const long result = syscall(__NR_getppid);
        ExitNow(result == -1 && errno == EPERM ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SeccompFilterDeathTest, ArgumentConditionsSelectTheCallsAllowed) {
  SyscallAllowlist list = ChildBasics();
  list.AllowIf(__NR_getpriority, {{.index = 0, .value = PRIO_PROCESS}});
  list.AllowIf(__NR_getpriority, {{.index = 0, .value = PRIO_PGRP}, {.index = 1, .value = 0}});
  EXPECT_EXIT(
      {
        ConfineOrDie(list, ViolationAction::kTrap);
        errno = 0;
        syscall(__NR_getpriority, PRIO_PROCESS, 0);
        syscall(__NR_getpriority, PRIO_PGRP, 0);
        if (errno != 0) ExitNow(3);
        syscall(__NR_getpriority, PRIO_PGRP, 1);  // second condition fails
        ExitNow(0);
      },
      ::testing::ExitedWithCode(kSeccompViolationExitStatus), "getpriority");
  EXPECT_EXIT(
      {
        ConfineOrDie(list, ViolationAction::kTrap);
        syscall(__NR_getpriority, PRIO_USER, 0);  // first condition fails in both rules
        ExitNow(0);
      },
      ::testing::ExitedWithCode(kSeccompViolationExitStatus), "getpriority");
}

TEST(SeccompFilterDeathTest, LogModeLetsForbiddenCallsThrough) {
  EXPECT_EXIT(
      {
        ConfineOrDie(ChildBasics(), ViolationAction::kLog);
        ExitNow(syscall(__NR_getppid) > 0 ? 0 : 3);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(SeccompFilterTest, RejectsMalformedRules) {
  SyscallAllowlist bad_index;
  bad_index.AllowIf(__NR_ioctl, {{.index = 6}});
  EXPECT_EQ(CompileFilter(bad_index, ViolationAction::kTrap).status().code(),
            absl::StatusCode::kInvalidArgument);
  SyscallAllowlist no_number;
  no_number.Allow(-1);
  EXPECT_FALSE(CompileFilter(no_number, ViolationAction::kTrap).ok());
}

TEST(SeccompFilterTest, ProgramChecksTheArchitectureFirstAndEndsWithTheViolation) {
  SyscallAllowlist list;
  list.Allow(__NR_read).AllowIf(__NR_ioctl, {{.index = 1, .mask = 0xff00, .value = 0xae00}});
  auto program = CompileFilter(list, ViolationAction::kTrap);
  ASSERT_TRUE(program.ok());
  // arch load, arch jeq, ret, nr load, x32 jge, ret; read: jeq + ret; ioctl: jeq, 3, ret, reload;
  // final ret.
  EXPECT_EQ(program->size(), 6u + 2u + 6u + 1u);
  EXPECT_TRUE(list.Mentions(__NR_ioctl));
  EXPECT_FALSE(list.Mentions(__NR_write));
  EXPECT_STREQ(SyscallName(__NR_execve), "execve");
  EXPECT_STREQ(SyscallName(100000), "unknown");
}

}  // namespace
}  // namespace vmm::sandbox

#include "vmm/sandbox/pid_namespace.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

using ::sys_util::ExitNow;

// A launcher in miniature: forks a process that enters a new PID namespace and forks again
// (ForkIntoPidNamespace), the way EnterNamespaces does. `vmm` runs in the grandchild, PID 1 of
// the namespace, and writes its host pid to the test through a pipe before it does anything
// else. Returns the supervisor's pid and the VMM's host pid.
struct Launched {
  pid_t supervisor = -1;
  pid_t vmm = -1;
};

Launched Launch(const std::function<int()>& vmm) {
  int ready[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return {};
  const pid_t supervisor = fork();
  if (supervisor == 0) {
    close(ready[0]);
    // As the launchers do before the fork (vmm/launch_sequence.cc): a SIGTERM the supervisor
    // forwards before the VMM blocks it would be dropped (PID 1 ignores what it does not handle).
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigprocmask(SIG_BLOCK, &stop, nullptr);
    if (unshare(CLONE_NEWPID) != 0) ExitNow(90);
    auto child = ForkIntoPidNamespace({.seccomp = {.enabled = true}});
    if (!child.ok()) ExitNow(91);
    const int32_t reported[2] = {child->host_pid, getpid()};
    if (write(ready[1], reported, sizeof(reported)) != sizeof(reported)) ExitNow(92);
    close(ready[1]);
    ExitNow(vmm());
  }
  close(ready[1]);
  int32_t reported[2] = {-1, -1};
  const bool got = read(ready[0], reported, sizeof(reported)) == sizeof(reported);
  close(ready[0]);
  EXPECT_TRUE(got) << "the VMM never started";
  EXPECT_EQ(reported[1], 1) << "the VMM is not PID 1 of its namespace";
  return {supervisor, got ? reported[0] : -1};
}

int WaitFor(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Waits for SIGTERM as the launchers do (blocked since before the fork: Launch; read when it
// comes), then exits with 42.
int VmmStoppedBySigterm() {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  int signal = 0;
  sigwait(&stop, &signal);
  return signal == SIGTERM ? 42 : 1;
}

int VmmThatRunsForEver() {
  for (;;) pause();
}

class PidNamespaceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) MICROVM_SKIP("a new PID namespace needs root");
    // Orphans of a killed supervisor come to this process, so the test can wait for them.
    ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
  }
  void TearDown() override { prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); }
};

TEST_F(PidNamespaceTest, TheSupervisorExitsWithTheVmmsStatus) {
  const Launched launched = Launch([] { return 7; });
  const int status = WaitFor(launched.supervisor);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

TEST_F(PidNamespaceTest, StopSignalsReachTheVmmThroughTheSupervisor) {
  const Launched launched = Launch(VmmStoppedBySigterm);
  ASSERT_GT(launched.vmm, 1);
  // The VMM is a process of its own, a child of the supervisor, and PID 1 inside.
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/status", launched.vmm);
  std::string status_text;
  if (FILE* file = fopen(path, "r")) {
    char line[256];
    while (fgets(line, sizeof(line), file) != nullptr) status_text += line;
    fclose(file);
  }
  EXPECT_NE(status_text.find("NSpid:\t" + std::to_string(launched.vmm) + "\t1\n"),
            std::string::npos)
      << status_text;
  EXPECT_NE(status_text.find("PPid:\t" + std::to_string(launched.supervisor) + "\n"),
            std::string::npos);
  // A signal the VMM blocks and reads is queued for it although, as PID 1, it would ignore it
  // with the default action; the supervisor forwards it.
  ASSERT_EQ(kill(launched.supervisor, SIGTERM), 0);
  const int status = WaitFor(launched.supervisor);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 42);
}

TEST_F(PidNamespaceTest, AnotherFatalSignalEndsBothAsItWouldHaveEndedTheVmm) {
  const Launched launched = Launch(VmmThatRunsForEver);
  ASSERT_GT(launched.vmm, 1);
  ASSERT_EQ(kill(launched.supervisor, SIGQUIT), 0);
  const int status = WaitFor(launched.supervisor);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGQUIT);
  // The supervisor waited for the VMM before it ended: nothing of it is left.
  EXPECT_NE(kill(launched.vmm, 0), 0);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(PidNamespaceTest, TheVmmDiesWithItsSupervisor) {
  const Launched launched = Launch(VmmThatRunsForEver);
  ASSERT_GT(launched.vmm, 1);
  ASSERT_EQ(kill(launched.supervisor, SIGKILL), 0);
  WaitFor(launched.supervisor);
  // PR_SET_PDEATHSIG: the kernel kills the orphan, which comes to this subreaper.
  const int status = WaitFor(launched.vmm);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST_F(PidNamespaceTest, TheSupervisorKeepsNoDescriptorOfTheLauncher) {
  // A descriptor the launcher opened before the fork (a disk, /dev/kvm) stays the VMM's alone.
  const int disk = open("/proc/self/exe", O_RDONLY);  // not O_CLOEXEC, like any inherited one
  ASSERT_GE(disk, 0);
  const Launched launched = Launch(VmmThatRunsForEver);
  close(disk);
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", launched.supervisor, disk);
  EXPECT_NE(access(path, F_OK), 0) << "the supervisor still holds descriptor " << disk;
  snprintf(path, sizeof(path), "/proc/%d/fd/%d", launched.vmm, disk);
  EXPECT_EQ(access(path, F_OK), 0) << "the VMM lost descriptor " << disk;
  kill(launched.supervisor, SIGTERM);
  // The VMM ignores SIGTERM with its default action (PID 1): end it the hard way.
  kill(launched.vmm, SIGKILL);
  WaitFor(launched.supervisor);
}

}  // namespace
}  // namespace vmm::sandbox

#include "vmm/sandbox/thread_policy.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "gtest/gtest.h"

namespace vmm::sandbox {
namespace {

// Ends a death-test child with the system call itself: a sanitizer runtime intercepts _exit and
// would run its leak check there, under the child's filter (or in its jail).
[[noreturn]] void ExitNow(int status) {
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

// Each test confines a death-test child (filters cannot be removed) and ends it with _exit: 0
// when the checks held, or through the violation report.

const SandboxOptions kTrap{.action = ViolationAction::kTrap};

void ConfineOrDie(ThreadRole role) {
  if (!ProcessSandbox::Enable(SeccompSetting{}, kTrap).ok()) ExitNow(2);
  if (role != ThreadRole::kControl && !ConfineThisThread(role, kTrap).ok()) ExitNow(2);
}

TEST(ThreadPolicyDeathTest, ControlThreadsStartThreadsAndServeSocketsButNeverConnectOut) {
  auto child = [&] {
        ConfineOrDie(ThreadRole::kControl);
        bool ran = false;
        std::thread([&ran] { ran = true; }).join();  // clone3 refused, clone(CLONE_THREAD) runs
        const int unix_socket = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        const int packet = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
        const int packet_errno = errno;
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        const int connected = connect(unix_socket, reinterpret_cast<sockaddr*>(&address),
                                      sizeof(address));
        const int connect_errno = errno;
        const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        ExitNow(ran && unix_socket >= 0 && packet == -1 && packet_errno == EAFNOSUPPORT &&
                      connected == -1 && connect_errno == EACCES && file >= 0
                  ? 0
                  : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPolicyDeathTest, ControlThreadsCannotExecuteAProgram) {
  auto child = [&] {
        ConfineOrDie(ThreadRole::kControl);
        char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
        execv("/bin/true", argv);
        ExitNow(3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus), "execve");
}

#if !defined(__SANITIZE_ADDRESS__)  // LeakSanitizer needs fork and ptrace in test builds
TEST(ThreadPolicyDeathTest, ControlThreadsCannotFork) {
  auto child = [&] {
        ConfineOrDie(ThreadRole::kControl);
        syscall(__NR_clone, SIGCHLD, 0, 0, 0, 0);  // a process, not a thread
        ExitNow(3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus), "clone");
}
#endif

TEST(ThreadPolicyDeathTest, VcpuThreadsOpenNothingAndMakeOnlyKvmIoctls) {
  auto child = [&] {
        ConfineOrDie(ThreadRole::kVcpu);
        const int event = eventfd(0, EFD_CLOEXEC);
        const uint64_t one = 1;
        const bool wrote = write(event, &one, sizeof(one)) == sizeof(one);
        const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        const int open_errno = errno;
        const int sock = socket(AF_UNIX, SOCK_STREAM, 0);
        if (!(event >= 0 && wrote && file == -1 && open_errno == EACCES && sock == -1)) ExitNow(3);
        termios attributes{};
        ioctl(event, TCGETS, &attributes);  // not a KVM ioctl
        ExitNow(0);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus), "ioctl");
}

TEST(ThreadPolicyDeathTest, IoThreadsCannotTraceOrOpen) {
  auto child = [&] {
        ConfineOrDie(ThreadRole::kIo);
        const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
        if (file != -1 || errno != EACCES) ExitNow(3);
        if (fdatasync(STDERR_FILENO) != 0 && errno == EACCES) ExitNow(3);  // allowed (EINVAL ok)
        syscall(__NR_ptrace, 0, 0, 0, 0);
        ExitNow(0);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus), "ptrace");
}

TEST(ThreadPolicyDeathTest, ThreadStartConfinesTheNewThreadOnly) {
  auto child = [&] {
        auto sandbox = ProcessSandbox::Enable(SeccompSetting{}, kTrap);
        if (!sandbox.ok()) ExitNow(2);
        auto start = sandbox->ThreadStart(ThreadRole::kVcpu);
        bool confined = false;
        bool refused = false;
        std::thread([&] {
          confined = start().ok();
          refused = open("/proc/self/status", O_RDONLY | O_CLOEXEC) == -1 && errno == EACCES;
        }).join();
        const bool main_opens = open("/proc/self/status", O_RDONLY | O_CLOEXEC) >= 0;
        ExitNow(confined && refused && main_opens ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPolicyTest, SettingsAndDisabledSandbox) {
  EXPECT_TRUE(ParseSeccompSetting("trap")->enabled);
  EXPECT_EQ(ParseSeccompSetting("log")->action, ViolationAction::kLog);
  EXPECT_FALSE(ParseSeccompSetting("off")->enabled);
  EXPECT_EQ(ParseSeccompSetting("on").status().code(), absl::StatusCode::kInvalidArgument);
  SeccompSetting off;
  off.enabled = false;
  auto sandbox = ProcessSandbox::Enable(off, kTrap);  // installs nothing: safe in-process
  ASSERT_TRUE(sandbox.ok());
  EXPECT_FALSE(sandbox->enabled());
  EXPECT_FALSE(static_cast<bool>(sandbox->ThreadStart(ThreadRole::kIo)));
}

TEST(ThreadPolicyTest, EveryRoleCompilesAndOnlyJailsMayChangeIds) {
  for (ThreadRole role : {ThreadRole::kControl, ThreadRole::kVcpu, ThreadRole::kIo}) {
    EXPECT_TRUE(CompileFilter(AllowlistFor(role, kTrap), ViolationAction::kTrap).ok());
    EXPECT_FALSE(AllowlistFor(role, kTrap).Mentions(__NR_execve));
    EXPECT_FALSE(AllowlistFor(role, kTrap).Mentions(__NR_setresuid));
  }
  const SandboxOptions jailed{.jail = true};
  EXPECT_TRUE(AllowlistFor(ThreadRole::kControl, jailed).Mentions(__NR_chroot));
  EXPECT_TRUE(AllowlistFor(ThreadRole::kIo, jailed).Mentions(__NR_setresuid));
  EXPECT_FALSE(AllowlistFor(ThreadRole::kVcpu, jailed).Mentions(__NR_setresuid));
}

}  // namespace
}  // namespace vmm::sandbox

#include "vmm/sandbox/thread_policy.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/io_uring.h>
#include <linux/kvm.h>
#include <linux/sched.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <string>
#include <thread>

#include "block/raw/uring_ops.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

using ::sys_util::ExitNow;

// Each test confines a death-test child (filters cannot be removed) and ends it with _exit: 0
// when the checks held, or through the violation report.

const SandboxOptions kTrap{.action = ViolationAction::kTrap};

void ConfineOrDie(ThreadRole role, const SandboxOptions& options = kTrap) {
  if (!ProcessSandbox::Enable(SeccompSetting{}, options).ok()) ExitNow(2);
  if (role != ThreadRole::kControl && !ConfineThisThread(role, options).ok()) ExitNow(2);
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
    const int connected =
        connect(unix_socket, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    const int connect_errno = errno;
    const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ExitNow(ran && unix_socket >= 0 && packet == -1 && packet_errno == EAFNOSUPPORT &&
                    connected == -1 && connect_errno == EACCES && file >= 0
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// H16 of docs/security.md: a compromised control thread typed a command into
// the operator's shell with TIOCSTI, and reached the network with MSG_FASTOPEN and UDP although
// connect() was refused. The TCP socket it would use is one the VMM made before its sandbox
// (the API's listener, --api-tcp): no thread can make one after.
TEST(ThreadPolicyDeathTest, ControlThreadsCannotTypeIntoATerminalOrSendUnconnected) {
  auto child = [&] {
    const int tcp4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ConfineOrDie(ThreadRole::kControl);
    const int master = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) ExitNow(4);
    char c = 'x';
    const int typed = ioctl(master, TIOCSTI, &c);
    const int typed_errno = errno;
    termios modes{};
    const int got_modes = ioctl(master, TCGETS, &modes);  // ordinary terminal ioctls still run
    const int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    const int udp_errno = errno;
    const int tcp = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int tcp_errno = errno;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(9);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const ssize_t sent =
        sendto(tcp4, "x", 1, MSG_FASTOPEN, reinterpret_cast<sockaddr*>(&address), sizeof(address));
    const int sent_errno = errno;
    ExitNow(typed == -1 && typed_errno == EPERM && got_modes == 0 && udp == -1 &&
                    udp_errno == EACCES && tcp == -1 && tcp_errno == EACCES && tcp4 >= 0 &&
                    sent == -1 && sent_errno == EACCES
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// Nothing in the VMM makes an IPv4 or IPv6 socket once sandboxed, --api-tcp or not (its listeners
// are bound before): not even a stream socket can be made (a compromised thread would use one to
// reach the host's loopback services).
TEST(ThreadPolicyDeathTest, ControlThreadsMakeNoInternetSocket) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kControl);
    const int tcp4 = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int tcp4_errno = errno;
    const int tcp6 = socket(AF_INET6, SOCK_STREAM, 0);
    const int tcp6_errno = errno;
    const int udp = socket(AF_INET, SOCK_DGRAM, 0);
    const int udp_errno = errno;
    const int unix_socket = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ExitNow(tcp4 == -1 && tcp4_errno == EACCES && tcp6 == -1 && tcp6_errno == EACCES && udp == -1 &&
                    udp_errno == EACCES && unix_socket >= 0
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// ioctl by request: what the VMM issues runs (a descriptor flag), any other request is refused
// before it reaches a driver, even FIGETBSZ, which the VFS answers for any file.
TEST(ThreadPolicyDeathTest, ControlThreadsIssueOnlyTheIoctlsTheVmmUses) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kControl);
    const int file = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (file < 0) ExitNow(4);
    int on = 1;
    const int flagged = ioctl(file, FIOCLEX, &on);
    int block_size = 0;
    const int asked = ioctl(file, FIGETBSZ, &block_size);
    const int asked_errno = errno;
    ExitNow(flagged == 0 && asked == -1 && asked_errno == ENOTTY ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// N7: a compromised thread undid the jail's dumpable 0, and could signal any process.
TEST(ThreadPolicyDeathTest, ControlThreadsCannotBecomeDumpableAgain) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kControl);
    const int lowered = prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    const int raised = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    const int raised_errno = errno;
    ExitNow(lowered == 0 && raised == -1 && raised_errno == EPERM && prctl(PR_GET_DUMPABLE) == 0
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(ThreadPolicyDeathTest, ThreadsSignalOnlyTheirOwnProcess) {
  auto child = [&] {
    const pid_t other = fork();  // before the filter: a process of the same user
    if (other == 0) {
      alarm(10);  // never outlives the test by long
      pause();
      ExitNow(0);
    }
    ConfineOrDie(ThreadRole::kControl);
    // Our own threads: allowed (signal 0 only checks).
    if (syscall(SYS_tgkill, getpid(), static_cast<pid_t>(syscall(SYS_gettid)), 0) != 0) ExitNow(3);
    syscall(SYS_tgkill, other, other, SIGKILL);
    ExitNow(4);
  };
  // The trap is the SIGKILL (third argument 9), not the check of our own thread before it.
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus),
              "tgkill, arguments 0x[0-9a-f]+ 0x[0-9a-f]+ 0x9\\)");
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

// A drive queue, made on its iothread, has a CLOCK_REALTIME timer for throttled requests
// (block/drive.cc): allowed; a timer on any other clock is not.
TEST(ThreadPolicyDeathTest, IoThreadsMakeTheDriveQueuesTimer) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kIo);
    const int timer = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer < 0) ExitNow(3);
    itimerspec spec{};
    spec.it_value.tv_nsec = 1;
    if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &spec, nullptr) != 0) ExitNow(4);
    timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    ExitNow(0);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus), "timerfd_create");
}

// A fresh ring would carry no restrictions: an iothread can neither make one nor register a file
// on the locked-down rings it was given (refused, not fatal: the queue reports the error). It may
// unregister one: a thread that drops an image's last reference lets go of the file at once.
TEST(ThreadPolicyDeathTest, IoThreadsCannotMakeOrRegisterRingsButMayLetGoOfAFile) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kIo);
    io_uring_params params{};
    const long setup = syscall(__NR_io_uring_setup, 4, &params);
    const int setup_errno = errno;
    const long registered = syscall(__NR_io_uring_register, 0, IORING_REGISTER_FILES, nullptr, 0);
    const int register_errno = errno;
    // Reaches the kernel (which refuses a call without a ring), not the filter's EPERM.
    const long unregistered =
        syscall(__NR_io_uring_register, -1, IORING_UNREGISTER_FILES, nullptr, 0);
    const int unregister_errno = errno;
    ExitNow(setup == -1 && setup_errno == EPERM && registered == -1 && register_errno == EPERM &&
                    unregistered == -1 && unregister_errno != EPERM
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// The whole path, as a hot-removed disk or an ejected host CD takes it: a pooled ring bound to a
// locked file is given back on an iothread after the VMM closed its own descriptor. The ring lets
// go of the file there and then, so the file's lock is free at once (a ring that kept it until
// the next Take held the image's lock, and a removed host drive, for as long as no other image
// was opened).
TEST(ThreadPolicyDeathTest, ARingGivenBackOnAnIothreadLetsGoOfItsFileAtOnce) {
  auto child = [&] {
    const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/given-back.img";
    const int image = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int observer = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (image < 0 || observer < 0 || ftruncate(image, 4096) != 0) ExitNow(4);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    if (fcntl(image, F_OFD_SETLK, &lock) != 0) ExitNow(4);
    auto pool = block::raw::RingPool::Create(1, 8);  // before the sandbox, as the launchers make it
    if (!pool.ok()) ExitNow(4);
    auto ring = (*pool)->Take(image);
    if (!ring.ok()) ExitNow(4);
    close(image);  // the ring alone holds the file now
    ConfineOrDie(ThreadRole::kControl);
    std::thread([&] {
      if (!ConfineThisThread(ThreadRole::kIo, kTrap).ok()) ExitNow(2);
      (*pool)->Recycle(*std::move(ring));
    }).join();
    struct flock probe {};
    probe.l_type = F_WRLCK;
    probe.l_whence = SEEK_SET;
    if (fcntl(observer, F_OFD_GETLK, &probe) != 0) ExitNow(5);
    ExitNow(probe.l_type == F_UNLCK ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// H19: a fresh ring carries no restriction, and its entries reach what the filter refuses
// (IORING_OP_UNLINKAT, CONNECT, ...): control threads make none either (every ring comes from the
// pool made before the sandbox), but may bind a pooled ring to an image (io_uring_register).
TEST(ThreadPolicyDeathTest, ControlThreadsCannotMakeRings) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kControl);
    io_uring_params params{};
    const long setup = syscall(__NR_io_uring_setup, 4, &params);
    const int setup_errno = errno;
    // Reaches the kernel (which refuses a call without a ring or files), not the filter's EPERM.
    const long registered = syscall(__NR_io_uring_register, -1, IORING_REGISTER_FILES, nullptr, 0);
    const int register_errno = errno;
    ExitNow(setup == -1 && setup_errno == EPERM && registered == -1 && register_errno != EPERM ? 0
                                                                                               : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

// N11: the vCPU filter allowed every KVM request, KVM_CREATE_VM included. The request is checked
// before the descriptor (-1 here): KVM_RUN passes the filter and fails with EBADF.
TEST(ThreadPolicyDeathTest, VcpuThreadsMakeOnlyTheirOwnKvmRequests) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kVcpu);
    if (ioctl(-1, KVM_RUN, 0) != -1 || errno != EBADF) ExitNow(3);
    // A vCPU thread may drop a medium's last reference too, and let go of its file.
    if (syscall(__NR_io_uring_register, -1, IORING_UNREGISTER_FILES, nullptr, 0) != -1 ||
        errno == EPERM) {
      ExitNow(3);
    }
    if (ioctl(-1, KVM_IRQFD, nullptr) != -1 || errno != EBADF) ExitNow(3);
    // KVM_SET_GSI_ROUTING as the kernel numbers it (8-byte header; not the C++ macro's 16).
    if (ioctl(-1, 0x4008ae6aUL, nullptr) != -1 || errno != EBADF) ExitNow(3);
    ioctl(-1, KVM_CREATE_VM, 0);
    ExitNow(4);
  };
  // The trap names the request (KVM_CREATE_VM is 0xae01): no earlier call trapped.
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus),
              "ioctl, arguments 0xffffffff 0xae01 ");
}

TEST(ThreadPolicyDeathTest, IoThreadsMayRaiseALegacyInterruptOnly) {
  auto child = [&] {
    ConfineOrDie(ThreadRole::kIo);
    if (ioctl(-1, KVM_IRQ_LINE, nullptr) != -1 || errno != EBADF) ExitNow(3);
    ioctl(-1, KVM_RUN, 0);
    ExitNow(4);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(kSeccompViolationExitStatus),
              "ioctl, arguments 0xffffffff 0xae80 ");
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

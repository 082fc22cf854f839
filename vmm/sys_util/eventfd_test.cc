#include "vmm/sys_util/eventfd.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

namespace sys_util {
namespace {

TEST(EventFdTest, SignalsAddUpAndOneDrainTakesThemAll) {
  absl::StatusOr<ScopedFd> fd = MakeEventFd();
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(DrainEventFd(fd->get()), 0u);
  SignalEventFd(fd->get());
  SignalEventFd(fd->get());
  EXPECT_EQ(DrainEventFd(fd->get()), 2u);
  EXPECT_EQ(DrainEventFd(fd->get()), 0u);
}

TEST(EventFdTest, DrainNeverBlocksOnABlockingDescriptor) {
  // A front end's kick eventfd may be blocking; its count may already be zero.
  ScopedFd blocking(::eventfd(0, EFD_CLOEXEC));
  ASSERT_TRUE(blocking.valid());
  EXPECT_EQ(DrainEventFd(blocking.get()), 0u);
  SignalEventFd(blocking.get());
  EXPECT_EQ(DrainEventFd(blocking.get()), 1u);
}

TEST(EventFdTest, ASemaphoreGivesOneARead) {
  ScopedFd semaphore(::eventfd(3, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE));
  ASSERT_TRUE(semaphore.valid());
  EXPECT_EQ(DrainEventFd(semaphore.get()), 1u);
  EXPECT_EQ(DrainEventFd(semaphore.get()), 1u);
}

TEST(EventFdTest, IsEventFdTellsEventfdsFromEveryOtherKindAndLeavesTheCountAlone) {
  ScopedFd blocking(::eventfd(5, EFD_CLOEXEC));
  ScopedFd nonblocking(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE));
  EXPECT_TRUE(IsEventFd(blocking.get()));
  EXPECT_TRUE(IsEventFd(nonblocking.get()));
  EXPECT_EQ(DrainEventFd(blocking.get()), 5u) << "the check added nothing";
  // Full (2^64-2): adding 0 still does not block.
  EXPECT_EQ(eventfd_write(blocking.get(), 0xfffffffffffffffeULL), 0);
  EXPECT_TRUE(IsEventFd(blocking.get()));

  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  ScopedFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  EXPECT_FALSE(IsEventFd(write_end.get()));
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/not-an-eventfd";
  ScopedFd file(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  EXPECT_FALSE(IsEventFd(file.get()));
  EXPECT_EQ(::lseek(file.get(), 0, SEEK_END), 0) << "nothing was written to the file";
  int sockets[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sockets), 0);
  ScopedFd one(sockets[0]), other(sockets[1]);
  EXPECT_FALSE(IsEventFd(one.get()));
  // Anonymous inodes of other kinds.
  ScopedFd timer(timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
  ScopedFd epoll(epoll_create1(EPOLL_CLOEXEC));
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGUSR2);
  ScopedFd signals(signalfd(-1, &mask, SFD_CLOEXEC));
  for (int fd : {timer.get(), epoll.get(), signals.get()}) EXPECT_FALSE(IsEventFd(fd)) << fd;
  EXPECT_FALSE(IsEventFd(-1));
}

// The jail has no /proc: the check must not need it (it once read /proc/self/fd).
TEST(EventFdDeathTest, IsEventFdNeedsNoProc) {
  char empty[] = "/tmp/eventfd_test.XXXXXX";
  ASSERT_NE(mkdtemp(empty), nullptr);
  auto child = [&] {
    ScopedFd fd(::eventfd(0, EFD_CLOEXEC));
    // As root, chroot directly; otherwise as root of a user namespace of our own.
    if (::chroot(empty) != 0 && (::unshare(CLONE_NEWUSER) != 0 || ::chroot(empty) != 0)) {
      ExitNow(4);
    }
    const bool proc_gone = ::access("/proc/self/fd", F_OK) != 0;
    ExitNow(proc_gone && IsEventFd(fd.get()) ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  ::rmdir(empty);
}

}  // namespace
}  // namespace sys_util

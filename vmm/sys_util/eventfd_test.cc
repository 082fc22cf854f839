#include "vmm/sys_util/eventfd.h"

#include <sys/eventfd.h>

#include "gtest/gtest.h"

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

}  // namespace
}  // namespace sys_util

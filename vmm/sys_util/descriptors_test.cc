#include "vmm/sys_util/descriptors.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

TEST(DescriptorsDeathTest, InheritedDescriptorsAreClosedAndTheStandardOnesKept) {
  auto child = [] {
    int fds[2];
    if (pipe(fds) != 0) syscall(SYS_exit_group, 4);
    const int high = fcntl(fds[0], F_DUPFD, 200);  // far up, as a parent might leave one
    if (!CloseInheritedDescriptors().ok()) syscall(SYS_exit_group, 5);
    const bool closed =
        fcntl(fds[0], F_GETFD) == -1 && fcntl(fds[1], F_GETFD) == -1 && fcntl(high, F_GETFD) == -1;
    const bool stdio = fcntl(1, F_GETFD) != -1 && fcntl(2, F_GETFD) != -1;
    syscall(SYS_exit_group, closed && stdio ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace sys_util

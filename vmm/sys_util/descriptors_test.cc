#include "vmm/sys_util/descriptors.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

namespace sys_util {
namespace {

TEST(DescriptorsDeathTest, InheritedDescriptorsAreClosedAndTheStandardOnesKept) {
  auto child = [] {
    int fds[2];
    if (pipe(fds) != 0) ExitNow(4);
    const int high = fcntl(fds[0], F_DUPFD, 200);  // far up, as a parent might leave one
    if (!CloseInheritedDescriptors().ok()) ExitNow(5);
    const bool closed =
        fcntl(fds[0], F_GETFD) == -1 && fcntl(fds[1], F_GETFD) == -1 && fcntl(high, F_GETFD) == -1;
    const bool stdio = fcntl(1, F_GETFD) != -1 && fcntl(2, F_GETFD) != -1;
    ExitNow(closed && stdio ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(DescriptorsDeathTest, AllButTheKeptDescriptorsAreClosed) {
  auto child = [] {
    int fds[2];
    if (pipe(fds) != 0) ExitNow(4);
    const int low = fcntl(fds[0], F_DUPFD, 20);
    const int high = fcntl(fds[1], F_DUPFD, 300);
    const int highest = fcntl(fds[1], F_DUPFD, 400);
    CloseAllDescriptorsBut({high, low, 1});  // any order; stdio is kept anyway
    const bool kept = fcntl(low, F_GETFD) != -1 && fcntl(high, F_GETFD) != -1;
    const bool closed = fcntl(fds[0], F_GETFD) == -1 && fcntl(fds[1], F_GETFD) == -1 &&
                        fcntl(highest, F_GETFD) == -1;
    const bool stdio = fcntl(1, F_GETFD) != -1 && fcntl(2, F_GETFD) != -1;
    ExitNow(kept && closed && stdio ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace sys_util

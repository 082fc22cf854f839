#include "vmm/sys_util/exit_now.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

int exit_handler_ran_fd = -1;

// The status reaches the parent, and nothing registered to run at exit runs: a forked child that
// calls ExitNow leaves no trace of the parent's exit-time work.
TEST(ExitNowTest, EndsWithTheStatusAndRunsNoExitHandler) {
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(pipe_fds[0]);
    exit_handler_ran_fd = pipe_fds[1];
    atexit([] { (void)!write(exit_handler_ran_fd, "x", 1); });
    ExitNow(42);
  }
  close(pipe_fds[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 42);
  char byte;
  EXPECT_EQ(read(pipe_fds[0], &byte, 1), 0) << "an atexit handler ran";
  close(pipe_fds[0]);
}

}  // namespace
}  // namespace sys_util

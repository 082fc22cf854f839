#include "vmm/sys_util/thread.h"

#include <pthread.h>

#include <atomic>
#include <string>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

std::string CurrentThreadName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(StartThreadTest, NamesTheThreadAndRunsTheHookBeforeTheBody) {
  std::string order;
  std::string name_in_hook;
  std::string name_in_body;
  absl::StatusOr<std::thread> thread = StartThread({.name = "iothread-with-a-long-name",
                                                    .on_start =
                                                        [&] {
                                                          name_in_hook = CurrentThreadName();
                                                          order += "hook;";
                                                          return absl::OkStatus();
                                                        }},
                                                   [&] {
                                                     name_in_body = CurrentThreadName();
                                                     order += "body;";
                                                   });
  ASSERT_TRUE(thread.ok()) << thread.status();
  thread->join();
  EXPECT_EQ(order, "hook;body;");
  EXPECT_EQ(name_in_hook, "iothread-with-a");  // 15 characters: the kernel's limit
  EXPECT_EQ(name_in_body, "iothread-with-a");
}

TEST(StartThreadTest, AFailedHookKeepsTheBodyFromRunningAndNamesTheThread) {
  std::atomic<bool> body_ran{false};
  absl::StatusOr<std::thread> thread = StartThread(
      {.name = "vcpu0", .on_start = [] { return absl::PermissionDeniedError("no filter"); }},
      [&] { body_ran = true; });
  ASSERT_FALSE(thread.ok());
  EXPECT_EQ(thread.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(thread.status().message(), "vcpu0: starting the thread: no filter");
  EXPECT_FALSE(body_ran.load());
}

TEST(StartThreadTest, NoHookRunsTheBody) {
  std::atomic<bool> body_ran{false};
  absl::StatusOr<std::thread> thread = StartThread({.name = "worker"}, [&] { body_ran = true; });
  ASSERT_TRUE(thread.ok());
  thread->join();
  EXPECT_TRUE(body_ran.load());
}

}  // namespace
}  // namespace sys_util

#include "vmm/sys_util/call_queue.h"

#include <poll.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

bool Readable(int fd) {
  pollfd ready{fd, POLLIN, 0};
  return poll(&ready, 1, 0) == 1;
}

TEST(CallQueueTest, OnTheServingThreadACallRunsAtOnce) {
  CallQueue queue;  // closed, but this thread serves it
  int runs = 0;
  EXPECT_TRUE(queue
                  .Call([&] {
                    ++runs;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(runs, 1);
  EXPECT_FALSE(Readable(queue.fd()));
}

TEST(CallQueueTest, AnotherThreadsCallRunsOnTheServingThreadAndReturnsItsResult) {
  CallQueue queue;
  queue.Open();
  std::thread::id ran_on;
  absl::Status result;
  std::thread caller([&] {
    result = queue.Call([&] {
      ran_on = std::this_thread::get_id();
      return absl::InternalError("from the serving thread");
    });
  });
  // The serving loop: wait for the queue's fd, run what is queued.
  pollfd ready{queue.fd(), POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 10000), 1);
  queue.RunPending();
  caller.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(result.message(), "from the serving thread");
  EXPECT_FALSE(Readable(queue.fd()));
}

TEST(CallQueueTest, CloseFailsTheWaitingCallAndLaterOnesWithoutRunningThem) {
  CallQueue queue;
  queue.Open();
  std::atomic<int> runs = 0;
  absl::Status waiting;
  std::thread caller([&] {
    waiting = queue.Call([&] {
      ++runs;
      return absl::OkStatus();
    });
  });
  pollfd ready{queue.fd(), POLLIN, 0};
  ASSERT_EQ(poll(&ready, 1, 10000), 1);
  queue.Close();
  caller.join();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kUnavailable);
  absl::Status later;
  std::thread late_caller([&] {
    later = queue.Call([&] {
      ++runs;
      return absl::OkStatus();
    });
  });
  late_caller.join();
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable);
  queue.RunPending();
  EXPECT_EQ(runs, 0);
}

}  // namespace
}  // namespace sys_util

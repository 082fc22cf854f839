#include "devices/iothread.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace devices {
namespace {

void Signal(int fd) {
  const uint64_t one = 1;
  ASSERT_EQ(write(fd, &one, sizeof(one)), 8);
}

// Clears an eventfd's readiness, as an fd handler must.
void Drain(int fd) {
  uint64_t value;
  (void)!read(fd, &value, sizeof(value));
}

// A polling window so generous that a loaded machine still grows it.
IoThreadOptions LongPollWindow() {
  IoThreadOptions options;
  options.poll_max_ns = 50'000'000;
  return options;
}

TEST(IoThreadTest, RunsFdHandlersOnItsThread) {
  IoThread thread("test-io");
  ASSERT_TRUE(thread.Start().ok());
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  absl::Notification fired;
  std::atomic<bool> on_thread{false};
  thread.RunSync([&] {
    ASSERT_TRUE(thread
                    .AddFd(event.get(),
                           [&] {
                             Drain(event.get());
                             on_thread = thread.OnLoopThread();
                             if (!fired.HasBeenNotified()) fired.Notify();
                           })
                    .ok());
  });
  Signal(event.get());
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(on_thread);
  thread.RunSync([&] { thread.RemoveFd(event.get()); });
  thread.Stop();
}

// A semaphore eventfd that stays readable (H10 of docs/security.md): edge-triggered, its handler
// runs once per write, not in a loop; and no write is missed.
TEST(IoThreadTest, EdgeTriggeredFdDoesNotSpinOnASemaphoreEventfd) {
  IoThread thread("test-io");
  ASSERT_TRUE(thread.Start().ok());
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK | EFD_SEMAPHORE));
  std::atomic<int> calls{0};
  thread.RunSync([&] {
    ASSERT_TRUE(thread
                    .AddFd(
                        event.get(),
                        [&] {
                          Drain(event.get());
                          ++calls;
                        },
                        IoThread::Trigger::kEdge)
                    .ok());
  });
  const uint64_t huge = UINT64_MAX - 1;  // each read takes 1: readable "for ever"
  ASSERT_EQ(write(event.get(), &huge, sizeof(huge)), 8);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_GE(calls.load(), 1);
  EXPECT_LE(calls.load(), 2);  // level-triggered this was hundreds of thousands
  // Each later write is one more readiness: one more call.
  const int before = calls.load();
  const uint64_t one = 1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(write(event.get(), &one, sizeof(one)), 8);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (calls.load() < before + i + 1 && absl::Now() < deadline)
      absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GE(calls.load(), before + 3);
  thread.RunSync([&] { thread.RemoveFd(event.get()); });
  thread.Stop();
}

TEST(IoThreadTest, StartHookRunsFirstOnTheLoopThreadAndItsErrorFailsStart) {
  IoThreadOptions options;
  std::thread::id hook_thread;
  options.on_start = [&hook_thread] {
    hook_thread = std::this_thread::get_id();
    return absl::OkStatus();
  };
  IoThread thread("test-io", options);
  ASSERT_TRUE(thread.Start().ok());
  std::thread::id loop_thread;
  thread.RunSync([&] { loop_thread = std::this_thread::get_id(); });
  EXPECT_EQ(hook_thread, loop_thread);

  IoThreadOptions failing;
  failing.on_start = [] { return absl::PermissionDeniedError("no filter"); };
  IoThread refused("test-io", failing);
  const absl::Status status = refused.Start();
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("no filter"), std::string::npos);
  refused.Stop();  // nothing to join: idempotent
}

TEST(IoThreadTest, PostAndRunSync) {
  IoThread thread("test-io");
  ASSERT_TRUE(thread.Start().ok());
  int counter = 0;  // touched only on the loop thread, then read after RunSync
  for (int i = 0; i < 100; ++i) thread.Post([&] { ++counter; });
  thread.RunSync([&] { ++counter; });
  EXPECT_EQ(counter, 101);
  EXPECT_FALSE(thread.OnLoopThread());
}

TEST(IoThreadTest, AdaptivePollingGrowsWhenPollsFindWork) {
  IoThread thread("test-poll", LongPollWindow());
  std::atomic<int> pending{0};
  std::atomic<int> found_by_polling{0};
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_TRUE(thread
                  .AddFd(event.get(),
                         [&] {
                           Drain(event.get());
                           pending = 0;
                         })
                  .ok());
  thread.AddPoller([&] {
    if (pending.exchange(0) == 0) return false;
    ++found_by_polling;
    return true;
  });
  ASSERT_TRUE(thread.Start().ok());
  // Work arriving every ~100 µs: waits are short, so the window grows and polling catches work
  // before the loop sleeps.
  for (int i = 0; i < 300; ++i) {
    pending = 1;
    Signal(event.get());
    absl::SleepFor(absl::Microseconds(100));
  }
  EXPECT_GT(found_by_polling.load(), 0);
  thread.Stop();
}

// A queue that, like a virtqueue, needs a notification only while the consumer is not polling:
// begin/end hooks turn notifications off and on, and no work is lost across the switch.
TEST(IoThreadTest, PollingHooksSuppressNotificationsWithoutLosingWork) {
  IoThread thread("test-hooks", LongPollWindow());
  std::atomic<int> queued{0};
  std::atomic<int> done{0};
  std::atomic<bool> notify{true};
  std::atomic<int> begins{0};
  std::atomic<int> ends{0};
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  auto consume = [&] {
    const int items = queued.exchange(0);
    done += items;
    return items > 0;
  };
  ASSERT_TRUE(thread
                  .AddFd(event.get(),
                         [&] {
                           Drain(event.get());
                           consume();
                         })
                  .ok());
  thread.AddPoller(
      consume,
      [&] {
        ++begins;
        notify = false;
      },
      [&] {
        ++ends;
        notify = true;
        return queued.load() > 0;  // work that came while notifications were off
      });
  ASSERT_TRUE(thread.Start().ok());
  constexpr int kItems = 2000;
  int notifications = 0;
  for (int i = 0; i < kItems; ++i) {
    ++queued;
    if (notify.load()) {
      Signal(event.get());
      ++notifications;
    }
    if (i % 8 == 0) absl::SleepFor(absl::Microseconds(50));
  }
  for (int i = 0; i < 1000 && done.load() < kItems; ++i) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_EQ(done.load(), kItems);
  EXPECT_LT(notifications, kItems);  // polling made most notifications unnecessary
  EXPECT_GT(begins.load(), 0);
  thread.Stop();
  EXPECT_EQ(begins.load(), ends.load());  // every polling phase ended, notifications back on
  EXPECT_TRUE(notify.load());
}

// Woken by an fd with a polling window open, the loop starts its polling phase before the fd's
// handler runs: work the handler triggers (a driver answering a completion with its next
// request) is then picked up by polling, with no notification.
TEST(IoThreadTest, WakeUpStartsPollingBeforeHandlers) {
  IoThread thread("test-wake", LongPollWindow());
  bool polling = false;  // touched only on the loop thread
  std::atomic<int> handled{0};
  std::atomic<int> handled_while_polling{0};
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  ASSERT_TRUE(thread
                  .AddFd(event.get(),
                         [&] {
                           Drain(event.get());
                           if (polling) ++handled_while_polling;
                           ++handled;
                         })
                  .ok());
  thread.AddPoller([] { return false; }, [&] { polling = true; },
                   [&] {
                     polling = false;
                     return false;
                   });
  ASSERT_TRUE(thread.Start().ok());
  constexpr int kRounds = 20;
  for (int i = 1; i <= kRounds; ++i) {
    // Each wait (~1 ms) is well inside poll_max_ns, so every wake-up leaves the window open.
    absl::SleepFor(absl::Milliseconds(1));
    Signal(event.get());
    for (int t = 0; t < 1000 && handled.load() < i; ++t) absl::SleepFor(absl::Milliseconds(1));
  }
  thread.Stop();
  EXPECT_EQ(handled.load(), kRounds);
  EXPECT_EQ(handled_while_polling.load(), kRounds);
  EXPECT_FALSE(polling);  // the last phase ended when the loop stopped
}

TEST(IoThreadTest, PollWindowFollowsQemusRule) {
  const int64_t max = 32000;
  EXPECT_EQ(NextPollWindow(0, 10000, max), 4000);     // room to grow: start at 4 µs
  EXPECT_EQ(NextPollWindow(4000, 10000, max), 8000);  // and double
  EXPECT_EQ(NextPollWindow(16000, 20000, max), 32000);
  EXPECT_EQ(NextPollWindow(32000, 30000, max), 32000);  // long enough already
  EXPECT_EQ(NextPollWindow(8000, 5000, max), 8000);
  EXPECT_EQ(NextPollWindow(32000, 100000, max), 16000);  // waits beyond the max: poll less
  EXPECT_EQ(NextPollWindow(4000, 100000, max), 0);
  EXPECT_EQ(NextPollWindow(0, 100000, max), 0);
}

TEST(IoThreadTest, StopIsIdempotentAndHandlersAreDropped) {
  IoThread thread("test-io");
  ASSERT_TRUE(thread.Start().ok());
  thread.Stop();
  thread.Stop();
  IoThread never_started("unused");
}

}  // namespace
}  // namespace devices

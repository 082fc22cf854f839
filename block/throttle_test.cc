#include "block/throttle.h"

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace block {
namespace {

class FakeClock final : public Clock {
 public:
  absl::Time Now() const override { return now_; }
  void Set(absl::Time now) { now_ = now; }

 private:
  absl::Time now_ = absl::UnixEpoch();
};

const absl::Time kStart = absl::UnixEpoch();

TEST(TokenBucketTest, StartsFullRefillsAtItsRateAndLetsLargeCostsGoIntoDebt) {
  TokenBucket bucket(100, 10, kStart);
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(bucket.ReadyAt(1, kStart), kStart) << i;
    bucket.Take(1, kStart);
  }
  // Empty: the next token comes 10 ms later (100 a second).
  EXPECT_EQ(bucket.ReadyAt(1, kStart), kStart + absl::Milliseconds(10));
  // Never more than the capacity, however long it rests.
  EXPECT_EQ(bucket.ReadyAt(10, kStart + absl::Hours(1)), kStart + absl::Hours(1));
  // A cost of 50 (above the capacity of 10) waits for a full bucket, then leaves a debt of 40:
  // 0.4 s until the bucket has one token again... plus the 10 ms of that token.
  const absl::Time full = kStart + absl::Hours(1);
  bucket.Take(50, full);
  EXPECT_EQ(bucket.ReadyAt(1, full), full + absl::Milliseconds(410));
  EXPECT_TRUE(TokenBucket().unlimited());
  EXPECT_EQ(TokenBucket().ReadyAt(1 << 30, kStart), kStart);
}

TEST(IoLimitsTest, ABurstNeedsItsRate) {
  EXPECT_TRUE(ValidateIoLimits({.iops = 100, .iops_burst = 500}).ok());
  EXPECT_FALSE(ValidateIoLimits({.iops_burst = 5}).ok());
  EXPECT_FALSE(ValidateIoLimits({.iops = 1, .bytes_burst = 5}).ok());
  EXPECT_TRUE(IoLimits{}.unlimited());
}

// Queues that send requests as fast as their throttles let them (a guest keeping the drive busy),
// driven by a fake clock: each wakes when its throttle said to, or when it was woken.
struct SimulatedQueue {
  std::vector<Throttle*> throttles;
  uint64_t bytes = 4096;
  absl::Time wake_at = kStart;
  int admitted = 0;
  std::unique_ptr<Throttle::Waiter> waiter;
};

void Simulate(FakeClock& clock, std::vector<SimulatedQueue>& queues, absl::Duration length) {
  for (SimulatedQueue& queue : queues) {
    queue.waiter = std::make_unique<Throttle::Waiter>(
        [&queue](absl::Time at) { queue.wake_at = std::min(queue.wake_at, at); });
  }
  const absl::Time end = kStart + length;
  for (;;) {
    SimulatedQueue* next = nullptr;
    for (SimulatedQueue& queue : queues) {
      if (next == nullptr || queue.wake_at < next->wake_at) next = &queue;
    }
    if (next->wake_at >= end) break;
    clock.Set(std::max(clock.Now(), next->wake_at));
    next->wake_at = absl::InfiniteFuture();
    for (;;) {
      const absl::Time at = AdmitThrough(next->throttles, *next->waiter, next->bytes);
      if (at != absl::InfinitePast()) {
        next->wake_at = std::min(next->wake_at, at);
        break;
      }
      ++next->admitted;
    }
  }
}

TEST(ThrottleTest, ABusyQueueGetsTheRateAndOneBurst) {
  FakeClock clock;
  Throttle throttle("disk0", {.iops = 500}, &clock);
  std::vector<SimulatedQueue> queues(1);
  queues[0].throttles = {&throttle};
  Simulate(clock, queues, absl::Seconds(10));
  // 10 s at 500 a second, plus the bucket it started with (a tenth of a second's worth).
  EXPECT_NEAR(queues[0].admitted, 5000 + 50, 2);
}

TEST(ThrottleTest, BytesAreLimitedTooAndTheTighterLimitWins) {
  FakeClock clock;
  // 1 MiB/s of 64 KiB requests is 16 a second, far below the 1000 IOPS.
  Throttle throttle("disk0", {.iops = 1000, .bytes_per_second = 1 << 20}, &clock);
  std::vector<SimulatedQueue> queues(1);
  queues[0].throttles = {&throttle};
  queues[0].bytes = 64 << 10;
  Simulate(clock, queues, absl::Seconds(10));
  EXPECT_NEAR(queues[0].admitted, 160, 3);
}

TEST(ThrottleTest, QueuesSharingABudgetShareItFairly) {
  FakeClock clock;
  Throttle group("group:tenant", {.iops = 1000}, &clock);
  std::vector<SimulatedQueue> queues(3);
  for (SimulatedQueue& queue : queues) queue.throttles = {&group};
  queues[2].bytes = 1 << 20;  // big requests get no more turns, and no fewer
  Simulate(clock, queues, absl::Seconds(10));
  const int total = queues[0].admitted + queues[1].admitted + queues[2].admitted;
  EXPECT_NEAR(total, 10000 + 100, 3);
  // A third each, in turn; the burst the bucket starts with (100) went to whoever came first.
  for (const SimulatedQueue& queue : queues)
    EXPECT_NEAR(queue.admitted, (total - 100) / 3, 100 + 2);
  EXPECT_NEAR(queues[1].admitted, queues[2].admitted, 2);
}

TEST(ThrottleTest, ADriveInAGroupKeepsWithinBothBudgets) {
  FakeClock clock;
  Throttle group("group:tenant", {.iops = 500}, &clock);
  Throttle limited("disk0", {.iops = 100}, &clock);
  Throttle unlimited("disk1", {}, &clock);
  std::vector<SimulatedQueue> queues(3);
  queues[0].throttles = {&limited, &group};
  queues[1].throttles = {&limited, &group};  // the same drive, on another iothread
  queues[2].throttles = {&unlimited, &group};
  Simulate(clock, queues, absl::Seconds(10));
  // disk0 its 100 a second (and its burst of 10) over its two queues, disk1 the rest of the group.
  EXPECT_NEAR(queues[0].admitted + queues[1].admitted, 1000 + 10, 3);
  EXPECT_NEAR(queues[0].admitted, queues[1].admitted, 10 + 2);  // the burst went to one of them
  EXPECT_NEAR(queues[0].admitted + queues[1].admitted + queues[2].admitted, 5000 + 50, 3);
}

TEST(ThrottleTest, NewLimitsTakeEffectAtOnceAndWakeTheWaiters) {
  FakeClock clock;
  Throttle throttle("disk0", {.iops = 10, .iops_burst = 1}, &clock);
  int woken = 0;
  absl::Time woken_at;
  Throttle::Waiter waiter([&](absl::Time at) {
    ++woken;
    woken_at = at;
  });
  ASSERT_EQ(AdmitThrough({&throttle}, waiter, 512), absl::InfinitePast());
  EXPECT_EQ(AdmitThrough({&throttle}, waiter, 512), kStart + absl::Milliseconds(100));
  clock.Set(kStart + absl::Milliseconds(5));
  throttle.SetLimits({.iops = 1000});
  EXPECT_EQ(woken, 1);
  EXPECT_EQ(woken_at, kStart + absl::Milliseconds(5));
  EXPECT_EQ(AdmitThrough({&throttle}, waiter, 512), absl::InfinitePast());
  throttle.SetLimits({});
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(AdmitThrough({&throttle}, waiter, 512), absl::InfinitePast());
}

TEST(ThrottleTest, AQueueThatLeavesHandsItsTurnOn) {
  FakeClock clock;
  Throttle throttle("disk0", {.iops = 10, .iops_burst = 1}, &clock);
  int second_woken = 0;
  Throttle::Waiter first([](absl::Time) {});
  Throttle::Waiter second([&](absl::Time) { ++second_woken; });
  ASSERT_EQ(AdmitThrough({&throttle}, first, 0), absl::InfinitePast());
  EXPECT_NE(AdmitThrough({&throttle}, first, 0), absl::InfinitePast());     // first waits, in line
  EXPECT_EQ(AdmitThrough({&throttle}, second, 0), absl::InfiniteFuture());  // behind it
  throttle.Leave(first);
  EXPECT_EQ(second_woken, 1);
  clock.Set(kStart + absl::Milliseconds(100));
  EXPECT_EQ(AdmitThrough({&throttle}, second, 0), absl::InfinitePast());
}

}  // namespace
}  // namespace block

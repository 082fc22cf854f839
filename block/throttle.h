#ifndef BLOCK_THROTTLE_H_
#define BLOCK_THROTTLE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace block {

// I/O limits of a drive, or of a group of drives sharing one budget: Firecracker's rate limiter
// (a token bucket for operations and one for bytes) and QEMU's throttle groups.
struct IoLimits {
  uint64_t iops = 0;              // operations per second; 0: no limit
  uint64_t bytes_per_second = 0;  // 0: no limit
  // What may go at once after a quiet spell, beyond the steady rate: the buckets' size. 0: a
  // tenth of a second's worth (at least one operation, or one byte), so a guest that keeps the
  // drive busy gets the rate over any second to within 10 %.
  uint64_t iops_burst = 0;
  uint64_t bytes_burst = 0;

  bool unlimited() const { return iops == 0 && bytes_per_second == 0; }
  bool operator==(const IoLimits&) const = default;
};

// Checks that the numbers make sense (a burst needs its rate). Errors name the field.
absl::Status ValidateIoLimits(const IoLimits& limits);

// A token bucket: `rate` tokens a second up to `capacity`, starting full. A cost above the
// capacity is taken once the bucket is full, leaving it in debt (a 1 MiB request on a bucket of
// 100 KiB goes, then nothing until the debt is paid): no request is too large to ever go.
class TokenBucket {
 public:
  TokenBucket() = default;  // unlimited
  TokenBucket(uint64_t rate, uint64_t capacity, absl::Time now);

  bool unlimited() const { return rate_ == 0; }
  // When `cost` may be taken (`now` or later).
  absl::Time ReadyAt(uint64_t cost, absl::Time now);
  // Takes `cost` (call when ReadyAt(cost) <= now).
  void Take(uint64_t cost, absl::Time now);

 private:
  void Refill(absl::Time now);

  uint64_t rate_ = 0;
  double capacity_ = 0;
  double tokens_ = 0;
  absl::Time last_ = absl::InfinitePast();
};

// What a throttle reads the time from (tests use a fake).
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // The real clock (absl::Now: CLOCK_REALTIME; only differences matter, and the throttle never
  // sleeps on it, it only arms a timer for the difference).
  static Clock* Real();
};

// One budget: a drive's own limits, or a group's that several drives share. Requests are admitted
// one at a time, each taking one operation and its bytes from the budget. Queues that have to wait
// are served in the order they started waiting, one request each in turn, so drives sharing a
// group (and the queues of one drive on several iothreads) share it fairly whatever their queue
// depths. Thread-safe: a drive's queues run on several iothreads, and a group spans drives.
class Throttle {
 public:
  Throttle(std::string name, IoLimits limits, Clock* clock = Clock::Real());

  const std::string& name() const { return name_; }
  IoLimits limits() const;
  // Takes effect at once: the buckets start full at the new rates, and every waiter is told to
  // try again now.
  void SetLimits(const IoLimits& limits);

  // A queue with requests to admit. `wake(at)` asks the queue to try again at `at` (it arms a
  // timer on its own thread; any thread may call it, the throttle's lock held).
  class Waiter {
   public:
    explicit Waiter(std::function<void(absl::Time)> wake) : wake_(std::move(wake)) {}
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;

   private:
    friend class Throttle;
    friend absl::Time AdmitThrough(const std::vector<Throttle*>&, Waiter&, uint64_t);
    std::function<void(absl::Time)> wake_;
  };

  // Forgets `waiter` (its queue is going away, or has nothing left to admit), handing its turn on.
  void Leave(Waiter& waiter);
  // Tells every waiter to try again now (what they wait for changed: a drive's group).
  void WakeWaiters();

 private:
  friend absl::Time AdmitThrough(const std::vector<Throttle*>&, Waiter&, uint64_t);

  // With mutex_ held: when `waiter` may send a request of `bytes` (InfiniteFuture: not its turn;
  // it is woken when it is), queuing it if it must wait.
  absl::Time ReadyAtLocked(Waiter& waiter, uint64_t bytes, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // With mutex_ held: takes the request's tokens; `waiter` leaves the line, the next is woken.
  void TakeLocked(Waiter& waiter, uint64_t bytes, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void LeaveLocked(Waiter& waiter, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const std::string name_;
  Clock* const clock_;
  mutable absl::Mutex mutex_;
  IoLimits limits_ ABSL_GUARDED_BY(mutex_);
  TokenBucket operations_ ABSL_GUARDED_BY(mutex_);
  TokenBucket bytes_ ABSL_GUARDED_BY(mutex_);
  std::deque<Waiter*> waiting_ ABSL_GUARDED_BY(mutex_);
};

// Admits one request of `bytes` through every throttle in `throttles` (a drive's own, then its
// group's: always in that order, so that two callers never lock them the other way round), or
// none: either it takes from all of them and returns InfinitePast, or it takes from none and
// returns when to try again (InfiniteFuture: when `waiter` is woken).
absl::Time AdmitThrough(const std::vector<Throttle*>& throttles, Throttle::Waiter& waiter,
                        uint64_t bytes);

}  // namespace block

#endif  // BLOCK_THROTTLE_H_

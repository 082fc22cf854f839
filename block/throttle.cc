#include "block/throttle.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace block {
namespace {

// A bucket's size: the burst asked for, else a tenth of a second of the rate (at least 1).
uint64_t Capacity(uint64_t rate, uint64_t burst) {
  if (burst != 0) return burst;
  return std::max<uint64_t>(rate / 10, 1);
}

class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

}  // namespace

absl::Status ValidateIoLimits(const IoLimits& limits) {
  if (limits.iops_burst != 0 && limits.iops == 0) {
    return absl::InvalidArgumentError("an iops burst needs an iops limit");
  }
  if (limits.bytes_burst != 0 && limits.bytes_per_second == 0) {
    return absl::InvalidArgumentError("a bytes burst needs a bytes/s limit");
  }
  return absl::OkStatus();
}

TokenBucket::TokenBucket(uint64_t rate, uint64_t capacity, absl::Time now)
    : rate_(rate),
      capacity_(static_cast<double>(capacity)),
      tokens_(static_cast<double>(capacity)),
      last_(now) {}

void TokenBucket::Refill(absl::Time now) {
  if (now <= last_) return;
  tokens_ = std::min(capacity_, tokens_ + absl::ToDoubleSeconds(now - last_) * rate_);
  last_ = now;
}

absl::Time TokenBucket::ReadyAt(uint64_t cost, absl::Time now) {
  if (unlimited()) return now;
  Refill(now);
  // A cost above the capacity waits for a full bucket, then goes into debt.
  const double needed = std::min(static_cast<double>(cost), capacity_);
  if (tokens_ >= needed) return now;
  // Rounded up to the next nanosecond: at that time the tokens are there.
  const double seconds = (needed - tokens_) / static_cast<double>(rate_);
  return now + absl::Nanoseconds(std::ceil(seconds * 1e9));
}

void TokenBucket::Take(uint64_t cost, absl::Time now) {
  if (unlimited()) return;
  Refill(now);
  tokens_ -= static_cast<double>(cost);
}

Clock* Clock::Real() {
  static RealClock clock;  // stateless
  return &clock;
}

Throttle::Throttle(std::string name, IoLimits limits, Clock* clock)
    : name_(std::move(name)), clock_(clock) {
  SetLimits(limits);
}

IoLimits Throttle::limits() const {
  absl::MutexLock lock(&mutex_);
  return limits_;
}

void Throttle::SetLimits(const IoLimits& limits) {
  absl::MutexLock lock(&mutex_);
  const absl::Time now = clock_->Now();
  limits_ = limits;
  operations_ = limits.iops == 0
                    ? TokenBucket()
                    : TokenBucket(limits.iops, Capacity(limits.iops, limits.iops_burst), now);
  bytes_ = limits.bytes_per_second == 0
               ? TokenBucket()
               : TokenBucket(limits.bytes_per_second,
                             Capacity(limits.bytes_per_second, limits.bytes_burst), now);
  // Whoever waits tries again now, under the new limits (the first in line first).
  for (Waiter* waiter : waiting_) waiter->wake_(now);
}

absl::Time Throttle::ReadyAtLocked(Waiter& waiter, uint64_t bytes, absl::Time now) {
  const auto place = std::find(waiting_.begin(), waiting_.end(), &waiter);
  if (place == waiting_.end()) {
    // Not in line: it may go ahead only if nobody waits.
    if (!waiting_.empty()) {
      waiting_.push_back(&waiter);
      return absl::InfiniteFuture();
    }
  } else if (place != waiting_.begin()) {
    return absl::InfiniteFuture();  // woken when it is first
  }
  const absl::Time ready = std::max(operations_.ReadyAt(1, now), bytes_.ReadyAt(bytes, now));
  if (ready > now && place == waiting_.end()) waiting_.push_back(&waiter);
  return ready;
}

void Throttle::TakeLocked(Waiter& waiter, uint64_t bytes, absl::Time now) {
  operations_.Take(1, now);
  bytes_.Take(bytes, now);
  LeaveLocked(waiter, now);
}

void Throttle::LeaveLocked(Waiter& waiter, absl::Time now) {
  const auto place = std::find(waiting_.begin(), waiting_.end(), &waiter);
  if (place == waiting_.end()) return;
  const bool was_first = place == waiting_.begin();
  waiting_.erase(place);
  // The next in line is woken to try now (it learns when its tokens come).
  if (was_first && !waiting_.empty()) waiting_.front()->wake_(now);
}

void Throttle::WakeWaiters() {
  absl::MutexLock lock(&mutex_);
  const absl::Time now = clock_->Now();
  for (Waiter* waiter : waiting_) waiter->wake_(now);
}

void Throttle::Leave(Waiter& waiter) {
  absl::MutexLock lock(&mutex_);
  LeaveLocked(waiter, clock_->Now());
}

// The analysis cannot follow locks held through a vector: every throttle's mutex is taken below,
// before any *Locked call, and held until the function returns.
absl::Time AdmitThrough(const std::vector<Throttle*>& throttles, Throttle::Waiter& waiter,
                        uint64_t bytes) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (throttles.empty()) return absl::InfinitePast();
  // Locked in the order given (a drive's own, then its group's), all at once: the tokens are
  // taken from every throttle or from none. (Locked and unlocked by hand: this runs for every
  // request of a limited or grouped drive, and a list of lock guards was a heap allocation each.)
  for (Throttle* throttle : throttles) throttle->mutex_.Lock();
  const absl::Time now = throttles.front()->clock_->Now();
  absl::Time result = absl::InfinitePast();
  for (size_t i = 0; i < throttles.size(); ++i) {
    const absl::Time at = throttles[i]->ReadyAtLocked(waiter, bytes, now);
    if (at > now) {
      // It waits here (in line, or for tokens). It stands in a later line only while it could go
      // through every earlier one: a drive waiting for its own tokens must not hold up its group,
      // and two waiters can never each hold up the other.
      for (size_t later = i + 1; later < throttles.size(); ++later) {
        throttles[later]->LeaveLocked(waiter, now);
      }
      result = at;
      break;
    }
  }
  if (result == absl::InfinitePast()) {
    for (Throttle* throttle : throttles) throttle->TakeLocked(waiter, bytes, now);
  }
  for (auto it = throttles.rbegin(); it != throttles.rend(); ++it) (*it)->mutex_.Unlock();
  return result;
}

}  // namespace block

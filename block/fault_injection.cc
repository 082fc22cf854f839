#include "block/fault_injection.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <queue>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace block {
namespace {

// SplitMix64 (Steele, Lea, Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
// a stateless hash of (seed, request number) makes probabilistic faults reproducible and needs no
// shared generator state between queues.
uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t MonotonicNanos() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

// The queue half of FaultInjectingBackend. Single-threaded like every BlockQueue; the rules it
// consults are the backend's (atomics).
class FaultInjectingQueue : public BlockQueue {
 public:
  static absl::StatusOr<std::unique_ptr<FaultInjectingQueue>> Create(FaultInjectingBackend* backend,
                                                                     CompletionHandler handler) {
    std::unique_ptr<FaultInjectingQueue> queue(
        new FaultInjectingQueue(backend, std::move(handler)));
    RETURN_IF_ERROR(queue->Init());
    return queue;
  }

  void Enqueue(const Request& request, uint64_t cookie) override {
    ++in_flight_;
    FaultInjectingBackend::Decision decision = backend_->Decide(request, rule_cache_);
    const int64_t delay_ns = std::max<int64_t>(0, absl::ToInt64Nanoseconds(decision.delay));

    uint64_t prefix = 0;
    if (decision.torn) {
      // Whole logical blocks only: an O_DIRECT inner backend rejects anything else (EINVAL), and a
      // real device tears at sector granularity at best.
      const uint64_t block = std::max<uint64_t>(1, backend_->info().logical_block_size);
      prefix = std::min(decision.torn_bytes, request.length()) / block * block;
    }
    if (decision.fail_error != 0 && prefix == 0) {
      // Failed here: the inner backend never sees it.
      if (delay_ns > 0) {
        Hold(cookie, decision.fail_error, MonotonicNanos() + delay_ns);
      } else {
        ready_.push_back({cookie, decision.fail_error});
        Signal();
      }
      return;
    }

    const uint64_t slot_index = AllocateSlot();
    Slot& slot = slots_[slot_index];
    slot.cookie = cookie;
    slot.fail_error = decision.fail_error;
    slot.delay_ns = delay_ns;
    if (prefix == 0) {
      inner_->Enqueue(request, slot_index);
      return;
    }
    // The torn write: the same request, cut after `prefix` bytes. The cut iovec array lives in the
    // slot until the inner backend completes it (request.h: it must stay valid until then).
    uint64_t remaining = prefix;
    for (const iovec& buffer : request.buffers) {
      if (remaining == 0) break;
      const size_t take = std::min<uint64_t>(remaining, buffer.iov_len);
      slot.torn_buffers.push_back({buffer.iov_base, take});
      remaining -= take;
    }
    Request cut = request;
    cut.buffers = std::span<const iovec>(slot.torn_buffers);
    inner_->Enqueue(cut, slot_index);
  }

  void Submit() override { inner_->Submit(); }

  int completion_fd() const override { return epoll_fd_.get(); }

  void ProcessCompletions() override {
    // Clear our own sources first, so anything signalled from here on (a handler enqueuing a
    // request that fails at once) keeps the epoll fd readable for the next round.
    sys_util::DrainEventFd(event_fd_.get());
    uint64_t expirations;  // a timerfd: read(2) is the only way to clear it
    (void)!::read(timer_fd_.get(), &expirations, sizeof(expirations));
    timer_armed_at_ = 0;

    inner_->ProcessCompletions();  // appends to reaped_ (see the inner handler)

    const int64_t now = MonotonicNanos();
    std::vector<Ready> deliver;
    deliver.swap(ready_);
    for (const auto& [slot_index, completion] : reaped_) {
      Slot& slot = slots_[slot_index];
      // A torn write fails whatever the inner backend said about its prefix.
      const int error = slot.fail_error != 0 ? slot.fail_error : completion.error;
      if (slot.delay_ns > 0) {
        Hold(slot.cookie, error, now + slot.delay_ns);
      } else {
        deliver.push_back({slot.cookie, error});
      }
      FreeSlot(slot_index);
    }
    reaped_.clear();
    while (!held_.empty() && held_.top().deadline_ns <= now) {
      deliver.push_back({held_.top().cookie, held_.top().error});
      held_.pop();
    }
    ArmTimer();

    for (const Ready& done : deliver) {
      --in_flight_;
      handler_(done.cookie, Completion{done.error});
    }
  }

  size_t in_flight() const override { return in_flight_; }

 private:
  struct Slot {
    uint64_t cookie = 0;
    int fail_error = 0;
    int64_t delay_ns = 0;
    std::vector<iovec> torn_buffers;
  };
  struct Ready {
    uint64_t cookie;
    int error;
  };
  struct Held {
    int64_t deadline_ns;
    uint64_t sequence;  // equal deadlines complete in the order they were held
    uint64_t cookie;
    int error;
    bool operator>(const Held& other) const {
      return deadline_ns != other.deadline_ns ? deadline_ns > other.deadline_ns
                                              : sequence > other.sequence;
    }
  };

  FaultInjectingQueue(FaultInjectingBackend* backend, CompletionHandler handler)
      : backend_(backend), handler_(std::move(handler)) {}

  absl::Status Init() {
    event_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!event_fd_.valid()) return sys_util::ErrnoStatus(errno, "eventfd");
    // CLOCK_MONOTONIC with absolute deadlines: immune to wall-clock steps, and a deadline already
    // past fires at once.
    timer_fd_.Reset(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK));
    if (!timer_fd_.valid()) return sys_util::ErrnoStatus(errno, "timerfd_create");
    epoll_fd_.Reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_fd_.valid()) return sys_util::ErrnoStatus(errno, "epoll_create1");

    // The inner queue completes into reaped_; ProcessCompletions() decides what the caller sees.
    // Collecting instead of calling our handler from inside the inner ProcessCompletions() keeps
    // the caller's handler (which may Enqueue again) from re-entering the inner queue mid-reap.
    ASSIGN_OR_RETURN(inner_,
                     backend_->inner()->CreateQueue([this](uint64_t slot, Completion completion) {
                       reaped_.push_back({slot, completion});
                     }));

    for (int fd : {inner_->completion_fd(), event_fd_.get(), timer_fd_.get()}) {
      epoll_event event = {};
      event.events = EPOLLIN;  // level-triggered: readable for as long as any source is
      event.data.fd = fd;
      if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
        return sys_util::ErrnoStatus(errno, "epoll_ctl(ADD)");
      }
    }
    return absl::OkStatus();
  }

  void Signal() { sys_util::SignalEventFd(event_fd_.get()); }

  void Hold(uint64_t cookie, int error, int64_t deadline_ns) {
    held_.push(Held{deadline_ns, next_sequence_++, cookie, error});
    ArmTimer();
  }

  // Points the timerfd at the earliest held completion (or disarms it).
  void ArmTimer() {
    const int64_t next = held_.empty() ? 0 : held_.top().deadline_ns;
    if (next == timer_armed_at_) return;
    itimerspec spec = {};
    if (next != 0) {
      spec.it_value.tv_sec = next / 1'000'000'000;
      spec.it_value.tv_nsec = next % 1'000'000'000;
    }
    ::timerfd_settime(timer_fd_.get(), TFD_TIMER_ABSTIME, &spec, nullptr);
    timer_armed_at_ = next;
  }

  uint64_t AllocateSlot() {
    if (!free_slots_.empty()) {
      const uint64_t index = free_slots_.back();
      free_slots_.pop_back();
      return index;
    }
    slots_.emplace_back();
    return slots_.size() - 1;
  }

  void FreeSlot(uint64_t index) {
    slots_[index].torn_buffers.clear();
    free_slots_.push_back(index);
  }

  FaultInjectingBackend* const backend_;
  FaultInjectingBackend::RuleCache rule_cache_;
  CompletionHandler handler_;
  sys_util::ScopedFd event_fd_;
  sys_util::ScopedFd timer_fd_;
  sys_util::ScopedFd epoll_fd_;
  size_t in_flight_ = 0;
  // Requests at the inner backend, by inner cookie. A slot's torn_buffers keeps its heap array
  // when slots_ grows (vector move), so the inner backend's span stays valid.
  std::vector<Slot> slots_;
  std::vector<uint64_t> free_slots_;
  std::vector<std::pair<uint64_t, Completion>> reaped_;
  std::vector<Ready> ready_;
  std::priority_queue<Held, std::vector<Held>, std::greater<Held>> held_;
  uint64_t next_sequence_ = 0;
  int64_t timer_armed_at_ = 0;
  // Declared last, destroyed first: it may still hold our `this` in its handler.
  std::unique_ptr<BlockQueue> inner_;
};

// ---- FaultRule ----------------------------------------------------------------------------------

FaultRule FaultRule::FailNth(uint64_t n, int error) {
  FaultRule rule;
  rule.trigger = Trigger::kNth;
  rule.n = n;
  rule.action = Action::kFail;
  rule.error = error;
  return rule;
}

FaultRule FaultRule::FailEvery(uint64_t period, int error) {
  FaultRule rule = FailNth(period, error);
  rule.trigger = Trigger::kEvery;
  return rule;
}

FaultRule FaultRule::FailWithProbability(double probability, uint64_t seed, int error) {
  FaultRule rule = FailNth(0, error);
  rule.trigger = Trigger::kProbability;
  rule.probability = probability;
  rule.seed = seed;
  return rule;
}

FaultRule FaultRule::DelayEvery(uint64_t period, absl::Duration delay) {
  FaultRule rule;
  rule.trigger = Trigger::kEvery;
  rule.n = period;
  rule.action = Action::kDelay;
  rule.delay = delay;
  return rule;
}

FaultRule FaultRule::TearNthWrite(uint64_t n, uint64_t torn_bytes, int error) {
  FaultRule rule = FailNth(n, error);
  rule.type = RequestType::kWrite;
  rule.action = Action::kTornWrite;
  rule.torn_bytes = torn_bytes;
  return rule;
}

FaultRule FaultRule::OnlyFor(RequestType request_type) const {
  FaultRule rule = *this;
  rule.type = request_type;
  return rule;
}

// ---- FaultInjectingBackend ----------------------------------------------------------------------

FaultInjectingBackend::FaultInjectingBackend(std::shared_ptr<BlockBackend> inner)
    : inner_(std::move(inner)), rules_(std::make_shared<const RuleSet>()) {}

absl::StatusOr<std::unique_ptr<BlockQueue>> FaultInjectingBackend::CreateQueue(
    CompletionHandler handler) {
  ASSIGN_OR_RETURN(std::unique_ptr<FaultInjectingQueue> queue,
                   FaultInjectingQueue::Create(this, std::move(handler)));
  return std::unique_ptr<BlockQueue>(std::move(queue));
}

FaultInjectingBackend::RuleId FaultInjectingBackend::AddRule(const FaultRule& rule) {
  auto active = std::make_shared<ActiveRule>();
  active->rule = rule;
  // request.h: a completion's error is a positive errno.
  if (active->rule.error <= 0) active->rule.error = EIO;
  absl::MutexLock lock(&rules_mutex_);
  const RuleId id = next_rule_id_++;
  active->id = id;
  auto next = std::make_shared<RuleSet>(*rules_);
  next->push_back(std::move(active));
  rules_ = std::move(next);
  rules_version_.fetch_add(1, std::memory_order_release);
  return id;
}

bool FaultInjectingBackend::RemoveRule(RuleId id) {
  absl::MutexLock lock(&rules_mutex_);
  auto next = std::make_shared<RuleSet>(*rules_);
  auto it = std::find_if(next->begin(), next->end(),
                         [id](const std::shared_ptr<ActiveRule>& rule) { return rule->id == id; });
  if (it == next->end()) return false;
  next->erase(it);
  rules_ = std::move(next);
  rules_version_.fetch_add(1, std::memory_order_release);
  return true;
}

void FaultInjectingBackend::ClearRules() {
  absl::MutexLock lock(&rules_mutex_);
  rules_ = std::make_shared<const RuleSet>();
  rules_version_.fetch_add(1, std::memory_order_release);
}

uint64_t FaultInjectingBackend::fired(RuleId id) const {
  absl::MutexLock lock(&rules_mutex_);
  for (const auto& rule : *rules_) {
    if (rule->id == id) return rule->fired.load(std::memory_order_relaxed);
  }
  return 0;
}

FaultStats FaultInjectingBackend::stats() const {
  FaultStats stats;
  stats.requests = requests_.load(std::memory_order_relaxed);
  stats.failed = failed_.load(std::memory_order_relaxed);
  stats.delayed = delayed_.load(std::memory_order_relaxed);
  stats.torn = torn_.load(std::memory_order_relaxed);
  return stats;
}

FaultInjectingBackend::Decision FaultInjectingBackend::Decide(const Request& request,
                                                              RuleCache& cache) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  // Acquire pairs with the writers' release: a version seen implies its rule set is published.
  const uint64_t version = rules_version_.load(std::memory_order_acquire);
  if (version != cache.version) {
    absl::MutexLock lock(&rules_mutex_);
    cache.rules = rules_;
    cache.version = rules_version_.load(std::memory_order_relaxed);
  }
  Decision decision;
  for (const std::shared_ptr<ActiveRule>& active : *cache.rules) {
    const FaultRule& rule = active->rule;
    if (rule.type.has_value() && *rule.type != request.type) continue;
    if (rule.action == FaultRule::Action::kTornWrite && request.type != RequestType::kWrite) {
      continue;
    }
    const uint64_t m = active->matched.fetch_add(1, std::memory_order_relaxed) + 1;
    bool fires = false;
    switch (rule.trigger) {
      case FaultRule::Trigger::kNth:
        fires = m == rule.n;
        break;
      case FaultRule::Trigger::kEvery:
        fires = rule.n > 0 && m % rule.n == 0;
        break;
      case FaultRule::Trigger::kProbability: {
        // 53 random bits to a double in [0, 1).
        const double draw =
            static_cast<double>(SplitMix64(rule.seed ^ SplitMix64(m)) >> 11) * 0x1.0p-53;
        fires = draw < rule.probability;
        break;
      }
    }
    if (!fires) continue;
    active->fired.fetch_add(1, std::memory_order_relaxed);
    switch (rule.action) {
      case FaultRule::Action::kFail:
        if (decision.fail_error == 0) decision.fail_error = rule.error;
        break;
      case FaultRule::Action::kTornWrite:
        if (decision.fail_error == 0) {
          decision.fail_error = rule.error;
          decision.torn = true;
          decision.torn_bytes = rule.torn_bytes;
        }
        break;
      case FaultRule::Action::kDelay:
        decision.delay += rule.delay;
        break;
    }
  }
  if (decision.torn) {
    torn_.fetch_add(1, std::memory_order_relaxed);
  } else if (decision.fail_error != 0) {
    failed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (decision.delay > absl::ZeroDuration()) delayed_.fetch_add(1, std::memory_order_relaxed);
  return decision;
}

}  // namespace block

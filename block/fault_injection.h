#ifndef BLOCK_FAULT_INJECTION_H_
#define BLOCK_FAULT_INJECTION_H_

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "block/backend.h"
#include "block/request.h"

namespace block {

class FaultInjectingQueue;

// One fault-injection rule: which requests it looks at, when it fires, and what it does then.
// Built with the helpers below, e.g. FaultRule::FailNth(3, EIO).OnlyFor(RequestType::kWrite).
struct FaultRule {
  enum class Trigger {
    kNth,          // the n-th matching request after the rule was added (1-based), once
    kEvery,        // every n-th matching request (n, 2n, 3n, ...)
    kProbability,  // each matching request with `probability`, from a seeded sequence
  };
  enum class Action {
    kFail,       // complete with `error` without sending the request to the inner backend
    kDelay,      // send it; hold its completion for `delay` after the inner backend finished
    kTornWrite,  // writes only: send the first `torn_bytes` to the inner backend, then fail with
                 // `error` whatever the inner backend said (see "torn writes" below)
  };

  // Matching requests: every type, or only `type`.
  std::optional<RequestType> type;
  Trigger trigger = Trigger::kNth;
  uint64_t n = 1;
  double probability = 0;
  uint64_t seed = 0;  // kProbability: same seed and same request order, same faults
  Action action = Action::kFail;
  int error = EIO;          // kFail, kTornWrite: the positive errno to complete with
  absl::Duration delay;     // kDelay
  uint64_t torn_bytes = 0;  // kTornWrite: the prefix that reaches the inner backend

  static FaultRule FailNth(uint64_t n, int error = EIO);
  static FaultRule FailEvery(uint64_t period, int error = EIO);
  static FaultRule FailWithProbability(double probability, uint64_t seed, int error = EIO);
  static FaultRule DelayEvery(uint64_t period, absl::Duration delay);
  static FaultRule TearNthWrite(uint64_t n, uint64_t torn_bytes, int error = EIO);
  FaultRule OnlyFor(RequestType request_type) const;
};

// Counts of what was injected, over all queues.
struct FaultStats {
  uint64_t requests = 0;  // requests seen
  uint64_t failed = 0;    // failed without reaching the inner backend
  uint64_t delayed = 0;
  uint64_t torn = 0;
  uint64_t injected() const { return failed + delayed + torn; }
};

// Wraps any BlockBackend and injects faults into its I/O, to test that what sits above (the drive
// layer, the devices, the guest) survives them: I/O errors, a full disk, slow completions, torn
// writes. Reports the inner backend's info() unchanged.
//
// Rules can be added and removed at any time from any thread while queues run I/O on theirs, and
// apply to requests enqueued after the call returns. The rule set is an immutable snapshot with a
// version number: per request a queue loads the version (one atomic load) and uses its cached
// snapshot, re-reading it only after a change. Each rule's counters are atomics shared by every
// queue, so "the n-th request" counts across queues. Every matching rule counts every request it
// sees; when several fire on one request, the first failing rule (in the order added) decides the
// error and the delays add up (a delayed failure is a slow error).
//
// Torn writes. The block layer's contract (request.h) is that a request completes whole or fails:
// there is no "short write" completion to inject at this level. What a device must survive is a
// write that failed after part of it reached the medium: so a torn write sends only its first
// `torn_bytes` (rounded down to the logical block size, since an O_DIRECT backend cannot write
// less) to the inner backend and then completes with an error. A later read returns the new data
// in the prefix and the old data after it. A prefix shorter than one block is a plain failure.
//
// Completions and the one completion fd. A wrapper queue has three sources of completions: the
// inner queue (requests it forwarded), failures it decided at Enqueue() (never sent), and
// completions it holds back for a delay. Its completion_fd() is an epoll fd watching, level-
// triggered, the inner queue's completion_fd(), an eventfd it signals for immediate failures, and
// a CLOCK_MONOTONIC timerfd armed at the earliest held deadline. An epoll fd is itself pollable
// (and can sit in the caller's epoll set), so callers treat it like any queue's fd.
// ProcessCompletions() clears the eventfd and timerfd, lets the inner queue reap (collecting its
// completions instead of running the caller's handler inside the inner queue), holds what must be
// delayed, re-arms the timer, and only then runs the caller's handler, which may enqueue again.
// Completions may overtake each other (an injected failure completes before earlier forwarded
// requests), as on any real backend.
//
// After any injected fault the backend keeps working: a fault is one request's outcome.
class FaultInjectingBackend : public BlockBackend {
 public:
  using RuleId = uint64_t;

  explicit FaultInjectingBackend(std::shared_ptr<BlockBackend> inner);

  const BackendInfo& info() const override { return inner_->info(); }
  // Creates an inner queue too; fails if that or the queue's epoll/eventfd/timerfd cannot be made.
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) override;

  RuleId AddRule(const FaultRule& rule);
  // False if there is no such rule. (A kNth rule that fired stays, inert, until removed.)
  bool RemoveRule(RuleId id);
  void ClearRules();
  // How often rule `id` fired (0 for an unknown rule).
  uint64_t fired(RuleId id) const;

  FaultStats stats() const;
  const std::shared_ptr<BlockBackend>& inner() const { return inner_; }

 private:
  friend class FaultInjectingQueue;

  // A rule with its run-time counters.
  struct ActiveRule {
    RuleId id;
    FaultRule rule;
    std::atomic<uint64_t> matched{0};
    std::atomic<uint64_t> fired{0};
  };
  using RuleSet = std::vector<std::shared_ptr<ActiveRule>>;

  // A queue's copy of the current rule set, refreshed when the version moves.
  struct RuleCache {
    uint64_t version = 0;
    std::shared_ptr<const RuleSet> rules;
  };

  // What the rules decide for one request (the queues call it once per request).
  struct Decision {
    int fail_error = 0;  // > 0: fail with this errno, without the inner I/O unless `torn`
    bool torn = false;   // forward the first `torn_bytes` of the write, then fail
    uint64_t torn_bytes = 0;
    absl::Duration delay;  // hold the completion this long
  };
  Decision Decide(const Request& request, RuleCache& cache);

  const std::shared_ptr<BlockBackend> inner_;

  // The current rules, replaced whole (copy on write) under rules_mutex_, and their version. The
  // hot path loads only the version: a queue takes the mutex to copy the pointer after a change.
  // (Not std::atomic<std::shared_ptr>: libstdc++ 12's load() releases its internal lock with
  // memory_order_relaxed, a race ThreadSanitizer reports against the next store.)
  mutable absl::Mutex rules_mutex_;
  std::shared_ptr<const RuleSet> rules_ ABSL_GUARDED_BY(rules_mutex_);
  RuleId next_rule_id_ ABSL_GUARDED_BY(rules_mutex_) = 1;
  std::atomic<uint64_t> rules_version_{1};

  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<uint64_t> delayed_{0};
  std::atomic<uint64_t> torn_{0};
};

}  // namespace block

#endif  // BLOCK_FAULT_INJECTION_H_

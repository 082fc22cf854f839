#include "block/fault_injection.h"

#include <poll.h>
#include <sys/uio.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "block/backend.h"
#include "block/memory_backend.h"
#include "block/request.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace block {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

constexpr uint32_t kBlock = 512;

bool Readable(int fd, int timeout_ms) {
  pollfd p = {fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// One queue on a FaultInjectingBackend over a MemoryBackend, with buffers that live as long as the
// harness, and the completions in arrival order.
class Harness {
 public:
  explicit Harness(uint64_t size = 1 << 20)
      : memory_(std::make_shared<MemoryBackend>(MemoryBackendOptions{.size_bytes = size})),
        faults_(std::make_shared<FaultInjectingBackend>(memory_)) {
    auto queue = faults_->CreateQueue([this](uint64_t cookie, Completion completion) {
      completions_.push_back({cookie, completion.error});
    });
    EXPECT_TRUE(queue.ok()) << queue.status();
    queue_ = *std::move(queue);
  }

  // Enqueues a write of `length` bytes of `fill` at `offset`; returns its cookie.
  uint64_t Write(uint64_t offset, uint64_t length, uint8_t fill) {
    auto& buffer = buffers_.emplace_back(length, fill);
    return Enqueue(RequestType::kWrite, offset, buffer);
  }
  uint64_t Read(uint64_t offset, uint64_t length) {
    auto& buffer = buffers_.emplace_back(length, 0);
    return Enqueue(RequestType::kRead, offset, buffer);
  }
  uint64_t Flush() {
    Request request;
    request.type = RequestType::kFlush;
    const uint64_t cookie = next_cookie_++;
    queue_->Enqueue(request, cookie);
    return cookie;
  }

  // Submits, then polls completion_fd() and processes until `count` more completions arrived.
  void SubmitAndWait(size_t count, int timeout_ms = 5000) {
    queue_->Submit();
    const size_t target = completions_.size() + count;
    const absl::Time deadline = absl::Now() + absl::Milliseconds(timeout_ms);
    while (completions_.size() < target) {
      const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
      ASSERT_GT(left, 0) << "timed out with " << completions_.size() << " of " << target;
      if (Readable(queue_->completion_fd(), static_cast<int>(left))) {
        queue_->ProcessCompletions();
      }
    }
  }

  // The errors of the requests with cookies from `first_cookie` on, in cookie (= enqueue) order.
  // Completions themselves may arrive in any order: an injected failure overtakes requests that
  // went to the backend, as completions on a real backend do.
  std::vector<int> ErrorsFrom(uint64_t first_cookie) const {
    std::vector<int> errors;
    for (const auto& [cookie, error] : Results()) {
      if (cookie >= first_cookie) errors.push_back(error);
    }
    return errors;
  }
  uint64_t next_cookie() const { return next_cookie_; }

  // The error each cookie completed with.
  std::map<uint64_t, int> Results() const {
    std::map<uint64_t, int> results;
    for (const auto& [cookie, error] : completions_) results[cookie] = error;
    return results;
  }

  std::vector<uint8_t> Data(uint64_t offset, uint64_t length) const {
    auto data = memory_->ReadData(offset, length);
    EXPECT_TRUE(data.ok());
    return data.ok() ? *data : std::vector<uint8_t>();
  }

  MemoryBackend& memory() { return *memory_; }
  FaultInjectingBackend& faults() { return *faults_; }
  BlockQueue& queue() { return *queue_; }
  std::vector<std::pair<uint64_t, int>>& completions() { return completions_; }

 private:
  uint64_t Enqueue(RequestType type, uint64_t offset, std::vector<uint8_t>& buffer) {
    auto& iov = iovecs_.emplace_back(1, iovec{buffer.data(), buffer.size()});
    Request request;
    request.type = type;
    request.offset = offset;
    request.buffers = iov;
    const uint64_t cookie = next_cookie_++;
    queue_->Enqueue(request, cookie);
    return cookie;
  }

  std::shared_ptr<MemoryBackend> memory_;
  std::shared_ptr<FaultInjectingBackend> faults_;
  std::unique_ptr<BlockQueue> queue_;
  std::deque<std::vector<uint8_t>> buffers_;  // deque: stable addresses
  std::deque<std::vector<iovec>> iovecs_;
  std::vector<std::pair<uint64_t, int>> completions_;
  uint64_t next_cookie_ = 1;
};

TEST(FaultInjectionTest, ReportsTheInnerBackendsInfo) {
  auto memory = std::make_shared<MemoryBackend>(
      MemoryBackendOptions{.size_bytes = 4096 * 10, .logical_block_size = 4096, .discard = false});
  FaultInjectingBackend faults(memory);
  EXPECT_EQ(faults.info().size_bytes, 4096u * 10);
  EXPECT_EQ(faults.info().logical_block_size, 4096u);
  EXPECT_FALSE(faults.info().discard);
}

TEST(FaultInjectionTest, NoRulesPassesEverythingThrough) {
  Harness h;
  const uint64_t w = h.Write(0, kBlock, 0x11);
  h.SubmitAndWait(1);
  const uint64_t r = h.Read(0, kBlock);
  h.SubmitAndWait(1);
  EXPECT_THAT(h.Results(), ElementsAre(Pair(w, 0), Pair(r, 0)));
  EXPECT_EQ(h.memory().operation_count(), 2u);
  EXPECT_EQ(h.faults().stats().requests, 2u);
  EXPECT_EQ(h.faults().stats().injected(), 0u);
  EXPECT_EQ(h.queue().in_flight(), 0u);
}

TEST(FaultInjectionTest, NthRequestFailsWithEioWithoutReachingTheBackendThenIoContinues) {
  Harness h;
  const auto rule = h.faults().AddRule(FaultRule::FailNth(3, EIO));
  std::vector<uint64_t> cookies;
  for (int i = 0; i < 5; ++i) cookies.push_back(h.Write(i * kBlock, kBlock, 0xA0 + i));
  h.SubmitAndWait(5);

  auto results = h.Results();
  EXPECT_EQ(results[cookies[0]], 0);
  EXPECT_EQ(results[cookies[1]], 0);
  EXPECT_EQ(results[cookies[2]], EIO);
  EXPECT_EQ(results[cookies[3]], 0);
  EXPECT_EQ(results[cookies[4]], 0);
  // The failed write never reached the backend: 4 operations, and its block still holds zeros.
  EXPECT_EQ(h.memory().operation_count(), 4u);
  EXPECT_EQ(h.Data(2 * kBlock, kBlock), std::vector<uint8_t>(kBlock, 0));
  EXPECT_EQ(h.Data(3 * kBlock, kBlock), std::vector<uint8_t>(kBlock, 0xA3));
  EXPECT_EQ(h.faults().fired(rule), 1u);
  EXPECT_EQ(h.faults().stats().failed, 1u);

  // The rule was one-shot: everything afterwards succeeds.
  for (int i = 0; i < 10; ++i) h.Write(0, kBlock, 0x55);
  h.SubmitAndWait(10);
  for (size_t i = 5; i < h.completions().size(); ++i) EXPECT_EQ(h.completions()[i].second, 0);
  EXPECT_EQ(h.faults().fired(rule), 1u);
  EXPECT_EQ(h.queue().in_flight(), 0u);
}

TEST(FaultInjectionTest, NthOfATypeCountsOnlyThatType) {
  Harness h;
  h.faults().AddRule(FaultRule::FailNth(2, EIO).OnlyFor(RequestType::kRead));
  const uint64_t r1 = h.Read(0, kBlock);
  const uint64_t w1 = h.Write(0, kBlock, 1);
  const uint64_t f1 = h.Flush();
  const uint64_t w2 = h.Write(0, kBlock, 2);
  const uint64_t r2 = h.Read(0, kBlock);  // the second read
  const uint64_t r3 = h.Read(0, kBlock);
  h.SubmitAndWait(6);
  EXPECT_THAT(h.Results(), ElementsAre(Pair(r1, 0), Pair(w1, 0), Pair(f1, 0), Pair(w2, 0),
                                       Pair(r2, EIO), Pair(r3, 0)));
}

TEST(FaultInjectionTest, EnospcOnAWrite) {
  Harness h;
  h.faults().AddRule(FaultRule::FailNth(1, ENOSPC).OnlyFor(RequestType::kWrite));
  const uint64_t read = h.Read(0, kBlock);
  const uint64_t full = h.Write(0, kBlock, 0xEE);
  const uint64_t later = h.Write(kBlock, kBlock, 0xFF);
  h.SubmitAndWait(3);
  EXPECT_THAT(h.Results(), ElementsAre(Pair(read, 0), Pair(full, ENOSPC), Pair(later, 0)));
  EXPECT_EQ(h.Data(0, kBlock), std::vector<uint8_t>(kBlock, 0));
  EXPECT_EQ(h.Data(kBlock, kBlock), std::vector<uint8_t>(kBlock, 0xFF));
}

TEST(FaultInjectionTest, NthCountsAcrossQueues) {
  auto memory = std::make_shared<MemoryBackend>();
  FaultInjectingBackend faults(memory);
  faults.AddRule(FaultRule::FailNth(2));
  std::map<uint64_t, int> errors;
  auto a = faults.CreateQueue([&](uint64_t cookie, Completion c) { errors[cookie] = c.error; });
  auto b = faults.CreateQueue([&](uint64_t cookie, Completion c) { errors[cookie] = c.error; });
  ASSERT_TRUE(a.ok() && b.ok());
  Request flush;
  flush.type = RequestType::kFlush;
  (*a)->Enqueue(flush, 1);  // first
  (*b)->Enqueue(flush, 2);  // second: fails, though it is this queue's first
  for (auto* q : {a->get(), b->get()}) {
    q->Submit();
    ASSERT_TRUE(Readable(q->completion_fd(), 5000));
    q->ProcessCompletions();
  }
  EXPECT_THAT(errors, ElementsAre(Pair(1, 0), Pair(2, EIO)));
}

TEST(FaultInjectionTest, PeriodAndProbability) {
  Harness h;
  const auto every3 = h.faults().AddRule(FaultRule::FailEvery(3, EIO));
  for (int i = 0; i < 9; ++i) h.Flush();
  h.SubmitAndWait(9);
  EXPECT_THAT(h.ErrorsFrom(1), ElementsAre(0, 0, EIO, 0, 0, EIO, 0, 0, EIO));
  EXPECT_EQ(h.faults().fired(every3), 3u);
  ASSERT_TRUE(h.faults().RemoveRule(every3));

  // Probability 1 fails all, 0 none; in between, reproducible for a seed.
  const auto always = h.faults().AddRule(FaultRule::FailWithProbability(1.0, 7, EIO));
  for (int i = 0; i < 20; ++i) h.Flush();
  h.SubmitAndWait(20);
  EXPECT_EQ(h.faults().fired(always), 20u);
  h.faults().ClearRules();

  auto count_failures = [](uint64_t seed) {
    Harness local;
    local.faults().AddRule(FaultRule::FailWithProbability(0.25, seed, EIO));
    for (int i = 0; i < 400; ++i) local.Flush();
    local.SubmitAndWait(400);
    return local.ErrorsFrom(1);
  };
  const auto first = count_failures(42);
  EXPECT_EQ(first, count_failures(42));
  const auto failed = std::count(first.begin(), first.end(), EIO);
  EXPECT_GT(failed, 60);  // 100 expected
  EXPECT_LT(failed, 140);
}

TEST(FaultInjectionTest, DelayHoldsTheCompletionUntilTheTimerFires) {
  Harness h;
  constexpr auto kDelay = absl::Milliseconds(150);
  h.faults().AddRule(FaultRule::DelayEvery(1, kDelay));
  const uint64_t cookie = h.Write(0, kBlock, 0x42);
  const absl::Time start = absl::Now();
  h.queue().Submit();

  // The inner backend finishes at once: the fd wakes us, but the completion is held.
  ASSERT_TRUE(Readable(h.queue().completion_fd(), 1000));
  h.queue().ProcessCompletions();
  EXPECT_TRUE(h.completions().empty());
  EXPECT_EQ(h.queue().in_flight(), 1u);
  EXPECT_EQ(h.Data(0, kBlock), std::vector<uint8_t>(kBlock, 0x42));  // the write itself happened
  // Readiness was cleared: nothing to do until the timer expires.
  EXPECT_FALSE(Readable(h.queue().completion_fd(), 20));

  ASSERT_TRUE(Readable(h.queue().completion_fd(), 2000));
  EXPECT_GE(absl::Now() - start, kDelay - absl::Milliseconds(1));
  h.queue().ProcessCompletions();
  EXPECT_THAT(h.Results(), ElementsAre(Pair(cookie, 0)));
  EXPECT_EQ(h.queue().in_flight(), 0u);
  EXPECT_EQ(h.faults().stats().delayed, 1u);
  EXPECT_FALSE(Readable(h.queue().completion_fd(), 0));
}

TEST(FaultInjectionTest, DelayedCompletionsKeepTheirOrderAndOthersAreNotHeld) {
  Harness h;
  h.faults().AddRule(
      FaultRule::DelayEvery(1, absl::Milliseconds(100)).OnlyFor(RequestType::kWrite));
  const uint64_t w1 = h.Write(0, kBlock, 1);
  const uint64_t w2 = h.Write(kBlock, kBlock, 2);
  const uint64_t r = h.Read(0, kBlock);
  h.SubmitAndWait(1);
  EXPECT_EQ(h.completions()[0].first, r);  // not delayed: overtakes the held writes
  h.SubmitAndWait(2);
  EXPECT_EQ(h.completions()[1].first, w1);
  EXPECT_EQ(h.completions()[2].first, w2);
}

TEST(FaultInjectionTest, DelayedFailureFailsLateWithoutReachingTheBackend) {
  Harness h;
  h.faults().AddRule(FaultRule::FailNth(1, EIO));
  h.faults().AddRule(FaultRule::DelayEvery(1, absl::Milliseconds(80)));
  const absl::Time start = absl::Now();
  const uint64_t cookie = h.Write(0, kBlock, 9);
  h.SubmitAndWait(1);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(79));
  EXPECT_THAT(h.Results(), ElementsAre(Pair(cookie, EIO)));
  EXPECT_EQ(h.memory().operation_count(), 0u);
}

TEST(FaultInjectionTest, TornWriteWritesOnlyThePrefixAndFailsWithEio) {
  Harness h;
  // 1000 bytes rounds down to 512: whole logical blocks only.
  const auto rule = h.faults().AddRule(FaultRule::TearNthWrite(1, 1000, EIO));
  ASSERT_TRUE(h.memory().WriteData(0, std::vector<uint8_t>(4 * kBlock, 0x11)).ok());

  // A write of 4 blocks from two iovecs (3 + 1 blocks): the prefix cuts inside the first one.
  std::vector<uint8_t> a(3 * kBlock, 0xAB), b(kBlock, 0xCD);
  std::vector<iovec> iov = {{a.data(), a.size()}, {b.data(), b.size()}};
  Request write;
  write.type = RequestType::kWrite;
  write.offset = 0;
  write.buffers = iov;
  h.queue().Enqueue(write, 77);
  h.SubmitAndWait(1);

  EXPECT_THAT(h.Results(), ElementsAre(Pair(77, EIO)));
  ASSERT_EQ(h.memory().operation_count(), 1u);
  EXPECT_EQ(h.memory().operations()[0].length, kBlock);  // only the prefix reached the backend
  EXPECT_EQ(h.Data(0, kBlock), std::vector<uint8_t>(kBlock, 0xAB));
  EXPECT_EQ(h.Data(kBlock, 3 * kBlock), std::vector<uint8_t>(3 * kBlock, 0x11));
  EXPECT_EQ(h.faults().stats().torn, 1u);
  EXPECT_EQ(h.faults().fired(rule), 1u);

  // The rule was one-shot. Another one cuts a write across its two iovecs: 4 blocks - 1 byte
  // round down to 3 blocks, the whole first iovec and one block of the second.
  h.faults().AddRule(FaultRule::TearNthWrite(1, 4 * kBlock - 1, ENOSPC));
  std::vector<uint8_t> c(2 * kBlock, 0x21), d(2 * kBlock, 0x22);
  std::vector<iovec> iov2 = {{c.data(), c.size()}, {d.data(), d.size()}};
  write.buffers = iov2;
  h.queue().Enqueue(write, 78);
  h.SubmitAndWait(1);
  EXPECT_EQ(h.Results()[78], ENOSPC);
  EXPECT_EQ(h.Data(0, 2 * kBlock), std::vector<uint8_t>(2 * kBlock, 0x21));
  EXPECT_EQ(h.Data(2 * kBlock, kBlock), std::vector<uint8_t>(kBlock, 0x22));
  EXPECT_EQ(h.Data(3 * kBlock, kBlock), std::vector<uint8_t>(kBlock, 0x11));

  // Reads are never torn, and the backend keeps working: a full write and read back succeed.
  const uint64_t full = h.Write(0, 4 * kBlock, 0x99);
  h.SubmitAndWait(1);
  EXPECT_EQ(h.Results()[full], 0);
  EXPECT_EQ(h.Data(0, 4 * kBlock), std::vector<uint8_t>(4 * kBlock, 0x99));
}

TEST(FaultInjectionTest, TearBelowOneBlockIsAPlainFailure) {
  Harness h;
  h.faults().AddRule(FaultRule::TearNthWrite(1, kBlock - 1));
  const uint64_t cookie = h.Write(0, 2 * kBlock, 0x31);
  h.SubmitAndWait(1);
  EXPECT_THAT(h.Results(), ElementsAre(Pair(cookie, EIO)));
  EXPECT_EQ(h.memory().operation_count(), 0u);
}

TEST(FaultInjectionTest, RulesChangeAtRunTime) {
  Harness h;
  auto run = [&h](int n) {
    const uint64_t first = h.next_cookie();
    for (int i = 0; i < n; ++i) h.Flush();
    h.SubmitAndWait(n);
    return h.ErrorsFrom(first);
  };
  EXPECT_THAT(run(2), ElementsAre(0, 0));
  const auto rule = h.faults().AddRule(FaultRule::FailEvery(2, EIO));
  // Counting starts when the rule is added.
  EXPECT_THAT(run(4), ElementsAre(0, EIO, 0, EIO));
  h.faults().AddRule(FaultRule::FailEvery(1, ENOSPC));
  // Both fire on even requests; the first rule added decides.
  EXPECT_THAT(run(2), ElementsAre(ENOSPC, EIO));
  h.faults().RemoveRule(rule);
  EXPECT_FALSE(h.faults().RemoveRule(rule));
  EXPECT_THAT(run(2), ElementsAre(ENOSPC, ENOSPC));
  h.faults().ClearRules();
  EXPECT_THAT(run(3), ElementsAre(0, 0, 0));
  EXPECT_EQ(h.faults().stats().failed, 6u);
  EXPECT_EQ(h.faults().stats().requests, 13u);
}

TEST(FaultInjectionTest, HandlerMayEnqueueFromInsideProcessCompletions) {
  auto memory = std::make_shared<MemoryBackend>();
  FaultInjectingBackend faults(memory);
  faults.AddRule(FaultRule::FailEvery(2, EIO));
  std::unique_ptr<BlockQueue> queue;
  std::vector<int> errors;
  Request flush;
  flush.type = RequestType::kFlush;
  auto created = faults.CreateQueue([&](uint64_t cookie, Completion c) {
    errors.push_back(c.error);
    if (cookie < 6) {
      queue->Enqueue(flush, cookie + 1);
      queue->Submit();
    }
  });
  ASSERT_TRUE(created.ok());
  queue = *std::move(created);
  queue->Enqueue(flush, 1);
  queue->Submit();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (errors.size() < 6 && absl::Now() < deadline) {
    if (Readable(queue->completion_fd(), 100)) queue->ProcessCompletions();
  }
  EXPECT_THAT(errors, ElementsAre(0, EIO, 0, EIO, 0, EIO));
  EXPECT_EQ(queue->in_flight(), 0u);
}

TEST(FaultInjectionTest, RulesChangeWhileAnotherThreadRunsIo) {
  Harness h;
  std::atomic<bool> stop{false};
  std::thread changer([&] {
    while (!stop.load()) {
      const auto id = h.faults().AddRule(FaultRule::FailEvery(3, EIO));
      h.faults().AddRule(FaultRule::DelayEvery(5, absl::Microseconds(200)));
      std::this_thread::yield();
      h.faults().RemoveRule(id);
      h.faults().ClearRules();
    }
  });
  constexpr int kRequests = 2000;
  for (int i = 0; i < kRequests; ++i) h.Write((i % 64) * kBlock, kBlock, static_cast<uint8_t>(i));
  h.SubmitAndWait(kRequests, 20000);
  stop = true;
  changer.join();
  // Every request completed exactly once, with success or the injected error.
  std::map<uint64_t, int> results = h.Results();
  EXPECT_EQ(results.size(), static_cast<size_t>(kRequests));
  for (const auto& [cookie, error] : results) EXPECT_TRUE(error == 0 || error == EIO);
  EXPECT_EQ(h.queue().in_flight(), 0u);
  const FaultStats stats = h.faults().stats();
  EXPECT_EQ(stats.requests, static_cast<uint64_t>(kRequests));
  EXPECT_EQ(h.memory().operation_count(), kRequests - stats.failed);
}

TEST(FaultInjectionTest, CompletionFdIsPollableLikeAnyQueues) {
  Harness h;
  EXPECT_FALSE(Readable(h.queue().completion_fd(), 0));
  h.faults().AddRule(FaultRule::FailNth(1));
  h.Flush();  // fails at Enqueue: readable without a Submit, completes in ProcessCompletions
  EXPECT_TRUE(Readable(h.queue().completion_fd(), 0));
  EXPECT_TRUE(h.completions().empty());
  h.queue().ProcessCompletions();
  EXPECT_EQ(h.completions().size(), 1u);
  EXPECT_FALSE(Readable(h.queue().completion_fd(), 0));
}

}  // namespace
}  // namespace block

#include "devices/iothread.h"

#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

namespace devices {
namespace {

// Fruitless polling before the loop starts yielding the CPU between polls (see Loop()).
constexpr int64_t kYieldAfterNs = 64'000;

// Adaptive polling constants, as QEMU's defaults (util/aio-posix.c): start at 4 µs, double on
// growth, halve on shrink.
constexpr int64_t kInitialPollNs = 4000;
constexpr int64_t kPollGrow = 2;
constexpr int64_t kPollShrink = 2;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

IoThread::IoThread(std::string name, IoThreadOptions options)
    : name_(std::move(name)),
      options_(options),
      epoll_(epoll_create1(EPOLL_CLOEXEC)),
      wakeup_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

IoThread::~IoThread() { Stop(); }

absl::Status IoThread::Start() {
  if (!epoll_.valid() || !wakeup_.valid()) {
    return absl::InternalError(absl::StrFormat("%s: epoll/eventfd: %s", name_, strerror(errno)));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wakeup_.get();
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wakeup_.get(), &event) != 0) {
    return absl::InternalError(absl::StrFormat("%s: epoll_ctl: %s", name_, strerror(errno)));
  }
  absl::StatusOr<std::thread> thread =
      sys_util::StartThread({.name = name_, .on_start = options_.on_start}, [this] {
        thread_id_.store(std::this_thread::get_id());
        Loop();
      });
  if (!thread.ok()) return absl::InternalError(thread.status().message());
  thread_ = *std::move(thread);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::shared_ptr<IoThread>>> StartIoThreads(
    const std::string& name_prefix, uint32_t count, const IoThreadOptions& options) {
  std::vector<std::shared_ptr<IoThread>> threads;
  for (uint32_t i = 0; i < count; ++i) {
    auto thread = std::make_shared<IoThread>(absl::StrCat(name_prefix, i), options);
    RETURN_IF_ERROR(thread->Start());
    threads.push_back(std::move(thread));
  }
  return threads;
}

void IoThread::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  sys_util::SignalEventFd(wakeup_.get());
  thread_.join();
  thread_id_.store(std::thread::id());
}

void IoThread::RunSync(absl::AnyInvocable<void()> fn) {
  if (!thread_.joinable() || OnLoopThread()) {
    fn();
    return;
  }
  absl::Notification done;
  Post([&fn, &done] {
    fn();
    done.Notify();
  });
  done.WaitForNotification();
}

void IoThread::Post(absl::AnyInvocable<void()> fn) {
  {
    absl::MutexLock lock(&posted_mutex_);
    posted_.push_back(std::move(fn));
  }
  sys_util::SignalEventFd(wakeup_.get());
}

absl::Status IoThread::AddFd(int fd, absl::AnyInvocable<void()> on_readable, Trigger trigger) {
  epoll_event event{};
  event.events = EPOLLIN | (trigger == Trigger::kEdge ? EPOLLET : 0);
  event.data.fd = fd;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
    return absl::InternalError(
        absl::StrFormat("%s: cannot watch fd %d: %s", name_, fd, strerror(errno)));
  }
  handlers_[fd] = std::move(on_readable);
  return absl::OkStatus();
}

void IoThread::RemoveFd(int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  handlers_.erase(fd);
}

int IoThread::AddPoller(absl::AnyInvocable<bool()> poll, absl::AnyInvocable<void()> begin,
                        absl::AnyInvocable<bool()> end) {
  const int id = next_poller_id_++;
  Poller& poller = pollers_[id];
  poller.poll = std::move(poll);
  poller.begin = std::move(begin);
  poller.end = std::move(end);
  // A poller added during a polling phase joins it.
  if (polling_ && poller.begin) poller.begin();
  return id;
}

void IoThread::RemovePoller(int id) {
  auto poller = pollers_.find(id);
  if (poller == pollers_.end()) return;
  // Leave its queue as it would be outside polling (notifications on).
  if (polling_ && poller->second.end) poller->second.end();
  pollers_.erase(poller);
}

bool IoThread::RunPollers() {
  bool progress = false;
  for (auto& [id, poller] : pollers_) progress |= poller.poll();
  return progress;
}

void IoThread::BeginPolling() {
  if (polling_) return;
  polling_ = true;
  for (auto& [id, poller] : pollers_) {
    if (poller.begin) poller.begin();
  }
}

bool IoThread::EndPolling() {
  if (!polling_) return false;
  polling_ = false;
  bool pending = false;
  for (auto& [id, poller] : pollers_) {
    if (poller.end) pending |= poller.end();
  }
  return pending;
}

void IoThread::RunPosted() {
  std::deque<absl::AnyInvocable<void()>> work;
  {
    absl::MutexLock lock(&posted_mutex_);
    work.swap(posted_);
  }
  for (auto& fn : work) fn();
}

int64_t NextPollWindow(int64_t poll_ns, int64_t blocked_ns, int64_t poll_max_ns) {
  // A wait no longer than the window means polling is right-sized; a wait beyond the maximum means
  // polling would not have caught it, so poll less; in between, poll longer.
  if (blocked_ns <= poll_ns) return poll_ns;
  if (blocked_ns > poll_max_ns) {
    poll_ns /= kPollShrink;
    return poll_ns < kInitialPollNs ? 0 : poll_ns;
  }
  poll_ns = poll_ns == 0 ? kInitialPollNs : poll_ns * kPollGrow;
  return poll_ns > poll_max_ns ? poll_max_ns : poll_ns;
}

void IoThread::Loop() {
  constexpr int kMaxEvents = 32;
  epoll_event events[kMaxEvents];
  while (!stopping_.load()) {
    // Busy-poll first when the window is open: an avail-ring check is far cheaper than a sleep and
    // wake-up through the ioeventfd.
    const int64_t window = poll_ns_.load(std::memory_order_relaxed);
    bool polled_progress = false;
    if (options_.poll_max_ns > 0 && !pollers_.empty() && window > 0) {
      BeginPolling();
      const int64_t start = NowNs();
      const int64_t deadline = start + window;
      do {
        polled_progress = RunPollers();
        // A long fruitless poll lets whatever else is runnable on this CPU go first: on a host
        // with no idle CPU the kernel's own completion work (the kworker that finishes an
        // O_DSYNC write) may be queued right here, and the I/O being polled for waits on it
        // (depth 1 with a 512 us window: 2,643 IOPS without yielding, 10,165 with it). Not
        // sooner: a yield to a vCPU that spins costs its whole time slice (milliseconds), which
        // windows up to QEMU's default never risk.
        if (!polled_progress && NowNs() - start > kYieldAfterNs) sched_yield();
      } while (!polled_progress && NowNs() < deadline && !stopping_.load());
    }
    // About to sleep: notifications back on, and a last look for work that slipped in while
    // they were off (it would otherwise wait for an unrelated event).
    if (!polled_progress && EndPolling()) polled_progress = true;
    const int64_t before = NowNs();
    const int count = epoll_wait(epoll_.get(), events, kMaxEvents, polled_progress ? 0 : -1);
    if (options_.poll_max_ns > 0 && !polled_progress && count > 0) {
      const int64_t next = NextPollWindow(window, NowNs() - before + window, options_.poll_max_ns);
      poll_ns_.store(next, std::memory_order_relaxed);
      // Woken (typically by a completion) and about to poll again: notifications go off before
      // the handlers run, not after. A handler that completes a request lets the driver queue
      // its next one at once, and with notifications still on it would kick for it (a VM exit)
      // although the polling phase that follows finds it anyway.
      if (next > 0 && !pollers_.empty()) BeginPolling();
    }
    if (count < 0) {
      if (errno == EINTR) continue;
      // Cannot happen with a valid epoll fd and buffer; were it to, the thread's queues would stop
      // being served, so say so rather than end in silence.
      absl::FPrintF(stderr, "%s: epoll_wait: %s; the iothread stops\n", name_, strerror(errno));
      break;
    }
    for (int i = 0; i < count; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wakeup_.get()) {
        sys_util::DrainEventFd(fd);
        RunPosted();
        continue;
      }
      auto handler = handlers_.find(fd);
      if (handler != handlers_.end()) handler->second();
    }
    // Pollers also run after events: the ring may hold more work than the notification said.
    if (!pollers_.empty() && options_.poll_max_ns > 0) RunPollers();
  }
  EndPolling();
  // Drop handlers on this thread: they may own state that belongs to it.
  handlers_.clear();
  pollers_.clear();
}

}  // namespace devices

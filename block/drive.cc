#include "block/drive.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <chrono>
#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace block {

struct Drive::Shared {
  DriveOptions options;
  // I/O limits: the drive's own budget (unlimited unless set) and its group's.
  std::unique_ptr<Throttle> own;
  mutable absl::Mutex group_mutex;
  std::shared_ptr<Throttle> group ABSL_GUARDED_BY(group_mutex);
  // Own limits or a group: queues admit requests through the throttles. Read on every request
  // without a lock; a change is followed by a wake-up of every waiter.
  std::atomic<bool> throttled{false};
  // Exactly one of `backend` (a fixed drive) and `media` (a removable one) is set.
  std::shared_ptr<BlockBackend> backend;
  BackendInfo backend_info;  // the fixed backend's, read once
  // The fixed backend's size now: backend_info's until Drive::Resize changes it. The I/O path
  // reads this, never the backend (a host drive's info() may be a probe).
  std::atomic<uint64_t> size_bytes{0};
  std::shared_ptr<RemovableMedia> media;
  Stats stats;
};

namespace {

using Clock = std::chrono::steady_clock;

DriveInfo MakeInfo(const DriveOptions& options, bool removable, const BackendInfo* backend) {
  DriveInfo info;
  info.removable = removable;
  info.write_cache_enabled = WriteCacheEnabled(options.cache_mode);
  info.read_only = options.read_only;
  if (backend != nullptr) {
    info.size_bytes = backend->size_bytes;
    info.logical_block_size = backend->logical_block_size;
    info.read_only = info.read_only || backend->read_only;
    info.discard = backend->discard;
  }
  return info;
}

// The BlockQueue a Drive hands to a device. One per iothread, used only there: the hot path takes no
// lock and makes no system call beyond what the backend makes.
//
// Completion fds: the queue owns an epoll fd (its completion_fd()) holding its own eventfd and the
// completion fd of every backend queue beneath it. An epoll fd is readable while any fd in its set
// is (level-triggered), so the device's epoll sees one fd for the whole drive, however many backend
// queues (media generations) are live. The own eventfd carries completions the drive makes itself
// (rejections, ignored flushes, no-op discards), written at Submit(), and media-change wake-ups.
// ProcessCompletions() clears the eventfd and calls ProcessCompletions() on every backend queue,
// which clears theirs.
//
// Completions are collected while the backend queues run their handlers and delivered to the
// device's handler afterwards, so the device may Enqueue()/Submit() from its handler without
// re-entering a backend queue from inside that queue's own handler.
class DriveQueue final : public BlockQueue, private MediaListener {
 public:
  static absl::StatusOr<std::unique_ptr<BlockQueue>> Create(std::shared_ptr<Drive::Shared> shared,
                                                            CompletionHandler handler);

  DriveQueue(std::shared_ptr<Drive::Shared> shared, CompletionHandler handler,
             sys_util::ScopedFd epoll_fd, sys_util::ScopedFd event_fd, sys_util::ScopedFd timer_fd)
      : shared_(std::move(shared)),
        removable_(shared_->media != nullptr),
        handler_(std::move(handler)),
        epoll_fd_(std::move(epoll_fd)),
        event_fd_(std::move(event_fd)),
        timer_fd_(std::move(timer_fd)),
        waiter_([fd = timer_fd_.get()](absl::Time at) { ArmTimer(fd, at); }) {}
  ~DriveQueue() override;

  void Enqueue(const Request& request, uint64_t cookie) override;
  void Submit() override;
  int completion_fd() const override { return epoll_fd_.get(); }
  void ProcessCompletions() override;
  size_t in_flight() const override { return in_flight_; }

 private:
  // What a finished request adds to the stats besides its type and outcome.
  enum class Note : uint8_t { kNone, kFuaNative, kFuaEmulated, kFlushIgnored, kFuaIgnored };
  static bool IsDurableWrite(Note note) {
    return note == Note::kFuaNative || note == Note::kFuaEmulated;
  }

  // The backend queue of one medium (a fixed drive has exactly one, for its lifetime).
  struct Backing {
    uint64_t generation = 0;
    std::shared_ptr<BlockBackend> backend;  // declared before `queue`, so it outlives it
    BackendInfo info;                       // read once, when the medium is first seen
    std::unique_ptr<BlockQueue> queue;      // null if creating it failed: requests get EIO
    absl::Status status;                    // why `queue` is null
    size_t in_flight = 0;                   // requests of ours in `queue`
    bool needs_submit = false;
    // Flushes, shared (QEMU's bdrv_co_flush coalesces alike): requests waiting for a flush that
    // starts after now (emulated-FUA writes that are done, guest flushes), and those the flush in
    // the backend covers. One flush at a time per backend queue: a flush makes durable every
    // write that completed before it started, so the requests that arrive while one runs share
    // the next one (docs/block.md: on storage without FUA a flush each cost 1.7x at depth 16).
    std::vector<uint32_t> awaiting_flush;
    std::vector<uint32_t> flush_covers;
    bool flush_in_flight = false;
    size_t durable_in_flight = 0;  // FUA writes (native or emulated) not yet completed
    // fua=auto: FUA writes of the batch being built, sent at Submit(): natively when one alone,
    // with a shared flush when several come together or others are in flight.
    struct Undecided {
      Request request;
      uint64_t cookie;
      uint64_t bytes;
      Clock::time_point start;
    };
    std::vector<Undecided> undecided;
  };

  // A request in a backend queue; the backend's cookie is its index in ops_.
  struct Op {
    uint64_t cookie = 0;
    uint64_t bytes = 0;
    Clock::time_point start;
    Backing* backing = nullptr;
    RequestType type = RequestType::kRead;
    Note note = Note::kNone;
    bool emulate_fua = false;   // write, then flush, then complete
    bool flushing = false;      // the write is done; it waits for a shared flush
    bool shared_flush = false;  // the backend flush that completes a Backing's flush_covers
  };

  // A request ready for the device's handler.
  struct Done {
    uint64_t cookie;
    uint64_t bytes;
    Clock::time_point start;
    int error;
    RequestType type;
    Note note;
  };

  // A request waiting for its budget (I/O limits), in arrival order.
  struct Throttled {
    Request request;
    uint64_t cookie;
    Clock::time_point start;
  };

  // The request's checks and its way to the backend (Enqueue() once it may go).
  void Issue(const Request& request, uint64_t cookie, Clock::time_point start);
  // Whether `request` may go now under the drive's limits, taking its budget if so; if not, the
  // timer is armed (or the throttle wakes the queue when its turn comes).
  bool Admit(const Request& request);
  // Issues the waiting requests that may go now, in order, and submits them.
  void ReleaseThrottled();
  void StopWaiting();  // when nothing waits any more
  static void ArmTimer(int timer_fd, absl::Time at);
  Backing* AddBacking(uint64_t generation, std::shared_ptr<BlockBackend> backend,
                      const BackendInfo& info);
  Backing* BackingFor(const MediaState& state);
  // Destroys the backend queues of old media once nothing of ours is in them.
  void RetireIdle();
  void CompleteNow(uint64_t cookie, RequestType type, uint64_t bytes, int error,
                   Clock::time_point start, Note note = Note::kNone) {
    immediate_.push_back(Done{cookie, bytes, start, error, type, note});
  }
  void Forward(Backing* backing, const Request& request, uint64_t cookie, uint64_t bytes,
               Clock::time_point start, Note note, bool emulate_fua);
  uint32_t NewOp(const Op& op);
  // A guest flush: it waits for the next shared flush.
  void AwaitFlush(Backing* backing, uint64_t cookie, Clock::time_point start);
  // Starts the shared flush when requests wait for one and none is in the backend; true if it
  // did (the backend queue then needs a Submit()).
  bool StartSharedFlush(Backing& backing);
  void OnBackendCompletion(Backing* backing, uint64_t slot, Completion completion);
  void Signal() const;
  void Deliver(const Done& done);
  // MediaListener: runs on the thread changing the media.
  void OnMediaEvent(const MediaEvent& event) override;

  const std::shared_ptr<Drive::Shared> shared_;
  const bool removable_;
  CompletionHandler handler_;
  const sys_util::ScopedFd epoll_fd_;
  const sys_util::ScopedFd event_fd_;
  const sys_util::ScopedFd timer_fd_;  // in epoll_fd_'s set: when waiting requests may go
  Throttle::Waiter waiter_;
  std::shared_ptr<Throttle> group_;       // the group last admitted through (left when destroyed)
  std::vector<Throttle*> admit_through_;  // Admit's list: the drive's own throttle, its group's
  std::deque<Throttled> throttled_;

  std::vector<std::unique_ptr<Backing>> backings_;
  Backing* current_ = nullptr;  // the medium requests go to; null until one is seen
  std::vector<Op> ops_;
  std::vector<uint32_t> free_ops_;
  std::vector<Done> immediate_;   // completed by the drive, waiting for ProcessCompletions()
  std::vector<Done> done_;        // collected during ProcessCompletions()
  std::vector<Done> delivering_;  // being handed to the device's handler
  size_t in_flight_ = 0;
  bool signalled_ = false;   // event_fd_ written by Submit() and not yet read
  bool processing_ = false;  // inside ProcessCompletions()
  bool destroying_ = false;
};

absl::StatusOr<std::unique_ptr<BlockQueue>> DriveQueue::Create(
    std::shared_ptr<Drive::Shared> shared, CompletionHandler handler) {
  sys_util::ScopedFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return absl::ErrnoToStatus(errno, "epoll_create1");
  ASSIGN_OR_RETURN(sys_util::ScopedFd event_fd, sys_util::MakeEventFd());
  // CLOCK_REALTIME: the throttles' clock is absl::Now(), and the timer is armed at their times.
  sys_util::ScopedFd timer_fd(::timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC));
  if (!timer_fd.valid()) return absl::ErrnoToStatus(errno, "timerfd_create");
  for (int fd : {event_fd.get(), timer_fd.get()}) {
    epoll_event event{};
    event.events = EPOLLIN;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &event) != 0) {
      return absl::ErrnoToStatus(errno, "epoll_ctl");
    }
  }
  auto queue =
      std::make_unique<DriveQueue>(std::move(shared), std::move(handler), std::move(epoll_fd),
                                   std::move(event_fd), std::move(timer_fd));
  Drive::Shared& s = *queue->shared_;
  if (s.backend != nullptr) {
    Backing* backing = queue->AddBacking(0, s.backend, s.backend_info);
    if (backing->queue == nullptr) return backing->status;
    queue->current_ = backing;
  } else {
    // Without this the queue would notice an eject only at its next request, and meanwhile keep
    // the ejected medium's backend (an open image or host device) alive.
    s.media->AddListener(queue.get());
  }
  return queue;
}

DriveQueue::~DriveQueue() {
  if (removable_) shared_->media->RemoveListener(this);
  // Out of every line, so no throttle wakes a queue that is gone.
  shared_->own->Leave(waiter_);
  if (group_ != nullptr) group_->Leave(waiter_);
  destroying_ = true;  // a backend queue may report cancellations while it is destroyed
  for (const std::unique_ptr<Backing>& backing : backings_) {
    if (backing->queue != nullptr) {
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, backing->queue->completion_fd(), nullptr);
    }
  }
  backings_.clear();
}

DriveQueue::Backing* DriveQueue::AddBacking(uint64_t generation,
                                            std::shared_ptr<BlockBackend> backend,
                                            const BackendInfo& info) {
  auto backing = std::make_unique<Backing>();
  Backing* b = backing.get();
  b->generation = generation;
  b->backend = std::move(backend);
  b->info = info;
  absl::StatusOr<std::unique_ptr<BlockQueue>> queue =
      b->backend->CreateQueue([this, b](uint64_t slot, Completion completion) {
        OnBackendCompletion(b, slot, completion);
      });
  if (!queue.ok()) {
    b->status = queue.status();
  } else {
    epoll_event event{};
    event.events = EPOLLIN;
    if (::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_ADD, (*queue)->completion_fd(), &event) != 0) {
      b->status = absl::ErrnoToStatus(errno, "epoll_ctl");
    } else {
      b->queue = *std::move(queue);
    }
  }
  backings_.push_back(std::move(backing));
  return b;
}

DriveQueue::Backing* DriveQueue::BackingFor(const MediaState& state) {
  if (current_ != nullptr && current_->generation == state.generation) return current_;
  current_ = nullptr;
  for (const std::unique_ptr<Backing>& backing : backings_) {
    if (backing->generation == state.generation) current_ = backing.get();
  }
  if (current_ == nullptr) {
    // A new medium: the one time this queue asks its backend anything outside the I/O itself. If
    // the queue cannot be created the medium answers EIO until it changes (no retry per request).
    current_ = AddBacking(state.generation, state.backend, state.backend->info());
  }
  RetireIdle();
  return current_;
}

void DriveQueue::RetireIdle() {
  for (auto it = backings_.begin(); it != backings_.end();) {
    Backing* backing = it->get();
    if (backing == current_ || backing->in_flight > 0 || !backing->undecided.empty()) {
      ++it;
      continue;
    }
    if (backing->queue != nullptr) {
      ::epoll_ctl(epoll_fd_.get(), EPOLL_CTL_DEL, backing->queue->completion_fd(), nullptr);
    }
    it = backings_.erase(it);
  }
}

void DriveQueue::Enqueue(const Request& request, uint64_t cookie) {
  const Clock::time_point start = Clock::now();
  ++in_flight_;
  if (shared_->throttled.load(std::memory_order_acquire) &&
      (!throttled_.empty() || !Admit(request))) {
    throttled_.push_back(Throttled{request, cookie, start});
    return;
  }
  Issue(request, cookie, start);
}

void DriveQueue::ArmTimer(int timer_fd, absl::Time at) {
  // Absolute, on CLOCK_REALTIME (absl::Now()'s). A time already past is made 1 ns from the epoch:
  // an all-zero it_value would disarm the timer instead.
  const timespec when = absl::ToTimespec(at);
  itimerspec spec{};
  spec.it_value = when.tv_sec > 0 || when.tv_nsec > 0 ? when : timespec{0, 1};
  ::timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &spec, nullptr);
}

bool DriveQueue::Admit(const Request& request) {
  if (request.type == RequestType::kFlush) return true;  // no budget: it only waits its turn
  std::shared_ptr<Throttle> group;
  {
    absl::MutexLock lock(&shared_->group_mutex);
    group = shared_->group;
  }
  if (group_ != group) {
    if (group_ != nullptr) group_->Leave(waiter_);
    group_ = group;
  }
  admit_through_.assign({shared_->own.get()});  // keeps its capacity: no allocation per request
  if (group != nullptr) admit_through_.push_back(group.get());
  const uint64_t bytes = request.type == RequestType::kDiscard ? 0 : request.length();
  const absl::Time at = AdmitThrough(admit_through_, waiter_, bytes);
  if (at == absl::InfinitePast()) return true;
  if (at != absl::InfiniteFuture()) ArmTimer(timer_fd_.get(), at);
  return false;
}

void DriveQueue::ReleaseThrottled() {
  bool issued = false;
  while (!throttled_.empty()) {
    const Throttled& next = throttled_.front();
    if (shared_->throttled.load(std::memory_order_acquire) && !Admit(next.request)) break;
    shared_->stats.RecordThrottled(static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - next.start).count()));
    Issue(next.request, next.cookie, next.start);
    throttled_.pop_front();
    issued = true;
  }
  if (throttled_.empty()) StopWaiting();
  if (issued) Submit();
}

void DriveQueue::StopWaiting() {
  // Out of every line: requests let go because the limits were lifted never took their turn, and
  // a waiter left first in a line would hold up the drive's other queues for good once limits
  // return. Then nothing can arm the timer: it is disarmed and a pending expiration read, so the
  // completion fd (level-triggered in the device's epoll) is not left readable with nothing to do.
  shared_->own->Leave(waiter_);
  if (group_ != nullptr) group_->Leave(waiter_);
  const itimerspec disarmed{};
  ::timerfd_settime(timer_fd_.get(), 0, &disarmed, nullptr);
  uint64_t expirations = 0;
  (void)!::read(timer_fd_.get(), &expirations, sizeof(expirations));  // EAGAIN: none pending
}

void DriveQueue::Issue(const Request& request, uint64_t cookie, Clock::time_point start) {
  const uint64_t length = request.type == RequestType::kFlush ? 0 : request.length();
  Backing* backing = current_;
  if (removable_) {
    // One atomic load: the request runs on this snapshot's medium until it completes, whatever
    // happens to the drive meanwhile. Nothing here asks the host whether a medium is present.
    const std::shared_ptr<const MediaState> state = shared_->media->Current();
    if (!state->ready()) {
      if (current_ != nullptr && current_->generation != state->generation) {
        current_ = nullptr;
        RetireIdle();
      }
      return CompleteNow(cookie, request.type, length, ENOMEDIUM, start);
    }
    backing = BackingFor(*state);
  }
  if (backing->queue == nullptr) return CompleteNow(cookie, request.type, length, EIO, start);

  const BackendInfo& info = backing->info;
  const DriveOptions& options = shared_->options;
  const bool read_only = options.read_only || info.read_only;
  switch (request.type) {
    case RequestType::kFlush: {
      if (IgnoresFlushes(options.cache_mode)) {
        return CompleteNow(cookie, request.type, 0, 0, start, Note::kFlushIgnored);
      }
      // Nothing was written through a read-only drive, so nothing needs making durable (and a host
      // CD-ROM need not implement flush at all).
      if (read_only) return CompleteNow(cookie, request.type, 0, 0, start);
      return AwaitFlush(backing, cookie, start);
    }
    case RequestType::kRead:
    case RequestType::kWrite:
    case RequestType::kDiscard:
      break;
    default:
      return CompleteNow(cookie, request.type, length, EINVAL, start);
  }

  if (request.type != RequestType::kRead && read_only) {
    return CompleteNow(cookie, request.type, length, EROFS, start);
  }
  // Written so that offset + length cannot overflow. It comes before the zero-length case, so a
  // zero-length request may start at the end of the medium but not beyond it (as QEMU's
  // scsi-disk check_lba_range(); SBC-4: a zero transfer length is no error, the LBA still counts).
  // The size now: a fixed drive's may change (Drive::Resize); a medium's is info's.
  const uint64_t size =
      removable_ ? info.size_bytes : shared_->size_bytes.load(std::memory_order_acquire);
  if (request.offset > size || length > size - request.offset) {
    return CompleteNow(cookie, request.type, length, ERANGE, start);
  }
  const uint32_t block = info.logical_block_size;
  if (block != 0 && (request.offset % block != 0 || length % block != 0)) {
    return CompleteNow(cookie, request.type, length, EINVAL, start);
  }
  if (length == 0) return CompleteNow(cookie, request.type, 0, 0, start);

  Request out = request;
  out.fua = false;
  Note note = Note::kNone;
  bool emulate_fua = false;
  if (request.type == RequestType::kDiscard && !info.discard) {
    // A discard is advisory: the data of a discarded range may stay as it was (request.h; SBC-4
    // UNMAP lets "mapped" blocks remain mapped; virtio-blk DISCARD likewise). So a backend that
    // cannot deallocate completes it as a successful no-op rather than failing the guest.
    return CompleteNow(cookie, request.type, length, 0, start);
  }
  if (request.type == RequestType::kWrite) {
    const CacheMode mode = options.cache_mode;
    if (IgnoresFlushes(mode)) {
      if (request.fua) note = Note::kFuaIgnored;
    } else if (request.fua || EveryWriteDurable(mode)) {
      if (options.fua_mode == FuaMode::kAuto && info.native_fua) {
        // Decided at Submit(), when the whole batch is known.
        backing->undecided.push_back({out, cookie, length, start});
        backing->needs_submit = true;
        return;
      }
      if (options.fua_mode == FuaMode::kNative && info.native_fua) {
        out.fua = true;  // one RWF_DSYNC write
        note = Note::kFuaNative;
      } else {
        emulate_fua = true;  // write, then flush (the backend's FUA cannot be relied on)
        note = Note::kFuaEmulated;
      }
    }
  }
  Forward(backing, out, cookie, length, start, note, emulate_fua);
}

uint32_t DriveQueue::NewOp(const Op& op) {
  uint32_t slot;
  if (!free_ops_.empty()) {
    slot = free_ops_.back();
    free_ops_.pop_back();
  } else {
    slot = static_cast<uint32_t>(ops_.size());
    ops_.emplace_back();
  }
  ops_[slot] = op;
  ++op.backing->in_flight;
  return slot;
}

void DriveQueue::Forward(Backing* backing, const Request& request, uint64_t cookie, uint64_t bytes,
                         Clock::time_point start, Note note, bool emulate_fua) {
  const uint32_t slot = NewOp(Op{cookie, bytes, start, backing, request.type, note, emulate_fua});
  if (IsDurableWrite(note)) ++backing->durable_in_flight;
  backing->needs_submit = true;
  backing->queue->Enqueue(request, slot);
}

void DriveQueue::AwaitFlush(Backing* backing, uint64_t cookie, Clock::time_point start) {
  // Never in the backend itself: the shared flush's completion completes it.
  backing->awaiting_flush.push_back(NewOp(Op{cookie, 0, start, backing, RequestType::kFlush}));
  backing->needs_submit = true;  // Submit() starts the flush
}

bool DriveQueue::StartSharedFlush(Backing& backing) {
  if (backing.flush_in_flight || backing.awaiting_flush.empty()) return false;
  // Everything waiting now is covered: its write completed (or the guest's flush arrived) before
  // this flush starts.
  backing.flush_covers.swap(backing.awaiting_flush);
  backing.flush_in_flight = true;
  Op op{0, 0, Clock::time_point{}, &backing, RequestType::kFlush};
  op.shared_flush = true;
  Request flush;
  flush.type = RequestType::kFlush;
  backing.queue->Enqueue(flush, NewOp(op));
  backing.needs_submit = true;
  return true;
}

void DriveQueue::OnBackendCompletion(Backing* backing, uint64_t slot, Completion completion) {
  if (destroying_) return;
  Op& op = ops_[slot];
  if (op.shared_flush) {
    // A failed flush fails every request it covered with its error: their data may not be durable.
    for (uint32_t covered : backing->flush_covers) {
      const Op& waiting = ops_[covered];
      --backing->in_flight;
      if (IsDurableWrite(waiting.note)) --backing->durable_in_flight;
      done_.push_back(Done{waiting.cookie, waiting.bytes, waiting.start, completion.error,
                           waiting.type, waiting.note});
      free_ops_.push_back(covered);
    }
    backing->flush_covers.clear();
    backing->flush_in_flight = false;
    --backing->in_flight;
    free_ops_.push_back(static_cast<uint32_t>(slot));
    return;
  }
  if (op.emulate_fua && !op.flushing && completion.ok()) {
    // The write is done; the guest's completion waits for a flush that starts after it. A failed
    // write completes at once with its error: there is nothing to make durable.
    op.flushing = true;
    backing->awaiting_flush.push_back(static_cast<uint32_t>(slot));
    return;
  }
  --backing->in_flight;
  if (IsDurableWrite(op.note)) --backing->durable_in_flight;
  done_.push_back(Done{op.cookie, op.bytes, op.start, completion.error, op.type, op.note});
  free_ops_.push_back(static_cast<uint32_t>(slot));
}

void DriveQueue::Submit() {
  for (const std::unique_ptr<Backing>& backing : backings_) {
    if (!backing->undecided.empty()) {
      // fua=auto: a FUA write alone goes down natively (one system call, the least latency);
      // writes that come together, or while others are in flight, share a flush.
      const bool alone = backing->undecided.size() == 1 && backing->durable_in_flight == 0;
      for (Backing::Undecided& write : backing->undecided) {
        write.request.fua = alone;
        Forward(backing.get(), write.request, write.cookie, write.bytes, write.start,
                alone ? Note::kFuaNative : Note::kFuaEmulated, !alone);
      }
      backing->undecided.clear();
    }
    if (backing->queue != nullptr) StartSharedFlush(*backing);
    if (!backing->needs_submit) continue;
    backing->needs_submit = false;
    backing->queue->Submit();
  }
  if (!immediate_.empty() && !signalled_) {
    Signal();
    signalled_ = true;
  }
}

void DriveQueue::Signal() const { sys_util::SignalEventFd(event_fd_.get()); }

void DriveQueue::ProcessCompletions() {
  if (processing_) return;  // called from inside its own handler: the outer call delivers
  processing_ = true;
  // A removable drive's eventfd is also written by media listeners on other threads, which this
  // thread cannot know of without reading it; a fixed drive reads it only after its own Submit().
  if (signalled_ || removable_) {
    sys_util::DrainEventFd(event_fd_.get());
    signalled_ = false;
  }
  // Waiting requests are tried again only when the timer has fired: every reason they may go
  // (their tokens' time, the one ahead in a line leaving, new limits, a new group) arms it
  // (Throttle::Waiter). The iothread calls this for every queue it serves whenever any has work
  // (its poller, every loop), and a try costs the throttles' locks and a timerfd_settime: with
  // one drive limited, the unlimited drives on its thread paid that on every completion.
  uint64_t expirations = 0;
  if (!throttled_.empty() &&
      ::read(timer_fd_.get(), &expirations, sizeof(expirations)) == sizeof(expirations)) {
    ReleaseThrottled();
  }
  done_.insert(done_.end(), immediate_.begin(), immediate_.end());
  immediate_.clear();

  for (size_t i = 0; i < backings_.size(); ++i) {
    Backing& backing = *backings_[i];
    if (backing.queue == nullptr) continue;
    backing.queue->ProcessCompletions();
    if (StartSharedFlush(backing)) {
      backing.needs_submit = false;
      backing.queue->Submit();
    }
  }

  if (removable_ && current_ != nullptr &&
      current_->generation != shared_->media->Current()->generation) {
    current_ = nullptr;  // the medium changed: release the old one once it is idle
  }
  RetireIdle();

  delivering_.swap(done_);
  for (const Done& done : delivering_) Deliver(done);
  delivering_.clear();
  processing_ = false;
}

void DriveQueue::Deliver(const Done& done) {
  const uint64_t latency_ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - done.start).count());
  Stats& stats = shared_->stats;
  stats.RecordCompletion(done.type, done.bytes, done.error, latency_ns);
  if (done.error == 0) {
    switch (done.note) {
      case Note::kNone:
        break;
      case Note::kFuaNative:
        stats.RecordFuaNative();
        break;
      case Note::kFuaEmulated:
        stats.RecordFuaEmulated();
        break;
      case Note::kFlushIgnored:
        stats.RecordFlushIgnored();
        break;
      case Note::kFuaIgnored:
        stats.RecordFuaIgnored();
        break;
    }
  }
  --in_flight_;
  handler_(done.cookie, Completion{done.error});
}

void DriveQueue::OnMediaEvent(const MediaEvent& event) {
  // Only the eventfd is touched here (another thread); the queue's thread does the rest in
  // ProcessCompletions().
  if (event.type == MediaEventType::kInserted || event.type == MediaEventType::kRemoved) Signal();
}

}  // namespace

Drive::Drive(Key, std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
Drive::~Drive() = default;

absl::StatusOr<std::unique_ptr<Drive>> Drive::CreateFixed(DriveOptions options,
                                                          std::shared_ptr<BlockBackend> backend) {
  if (backend == nullptr) return absl::InvalidArgumentError("drive without a backend");
  auto shared = std::make_shared<Shared>();
  shared->backend_info = backend->info();
  shared->size_bytes.store(shared->backend_info.size_bytes);
  const uint32_t block = shared->backend_info.logical_block_size;
  if (!std::has_single_bit(block)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "drive \"", options.name, "\": logical block size ", block, " is not a power of two"));
  }
  shared->own = std::make_unique<Throttle>(options.name, IoLimits{}, options.limits_clock);
  shared->options = std::move(options);
  shared->backend = std::move(backend);
  return std::make_unique<Drive>(Key(), std::move(shared));
}

absl::StatusOr<std::unique_ptr<Drive>> Drive::CreateRemovable(
    DriveOptions options, std::shared_ptr<RemovableMedia> media) {
  if (media == nullptr) return absl::InvalidArgumentError("removable drive without media");
  auto shared = std::make_shared<Shared>();
  shared->own = std::make_unique<Throttle>(options.name, IoLimits{}, options.limits_clock);
  shared->options = std::move(options);
  shared->media = std::move(media);
  return std::make_unique<Drive>(Key(), std::move(shared));
}

const DriveOptions& Drive::options() const { return shared_->options; }

bool Drive::removable() const { return shared_->media != nullptr; }

DriveInfo Drive::info() const {
  if (!removable()) {
    DriveInfo info = MakeInfo(shared_->options, false, &shared_->backend_info);
    info.size_bytes = shared_->size_bytes.load(std::memory_order_acquire);
    return info;
  }
  return InfoFor(*shared_->media->Current());
}

absl::StatusOr<uint64_t> Drive::Resize(std::optional<uint64_t> new_size) {
  if (removable()) {
    return absl::FailedPreconditionError(
        absl::StrCat(name(), " has removable media: change the medium instead"));
  }
  if (new_size.has_value() && shared_->options.read_only) {
    return absl::FailedPreconditionError(absl::StrCat(name(), " is read-only"));
  }
  ASSIGN_OR_RETURN(const uint64_t size, shared_->backend->Resize(new_size));
  shared_->size_bytes.store(size, std::memory_order_release);
  return size;
}

DriveInfo Drive::InfoFor(const MediaState& state) const {
  if (!removable()) return info();
  return MakeInfo(shared_->options, true,
                  state.backend != nullptr ? &state.backend->info() : nullptr);
}

RemovableMedia* Drive::media() const { return shared_->media.get(); }

const Stats& Drive::stats() const { return shared_->stats; }

absl::Status Drive::SetLimits(const IoLimits& limits) {
  RETURN_IF_ERROR(ValidateIoLimits(limits));
  absl::MutexLock lock(&shared_->group_mutex);
  shared_->throttled.store(!limits.unlimited() || shared_->group != nullptr,
                           std::memory_order_release);
  shared_->own->SetLimits(limits);  // wakes whoever waits, to try under the new limits
  return absl::OkStatus();
}

IoLimits Drive::limits() const { return shared_->own->limits(); }

void Drive::SetGroup(std::shared_ptr<Throttle> group) {
  absl::MutexLock lock(&shared_->group_mutex);
  std::shared_ptr<Throttle> old = std::exchange(shared_->group, std::move(group));
  shared_->throttled.store(!shared_->own->limits().unlimited() || shared_->group != nullptr,
                           std::memory_order_release);
  // Waiters try again now, under the new group or none: those in the drive's own line, and those
  // that had got through it and stood in the old group's.
  shared_->own->WakeWaiters();
  if (old != nullptr) old->WakeWaiters();
}

std::shared_ptr<Throttle> Drive::group() const {
  absl::MutexLock lock(&shared_->group_mutex);
  return shared_->group;
}

absl::StatusOr<std::unique_ptr<BlockQueue>> Drive::CreateQueue(CompletionHandler handler) {
  return DriveQueue::Create(shared_, std::move(handler));
}

}  // namespace block

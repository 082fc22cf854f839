#ifndef DEVICES_IOTHREAD_H_
#define DEVICES_IOTHREAD_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices {

struct IoThreadOptions {
  // Adaptive polling (QEMU's iothread poll-max-ns is the model): before sleeping in epoll, call the
  // pollers for up to this long; the window grows while polling finds work in time and shrinks when
  // waits are longer than the window. 0 disables polling.
  int64_t poll_max_ns = 0;
  // Runs first on the new thread, before its loop; an error fails Start(). The VMM confines the
  // thread here (its seccomp filter: vmm/sandbox); devices only pass it on.
  std::function<absl::Status()> on_start;
};

// QEMU's adaptive polling rule: the next polling window after a wait of `blocked_ns` with window
// `poll_ns` and limit `poll_max_ns`.
int64_t NextPollWindow(int64_t poll_ns, int64_t blocked_ns, int64_t poll_max_ns);

// An event loop on its own thread: epoll over registered fds (ioeventfds, io_uring eventfds), plus
// pollers for adaptive busy-polling, plus functions posted from other threads. Devices keep all
// per-queue state on one IoThread, so their hot path takes no lock.
class IoThread {
 public:
  IoThread(std::string name, IoThreadOptions options = {});
  ~IoThread();  // Stop()s.
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  // Starts the thread; fails when IoThreadOptions::on_start fails on it (the thread has ended).
  absl::Status Start();
  // Ends the loop and joins the thread. Handlers still registered are dropped (not called).
  void Stop();

  // Runs `fn` on the loop thread and waits for it (or runs it at once when called on the loop thread
  // or before Start()). Use for setting up and tearing down per-thread state.
  void RunSync(absl::AnyInvocable<void()> fn);
  // Queues `fn` to run on the loop thread.
  void Post(absl::AnyInvocable<void()> fn);

  // kLevel: `on_readable` runs on the loop thread while `fd` is readable; it must consume the
  // readiness (read the eventfd). kEdge: it runs once per new readiness (for an eventfd, once per
  // write to it), whatever is left unread. Notification fds a guest or a vhost-user front end
  // controls are edge-triggered: an EFD_SEMAPHORE eventfd holding 2^64-2 stays readable after
  // each read, and level-triggered it kept an iothread spinning (H10 of docs/security.md).
  // Call on the loop thread (RunSync) or before Start().
  enum class Trigger { kLevel, kEdge };
  absl::Status AddFd(int fd, absl::AnyInvocable<void()> on_readable,
                     Trigger trigger = Trigger::kLevel);
  void RemoveFd(int fd);
  // A poller returns true when it found (and handled) work. Returns an id for RemovePoller().
  int AddPoller(absl::AnyInvocable<bool()> poll) { return AddPoller(std::move(poll), {}, {}); }
  // With hooks around each polling phase, as QEMU's io_poll_begin/io_poll_end: `begin` runs when
  // the loop starts busy-polling (a virtqueue turns its notifications off: the poller will see new
  // buffers anyway, and the driver saves a VM exit per request); `end` runs before the loop
  // sleeps, and must turn notifications back on and return true if work arrived meanwhile (the
  // loop then polls again instead of sleeping, or that work would wait for the next event).
  int AddPoller(absl::AnyInvocable<bool()> poll, absl::AnyInvocable<void()> begin,
                absl::AnyInvocable<bool()> end);
  void RemovePoller(int id);

  bool OnLoopThread() const { return std::this_thread::get_id() == thread_id_.load(); }
  const std::string& name() const { return name_; }
  // The thread's adaptive-polling limit (IoThreadOptions::poll_max_ns): 0 means pollers never run.
  int64_t poll_max_ns() const { return options_.poll_max_ns; }
  // The current adaptive polling window (for statistics and tests).
  int64_t poll_ns() const { return poll_ns_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  bool RunPollers();
  void BeginPolling();
  // Ends a polling phase; true if a poller reported work that arrived meanwhile.
  bool EndPolling();
  void RunPosted();

  const std::string name_;
  const IoThreadOptions options_;
  sys_util::ScopedFd epoll_;
  sys_util::ScopedFd wakeup_;  // eventfd: posted work or stop
  std::thread thread_;
  std::atomic<std::thread::id> thread_id_{};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> poll_ns_{0};

  // Touched only on the loop thread (or before Start()).
  std::map<int, absl::AnyInvocable<void()>> handlers_;
  struct Poller {
    absl::AnyInvocable<bool()> poll;
    absl::AnyInvocable<void()> begin;  // may be empty
    absl::AnyInvocable<bool()> end;    // may be empty
  };
  std::map<int, Poller> pollers_;
  int next_poller_id_ = 1;
  bool polling_ = false;  // between the pollers' begin and end hooks

  absl::Mutex posted_mutex_;
  std::deque<absl::AnyInvocable<void()>> posted_ ABSL_GUARDED_BY(posted_mutex_);
};

// How devices get their threads: the assembly starts them here and hands them to the devices
// (VirtioScsiOptions::iothreads, IdeControllerOptions::iothread), which never start threads of
// their own (Cloud Hypervisor's one spawning helper is the model). `count` threads named
// NAME_PREFIX0, NAME_PREFIX1, ..., each started (its on_start run: the VMM confines it there).
// The last owner of a thread stops and joins it.
absl::StatusOr<std::vector<std::shared_ptr<IoThread>>> StartIoThreads(
    const std::string& name_prefix, uint32_t count, const IoThreadOptions& options);

}  // namespace devices

#endif  // DEVICES_IOTHREAD_H_

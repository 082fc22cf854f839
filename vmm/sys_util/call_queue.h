#ifndef VMM_SYS_UTIL_CALL_QUEUE_H_
#define VMM_SYS_UTIL_CALL_QUEUE_H_

#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/scoped_fd.h"

namespace sys_util {

// Calls one thread hands to another and waits for. A thread whose seccomp filter forbids an
// operation (a vCPU thread may not change KVM's memory slots) has the thread that may do it (the
// VMM's main thread, the "serving" thread) run it from its event loop, which polls fd() and then
// calls RunPending().
//
// The serving thread is the one that constructed the queue or last called Open(); a call made on
// it runs at once. Calls from other threads are accepted only while the queue is open: Close(),
// which the serving thread calls when it stops serving (before it stops the threads that could be
// waiting), fails the waiting calls and later ones, so nothing waits for a loop that has ended.
class CallQueue {
 public:
  CallQueue();
  CallQueue(const CallQueue&) = delete;
  CallQueue& operator=(const CallQueue&) = delete;

  // Runs `call` on the serving thread and returns what it returned; UNAVAILABLE, without running
  // it, when the queue is closed.
  absl::Status Call(absl::FunctionRef<absl::Status()> call);

  // Readable while calls are queued.
  int fd() const { return event_fd_.get(); }
  // Serving thread: runs the calls queued so far, in order.
  void RunPending();
  void Open();
  void Close();

 private:
  struct Pending {
    absl::FunctionRef<absl::Status()> call;
    absl::Status result;
    bool done = false;
  };

  ScopedFd event_fd_;
  absl::Mutex mutex_;
  std::thread::id serving_thread_ ABSL_GUARDED_BY(mutex_);
  bool open_ ABSL_GUARDED_BY(mutex_) = false;
  std::deque<Pending*> queue_ ABSL_GUARDED_BY(mutex_);  // each lives on its caller's stack
};

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_CALL_QUEUE_H_

#include "vmm/sys_util/call_queue.h"

#include <sys/eventfd.h>

#include "vmm/sys_util/eventfd.h"

namespace sys_util {

CallQueue::CallQueue()
    : event_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      serving_thread_(std::this_thread::get_id()) {}

absl::Status CallQueue::Call(absl::FunctionRef<absl::Status()> call) {
  Pending pending{call, absl::OkStatus(), false};
  {
    absl::MutexLock lock(&mutex_);
    if (std::this_thread::get_id() != serving_thread_) {
      if (!open_) return absl::UnavailableError("the thread that serves this call has stopped");
      queue_.push_back(&pending);
      SignalEventFd(event_fd_.get());
      mutex_.Await(absl::Condition(&pending.done));
      return pending.result;
    }
  }
  return call();
}

void CallQueue::RunPending() {
  DrainEventFd(event_fd_.get());
  // Only the calls queued so far: callers that keep queueing (a guest's vCPUs taking turns) must
  // not keep this thread from the rest of its loop. A later call signalled the eventfd again.
  std::deque<Pending*> batch;
  {
    absl::MutexLock lock(&mutex_);
    batch.swap(queue_);
  }
  for (Pending* pending : batch) {
    // Outside the lock: the call may take time.
    absl::Status result = pending->call();
    absl::MutexLock lock(&mutex_);
    pending->result = std::move(result);
    pending->done = true;
  }
}

void CallQueue::Open() {
  absl::MutexLock lock(&mutex_);
  serving_thread_ = std::this_thread::get_id();
  open_ = true;
}

void CallQueue::Close() {
  absl::MutexLock lock(&mutex_);
  open_ = false;
  for (Pending* pending : queue_) {
    pending->result = absl::UnavailableError("the thread that serves this call has stopped");
    pending->done = true;
  }
  queue_.clear();
}

}  // namespace sys_util

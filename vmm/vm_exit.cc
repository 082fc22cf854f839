#include "vmm/vm_exit.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

#include "vmm/sys_util/eventfd.h"

namespace vmm {

ExitLatch::ExitLatch() : event_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void ExitLatch::Trigger(VmExit exit) {
  {
    absl::MutexLock lock(&mutex_);
    if (exit_.has_value()) return;
    exit_ = std::move(exit);
    triggered_.store(true, std::memory_order_release);
  }
  sys_util::SignalEventFd(event_fd_.get());
}

void ExitLatch::Rearm() {
  absl::MutexLock lock(&mutex_);
  exit_.reset();
  triggered_.store(false, std::memory_order_release);
  uint64_t count = 0;
  // Non-blocking: drains the eventfd's counter if it was signalled, else EAGAIN.
  (void)!read(event_fd_.get(), &count, sizeof(count));
}

std::optional<VmExit> ExitLatch::Get() const {
  absl::MutexLock lock(&mutex_);
  return exit_;
}

}  // namespace vmm

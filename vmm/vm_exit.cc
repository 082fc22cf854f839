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

std::optional<VmExit> ExitLatch::Get() const {
  absl::MutexLock lock(&mutex_);
  return exit_;
}

}  // namespace vmm

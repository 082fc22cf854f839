#include "vmm/vm_exit.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>

namespace vmm {

ExitLatch::ExitLatch() : event_fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void ExitLatch::Trigger(VmExit exit) {
  {
    absl::MutexLock lock(&mutex_);
    if (exit_.has_value()) return;
    exit_ = std::move(exit);
    triggered_.store(true, std::memory_order_release);
  }
  const uint64_t one = 1;
  // The eventfd counter cannot overflow from one write; nothing useful to do if it fails.
  (void)!write(event_fd_.get(), &one, sizeof(one));
}

std::optional<VmExit> ExitLatch::Get() const {
  absl::MutexLock lock(&mutex_);
  return exit_;
}

}  // namespace vmm

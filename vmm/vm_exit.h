#ifndef VMM_VM_EXIT_H_
#define VMM_VM_EXIT_H_

#include <atomic>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm {

// Why the VM stopped.
struct VmExit {
  enum class Kind {
    kGuestExit,  // the guest wrote its status to the debug-exit port
    kReset,      // the guest reset the machine (i8042 0xFE, KVM system event)
    kPowerOff,   // the guest powered off (KVM system event)
    kSignal,     // SIGINT/SIGTERM/SIGHUP reached the VMM
    kFatal,      // a vCPU could not go on (triple fault, KVM internal error, ...)
    kStopped,    // stopped through the control API (Shutdown), status 0
  };
  Kind kind;
  int status = 0;       // the process exit status this exit maps to
  std::string message;  // for kFatal: what happened, with the registers
  // For a triple fault that --on-reboot=restart turns into a reset: where the vCPU last exited,
  // printed with the restart (the guest state at the fault is gone by then on SVM hosts).
  std::string detail;
};

// The first reason to stop wins; later ones are ignored. Waiters poll fd(), an eventfd that becomes
// readable once a reason is set. Safe to call from any thread.
class ExitLatch {
 public:
  ExitLatch();
  void Trigger(VmExit exit);
  std::optional<VmExit> Get() const;
  // Clears the reason, for a VM that restarts its guest after a reset. Only once nothing can
  // trigger it any more (every vCPU stopped) and nothing waits on fd().
  void Rearm();
  // Cheap enough to check after every vCPU exit.
  bool triggered() const { return triggered_.load(std::memory_order_acquire); }
  int fd() const { return event_fd_.get(); }

 private:
  sys_util::ScopedFd event_fd_;
  mutable absl::Mutex mutex_;
  std::optional<VmExit> exit_ ABSL_GUARDED_BY(mutex_);
  std::atomic<bool> triggered_{false};
};

}  // namespace vmm

#endif  // VMM_VM_EXIT_H_

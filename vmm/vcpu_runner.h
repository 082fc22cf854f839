#ifndef VMM_VCPU_RUNNER_H_
#define VMM_VCPU_RUNNER_H_

#include <pthread.h>

#include <atomic>
#include <memory>
#include <thread>

#include "vmm/bus.h"
#include "vmm/kvm.h"
#include "vmm/vm_exit.h"

namespace vmm {

// Runs one vCPU on its own thread: KVM_RUN, then the exit is dispatched to the port I/O or MMIO bus
// on this thread. Guest resets, shutdowns and fatal errors go to the ExitLatch; the runner then
// stops. Stop() interrupts a running or blocked KVM_RUN (an AP waiting for its SIPI blocks there).
class VcpuRunner {
 public:
  VcpuRunner(VcpuFd vcpu, const Bus& pio_bus, const Bus& mmio_bus, ExitLatch& exit_latch);
  ~VcpuRunner();  // Stops and joins.
  VcpuRunner(const VcpuRunner&) = delete;
  VcpuRunner& operator=(const VcpuRunner&) = delete;

  // Installs the (empty) handler of the signal used to kick vCPU threads out of KVM_RUN. Call once
  // before starting runners.
  static void InstallKickSignalHandler();

  void Start();
  void Stop();

  // Guest exits the runner handled, for statistics.
  uint64_t exit_count() const { return exit_count_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // Returns false when the vCPU must stop.
  bool HandleExit();
  void Fatal(const std::string& what);

  VcpuFd vcpu_;
  const Bus& pio_bus_;
  const Bus& mmio_bus_;
  ExitLatch& exit_latch_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> exited_{false};
  std::atomic<uint64_t> exit_count_{0};
  std::thread thread_;
};

}  // namespace vmm

#endif  // VMM_VCPU_RUNNER_H_

#ifndef VMM_VCPU_RUNNER_H_
#define VMM_VCPU_RUNNER_H_

#include <pthread.h>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "vmm/kvm/coalesced_writes.h"
#include "vmm/kvm/kvm.h"
#include "vmm/machine/bus.h"
#include "vmm/vm_exit.h"

namespace vmm {

// Runs one vCPU on its own thread: KVM_RUN, then the exit is dispatched to the port I/O or MMIO bus
// on this thread. Guest resets, shutdowns and fatal errors go to the ExitLatch; the runner then
// stops. Stop() interrupts a running or blocked KVM_RUN (an AP waiting for its SIPI blocks there).
// Pause() takes the vCPU out of KVM_RUN the same way and parks its thread until Resume(); nothing
// else (devices, iothreads) is affected.
class VcpuRunner {
 public:
  // `on_start` runs first on the vCPU thread (the VMM confines the thread there: vmm/sandbox); its
  // error stops the VM as a fatal one before the vCPU ever runs.
  VcpuRunner(VcpuFd vcpu, const Bus& pio_bus, const Bus& mmio_bus, ExitLatch& exit_latch,
             std::function<absl::Status()> on_start = {});
  ~VcpuRunner();  // Stops and joins.
  VcpuRunner(const VcpuRunner&) = delete;
  VcpuRunner& operator=(const VcpuRunner&) = delete;

  // Installs the (empty) handler of the signal used to kick vCPU threads out of KVM_RUN. Call once
  // before starting runners.
  static void InstallKickSignalHandler();

  // A triple fault (KVM_EXIT_SHUTDOWN) resets the machine, as on a PC, instead of stopping the VM
  // as a fatal error. Call before Start().
  void TreatTripleFaultAsReset() { triple_fault_resets_ = true; }
  // The VM's posted writes (its coalesced ring, seen through this vCPU's mapping): applied after
  // every return from KVM_RUN, before the exit is handled. Call before Start(); `writes` must
  // outlive the runner.
  void ApplyPostedWrites(CoalescedWrites* writes) {
    posted_writes_ = writes;
    posted_ring_ = writes != nullptr ? vcpu_.CoalescedRing(writes->page_offset()) : nullptr;
  }

  void Start();
  void Stop();

  // Asks the vCPU to leave KVM_RUN (kick) and wait until Resume(); returns at once. Idempotent.
  // Before Start() the vCPU parks as soon as it starts. A pending I/O exit is completed first (KVM
  // finishes the instruction on the next KVM_RUN, which immediate_exit then leaves at once).
  // Start(), Stop() and these are not to be called concurrently with each other (the VM serializes
  // them); Pause/Resume may be called from any thread, before Start() and after Stop().
  void RequestPause();
  // Blocks until the vCPU is parked (or its thread has ended, or was never started).
  void WaitUntilPaused();
  // RequestPause() then WaitUntilPaused().
  void Pause();
  // Lets a paused vCPU run again (also one asked to pause that has not parked yet). Idempotent.
  void Resume();
  // The vCPU is parked (acknowledged a pause).
  bool parked() const;

  // Guest exits the runner handled, for statistics.
  uint64_t exit_count() const { return exit_count_.load(std::memory_order_relaxed); }

 private:
  void Loop();
  // Returns false when the vCPU must stop.
  bool HandleExit();
  void Fatal(const std::string& what);
  // With register sync on (VcpuFd::SyncGeneralRegistersOnExit), keeps this exit's reason and
  // registers; DescribePreviousExit() reports them.
  void RememberExit(const kvm_run& run);
  std::string DescribePreviousExit() const;
  // Called by the vCPU thread while a pause is requested: waits until resumed or stopped. Returns
  // false when the vCPU must stop.
  bool ParkWhilePaused();
  void Kick();

  VcpuFd vcpu_;
  const Bus& pio_bus_;
  const Bus& mmio_bus_;
  ExitLatch& exit_latch_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> exited_{false};
  std::atomic<uint64_t> exit_count_{0};
  std::atomic<bool> pause_requested_{false};  // also written under pause_mutex_
  mutable absl::Mutex pause_mutex_;
  absl::CondVar pause_cv_;
  bool parked_ ABSL_GUARDED_BY(pause_mutex_) = false;

  // The exit before the current one (vCPU thread only). Under SVM KVM re-initializes the vCPU on a
  // triple fault, so KVM_GET_REGS then shows the reset state; this is where the guest last was.
  struct PreviousExit {
    bool valid = false;
    uint32_t reason = 0;
    uint64_t address = 0;  // the port (I/O) or guest-physical address (MMIO)
    bool write = false;
    kvm_regs regs{};
  };
  PreviousExit previous_exit_;
  std::function<absl::Status()> on_start_;
  bool triple_fault_resets_ = false;
  CoalescedWrites* posted_writes_ = nullptr;
  kvm_abi::CoalescedRing* posted_ring_ = nullptr;
  std::thread thread_;
};

}  // namespace vmm

#endif  // VMM_VCPU_RUNNER_H_

#include "vmm/vcpu_runner.h"

#include <signal.h>

#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vmm/sys_util/thread.h"

namespace vmm {
namespace {

int KickSignal() { return SIGRTMIN; }

void IgnoreKick(int) {}

// KVM_EXIT_INTERNAL_ERROR in words; for an emulation failure, with the instruction bytes KVM could
// not emulate (struct emulation_failure, an ABI overlay of `internal`).
std::string DescribeInternalError(const kvm_run& run) {
  if (run.internal.suberror != KVM_INTERNAL_ERROR_EMULATION) {
    return absl::StrFormat("KVM internal error, suberror %u", run.internal.suberror);
  }
  std::string message = "KVM could not emulate an instruction (KVM_INTERNAL_ERROR_EMULATION)";
  const auto& failure = run.emulation_failure;
  if (failure.ndata >= 3 && (failure.flags & KVM_INTERNAL_ERROR_EMULATION_FLAG_INSTRUCTION_BYTES)) {
    const uint32_t size = std::min<uint32_t>(failure.insn_size, sizeof(failure.insn_bytes));
    absl::StrAppend(&message, "; instruction bytes:");
    for (uint32_t i = 0; i < size; ++i) {
      absl::StrAppend(&message, absl::StrFormat(" %02x", failure.insn_bytes[i]));
    }
  }
  return message;
}

}  // namespace

VcpuRunner::VcpuRunner(VcpuFd vcpu, const Bus& pio_bus, const Bus& mmio_bus, ExitLatch& exit_latch,
                       std::function<absl::Status()> on_start)
    : vcpu_(std::move(vcpu)),
      pio_bus_(pio_bus),
      mmio_bus_(mmio_bus),
      exit_latch_(exit_latch),
      on_start_(std::move(on_start)) {}

VcpuRunner::~VcpuRunner() { Stop(); }

void VcpuRunner::InstallKickSignalHandler() {
  struct sigaction action {};
  action.sa_handler = IgnoreKick;
  sigemptyset(&action.sa_mask);
  // No SA_RESTART: the point is that KVM_RUN returns EINTR.
  action.sa_flags = 0;
  sigaction(KickSignal(), &action, nullptr);
}

void VcpuRunner::Start() {
  absl::StatusOr<std::thread> thread = sys_util::StartThread(
      {.name = absl::StrFormat("vcpu%u", vcpu_.id()), .on_start = on_start_}, [this] { Loop(); });
  if (!thread.ok()) {
    // Its confinement failed: the VM stops as for a fatal error before the vCPU ever ran.
    exit_latch_.Trigger({VmExit::Kind::kFatal, 1, std::string(thread.status().message())});
    return;
  }
  thread_ = *std::move(thread);
}

void VcpuRunner::Kick() { pthread_kill(thread_.native_handle(), KickSignal()); }

void VcpuRunner::Stop() {
  {
    // immediate_exit makes a KVM_RUN that starts after this point return EINTR at once; the signal
    // interrupts one already running (or blocked waiting for INIT/SIPI). Every write of
    // immediate_exit is under pause_mutex_, so a concurrent Resume() cannot clear it after this.
    // A parked vCPU wakes up and ends.
    absl::MutexLock lock(&pause_mutex_);
    stop_requested_.store(true);
    vcpu_.run_state()->immediate_exit = 1;
    pause_cv_.SignalAll();
  }
  if (!thread_.joinable()) return;
  // Keep kicking until the thread is gone, in case a kick lands between the flag check and the
  // ioctl.
  while (true) {
    Kick();
    // The loop exits within one KVM_RUN once the flag is set.
    struct timespec pause = {0, 1'000'000};
    nanosleep(&pause, nullptr);
    if (exited_.load()) break;
  }
  thread_.join();
}

void VcpuRunner::RequestPause() {
  absl::MutexLock lock(&pause_mutex_);
  if (pause_requested_.load() || stop_requested_.load()) return;
  pause_requested_.store(true);
  vcpu_.run_state()->immediate_exit = 1;
  if (thread_.joinable()) Kick();
}

void VcpuRunner::WaitUntilPaused() {
  if (!thread_.joinable()) return;  // not started: it parks as soon as it starts
  absl::MutexLock lock(&pause_mutex_);
  while (pause_requested_.load() && !parked_ && !exited_.load()) {
    // immediate_exit covers a kick that lands before the vCPU enters KVM_RUN; kick again anyway
    // now and then, as Stop() does.
    if (pause_cv_.WaitWithTimeout(&pause_mutex_, absl::Milliseconds(5))) Kick();
  }
}

void VcpuRunner::Pause() {
  RequestPause();
  WaitUntilPaused();
}

void VcpuRunner::Resume() {
  absl::MutexLock lock(&pause_mutex_);
  if (!pause_requested_.load()) return;
  pause_requested_.store(false);
  // Back into the guest: a vCPU that never parked (resumed before it saw the request) must not
  // keep bouncing off immediate_exit. Not after Stop(), which needs it set.
  if (!stop_requested_.load()) vcpu_.run_state()->immediate_exit = 0;
  pause_cv_.SignalAll();
}

bool VcpuRunner::parked() const {
  absl::MutexLock lock(&pause_mutex_);
  return parked_;
}

bool VcpuRunner::ParkWhilePaused() {
  absl::MutexLock lock(&pause_mutex_);
  parked_ = true;
  pause_cv_.SignalAll();
  while (pause_requested_.load() && !stop_requested_.load()) pause_cv_.Wait(&pause_mutex_);
  parked_ = false;
  return !stop_requested_.load();
}

void VcpuRunner::Loop() {
  while (!stop_requested_.load(std::memory_order_relaxed)) {
    // Paused: out of KVM_RUN (the kick made it return), parked until Resume() or Stop().
    if (pause_requested_.load(std::memory_order_acquire)) {
      if (!ParkWhilePaused()) break;
      continue;
    }
    absl::Status status = vcpu_.Run();
    // Before anything is handled: the exit (and anything a pause or stop looks at) must see the
    // writes the guest made before it.
    if (posted_writes_ != nullptr) posted_writes_->Drain(posted_ring_);
    if (absl::IsAborted(status)) {
      // EINTR: a kick, or a signal meant for another thread; the flag says which.
      continue;
    }
    if (!status.ok()) {
      Fatal(std::string(status.message()));
      break;
    }
    exit_count_.fetch_add(1, std::memory_order_relaxed);
    const bool keep_running = HandleExit();
    // After handling: a fatal exit reports the exit before it.
    const kvm_run& run = *vcpu_.run_state();
    if (run.kvm_valid_regs & KVM_SYNC_X86_REGS) RememberExit(run);
    if (!keep_running) break;
    // Once the VM is stopping (this exit was the guest's exit-port write, a reset, or another vCPU
    // failed), no vCPU goes back into the guest: nothing it does after that may be observed.
    if (exit_latch_.triggered()) break;
  }
  absl::MutexLock lock(&pause_mutex_);
  exited_.store(true);
  pause_cv_.SignalAll();
}

void VcpuRunner::RememberExit(const kvm_run& run) {
  previous_exit_.valid = true;
  previous_exit_.reason = run.exit_reason;
  previous_exit_.regs = run.s.regs.regs;
  previous_exit_.address = 0;
  previous_exit_.write = false;
  if (run.exit_reason == KVM_EXIT_IO) {
    previous_exit_.address = run.io.port;
    previous_exit_.write = run.io.direction == KVM_EXIT_IO_OUT;
  } else if (run.exit_reason == KVM_EXIT_MMIO) {
    previous_exit_.address = run.mmio.phys_addr;
    previous_exit_.write = run.mmio.is_write != 0;
  }
}

std::string VcpuRunner::DescribePreviousExit() const {
  if (!previous_exit_.valid) return "";
  const PreviousExit& e = previous_exit_;
  std::string what = absl::StrFormat("exit reason %u", e.reason);
  if (e.reason == KVM_EXIT_IO) {
    what = absl::StrFormat("port %s 0x%x", e.write ? "write" : "read", e.address);
  } else if (e.reason == KVM_EXIT_MMIO) {
    what = absl::StrFormat("MMIO %s 0x%x", e.write ? "write" : "read", e.address);
  }
  return absl::StrFormat(
      "\nthe vCPU's previous exit (%s) was at rip=%016x rsp=%016x rflags=%016x\n"
      "  rax=%016x rbx=%016x rcx=%016x rdx=%016x rsi=%016x rdi=%016x rbp=%016x",
      what, e.regs.rip, e.regs.rsp, e.regs.rflags, e.regs.rax, e.regs.rbx, e.regs.rcx, e.regs.rdx,
      e.regs.rsi, e.regs.rdi, e.regs.rbp);
}

bool VcpuRunner::HandleExit() {
  kvm_run* run = vcpu_.run_state();
  switch (run->exit_reason) {
    case KVM_EXIT_IO: {
      // String I/O (rep ins/outs) arrives as `count` back-to-back items in the shared page; the
      // device takes them in one call (an IDE data port reads a whole CD sector so).
      std::span<uint8_t> data(reinterpret_cast<uint8_t*>(run) + run->io.data_offset,
                              size_t{run->io.size} * run->io.count);
      const bool out = run->io.direction == KVM_EXIT_IO_OUT;
      if (run->io.count == 1) {
        out ? pio_bus_.Write(run->io.port, data) : pio_bus_.Read(run->io.port, data);
      } else if (out) {
        pio_bus_.WriteString(run->io.port, run->io.size, data);
      } else {
        pio_bus_.ReadString(run->io.port, run->io.size, data);
      }
      return true;
    }
    case KVM_EXIT_MMIO: {
      const uint32_t length = std::min<uint32_t>(run->mmio.len, sizeof(run->mmio.data));
      std::span<uint8_t> data(run->mmio.data, length);
      if (run->mmio.is_write) {
        mmio_bus_.Write(run->mmio.phys_addr, data);
      } else {
        mmio_bus_.Read(run->mmio.phys_addr, data);
      }
      return true;
    }
    case KVM_EXIT_SHUTDOWN:
      if (triple_fault_resets_) {
        // A PC's chipset answers the processor's shutdown cycle with INIT (QEMU: a system reset);
        // some loaders and kernels (Linux's reboot=t) reboot that way.
        exit_latch_.Trigger({VmExit::Kind::kReset, 0, "guest triple fault",
                             absl::StrFormat("vCPU %u%s", vcpu_.id(), DescribePreviousExit())});
        return false;
      }
      Fatal(
          "triple fault (KVM_EXIT_SHUTDOWN): the guest hit an exception it could not handle "
          "(on SVM hosts KVM has already reset the registers below; see the previous exit)");
      return false;
    case KVM_EXIT_SYSTEM_EVENT:
      switch (run->system_event.type) {
        case KVM_SYSTEM_EVENT_SHUTDOWN:
          exit_latch_.Trigger({VmExit::Kind::kPowerOff, 0, "guest powered off"});
          return false;
        case KVM_SYSTEM_EVENT_RESET:
          exit_latch_.Trigger({VmExit::Kind::kReset, 0, "guest reset"});
          return false;
        default:
          Fatal(absl::StrFormat("guest system event %u (crash)", run->system_event.type));
          return false;
      }
    case KVM_EXIT_INTERNAL_ERROR:
      Fatal(DescribeInternalError(*run));
      return false;
    case KVM_EXIT_FAIL_ENTRY:
      Fatal(absl::StrFormat("KVM could not enter the guest (hardware reason 0x%x)",
                            run->fail_entry.hardware_entry_failure_reason));
      return false;
    case KVM_EXIT_HLT:
      // Only without an in-kernel irqchip, which this VMM always has.
      Fatal("unexpected HLT exit");
      return false;
    case KVM_EXIT_INTR:
      return true;
    default:
      Fatal(absl::StrFormat("unexpected KVM exit reason %u", run->exit_reason));
      return false;
  }
}

void VcpuRunner::Fatal(const std::string& what) {
  exit_latch_.Trigger({VmExit::Kind::kFatal, 1,
                       absl::StrFormat("vCPU %u: %s\n%s%s", vcpu_.id(), what, vcpu_.DumpRegisters(),
                                       DescribePreviousExit())});
}

}  // namespace vmm

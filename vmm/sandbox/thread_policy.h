#ifndef VMM_SANDBOX_THREAD_POLICY_H_
#define VMM_SANDBOX_THREAD_POLICY_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/sandbox/seccomp_filter.h"

namespace vmm::sandbox {

// The kinds of thread a VMM process runs, each with its own seccomp allowlist (docs/security.md):
//
// - kControl: the whole process, installed before any thread exists, so every thread inherits it:
//   the main thread, the control API's threads, the vhost-user message loop. They open media and
//   sockets, so they may; no thread may execute a program, fork, trace, mount, load modules or
//   BPF, change namespaces, or connect out.
// - kVcpu: a vCPU thread, stacked on kControl: KVM ioctls, memory, synchronization, eventfds and
//   the serial console's writes. No open, no socket.
// - kIo: an iothread (virtqueues, IDE DMA, block I/O), stacked on kControl: io_uring, epoll,
//   eventfds, reads and writes on fds it was given, flushes and fallocate, KVM ioctls for
//   interrupt lines. No open, no socket.
enum class ThreadRole { kControl, kVcpu, kIo };

struct SandboxOptions {
  ViolationAction action = ViolationAction::kTrap;
  // The process will enter a jail (vmm/sandbox/jail.h) after threads exist: glibc changes the
  // ids of every thread by making each call setresuid/setresgid/setgroups itself, so kControl and
  // kIo allow those (and kControl the calls that build and enter the jail's root).
  bool jail = false;
};

// The allowlist of a role (exposed for tests and for reviewing what a role may do).
SyscallAllowlist AllowlistFor(ThreadRole role, const SandboxOptions& options);

// Confines the calling thread to `role`.
absl::Status ConfineThisThread(ThreadRole role, const SandboxOptions& options);

// "trap" (default), "log" or "off", as --seccomp takes it.
struct SeccompSetting {
  bool enabled = true;
  ViolationAction action = ViolationAction::kTrap;
};
absl::StatusOr<SeccompSetting> ParseSeccompSetting(const std::string& text);

// The sandbox of one VMM process. Enable() first thing in main(), before any thread starts:
// installs the SIGSYS reporter and the kControl filter on the process. ThreadStart(role) is what
// the thread-starting code runs first on each new vCPU or iothread (VmConfig, IoThreadOptions).
class ProcessSandbox {
 public:
  // Disabled: ThreadStart() returns an empty function and nothing is filtered.
  static absl::StatusOr<ProcessSandbox> Enable(const SeccompSetting& setting,
                                               const SandboxOptions& options);

  std::function<absl::Status()> ThreadStart(ThreadRole role) const;
  bool enabled() const { return enabled_; }

 private:
  ProcessSandbox(bool enabled, SandboxOptions options) : enabled_(enabled), options_(options) {}
  bool enabled_;
  SandboxOptions options_;
};

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_THREAD_POLICY_H_

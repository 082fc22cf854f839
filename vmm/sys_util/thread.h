#ifndef VMM_SYS_UTIL_THREAD_H_
#define VMM_SYS_UTIL_THREAD_H_

#include <functional>
#include <string>
#include <thread>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"

namespace sys_util {

struct ThreadOptions {
  // Shown by ps, /proc/PID/task/*/comm and the sandbox's violation report; the kernel keeps the
  // first 15 characters.
  std::string name;
  // Runs first on the new thread, before `body`: the assembly confines the thread here (its
  // seccomp filter, vmm/sandbox). When it fails, `body` never runs.
  std::function<absl::Status()> on_start;
};

// The one way the VMM starts a long-lived thread (vCPUs, iothreads, the host drive's worker, the
// uevent listener, serial input), so that every one is named and confined alike (Cloud
// Hypervisor spawns its device threads through one helper for the same reason).
//
// Returns once `on_start` has run on the new thread. On its failure the thread is joined and the
// error returned as "NAME: starting the thread: ERROR". The caller joins the returned thread.
absl::StatusOr<std::thread> StartThread(ThreadOptions options, absl::AnyInvocable<void() &&> body);

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_THREAD_H_

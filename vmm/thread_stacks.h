#ifndef VMM_THREAD_STACKS_H_
#define VMM_THREAD_STACKS_H_

#include <cstddef>

#include "absl/status/status.h"

namespace vmm {

// The stack size every thread the VMM starts gets (vCPUs, iothreads, serial input, std::thread
// and library threads alike): glibc's default is 8 MiB, and where the host has transparent huge
// pages "always" (Debian's default) the first touch of such a stack can fault in a whole 2 MiB
// huge page: measured, one of the VMM's threads held 2 MiB of RSS for a few KiB of stack. A stack
// smaller than 2 MiB cannot hold a huge page. 1 MiB is many times what the deepest thread uses.
inline constexpr size_t kThreadStackBytes = size_t{1} << 20;

// Makes kThreadStackBytes the default for threads created from now on (pthread_setattr_default_np).
// Call first thing in main(), before any thread exists.
absl::Status UseSmallThreadStacks();

}  // namespace vmm

#endif  // VMM_THREAD_STACKS_H_

#ifndef VMM_SYS_UTIL_DESCRIPTORS_H_
#define VMM_SYS_UTIL_DESCRIPTORS_H_

#include <vector>

#include "absl/status/status.h"

namespace sys_util {

// Closes every descriptor from 3 up: whatever the process that started us left open (a pipe, a
// socket, a directory outside the jail) is nothing the VMM asked for, and a compromised thread
// could use it (H8 of docs/security.md; Firecracker's jailer does the same). Call
// first thing in main, before anything of ours is opened; stdin, stdout and stderr stay.
absl::Status CloseInheritedDescriptors();

// Closes every descriptor above stderr but those in `keep` (any order; values below 3 are
// ignored): what a helper process forked from the launcher does first (the jail's supervisor, the
// socket janitor), so it holds nothing of the VMM's. Async-signal-safe apart from the sort of
// `keep`, which it takes by value.
void CloseAllDescriptorsBut(std::vector<int> keep);

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_DESCRIPTORS_H_

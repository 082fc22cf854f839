#include "vmm/sys_util/descriptors.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "vmm/sys_util/scoped_fd.h"

namespace sys_util {

absl::Status CloseInheritedDescriptors() {
  // close_range(2), Linux 5.9: one call, however many there are.
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) return ErrnoStatus(errno, "close_range");
  return absl::OkStatus();
}

void CloseAllDescriptorsBut(std::vector<int> keep) {
  std::sort(keep.begin(), keep.end());
  unsigned first = 3;
  for (int fd : keep) {
    if (fd < 3 || static_cast<unsigned>(fd) < first) continue;
    if (static_cast<unsigned>(fd) > first) syscall(SYS_close_range, first, fd - 1u, 0u);
    first = fd + 1u;
  }
  syscall(SYS_close_range, first, ~0u, 0u);
}

}  // namespace sys_util

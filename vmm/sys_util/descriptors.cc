#include "vmm/sys_util/descriptors.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "vmm/sys_util/scoped_fd.h"

namespace sys_util {

absl::Status CloseInheritedDescriptors() {
  // close_range(2), Linux 5.9: one call, however many there are.
  if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) return ErrnoStatus(errno, "close_range");
  return absl::OkStatus();
}

}  // namespace sys_util

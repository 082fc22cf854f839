#include "vmm/sys_util/eventfd.h"

#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace sys_util {

absl::StatusOr<ScopedFd> MakeEventFd() {
  ScopedFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) return ErrnoStatus(errno, "eventfd");
  return fd;
}

void SignalEventFd(int fd) {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(fd, &one, sizeof(one));
}

uint64_t DrainEventFd(int fd) {
  uint64_t count = 0;
  iovec buffer = {&count, sizeof(count)};
  if (::preadv2(fd, &buffer, 1, -1, RWF_NOWAIT) != static_cast<ssize_t>(sizeof(count))) return 0;
  return count;
}

}  // namespace sys_util

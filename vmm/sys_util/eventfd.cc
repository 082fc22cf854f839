#include "vmm/sys_util/eventfd.h"

#include <sys/eventfd.h>
#include <sys/stat.h>
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

bool IsEventFd(int fd) {
  ScopedFd ours(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  struct stat reference {
  }, theirs{};
  if (!ours.valid() || ::fstat(ours.get(), &reference) != 0 || ::fstat(fd, &theirs) != 0) {
    return false;
  }
  if (theirs.st_dev != reference.st_dev) return false;
  const uint64_t zero = 0;
  return ::write(fd, &zero, sizeof(zero)) == static_cast<ssize_t>(sizeof(zero));
}

}  // namespace sys_util

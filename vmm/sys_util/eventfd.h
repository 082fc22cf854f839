#ifndef VMM_SYS_UTIL_EVENTFD_H_
#define VMM_SYS_UTIL_EVENTFD_H_

#include "absl/status/statusor.h"
#include "vmm/sys_util/scoped_fd.h"

namespace sys_util {

// A new non-blocking, close-on-exec eventfd with a zero count (eventfd(2)).
absl::StatusOr<ScopedFd> MakeEventFd();

// Adds 1 to the eventfd's count. A non-blocking eventfd refuses (EAGAIN) only when the count would
// pass 2^64-2, and then the reader has a wake-up pending anyway, so the result is not needed.
void SignalEventFd(int fd);

// Takes the eventfd's whole count in one read that never blocks, whatever the descriptor's own
// flags: a descriptor another process handed over (a vhost-user kick) may be a blocking one whose
// count its owner already zeroed, and a plain read would then wait for ever (RWF_NOWAIT: EAGAIN
// instead). Returns the count taken, 0 when there was none. An EFD_SEMAPHORE eventfd gives 1 a read.
uint64_t DrainEventFd(int fd);

// Whether `fd` (from another process: a vhost-user front end) is an eventfd, without /proc (absent
// in the jail) and without changing it. Every anonymous-inode descriptor (eventfd, timerfd,
// signalfd, epoll, inotify, pidfd, KVM, io_uring, ...) lives on the kernel's anon_inodefs, so the
// file must be on the same device as an eventfd of our own (no regular file, pipe or socket is);
// among those only an eventfd takes an 8-byte write, and adding 0 to its count changes nothing
// and never blocks (eventfd(2)), while the others have no write at all (EINVAL).
bool IsEventFd(int fd);

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_EVENTFD_H_

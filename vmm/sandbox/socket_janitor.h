#ifndef VMM_SANDBOX_SOCKET_JANITOR_H_
#define VMM_SANDBOX_SOCKET_JANITOR_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "vmm/sandbox/seccomp_filter.h"
#include "vmm/sandbox/thread_policy.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm::sandbox {

// Removes the unix sockets a launcher created (the control API's, vhost-user's) once the launcher
// is done, from a small process of its own. The VMM cannot do it itself: its filter allows no
// unlink at all (docs/security.md: no file is removed, renamed, linked or re-moded through a
// compromised thread), and a jailed VMM no longer sees the paths.
//
// The paths it may ever remove are fixed when it starts (the sockets' paths come from the command
// line), so that nothing said on its channel later can name another file for a process that may
// run as root. The launcher tells it which of them it bound while it starts up (Register: the path
// and what its lstat gave right after the bind: device, inode and change time, which together
// name that one socket even after its inode number is reused), until Seal(), as soon as the last
// socket is bound
// (the control API's, a moment after its server started: before the guest, a front end or the
// jail). Whatever arrives after that is read and ignored: a thread compromised later cannot name
// a file for it. When the launcher ends (Finish, or its death: the channel reads
// end-of-file), the janitor removes each registered path that is still the very socket registered
// (a socket, same device and inode: never a file that took its place) and exits.
//
// Start forks twice while the launcher has one thread, before its sandbox: the janitor is nobody's
// child (a jailed launcher's supervisor keeps exactly one, the VMM), stays in the host's
// namespaces as the launcher's user, leaves the session (a terminal's Ctrl-C or hang-up does not
// reach it, so it outlives a VMM they stop), is not dumpable, keeps only its channel and a pipe
// (not even stdio), and runs under its own filter (JanitorAllowlist): read, lstat, unlink, exit.
class SocketJanitor {
 public:
  // `paths`: the only paths it may remove (at most kMaxSockets, each fitting sockaddr_un).
  // `seccomp` (--seccomp) decides the janitor's own filter: off, none; log, logged only.
  static absl::StatusOr<SocketJanitor> Start(std::vector<std::string> paths,
                                             const SeccompSetting& seccomp = {.enabled = true});

  SocketJanitor(SocketJanitor&&) = default;
  SocketJanitor& operator=(SocketJanitor&&) = default;
  // Finish().
  ~SocketJanitor();

  // Adds a socket to remove at the end: one of Start's `paths` (InvalidArgument otherwise), once
  // (AlreadyExists), as `identity` (its lstat right after the bind) names it. FailedPrecondition
  // after Seal().
  absl::Status Register(const std::string& path, const struct stat& identity);
  // No more registrations: the janitor ignores what it reads from now on.
  absl::Status Seal();
  // Lets the janitor remove the sockets now and waits until it has exited (at most `timeout`), so
  // that they are gone when the launcher's exit status is seen. Idempotent.
  void Finish(absl::Duration timeout = absl::Seconds(5));

  static constexpr int kMaxSockets = 8;

 private:
  SocketJanitor(sys_util::ScopedFd requests, sys_util::ScopedFd exited,
                std::vector<std::string> paths)
      : requests_(std::move(requests)), exited_(std::move(exited)), paths_(std::move(paths)) {}
  absl::Status Send(uint32_t kind, const std::string& path, const struct stat* identity);

  sys_util::ScopedFd requests_;  // our end of the channel; closing it tells the janitor to go ahead
  sys_util::ScopedFd exited_;    // reads end-of-file once the janitor has exited
  std::vector<std::string> paths_;       // what Start allowed
  std::vector<std::string> registered_;  // what was registered of it
  bool sealed_ = false;
};

// Everything the janitor may do once started (its filter; docs/security.md's table).
SyscallAllowlist JanitorAllowlist();

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_SOCKET_JANITOR_H_

#ifndef VMM_SANDBOX_SANDBOX_FLAGS_H_
#define VMM_SANDBOX_SANDBOX_FLAGS_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vmm/sandbox/jail.h"
#include "vmm/sandbox/thread_policy.h"

namespace vmm::sandbox {

// The launchers' sandbox flags, defined once for microvm and vhost-user-scsi:
//   --seccomp=trap|log|off   per-thread seccomp filters (default trap)
//   --jail=auto|on|off       the jail (default auto: on when started as root)
//   --jail-user=UID:GID      the jailed VMM's user (default 65534:65534)
//   --jail-cgroup=FILE=VALUE,...  cgroup v2 limits for the jailed VMM (cgroup.h)
//   --jail-cgroup-parent=PATH     their parent cgroup (default microvm)
struct SandboxFromFlags {
  ProcessSandbox sandbox;
  std::optional<JailOptions> jail;  // set when the process is to enter the jail
  sys_util::ScopedFd jail_root;     // its new root (BuildJailRoot), when jailed
  std::string notice;               // for stderr when not empty (--jail=off as root)
  // Jailed: the VMM's host pid and its supervisor's pipe (pid_namespace.h). Otherwise host_pid is
  // getpid() and the pipe is not open.
  SupervisedChild supervised;
};

// What the jail must hold or keep for this VMM (the launcher knows its drives and API).
struct JailNeeds {
  std::string program;                          // names the VM's cgroup: PROGRAM-PID
  std::vector<std::string> shared_directories;  // --media-dir
  std::vector<std::string> device_nodes;        // passed-through host CD-ROM drives
};

// --seccomp, parsed once at the launch: the socket janitor's filter and the process's follow it
// (errors name the flag).
absl::StatusOr<SeccompSetting> SeccompSettingFromFlags();

// Validates the jail's flags; for a jail, enters its namespaces (EnterNamespaces); then enables
// the sandbox (ProcessSandbox::Enable) with `seccomp` (SeccompSettingFromFlags). Call in main()
// after parsing the flags, before any thread starts. Errors name the flag.
absl::StatusOr<SandboxFromFlags> EnableSandboxFromFlags(const SeccompSetting& seccomp,
                                                        const JailNeeds& needs);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_SANDBOX_FLAGS_H_

#ifndef VMM_SANDBOX_SANDBOX_FLAGS_H_
#define VMM_SANDBOX_SANDBOX_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "vmm/sandbox/jail.h"
#include "vmm/sandbox/thread_policy.h"

namespace vmm::sandbox {

// The launchers' sandbox flags, defined once for microvm and vhost-user-scsi:
//   --seccomp=trap|log|off   per-thread seccomp filters (default trap)
//   --jail=DIR               chroot into DIR once everything is open
//   --jail-user=UID:GID      and run as this user (needs --jail)
struct SandboxFromFlags {
  ProcessSandbox sandbox;
  std::optional<JailOptions> jail;
};

// Validates the flags and enables the sandbox (ProcessSandbox::Enable): call in main() right
// after parsing the flags, before any thread starts. Errors name the flag.
absl::StatusOr<SandboxFromFlags> EnableSandboxFromFlags();

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_SANDBOX_FLAGS_H_

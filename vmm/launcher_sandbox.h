#ifndef VMM_LAUNCHER_SANDBOX_H_
#define VMM_LAUNCHER_SANDBOX_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/api_flags.h"
#include "vmm/drive_spec.h"
#include "vmm/sandbox/sandbox_flags.h"

namespace vmm {

// The sandbox of a launcher (microvm, vhost-user-scsi), in its two steps (docs/security.md).
//
// Before any thread starts: what the jail must hold for these drives and this API (--media-dir,
// passed-through host CD-ROM drives; the host's network namespace for --api-tcp), then
// sandbox::EnableSandboxFromFlags. Jailed with the API but without --media-dir, `api.media_dir`
// becomes MediaDirectory::NoneInTheJail(), so inserts say why they fail. Prints the sandbox's
// notice, if any, after "`program`: ".
absl::StatusOr<sandbox::SandboxFromFlags> EnableLauncherSandbox(
    const char* program, const sandbox::SeccompSetting& seccomp,
    const std::vector<DriveSpec>& drives, ApiFlags& api);

// Once everything is open: enters the jail, if there is one, and opens the media directory again
// inside it. Errors start with "--jail: ".
absl::Status EnterLauncherJail(sandbox::SandboxFromFlags& sandbox, MediaDirectory* media_dir);

}  // namespace vmm

#endif  // VMM_LAUNCHER_SANDBOX_H_

#include "vmm/launcher_sandbox.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vmm {

absl::StatusOr<sandbox::SandboxFromFlags> EnableLauncherSandbox(
    const char* program, const sandbox::SeccompSetting& seccomp,
    const std::vector<DriveSpec>& drives, ApiFlags& api) {
  sandbox::JailNeeds needs;
  needs.program = program;
  if (api.media_dir != nullptr) needs.shared_directories.push_back(api.media_dir->resolved_path());
  for (const DriveSpec& drive : drives) {
    // A CD-ROM drive on a block device is a passed-through host drive (drive_spec.h), reopened by
    // path when its disc changes.
    struct stat node {};
    if (drive.kind == DriveSpec::Kind::kCdrom && !drive.path.empty() &&
        stat(drive.path.c_str(), &node) == 0 && S_ISBLK(node.st_mode)) {
      needs.device_nodes.push_back(drive.path);
    }
  }
  auto sandbox = sandbox::EnableSandboxFromFlags(seccomp, needs);
  if (!sandbox.ok()) return sandbox.status();
  if (!sandbox->notice.empty()) absl::FPrintF(stderr, "%s: %s\n", program, sandbox->notice);
  if (sandbox->jail.has_value() && api.enabled() && api.media_dir == nullptr) {
    api.media_dir = MediaDirectory::NoneInTheJail();
  }
  return sandbox;
}

absl::Status EnterLauncherJail(sandbox::SandboxFromFlags& sandbox, MediaDirectory* media_dir) {
  if (!sandbox.jail.has_value()) return absl::OkStatus();
  absl::Status entered = sandbox::EnterJail(*sandbox.jail, std::move(sandbox.jail_root));
  if (entered.ok() && media_dir != nullptr) entered = media_dir->ReopenInTheJail();
  if (!entered.ok()) {
    return absl::Status(entered.code(), absl::StrCat("--jail: ", entered.message()));
  }
  return absl::OkStatus();
}

}  // namespace vmm

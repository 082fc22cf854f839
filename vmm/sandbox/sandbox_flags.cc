#include "vmm/sandbox/sandbox_flags.h"

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

ABSL_FLAG(std::string, seccomp, "trap",
          "Per-thread seccomp filters (docs/security.md): trap (a forbidden system call ends the "
          "process with a report naming it), log (allowed, logged by the kernel), off.");
ABSL_FLAG(std::string, jail, "",
          "Once every file is open, chroot into this directory (an empty one is best); API "
          "media paths then resolve inside it, relative ones from its root (or use --media-dir).");
ABSL_FLAG(std::string, jail_user, "",
          "With --jail: run as UID:GID (numbers, not root), which also drops every capability.");

namespace vmm::sandbox {

absl::StatusOr<SandboxFromFlags> EnableSandboxFromFlags() {
  ASSIGN_OR_RETURN(const SeccompSetting setting, ParseSeccompSetting(absl::GetFlag(FLAGS_seccomp)));
  std::optional<JailOptions> jail;
  const std::string jail_root = absl::GetFlag(FLAGS_jail);
  const std::string jail_user = absl::GetFlag(FLAGS_jail_user);
  if (!jail_user.empty() && jail_root.empty()) {
    return absl::InvalidArgumentError("--jail-user needs --jail=DIR");
  }
  if (!jail_root.empty()) {
    JailOptions options;
    options.root = jail_root;
    if (!jail_user.empty()) {
      RETURN_IF_ERROR(ParseJailUser(jail_user, options));
    }
    jail = options;
  }
  SandboxOptions options;
  options.jail = jail.has_value();
  auto sandbox = ProcessSandbox::Enable(setting, options);
  if (!sandbox.ok()) {
    return absl::Status(sandbox.status().code(),
                        absl::StrFormat("--seccomp: %s", sandbox.status().message()));
  }
  return SandboxFromFlags{*std::move(sandbox), std::move(jail)};
}

}  // namespace vmm::sandbox

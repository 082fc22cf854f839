#include "vmm/sandbox/sandbox_flags.h"

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

ABSL_FLAG(std::string, seccomp, "trap",
          "Per-thread seccomp filters (docs/security.md): trap (a forbidden system call ends the "
          "process with a report naming it), log (allowed, logged by the kernel), off.");
ABSL_FLAG(std::string, jail, "auto",
          "The jail (docs/security.md): new mount, network, IPC and UTS namespaces, an empty root "
          "holding only --media-dir and passed-through drives, an unprivileged user. auto: on "
          "when started as root (outside a user namespace); on; off.");
ABSL_FLAG(std::string, jail_user, "",
          "The jailed VMM's user and group, UID:GID (numbers, not root; default 65534:65534). "
          "One of its own per VM is best.");

namespace vmm::sandbox {
namespace {

absl::Status JailError(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("--jail: ", status.message()));
}

}  // namespace

absl::StatusOr<SandboxFromFlags> EnableSandboxFromFlags(const JailNeeds& needs) {
  ASSIGN_OR_RETURN(const SeccompSetting setting, ParseSeccompSetting(absl::GetFlag(FLAGS_seccomp)));
  const std::string jail_setting = absl::GetFlag(FLAGS_jail);
  const std::string jail_user = absl::GetFlag(FLAGS_jail_user);
  // Root with real capabilities: not in a container's (or Bazel's sandbox's) user namespace.
  const bool root = geteuid() == 0 && InInitialUserNamespace();
  JailOptions options;
  if (!jail_user.empty()) RETURN_IF_ERROR(ParseJailUser(jail_user, options));
  bool jailed = false;
  std::string notice;
  if (jail_setting == "auto") {
    jailed = root;
  } else if (jail_setting == "on") {
    if (!root) {
      return absl::InvalidArgumentError(
          "--jail=on: the jail needs root in the initial user namespace (new namespaces, a new "
          "root, a change of user); start as root, or without --jail=on");
    }
    jailed = true;
  } else if (jail_setting == "off") {
    if (root) {
      notice = "--jail=off: running as root outside the jail, with every capability "
               "(docs/security.md)";
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jail=%s: expected auto, on or off", jail_setting));
  }
  if (!jail_user.empty() && !jailed) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--jail-user applies to the jail, which is off (%s)",
        jail_setting == "off" ? "--jail=off" : "not root outside a user namespace"));
  }
  std::optional<JailOptions> jail;
  if (jailed) {
    options.shared_directories = needs.shared_directories;
    options.device_nodes = needs.device_nodes;
    if (absl::Status entered = EnterNamespaces(!needs.host_network); !entered.ok()) {
      return JailError(entered);
    }
    jail = std::move(options);
  }
  SandboxOptions sandbox_options;
  sandbox_options.jail = jailed;
  auto sandbox = ProcessSandbox::Enable(setting, sandbox_options);
  if (!sandbox.ok()) {
    return absl::Status(sandbox.status().code(),
                        absl::StrFormat("--seccomp: %s", sandbox.status().message()));
  }
  return SandboxFromFlags{*std::move(sandbox), std::move(jail), std::move(notice)};
}

}  // namespace vmm::sandbox

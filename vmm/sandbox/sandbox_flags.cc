#include "vmm/sandbox/sandbox_flags.h"

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

ABSL_FLAG(std::string, seccomp, "trap",
          "Per-thread seccomp filters (docs/security.md): trap (a forbidden system call ends the "
          "process with a report naming it), log (allowed, logged by the kernel), off.");
ABSL_FLAG(
    std::string, jail, "auto",
    "The jail (docs/security.md): new mount, PID, network, IPC and UTS namespaces, an empty root "
    "holding only --media-dir and passed-through drives, an unprivileged user. auto: on "
    "when started as root (outside a user namespace); on; off.");
ABSL_FLAG(std::string, jail_user, "",
          "The jailed VMM's user and group, UID:GID (numbers, not root; default 65534:65534). "
          "One of its own per VM is best.");

ABSL_FLAG(std::string, jail_cgroup, "",
          "cgroup v2 limits for the jailed VMM, FILE=VALUE[,FILE=VALUE...] (interface files of "
          "the memory, pids, cpu, io and cpuset controllers, e.g. memory.max=512M,pids.max=64). "
          "The VMM gets a cgroup of its own, removed when it exits.");
ABSL_FLAG(std::string, jail_cgroup_parent, "microvm",
          "The parent of the VMs' cgroups (--jail-cgroup), below the cgroup2 mount.");

namespace vmm::sandbox {
namespace {

absl::Status JailError(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("--jail: ", status.message()));
}

}  // namespace

absl::StatusOr<SeccompSetting> SeccompSettingFromFlags() {
  return ParseSeccompSetting(absl::GetFlag(FLAGS_seccomp));
}

absl::StatusOr<SandboxFromFlags> EnableSandboxFromFlags(const SeccompSetting& seccomp,
                                                        const JailNeeds& needs) {
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
      notice =
          "--jail=off: running as root outside the jail, with every capability "
          "(docs/security.md)";
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jail=%s: expected auto, on or off", jail_setting));
  }
  const std::string jail_cgroup = absl::GetFlag(FLAGS_jail_cgroup);
  CgroupLimits cgroup_limits;
  cgroup_limits.parent = absl::GetFlag(FLAGS_jail_cgroup_parent);
  if (!jail_cgroup.empty()) RETURN_IF_ERROR(ParseCgroupLimits(jail_cgroup, cgroup_limits));
  for (const auto& [flag, given] :
       {std::pair{"--jail-user", !jail_user.empty()}, {"--jail-cgroup", !jail_cgroup.empty()}}) {
    if (given && !jailed) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s applies to the jail, which is off (%s)", flag,
          jail_setting == "off" ? "--jail=off" : "not root outside a user namespace"));
    }
  }
  std::optional<JailOptions> jail;
  sys_util::ScopedFd jail_root;
  SupervisedChild supervised{.host_pid = getpid()};
  if (jailed) {
    options.shared_directories = needs.shared_directories;
    options.device_nodes = needs.device_nodes;
    // A network namespace of its own, always: the API's TCP listeners (--api-tcp) are bound in
    // the host's before this (vmm/launch_sequence.h), and a socket keeps the namespace it was
    // made in.
    NamespaceOptions namespaces{.new_network = true, .seccomp = seccomp};
    if (!jail_cgroup.empty()) {
      auto cgroup =
          Cgroup::Create(cgroup_limits, absl::StrFormat("%s-%d", needs.program, getpid()));
      if (!cgroup.ok()) {
        return absl::Status(cgroup.status().code(),
                            absl::StrCat("--jail-cgroup: ", cgroup.status().message()));
      }
      namespaces.cgroup = *std::move(cgroup);
    }
    auto entered = EnterNamespaces(std::move(namespaces));
    if (!entered.ok()) return JailError(entered.status());
    supervised = *std::move(entered);
    options.supervisor_alive = supervised.supervisor_alive.get();
    // Before the filter, which allows no mkdir, mknod, chown or chmod.
    auto root = BuildJailRoot(options);
    if (!root.ok()) return JailError(root.status());
    jail_root = *std::move(root);
    jail = std::move(options);
  }
  SandboxOptions sandbox_options;
  sandbox_options.jail = jailed;
  auto sandbox = ProcessSandbox::Enable(seccomp, sandbox_options);
  if (!sandbox.ok()) {
    return absl::Status(sandbox.status().code(),
                        absl::StrFormat("--seccomp: %s", sandbox.status().message()));
  }
  return SandboxFromFlags{*std::move(sandbox), std::move(jail), std::move(jail_root),
                          std::move(notice), std::move(supervised)};
}

}  // namespace vmm::sandbox

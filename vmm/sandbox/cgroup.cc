#include "vmm/sandbox/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::sandbox {
namespace {

// The controllers whose interface files --jail-cgroup may write (cgroup-v2.rst, "Controllers").
constexpr const char* kControllers[] = {"memory", "pids", "cpu", "io", "cpuset"};

// "memory" for "memory.max"; empty when the name is not a controller's file.
std::string ControllerOf(const std::string& file) {
  const size_t dot = file.find('.');
  if (dot == std::string::npos || dot + 1 == file.size()) return "";
  const std::string controller = file.substr(0, dot);
  if (std::none_of(std::begin(kControllers), std::end(kControllers),
                   [&](const char* known) { return controller == known; })) {
    return "";
  }
  const bool plain = std::all_of(file.begin(), file.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' || c == '_';
  });
  return plain ? controller : "";
}

// The mount point of the cgroup2 file system, from /proc/self/mountinfo (proc(5): field 5 is the
// mount point, the file system type follows the " - " separator).
absl::StatusOr<std::string> Cgroup2MountPoint() {
  FILE* mountinfo = fopen("/proc/self/mountinfo", "re");
  if (mountinfo == nullptr) return sys_util::ErrnoStatus(errno, "/proc/self/mountinfo");
  std::string found;
  char line[4096];
  while (found.empty() && fgets(line, sizeof(line), mountinfo) != nullptr) {
    std::vector<std::string> halves = absl::StrSplit(line, " - ");
    if (halves.size() != 2) continue;
    std::vector<std::string> before = absl::StrSplit(halves[0], ' ');
    std::vector<std::string> after = absl::StrSplit(halves[1], ' ');
    // A mount point with an escaped space or other character (\040) is not one to guess at.
    if (before.size() >= 5 && !after.empty() && after[0] == "cgroup2" &&
        before[4].find('\\') == std::string::npos) {
      found = before[4];
    }
  }
  fclose(mountinfo);
  if (found.empty()) {
    return absl::FailedPreconditionError(
        "no cgroup2 file system is mounted (mount -t cgroup2 none /sys/fs/cgroup)");
  }
  return found;
}

// Writes `value` to the interface file `file` of the cgroup directory `directory` (path: for
// messages). The kernel checks the value on write.
absl::Status WriteInterfaceFile(int directory, const std::string& path, const std::string& file,
                                const std::string& value) {
  sys_util::ScopedFd out(openat(directory, file.c_str(), O_WRONLY | O_CLOEXEC));
  if (!out.valid()) return sys_util::ErrnoStatus(errno, absl::StrFormat("%s/%s", path, file));
  if (write(out.get(), value.data(), value.size()) != static_cast<ssize_t>(value.size())) {
    return sys_util::ErrnoStatus(errno,
                                 absl::StrFormat("writing \"%s\" to %s/%s", value, path, file));
  }
  return absl::OkStatus();
}

// The controllers a cgroup directory offers its children (cgroup.controllers), for messages.
std::string AvailableControllers(int directory) {
  sys_util::ScopedFd in(openat(directory, "cgroup.controllers", O_RDONLY | O_CLOEXEC));
  char text[256] = {};
  const ssize_t got = in.valid() ? read(in.get(), text, sizeof(text) - 1) : -1;
  const std::string list(absl::StripAsciiWhitespace(got > 0 ? std::string(text, got) : ""));
  return list.empty() ? "none" : list;
}

}  // namespace

absl::Status ParseCgroupLimits(const std::string& text, CgroupLimits& limits) {
  limits.settings.clear();
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[1].empty() || parts[1].find('\n') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--jail-cgroup=%s: expected FILE=VALUE[,FILE=VALUE...], e.g. memory.max=512M,pids.max=64",
          text));
    }
    if (ControllerOf(parts[0]).empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--jail-cgroup: %s is not an interface file of the %s controllers",
                          parts[0], absl::StrJoin(kControllers, ", ")));
    }
    limits.settings.emplace_back(parts[0], parts[1]);
  }
  if (limits.settings.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jail-cgroup=%s: no limit given (e.g. memory.max=512M)", text));
  }
  return absl::OkStatus();
}

absl::StatusOr<Cgroup> Cgroup::Create(const CgroupLimits& limits, const std::string& name) {
  std::vector<std::string> parent_parts = absl::StrSplit(limits.parent, '/', absl::SkipEmpty());
  if (parent_parts.empty() ||
      std::any_of(parent_parts.begin(), parent_parts.end(),
                  [](const std::string& part) { return part == "." || part == ".."; })) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--jail-cgroup-parent=%s: expected a path below the cgroup2 root, without . or ..",
        limits.parent));
  }
  std::set<std::string> controllers;
  for (const auto& [file, value] : limits.settings) controllers.insert(ControllerOf(file));
  std::string enable;
  for (const std::string& controller : controllers) {
    enable += (enable.empty() ? "+" : " +") + controller;
  }

  ASSIGN_OR_RETURN(std::string path, Cgroup2MountPoint());
  sys_util::ScopedFd directory(open(path.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
  if (!directory.valid()) return sys_util::ErrnoStatus(errno, path);
  // Down from the root: each level hands the controllers to its children, then the next level is
  // made. (The root may hold processes; a non-root parent must not, which a directory of our own
  // made for VMs does not.)
  parent_parts.push_back(name);
  for (size_t level = 0; level < parent_parts.size(); ++level) {
    if (!enable.empty()) {
      absl::Status enabled =
          WriteInterfaceFile(directory.get(), path, "cgroup.subtree_control", enable);
      if (!enabled.ok()) {
        return absl::Status(enabled.code(),
                            absl::StrFormat("%s (the controllers %s offers: %s)", enabled.message(),
                                            path, AvailableControllers(directory.get())));
      }
    }
    const std::string& part = parent_parts[level];
    const bool leaf = level + 1 == parent_parts.size();
    const bool made = mkdirat(directory.get(), part.c_str(), 0755) == 0;
    if (!made && (leaf || errno != EEXIST)) {
      return sys_util::ErrnoStatus(errno, absl::StrFormat("mkdir %s/%s", path, part));
    }
    sys_util::ScopedFd next(
        openat(directory.get(), part.c_str(), O_DIRECTORY | O_RDONLY | O_CLOEXEC));
    if (!next.valid()) return sys_util::ErrnoStatus(errno, absl::StrFormat("%s/%s", path, part));
    // 0755 whatever the launcher's umask (0177: a directory nobody else could enter); one that
    // existed keeps its mode.
    if (made && fchmod(next.get(), 0755) != 0) {
      return sys_util::ErrnoStatus(errno, absl::StrFormat("chmod %s/%s", path, part));
    }
    if (leaf) {
      Cgroup cgroup(std::move(directory), std::move(next), name,
                    absl::StrFormat("%s/%s", path, part));
      for (const auto& [file, value] : limits.settings) {
        absl::Status written = WriteInterfaceFile(cgroup.leaf_.get(), cgroup.path_, file, value);
        if (!written.ok()) {
          cgroup.Remove().IgnoreError();  // a half-made cgroup is not left behind
          return written;
        }
      }
      return cgroup;
    }
    directory = std::move(next);
    path = absl::StrFormat("%s/%s", path, part);
  }
  return absl::InternalError("unreachable");
}

absl::Status Cgroup::Join() const {
  // cgroup-v2.rst: writing a PID moves that process, every thread of it; 0 is the writer.
  return WriteInterfaceFile(leaf_.get(), path_, "cgroup.procs", "0");
}

absl::Status Cgroup::Remove() const {
  if (unlinkat(parent_.get(), name_.c_str(), AT_REMOVEDIR) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrFormat("rmdir %s", path_));
  }
  return absl::OkStatus();
}

}  // namespace vmm::sandbox

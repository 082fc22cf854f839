#ifndef VMM_SANDBOX_CGROUP_H_
#define VMM_SANDBOX_CGROUP_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm::sandbox {

// Limits for the jailed VMM's own cgroup (cgroup v2, Documentation/admin-guide/cgroup-v2.rst),
// Firecracker's jailer's --cgroup done the same way: one cgroup per VM, under a parent shared by
// every VM, its interface files written before the VMM joins it.
struct CgroupLimits {
  // Interface files and their values, e.g. {"memory.max", "512M"}, {"pids.max", "64"},
  // {"cpu.max", "50000 100000"}. Only controller files (memory, pids, cpu, io, cpuset): never
  // cgroup.* (which would move processes or change the tree).
  std::vector<std::pair<std::string, std::string>> settings;
  // The parent cgroup, relative to the cgroup2 mount (directories made as needed). Its
  // cgroup.subtree_control and its ancestors' get the controllers the settings name.
  std::string parent = "microvm";
};

// Parses --jail-cgroup=FILE=VALUE[,FILE=VALUE...] into `limits.settings`.
absl::Status ParseCgroupLimits(const std::string& text, CgroupLimits& limits);

// One VM's cgroup: created (as root, before the VMM forks into its PID namespace), joined by the
// VMM, removed by the supervisor once the VMM has exited.
class Cgroup {
 public:
  // Finds the cgroup2 mount in /proc/self/mountinfo, makes `limits.parent` with the controllers
  // enabled down to it, then `limits.parent/name` with every setting written. Errors name the
  // file and what the kernel said (a controller the hierarchy lacks, a value it refuses).
  static absl::StatusOr<Cgroup> Create(const CgroupLimits& limits, const std::string& name);

  // Moves the calling process (all its threads) into the cgroup.
  absl::Status Join() const;
  // Removes the cgroup; it must be empty (its processes have exited).
  absl::Status Remove() const;
  // The descriptors Remove() needs (the supervisor keeps them, closing every other one).
  int parent_fd() const { return parent_.get(); }
  // Closes the cgroup's own directory: what the VMM does once it has joined, so that nothing of
  // the cgroup file system is reachable from the jail.
  void CloseForTheJail() {
    leaf_.Reset();
    parent_.Reset();
  }
  // The cgroup's path, for messages.
  const std::string& path() const { return path_; }

 private:
  Cgroup(sys_util::ScopedFd parent, sys_util::ScopedFd leaf, std::string name, std::string path)
      : parent_(std::move(parent)),
        leaf_(std::move(leaf)),
        name_(std::move(name)),
        path_(std::move(path)) {}

  sys_util::ScopedFd parent_;
  sys_util::ScopedFd leaf_;
  std::string name_;
  std::string path_;
};

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_CGROUP_H_

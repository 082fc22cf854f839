#ifndef API_VM_CONTROL_H_
#define API_VM_CONTROL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "block/backend.h"
#include "block/cache_mode.h"
#include "block/drive.h"
#include "block/media.h"
#include "block/raw/raw_file_backend.h"
#include "block/throttle.h"

namespace api {

// One drive of the VM as the API sees it. Fixed while the drive exists; the media state lives in
// `media` (block::RemovableMedia), which the API reads and changes directly: the devices hear of
// every change through the block layer's media events, so the API needs no device knowledge.
struct DriveEntry {
  std::string name;        // "cd0", "disk0", ...
  bool cdrom = false;      // else a disk
  std::string bus;         // "virtio-scsi" or "ide"
  std::string address;     // "0:0:LUN" (channel:target:lun) or "CHANNEL:UNIT" (IDE)
  std::string source;      // disks: the image's host path (CD-ROMs: from the media state)
  bool read_only = false;  // disks (CD-ROMs are always read-only)
  std::string cache_mode;  // disks: "writeback", "none", ...
  std::shared_ptr<block::Drive> drive;           // size, statistics
  std::shared_ptr<block::RemovableMedia> media;  // null for disks
  // A passed-through host drive's probe count (block::HostCdrom::Stats::probes); null otherwise.
  std::function<uint64_t()> host_probes;
};

// A disk to attach while the guest runs (AttachDisk), checked by the caller: the cache and FUA
// modes are parsed, the path is absolute unless media paths are confined.
struct DiskAttachment {
  std::string path;
  std::string id;  // empty: the first free "diskN"
  block::CacheMode cache_mode = block::CacheMode::kWriteback;
  block::FuaMode fua_mode = block::FuaMode::kAuto;
  bool read_only = false;
  std::optional<uint16_t> lun;  // on target 0; unset: the lowest free LUN
  block::IoLimits limits;
  std::string io_group;
};

enum class VmRunState { kRunning, kPaused, kStopping };

struct VmStatus {
  VmRunState state = VmRunState::kRunning;
  uint32_t vcpus = 0;
  uint64_t memory_bytes = 0;
  std::string kernel;
  std::string cmdline;
  absl::Duration uptime;
  uint32_t pid = 0;
  std::string firmware;                 // empty: direct kernel boot
  std::vector<std::string> boot_order;  // drive names the firmware tries first
};

// What the API server needs of the VMM. The VMM implements it over its Vm (vmm/vm_api.h); tests
// fake it. Every method may be called from any gRPC thread, concurrently.
class VmControl {
 public:
  virtual ~VmControl() = default;

  // Every drive, disks included, in a stable order. Called once when the server starts.
  virtual std::vector<DriveEntry> Drives() const = 0;

  // Opens the host file `path` as a read-only CD/DVD medium. Errors name the path: NotFound,
  // PermissionDenied, or anything else for a file that cannot be a medium.
  virtual absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(
      const std::string& path) = 0;
  // True when OpenMedium confines paths to a directory (and answers PermissionDenied for any path
  // outside it, existing or not): the server then must not look at the path itself, or its
  // answers would tell which files exist outside.
  virtual bool MediaPathsConfined() const { return false; }
  // The directory media are confined to (--media-dir, absolute as given), or "" (none, or none
  // reachable in the jail). VmInfo reports it, so that vmmctl sends a path relative to it as
  // typed; an insert from such a relative path gets the directory joined to it as its source.
  virtual std::string MediaRoot() const { return ""; }
  // The --io-group budgets by name (block::Throttle), which SetDriveLimits may change.
  virtual std::map<std::string, std::shared_ptr<block::Throttle>> IoGroups() const { return {}; }

  // Hot-plug of virtio-scsi disks, in two steps so that the caller can tell the file's errors
  // from the VM's. OpenDiskImage opens disk.path as the disk will use it (confined as OpenMedium
  // when MediaPathsConfined(); errors name the path); AttachDisk makes that image a disk of the
  // VM and returns its entry. DetachDisk returns once the disk's commands are done and Storage
  // has let go of it (the caller drops its entry to close the image). Unimplemented where the
  // VMM has no such controller.
  virtual absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> OpenDiskImage(
      const DiskAttachment& disk) {
    return absl::UnimplementedError("this VMM cannot attach disks");
  }
  virtual absl::StatusOr<DriveEntry> AttachDisk(const DiskAttachment& disk,
                                                std::shared_ptr<block::raw::RawFileBackend> image) {
    return absl::UnimplementedError("this VMM cannot attach disks");
  }
  virtual absl::Status DetachDisk(const std::string& name) {
    return absl::UnimplementedError("this VMM cannot detach disks");
  }
  // Online resize of a disk: to `size_bytes`, or with none to its image's size on the host now.
  // Returns the new size.
  virtual absl::StatusOr<uint64_t> ResizeDisk(const std::string& name,
                                              std::optional<uint64_t> size_bytes) {
    return absl::UnimplementedError("this VMM cannot resize disks");
  }

  virtual VmStatus Status() const = 0;

  // Stops every vCPU (devices and iothreads keep running) / lets them run again. Idempotent.
  // FailedPrecondition when the VM is stopping.
  virtual absl::Status Pause() = 0;
  virtual absl::Status Resume() = 0;

  // Stops the VM now (`force`), or gracefully within `grace_period`. Returns at once; the VMM
  // process then exits with status 0. Idempotent.
  virtual absl::Status Shutdown(bool force, absl::Duration grace_period) = 0;

  // Resets the machine in place (its reset button): the guest restarts from power-on with the
  // drives and media as they are. Returns at once. FailedPrecondition when the VM is stopping.
  virtual absl::Status Reset() {
    return absl::UnimplementedError("this VMM runs no guest to reset");
  }

  // The drives the firmware tries first from its next start, by name. InvalidArgument for a name
  // that is no drive or comes twice; FailedPrecondition without a firmware.
  virtual absl::Status SetBootOrder(const std::vector<std::string>& drives) {
    return absl::UnimplementedError("this VMM runs no firmware");
  }
};

}  // namespace api

#endif  // API_VM_CONTROL_H_

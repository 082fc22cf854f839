#ifndef VMM_STORAGE_H_
#define VMM_STORAGE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "block/backend.h"
#include "block/drive.h"
#include "block/host_cdrom.h"
#include "block/media.h"
#include "block/raw/raw_file_backend.h"
#include "block/uevent_monitor.h"
#include "devices/ide/ide_controller.h"
#include "devices/virtio/scsi/virtio_scsi.h"
#include "vmm/drive_spec.h"

namespace vmm {

// Makes a simulated host optical drive over the ISO at `path` whose every status probe takes
// `probe_delay` (--cdrom/--ide-cdrom=ISO,probe-delay-us=N). Only the test build of the launcher
// has one (//vmm:microvm_testing); the product carries no simulated drive and refuses the option.
using SimulatedDriveFactory = std::function<std::unique_ptr<block::CdromDevice>(
    const std::string& path, std::chrono::microseconds probe_delay)>;

struct StorageConfig {
  std::vector<DriveSpec> drives;
  std::vector<IoGroupSpec> io_groups;  // budgets drives share (",group=")
  uint32_t scsi_queues = 1;
  // A virtio-scsi controller even without --disk or --cdrom (--scsi-controller), for disks the
  // control API attaches later.
  bool scsi_controller = false;
  uint32_t iothreads = 1;
  int64_t poll_max_ns = 0;
  // Runs first on every iothread the storage devices start (vmm/sandbox confines it there).
  std::function<absl::Status()> iothread_start;
  // For probe-delay-us; null in the product.
  SimulatedDriveFactory simulated_drive;
  // Where every image's and medium's io_urings come from (block/raw/uring_ops.h): made by the
  // launch sequence before the sandbox, after which no thread may make one. Null: each ring made
  // when needed (tests, where nothing forbids it).
  std::shared_ptr<block::raw::RingPool> ring_pool;
  // --io-rings: how many rings MakeRingPool makes; 0: enough for the drives given, twice over
  // (media swaps hold the old disc's rings a moment), and for 8 disks attached later.
  uint32_t io_rings = 0;
};

// Makes config.ring_pool, while the process may still call io_uring_setup: before the sandbox.
absl::Status MakeRingPool(StorageConfig& config);

// One drive as the VMM wired it: the block layer's Drive, its media (CD-ROMs), and where the guest
// finds it (virtio-scsi target 0, `lun`; or IDE `ide_channel`/`ide_unit`).
struct AttachedDrive {
  std::string name;  // disk0, disk1, ..., cd0, cd1, ...
  DriveSpec spec;
  std::shared_ptr<block::Drive> drive;
  std::shared_ptr<block::RemovableMedia> media;  // null for disks
  // A disk's image (to flush it when the disk is detached); null for CD-ROMs.
  std::shared_ptr<block::raw::RawFileBackend> image;
  uint16_t lun = 0;
  int ide_channel = -1;
  int ide_unit = -1;
  // A host optical drive passed through (--cdrom=/dev/sr0, host:PATH), or with probe-delay-us the
  // simulated one: the host CD-ROM backend keeping `media` in step with the drive, and its
  // subscription to the kernel's uevents (null without netlink; destroyed first).
  std::shared_ptr<block::HostCdrom> host_drive;
  std::shared_ptr<block::HostCdrom::UeventWatch> host_drive_uevents;
};

// The storage of a VM: each --disk and --cdrom becomes a block-layer drive (raw file on io_uring)
// and a SCSI logical unit on one virtio-scsi controller, in command-line order (LUN 0, 1, ...);
// each --ide-disk and --ide-cdrom a drive on the IDE controller. Names count across both buses:
// disk0, disk1, ... and cd0, cd1, ... in command-line order. Disks may be attached to and detached
// from the virtio-scsi controller while the guest runs (AttachDisk, DetachDisk). Thread-safe.
class Storage {
 public:
  static absl::StatusOr<std::unique_ptr<Storage>> Create(const StorageConfig& config);

  // The virtio-scsi device to put behind a transport (once; null afterwards or without drives).
  std::unique_ptr<devices::virtio::scsi::VirtioScsi> TakeScsiDevice() {
    return std::move(scsi_device_);
  }
  // The IDE drives, placed, for devices::ide::IdeController::Create (empty: no IDE controller),
  // and the iothread the controller is to use (null without IDE drives).
  const std::vector<devices::ide::IdeDriveConfig>& ide_drives() const { return ide_drives_; }
  const std::shared_ptr<devices::IoThread>& ide_iothread() const { return ide_iothread_; }
  // The drives now, in order (command line, then attached while running).
  std::vector<AttachedDrive> drives() const;
  std::optional<AttachedDrive> Find(const std::string& name) const;
  // The --io-group budgets, by name (their limits may change; the set does not).
  const std::map<std::string, std::shared_ptr<block::Throttle>>& io_groups() const {
    return io_groups_;
  }
  // Makes the devices again, in their power-on state, on the same open drives and media (a guest
  // restart, --on-reboot=restart): the virtio-scsi device (with new iothreads) and the IDE drive
  // list and iothread. The VM must have destroyed the devices it took before.
  absl::Status CreateDevices();

  // How a disk's image is opened (a disk attached later too): its cache and FUA modes and
  // read-only, and a ring ready for every thread that may serve it.
  block::raw::RawFileOptions DiskFileOptions(const DriveSpec& spec) const;
  // Hot-plug (the control API's AttachDisk): the image `image`, opened by the caller with
  // DiskFileOptions (confined to --media-dir or not, as the caller decides), becomes a disk on the
  // virtio-scsi controller, target 0, at `lun` or the lowest free LUN, named spec.id or the first
  // free "diskN", with spec's limits and group; the guest is told (ScsiHotplug). Errors:
  // FailedPrecondition (no virtio-scsi controller), AlreadyExists (the name or the LUN is taken),
  // ResourceExhausted (256 drives), InvalidArgument (a LUN past 16383, an unknown group).
  absl::StatusOr<AttachedDrive> AttachDisk(DriveSpec spec, std::optional<uint16_t> lun,
                                           std::shared_ptr<block::raw::RawFileBackend> image);
  // Hot-unplug of the virtio-scsi disk `name`: its limits are lifted, the commands it has in
  // flight complete, the guest is told, its image is flushed (unless cache=unsafe or read-only)
  // and Storage lets go of it: the image closes, and its lock goes, when the caller drops the
  // AttachedDrive returned and any other reference it handed out (the API's). NotFound (no such
  // drive), FailedPrecondition (an IDE drive or a CD-ROM).
  absl::StatusOr<AttachedDrive> DetachDisk(const std::string& name);
  // Online resize of the virtio-scsi disk `name` (block::Drive::Resize: to `size_bytes`, or with
  // none to the size the host gives its image now); the guest is told (ScsiHotplug::
  // CapacityChanged). Returns the new size. NotFound, FailedPrecondition (an IDE disk: ATA has no
  // way to tell the guest; a CD-ROM; shrinking over data), InvalidArgument (not whole blocks).
  absl::StatusOr<uint64_t> ResizeDisk(const std::string& name, std::optional<uint64_t> size_bytes);

  // Opens `path` as a CD/DVD medium (read-only raw file) with `options` (MediumFileOptions()).
  static absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(
      const std::string& path, const block::raw::RawFileOptions& options);
  // How a CD/DVD medium is opened for an insert into one of this VM's drives: read-only, a ring
  // ready for each of the medium_queue_threads(), from the VM's ring pool.
  block::raw::RawFileOptions MediumFileOptions() const;
  // How many iothreads may serve one drive, so many rings a medium opened for it gets ready (an
  // iothread cannot make one: vmm/sandbox/thread_policy.cc): every virtio-scsi iothread opens a
  // queue on every drive; the IDE controller has one.
  unsigned medium_queue_threads() const;

 private:
  Storage() = default;
  // The host optical drive behind a CD-ROM's path: the simulated one of probe-delay-us, a real
  // drive (host:PATH, or a block device that answers as one), or null for an image file.
  static absl::StatusOr<std::unique_ptr<block::CdromDevice>> HostDriveOf(
      const AttachedDrive& attached, const SimulatedDriveFactory& simulated_drive);
  // Passes `device` through: a HostCdrom keeps the drive's media in step with it, from uevents
  // too when `watch_uevents`, and publishes what the drive holds now.
  absl::Status AttachHostDrive(AttachedDrive& attached, std::unique_ptr<block::CdromDevice> device,
                               bool watch_uevents);

  absl::Status CreateDevicesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  StorageConfig config_;  // queues, iothreads, polling, the thread start (drives: in drives_)
  // Kernel uevents for passed-through drives (declared before drives_: destroyed after them).
  std::unique_ptr<block::UeventMonitor> uevents_;
  std::unique_ptr<block::UeventThread> uevent_thread_;
  // The drive list and the controller's hot-plug handle change under this lock: a hot-plug call,
  // a guest restart's CreateDevices() and the readers of drives() are serialized by it.
  mutable absl::Mutex mutex_;
  std::vector<AttachedDrive> drives_ ABSL_GUARDED_BY(mutex_);
  std::shared_ptr<devices::virtio::scsi::ScsiHotplug> scsi_hotplug_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, std::shared_ptr<block::Throttle>> io_groups_;
  std::unique_ptr<devices::virtio::scsi::VirtioScsi> scsi_device_;
  std::vector<devices::ide::IdeDriveConfig> ide_drives_;
  std::shared_ptr<devices::IoThread> ide_iothread_;
};

}  // namespace vmm

#endif  // VMM_STORAGE_H_

#include "vmm/storage.h"

#include <errno.h>  // program_invocation_short_name
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "block/raw/raw_file_backend.h"
#include "devices/scsi/cdrom.h"
#include "devices/scsi/disk.h"
#include "devices/scsi/lun.h"
#include "devices/scsi/target.h"
#include "vmm/cd_medium.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {

absl::StatusOr<std::shared_ptr<block::BlockBackend>> Storage::OpenMedium(
    const std::string& path, const block::raw::RawFileOptions& options) {
  return AsCdMedium(block::raw::RawFileBackend::Open(path, options), path);
}

absl::Status MakeRingPool(StorageConfig& config) {
  uint32_t count = config.io_rings;
  if (count == 0) {
    const uint32_t threads = std::max<uint32_t>(config.iothreads, 1);
    uint32_t for_drives = 0;
    for (const DriveSpec& drive : config.drives) {
      for_drives += drive.bus == DriveSpec::Bus::kIde ? 1 : threads;
    }
    count = std::min<uint32_t>(2 * for_drives + 8 * threads, 1024);
  }
  ASSIGN_OR_RETURN(config.ring_pool,
                   block::raw::RingPool::Create(count, block::raw::RawFileOptions{}.ring_entries));
  return absl::OkStatus();
}

block::raw::RawFileOptions Storage::MediumFileOptions() const {
  block::raw::RawFileOptions options = CdMediumFileOptions(medium_queue_threads());
  options.ring_pool = config_.ring_pool;
  return options;
}

unsigned Storage::medium_queue_threads() const { return std::max<uint32_t>(config_.iothreads, 1); }

std::vector<AttachedDrive> Storage::drives() const {
  absl::MutexLock lock(&mutex_);
  return drives_;
}

namespace {

// The drive named `name` in `drives` (a vector of AttachedDrive, const or not); NotFound if none.
template <typename Drives>
absl::StatusOr<decltype(std::declval<Drives&>().begin())> FindByName(Drives& drives,
                                                                     const std::string& name) {
  auto found = std::find_if(drives.begin(), drives.end(),
                            [&](const AttachedDrive& drive) { return drive.name == name; });
  if (found == drives.end()) return absl::NotFoundError(absl::StrFormat("no drive named %s", name));
  return found;
}

}  // namespace

std::optional<AttachedDrive> Storage::Find(const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto found = FindByName(drives_, name);
  if (!found.ok()) return std::nullopt;
  return **found;
}

block::raw::RawFileOptions Storage::DiskFileOptions(const DriveSpec& spec) const {
  block::raw::RawFileOptions raw;
  raw.cache_mode = spec.cache_mode;
  raw.read_only = spec.read_only;
  raw.fua_mode = spec.fua_mode;
  raw.prepared_rings = spec.bus == DriveSpec::Bus::kIde ? 1 : medium_queue_threads();
  raw.ring_pool = config_.ring_pool;
  return raw;
}

namespace {

// What one VM may have, on both buses, hot-added disks included.
constexpr size_t kMaxDrives = 256;

bool IsBlockDevice(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISBLK(st.st_mode);
}

void ReportHostDriveError(const std::string& drive, const absl::Status& status) {
  absl::FPrintF(stderr, "%s: %s: %s\n", program_invocation_short_name, drive, status.message());
}

// Places the IDE drives: explicit channel/unit first, then the rest in the first free position —
// CD-ROMs from the secondary master (QEMU's -cdrom), disks from the primary master.
// Each drive's name: its id, or its position among the drives of its kind ("disk0", "cd1"). Two
// drives with one name are refused, naming both.
absl::StatusOr<std::vector<std::string>> NameDrives(const std::vector<DriveSpec>& drives) {
  std::vector<std::string> names;
  std::map<std::string, const DriveSpec*> named;
  int disks = 0;
  int cdroms = 0;
  for (const DriveSpec& spec : drives) {
    const bool disk = spec.kind == DriveSpec::Kind::kDisk;
    const int position = disk ? disks++ : cdroms++;
    std::string name =
        spec.id.empty() ? absl::StrFormat("%s%d", disk ? "disk" : "cd", position) : spec.id;
    if (auto [other, inserted] = named.emplace(name, &spec); !inserted) {
      const DriveSpec& first = *other->second;
      return DriveError(spec, absl::InvalidArgumentError(absl::StrFormat(
                                  "the drive name %s is taken by %s=%s%s", name, DriveFlag(first),
                                  first.given_path.empty() ? first.path : first.given_path,
                                  first.id.empty() ? " (its position gives it that name)" : "")));
    }
    names.push_back(std::move(name));
  }
  return names;
}

absl::Status PlaceIdeDrives(std::vector<AttachedDrive*>& ide) {
  bool taken[2][2] = {};
  for (AttachedDrive* drive : ide) {
    if (!drive->spec.ide_channel && !drive->spec.ide_unit) continue;
    const int channel =
        drive->spec.ide_channel.value_or(drive->spec.kind == DriveSpec::Kind::kCdrom);
    const int unit = drive->spec.ide_unit.value_or(0);
    if (taken[channel][unit]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("two IDE drives at channel %d unit %d", channel, unit));
    }
    taken[channel][unit] = true;
    drive->ide_channel = channel;
    drive->ide_unit = unit;
  }
  static constexpr int kCdromOrder[4][2] = {{1, 0}, {1, 1}, {0, 1}, {0, 0}};
  static constexpr int kDiskOrder[4][2] = {{0, 0}, {0, 1}, {1, 1}, {1, 0}};
  for (AttachedDrive* drive : ide) {
    if (drive->ide_channel >= 0) continue;
    const auto& order = drive->spec.kind == DriveSpec::Kind::kCdrom ? kCdromOrder : kDiskOrder;
    for (const auto& position : order) {
      if (taken[position[0]][position[1]]) continue;
      taken[position[0]][position[1]] = true;
      drive->ide_channel = position[0];
      drive->ide_unit = position[1];
      break;
    }
    if (drive->ide_channel < 0) return absl::InvalidArgumentError("at most four IDE drives");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<block::CdromDevice>> Storage::HostDriveOf(
    const AttachedDrive& attached, const SimulatedDriveFactory& simulated_drive) {
  const DriveSpec& spec = attached.spec;
  if (spec.path.empty()) return nullptr;
  if (spec.probe_delay_us) {
    // The ISO behind a simulated host drive (benchmarks): probed at start, never per request.
    if (!simulated_drive) {
      return absl::InvalidArgumentError(
          "probe-delay-us simulates a slow host drive for tests and benchmarks; only the test "
          "build of the launcher has it (bazel build //vmm:microvm_testing)");
    }
    return simulated_drive(spec.path, std::chrono::microseconds(*spec.probe_delay_us));
  }
  if (!spec.host_drive && !IsBlockDevice(spec.path)) return nullptr;
  auto device = block::OpenHostCdromDevice(spec.path);
  // A block device that is no CD-ROM drive (a loop device holding an ISO) is an image, unless
  // host:PATH insisted on a drive.
  if (!device.ok() && !spec.host_drive && absl::IsInvalidArgument(device.status())) return nullptr;
  return device;
}

absl::Status Storage::AttachHostDrive(AttachedDrive& attached,
                                      std::unique_ptr<block::CdromDevice> device,
                                      bool watch_uevents) {
  attached.media = std::make_shared<block::RemovableMedia>();
  block::HostCdrom::Options options;
  // The disc itself: read through io_uring like an image. The drive is opened O_NONBLOCK (the raw
  // backend's open), which the uniform CD-ROM driver treats as "open for ioctl": no door lock and
  // no media check at open (drivers/cdrom/cdrom.c, cdrom_open).
  options.backend_factory = [medium = MediumFileOptions()](const std::string& path) {
    return OpenMedium(path, medium);
  };
  options.on_error = [name = attached.name](const absl::Status& status) {
    ReportHostDriveError(name, status);
  };
  // The host drive's eject button while the guest prevents removal: the guest is asked, as for an
  // API eject without force (the drive reports an MMC EjectRequest); if it agrees, its tray
  // opening reaches the host drive.
  options.on_eject_request = [media = std::weak_ptr<block::RemovableMedia>(attached.media)] {
    if (auto alive = media.lock()) (void)alive->Eject(/*force=*/false);
  };
  ASSIGN_OR_RETURN(attached.host_drive,
                   block::HostCdrom::Create(std::move(device), attached.media.get(), options));
  // Kernel uevents tell of host media changes; without netlink (a sandbox or a namespace without
  // uevents) the drive is still probed at start, after tray commands and after a failed read.
  if (watch_uevents && uevents_ == nullptr) {
    auto monitor = block::UeventMonitor::Open();
    if (monitor.ok()) {
      auto thread = block::UeventThread::Start(monitor->get(), [](const absl::Status& status) {
        ReportHostDriveError("uevents", status);
      });
      if (thread.ok()) {
        uevents_ = *std::move(monitor);
        uevent_thread_ = *std::move(thread);
      }
    } else {
      ReportHostDriveError(attached.name, monitor.status());
    }
  }
  if (watch_uevents && uevents_ != nullptr) {
    attached.host_drive_uevents = attached.host_drive->WatchUevents(uevents_.get());
  }
  if (absl::Status refreshed = attached.host_drive->Refresh(); !refreshed.ok()) {
    return DriveError(attached.spec, refreshed);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Storage>> Storage::Create(const StorageConfig& config) {
  std::unique_ptr<Storage> storage(new Storage());
  storage->config_ = config;
  storage->config_.drives.clear();  // the specs live on in drives_
  if (config.drives.empty()) return storage;
  if (config.drives.size() > kMaxDrives) {
    return absl::InvalidArgumentError(absl::StrFormat("at most %d drives", kMaxDrives));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> names, NameDrives(config.drives));
  std::vector<AttachedDrive> drives;
  for (const IoGroupSpec& group : config.io_groups) {
    storage->io_groups_[group.name] = std::make_shared<block::Throttle>(group.name, group.limits);
  }
  for (size_t index = 0; index < config.drives.size(); ++index) {
    const DriveSpec& spec = config.drives[index];
    AttachedDrive attached;
    attached.spec = spec;
    block::DriveOptions options;
    options.cache_mode = spec.cache_mode;
    options.fua_mode = spec.fua_mode;
    options.read_only = spec.read_only;
    if (spec.kind == DriveSpec::Kind::kDisk) {
      attached.name = names[index];
      options.name = attached.name;
      auto backend = block::raw::RawFileBackend::Open(spec.path, storage->DiskFileOptions(spec));
      if (!backend.ok()) return DriveError(spec, backend.status());
      attached.image = *backend;
      ASSIGN_OR_RETURN(attached.drive, block::Drive::CreateFixed(options, *std::move(backend)));
    } else {
      attached.name = names[index];
      options.name = attached.name;
      options.read_only = true;
      auto host_device = HostDriveOf(attached, config.simulated_drive);
      if (!host_device.ok()) return DriveError(spec, host_device.status());
      if (spec.path.empty()) {
        attached.media = std::make_shared<block::RemovableMedia>();
      } else if (*host_device != nullptr) {
        RETURN_IF_ERROR(storage->AttachHostDrive(attached, *std::move(host_device),
                                                 /*watch_uevents=*/!spec.probe_delay_us));
      } else {
        auto medium = OpenMedium(spec.path, storage->MediumFileOptions());
        if (!medium.ok()) return DriveError(spec, medium.status());
        attached.media = std::make_shared<block::RemovableMedia>(*std::move(medium), spec.path);
      }
      ASSIGN_OR_RETURN(attached.drive, block::Drive::CreateRemovable(options, attached.media));
    }
    // I/O limits: the drive's own, and its group's budget.
    RETURN_IF_ERROR(DriveError(spec, attached.drive->SetLimits(spec.limits)));
    if (!spec.group.empty()) {
      const auto group = storage->io_groups_.find(spec.group);
      if (group == storage->io_groups_.end()) {
        return DriveError(spec, absl::InvalidArgumentError(absl::StrFormat(
                                    "group=%s: no --io-group=%s,iops=...,bps=... defines it",
                                    spec.group, spec.group)));
      }
      attached.drive->SetGroup(group->second);
    }
    drives.push_back(std::move(attached));
  }

  uint16_t next_lun = 0;
  std::vector<AttachedDrive*> ide;
  for (AttachedDrive& drive : drives) {
    if (drive.spec.bus == DriveSpec::Bus::kIde) {
      ide.push_back(&drive);
    } else {
      drive.lun = next_lun++;
    }
  }
  RETURN_IF_ERROR(PlaceIdeDrives(ide));
  {
    absl::MutexLock lock(&storage->mutex_);
    storage->drives_ = std::move(drives);
  }
  RETURN_IF_ERROR(storage->CreateDevices());
  return storage;
}

absl::Status Storage::CreateDevices() {
  absl::MutexLock lock(&mutex_);
  return CreateDevicesLocked();
}

absl::Status Storage::CreateDevicesLocked() {
  // Fresh devices in their power-on state on the drives opened once: a unit attention for power on
  // (SPC-4 6.1.1) per logical unit, new queues, new iothreads.
  scsi_device_.reset();
  scsi_hotplug_.reset();
  ide_drives_.clear();
  ide_iothread_.reset();
  auto target = std::make_shared<devices::scsi::Target>();
  bool any_scsi = false;
  for (const AttachedDrive& drive : drives_) {
    if (drive.spec.bus == DriveSpec::Bus::kIde) {
      devices::ide::IdeDriveConfig ide_config;
      ide_config.channel = drive.ide_channel;
      ide_config.unit = drive.ide_unit;
      ide_config.kind = drive.spec.kind == DriveSpec::Kind::kCdrom
                            ? devices::ide::DeviceKind::kCdRom
                            : devices::ide::DeviceKind::kDisk;
      ide_config.drive = drive.drive;
      ide_drives_.push_back(ide_config);
      continue;
    }
    std::shared_ptr<devices::scsi::LogicalUnit> unit;
    if (drive.spec.kind == DriveSpec::Kind::kDisk) {
      ASSIGN_OR_RETURN(unit, devices::scsi::Disk::Create(drive.drive));
    } else {
      ASSIGN_OR_RETURN(unit, devices::scsi::CdRom::Create(drive.drive));
    }
    RETURN_IF_ERROR(target->AddLogicalUnit(drive.lun, unit));
    any_scsi = true;
  }
  // Every storage thread starts here (devices start none), confined by iothread_start.
  devices::IoThreadOptions thread_options;
  thread_options.on_start = config_.iothread_start;
  if (!ide_drives_.empty()) {
    // The IDE controller's DMA and block I/O: no polling (its doorbells are port writes that exit).
    ASSIGN_OR_RETURN(auto ide_threads, devices::StartIoThreads("ide-io", 1, thread_options));
    ide_iothread_ = ide_threads.front();
  }
  if (!any_scsi && !config_.scsi_controller) return absl::OkStatus();
  devices::virtio::scsi::VirtioScsiOptions options;
  options.num_request_queues = config_.scsi_queues;
  thread_options.poll_max_ns = config_.poll_max_ns;
  ASSIGN_OR_RETURN(options.iothreads,
                   devices::StartIoThreads("scsi-io", config_.iothreads, thread_options));
  ASSIGN_OR_RETURN(scsi_device_, devices::virtio::scsi::VirtioScsi::Create(options, {{0, target}}));
  scsi_hotplug_ = scsi_device_->hotplug();
  return absl::OkStatus();
}

absl::StatusOr<AttachedDrive> Storage::AttachDisk(
    DriveSpec spec, std::optional<uint16_t> lun,
    std::shared_ptr<block::raw::RawFileBackend> image) {
  spec.kind = DriveSpec::Kind::kDisk;
  spec.bus = DriveSpec::Bus::kScsi;
  absl::MutexLock lock(&mutex_);
  if (scsi_hotplug_ == nullptr) {
    return absl::FailedPreconditionError(
        "this VM has no virtio-scsi controller to attach a disk to: start it with a --disk or "
        "--cdrom, or with --scsi-controller");
  }
  if (drives_.size() >= kMaxDrives) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("the VM has %d drives, the most it may have", drives_.size()));
  }
  std::set<std::string> names;
  std::set<uint16_t> luns;
  for (const AttachedDrive& drive : drives_) {
    names.insert(drive.name);
    if (drive.spec.bus == DriveSpec::Bus::kScsi) luns.insert(drive.lun);
  }
  AttachedDrive attached;
  if (!spec.id.empty()) {
    if (!IsValidDriveId(spec.id)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "id %s: a drive name is 1 to 32 letters, digits, '.', '_' or '-', starting with a "
          "letter",
          spec.id));
    }
    if (names.count(spec.id) != 0) {
      return absl::AlreadyExistsError(absl::StrFormat("the drive name %s is taken", spec.id));
    }
    attached.name = spec.id;
  } else {
    for (int index = 0; attached.name.empty(); ++index) {
      std::string name = absl::StrFormat("disk%d", index);
      if (names.count(name) == 0) attached.name = std::move(name);
    }
  }
  if (lun.has_value()) {
    if (*lun > devices::scsi::kMaxLun) {
      return absl::InvalidArgumentError(
          absl::StrFormat("LUN %d is past the last one, %d", *lun, devices::scsi::kMaxLun));
    }
    if (luns.count(*lun) != 0) {
      return absl::AlreadyExistsError(absl::StrFormat("LUN %d is taken", *lun));
    }
    attached.lun = *lun;
  } else {
    uint16_t free = 0;
    while (luns.count(free) != 0) ++free;
    attached.lun = free;
  }
  std::shared_ptr<block::Throttle> group;
  if (!spec.group.empty()) {
    const auto found = io_groups_.find(spec.group);
    if (found == io_groups_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("group %s: no --io-group of this VM has that name", spec.group));
    }
    group = found->second;
  }
  block::DriveOptions options;
  options.cache_mode = spec.cache_mode;
  options.fua_mode = spec.fua_mode;
  options.read_only = spec.read_only;
  options.name = attached.name;
  attached.image = image;
  ASSIGN_OR_RETURN(attached.drive, block::Drive::CreateFixed(options, std::move(image)));
  RETURN_IF_ERROR(attached.drive->SetLimits(spec.limits));
  if (group != nullptr) attached.drive->SetGroup(group);
  attached.spec = std::move(spec);
  ASSIGN_OR_RETURN(std::shared_ptr<devices::scsi::LogicalUnit> unit,
                   devices::scsi::Disk::Create(attached.drive));
  RETURN_IF_ERROR(scsi_hotplug_->Attach(0, attached.lun, std::move(unit)));
  drives_.push_back(attached);
  return attached;
}

absl::StatusOr<uint64_t> Storage::ResizeDisk(const std::string& name,
                                             std::optional<uint64_t> size_bytes) {
  absl::MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(auto found, FindByName(drives_, name));
  if (found->spec.kind != DriveSpec::Kind::kDisk) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s is a CD-ROM drive: its size is its medium's", name));
  }
  if (found->spec.bus != DriveSpec::Bus::kScsi) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is an IDE disk: ATA has no way to tell the guest of a new size (virtio-scsi disks "
        "resize)",
        name));
  }
  ASSIGN_OR_RETURN(const uint64_t size, found->drive->Resize(size_bytes));
  // Without a controller (a guest restart in progress) the next one reads the new size.
  if (scsi_hotplug_ != nullptr) scsi_hotplug_->CapacityChanged(0, found->lun);
  return size;
}

absl::StatusOr<AttachedDrive> Storage::DetachDisk(const std::string& name) {
  absl::MutexLock lock(&mutex_);
  ASSIGN_OR_RETURN(auto found, FindByName(drives_, name));
  if (found->spec.bus != DriveSpec::Bus::kScsi) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is on the IDE controller, which has no hot-plug; only virtio-scsi disks detach", name));
  }
  if (found->spec.kind != DriveSpec::Kind::kDisk) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a CD-ROM drive: eject its medium instead (only disks detach)", name));
  }
  if (scsi_hotplug_ == nullptr) {
    return absl::FailedPreconditionError("the virtio-scsi controller is being restarted; retry");
  }
  // Requests waiting for their I/O budget go now, so the drain below is quick.
  (void)found->drive->SetLimits(block::IoLimits{});
  found->drive->SetGroup(nullptr);
  RETURN_IF_ERROR(scsi_hotplug_->Detach(0, found->lun).status());
  AttachedDrive detached = std::move(*found);
  drives_.erase(found);
  // What the guest wrote and was told is done reaches the image's storage before it is let go,
  // as QEMU flushes a drive it closes. cache=unsafe promises no such thing.
  if (detached.image != nullptr && !detached.spec.read_only &&
      detached.spec.cache_mode != block::CacheMode::kUnsafe &&
      fdatasync(detached.image->fd()) != 0) {
    const int error = errno;
    absl::FPrintF(stderr, "%s: %s: flushing the detached image: %s\n",
                  program_invocation_short_name, name, strerror(error));
  }
  return detached;
}

}  // namespace vmm

#include "vmm/vm_api.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "block/cache_mode.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {

api::DriveEntry DriveEntryOf(const AttachedDrive& attached) {
  api::DriveEntry entry;
  entry.name = attached.name;
  entry.cdrom = attached.spec.kind == DriveSpec::Kind::kCdrom;
  if (attached.spec.bus == DriveSpec::Bus::kIde) {
    entry.bus = "ide";
    entry.address = absl::StrFormat("%d:%d", attached.ide_channel, attached.ide_unit);
  } else {
    // One virtio-scsi controller, target 0: channel:target:lun.
    entry.bus = "virtio-scsi";
    entry.address = absl::StrFormat("0:0:%d", attached.lun);
  }
  if (!entry.cdrom) {
    entry.source = attached.spec.path;
    entry.read_only = attached.spec.read_only;
    entry.cache_mode = block::CacheModeName(attached.spec.cache_mode);
  }
  entry.drive = attached.drive;
  entry.media = attached.media;
  if (attached.host_drive != nullptr) {
    entry.host_probes = [host = attached.host_drive] { return host->stats().probes; };
  }
  return entry;
}

std::vector<api::DriveEntry> DriveEntries(const Storage& storage) {
  std::vector<api::DriveEntry> entries;
  for (const AttachedDrive& attached : storage.drives()) entries.push_back(DriveEntryOf(attached));
  return entries;
}

std::vector<api::DriveEntry> VmApiControl::Drives() const { return DriveEntries(vm_.storage()); }

absl::StatusOr<std::shared_ptr<block::BlockBackend>> VmApiControl::OpenMedium(
    const std::string& path) {
  const block::raw::RawFileOptions options = vm_.storage().MediumFileOptions();
  if (media_dir_ != nullptr) return media_dir_->OpenMedium(path, options);
  return Storage::OpenMedium(path, options);
}

namespace {

// The --disk a hot-plugged disk would have been.
DriveSpec DiskSpecOf(const api::DiskAttachment& disk) {
  DriveSpec spec;
  spec.kind = DriveSpec::Kind::kDisk;
  spec.bus = DriveSpec::Bus::kScsi;
  spec.path = disk.path;
  spec.given_path = disk.path;
  spec.cache_mode = disk.cache_mode;
  spec.fua_mode = disk.fua_mode;
  spec.read_only = disk.read_only;
  spec.id = disk.id;
  spec.limits = disk.limits;
  spec.group = disk.io_group;
  return spec;
}

}  // namespace

absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> VmApiControl::OpenDiskImage(
    const api::DiskAttachment& disk) {
  const block::raw::RawFileOptions options = vm_.storage().DiskFileOptions(DiskSpecOf(disk));
  return media_dir_ != nullptr ? media_dir_->OpenFile(disk.path, options)
                               : block::raw::RawFileBackend::Open(disk.path, options);
}

absl::StatusOr<api::DriveEntry> VmApiControl::AttachDisk(
    const api::DiskAttachment& disk, std::shared_ptr<block::raw::RawFileBackend> image) {
  DriveSpec spec = DiskSpecOf(disk);
  // The source names the file for every reader: a path relative to the media directory gets the
  // directory in front.
  if (media_dir_ != nullptr && !disk.path.empty() && disk.path[0] != '/') {
    spec.path = absl::StrCat(media_dir_->path(), "/", disk.path);
  }
  ASSIGN_OR_RETURN(AttachedDrive attached,
                   vm_.storage().AttachDisk(spec, disk.lun, std::move(image)));
  return DriveEntryOf(attached);
}

absl::Status VmApiControl::DetachDisk(const std::string& name) {
  // The AttachedDrive returned is dropped here: with the API's entry gone too, the image closes.
  return vm_.storage().DetachDisk(name).status();
}

api::VmStatus VmApiControl::Status() const {
  api::VmStatus status;
  switch (vm_.run_state()) {
    case Vm::RunState::kRunning:
      status.state = api::VmRunState::kRunning;
      break;
    case Vm::RunState::kPaused:
      status.state = api::VmRunState::kPaused;
      break;
    case Vm::RunState::kStopping:
      status.state = api::VmRunState::kStopping;
      break;
  }
  const VmConfig& config = vm_.config();
  status.vcpus = config.vcpus;
  status.memory_bytes = config.memory_bytes;
  status.kernel = config.kernel_path;
  status.cmdline = config.cmdline;
  status.uptime = absl::Now() - config.launch_time;
  status.pid = static_cast<uint32_t>(config.host_pid != 0 ? config.host_pid : getpid());
  status.firmware = config.firmware_path;
  status.boot_order = vm_.boot_order();
  return status;
}

absl::Status VmApiControl::Shutdown(bool force, absl::Duration grace_period) {
  vm_.RequestStop(force, grace_period);
  return absl::OkStatus();
}

}  // namespace vmm

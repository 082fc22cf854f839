#include "vmm/storage.h"

#include "absl/strings/str_format.h"
#include "block/raw/raw_file_backend.h"
#include "devices/scsi/cdrom.h"
#include "devices/scsi/disk.h"
#include "devices/scsi/target.h"

namespace vmm {

absl::StatusOr<std::shared_ptr<block::BlockBackend>> Storage::OpenMedium(const std::string& path) {
  block::raw::RawFileOptions options;
  options.cache_mode = block::CacheMode::kWriteback;
  options.read_only = true;
  auto backend = block::raw::RawFileBackend::Open(path, options);
  if (!backend.ok()) return backend.status();
  return std::shared_ptr<block::BlockBackend>(*std::move(backend));
}

const AttachedDrive* Storage::Find(const std::string& name) const {
  for (const AttachedDrive& drive : drives_) {
    if (drive.name == name) return &drive;
  }
  return nullptr;
}

absl::StatusOr<std::unique_ptr<Storage>> Storage::Create(const StorageConfig& config) {
  std::unique_ptr<Storage> storage(new Storage());
  if (config.drives.empty()) return storage;
  if (config.drives.size() > 256) return absl::InvalidArgumentError("at most 256 drives");
  auto target = std::make_shared<devices::scsi::Target>();
  int disks = 0;
  int cdroms = 0;
  for (const DriveSpec& spec : config.drives) {
    AttachedDrive attached;
    attached.spec = spec;
    attached.lun = static_cast<uint16_t>(storage->drives_.size());
    block::DriveOptions options;
    options.cache_mode = spec.cache_mode;
    options.fua_mode = spec.fua_mode;
    options.read_only = spec.read_only;
    std::shared_ptr<devices::scsi::LogicalUnit> unit;
    if (spec.kind == DriveSpec::Kind::kDisk) {
      attached.name = absl::StrFormat("disk%d", disks++);
      options.name = attached.name;
      block::raw::RawFileOptions raw;
      raw.cache_mode = spec.cache_mode;
      raw.read_only = spec.read_only;
      raw.fua_mode = spec.fua_mode;
      auto backend = block::raw::RawFileBackend::Open(spec.path, raw);
      if (!backend.ok()) {
        return absl::Status(backend.status().code(),
                            absl::StrFormat("--disk %s: %s", spec.path, backend.status().message()));
      }
      auto drive = block::Drive::CreateFixed(options, *std::move(backend));
      if (!drive.ok()) return drive.status();
      attached.drive = *std::move(drive);
      auto disk = devices::scsi::Disk::Create(attached.drive);
      if (!disk.ok()) return disk.status();
      unit = *std::move(disk);
    } else {
      attached.name = absl::StrFormat("cd%d", cdroms++);
      options.name = attached.name;
      options.read_only = true;
      if (spec.path.empty()) {
        attached.media = std::make_shared<block::RemovableMedia>();
      } else {
        auto medium = OpenMedium(spec.path);
        if (!medium.ok()) {
          return absl::Status(medium.status().code(), absl::StrFormat("--cdrom %s: %s", spec.path,
                                                                      medium.status().message()));
        }
        attached.media = std::make_shared<block::RemovableMedia>(*std::move(medium), spec.path);
      }
      auto drive = block::Drive::CreateRemovable(options, attached.media);
      if (!drive.ok()) return drive.status();
      attached.drive = *std::move(drive);
      auto cdrom = devices::scsi::CdRom::Create(attached.drive);
      if (!cdrom.ok()) return cdrom.status();
      unit = *std::move(cdrom);
    }
    absl::Status status = target->AddLogicalUnit(attached.lun, unit);
    if (!status.ok()) return status;
    storage->drives_.push_back(std::move(attached));
  }
  devices::virtio::scsi::VirtioScsiOptions options;
  options.num_request_queues = config.scsi_queues;
  options.num_iothreads = config.iothreads;
  options.poll_max_ns = config.poll_max_ns;
  auto device = devices::virtio::scsi::VirtioScsi::Create(options, {{0, target}});
  if (!device.ok()) return device.status();
  storage->scsi_device_ = *std::move(device);
  return storage;
}

}  // namespace vmm

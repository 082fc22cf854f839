#include <limits.h>
#include <sys/stat.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "api/api_core.h"
#include "vmm/sys_util/status_macros.h"

namespace api {
namespace {

// As MediaServiceImpl: streamed, so that a malformed request is INVALID_ARGUMENT.
class VmServiceImpl final : public pb::VmService::StreamedService {
 public:
  explicit VmServiceImpl(ApiCore& core) : core_(core) {}

  grpc::Status StreamedGetInfo(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::GetInfoRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleGetInfo(request, response);
    });
  }
  grpc::Status StreamedPause(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::PauseRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandlePause(request, response);
    });
  }
  grpc::Status StreamedResume(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::ResumeRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleResume(request, response);
    });
  }
  grpc::Status StreamedShutdown(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::ShutdownRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleShutdown(request, response);
    });
  }
  grpc::Status StreamedReset(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::ResetRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleReset(request, response);
    });
  }
  grpc::Status StreamedSetBootOrder(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::SetBootOrderRequest, pb::VmInfo>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleSetBootOrder(request, response);
    });
  }
  grpc::Status StreamedGetStats(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::GetStatsRequest, pb::GetStatsResponse>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleGetStats(request, response);
    });
  }
  grpc::Status StreamedSetDriveLimits(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::SetDriveLimitsRequest, pb::DriveLimits>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleSetDriveLimits(request, response);
    });
  }
  grpc::Status StreamedAttachDisk(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::AttachDiskRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleAttachDisk(request, response);
    });
  }
  grpc::Status StreamedResizeDisk(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::ResizeDiskRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleResizeDisk(request, response);
    });
  }
  grpc::Status StreamedDetachDisk(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::DetachDiskRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleDetachDisk(request, response);
    });
  }

 private:
  grpc::Status HandleGetInfo(const pb::GetInfoRequest*, pb::VmInfo* response) {
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandlePause(const pb::PauseRequest*, pb::VmInfo* response) {
    absl::Status status = core_.control().Pause();
    if (!status.ok()) return ToGrpc(status);
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandleResume(const pb::ResumeRequest*, pb::VmInfo* response) {
    absl::Status status = core_.control().Resume();
    if (!status.ok()) return ToGrpc(status);
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandleShutdown(const pb::ShutdownRequest* request, pb::VmInfo* response) {
    const absl::Duration grace = request->grace_period_ms() == 0
                                     ? kDefaultGracePeriod
                                     : absl::Milliseconds(request->grace_period_ms());
    absl::Status status = core_.control().Shutdown(request->force(), grace);
    if (!status.ok()) return ToGrpc(status);
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandleReset(const pb::ResetRequest*, pb::VmInfo* response) {
    absl::Status status = core_.control().Reset();
    if (!status.ok()) return ToGrpc(status);
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandleSetBootOrder(const pb::SetBootOrderRequest* request, pb::VmInfo* response) {
    const std::vector<std::string> drives(request->drives().begin(), request->drives().end());
    absl::Status status = core_.control().SetBootOrder(drives);
    if (!status.ok()) return ToGrpc(status);
    core_.FillVmInfo(response);
    return grpc::Status::OK;
  }

  grpc::Status HandleGetStats(const pb::GetStatsRequest* request, pb::GetStatsResponse* response) {
    if (!request->drive().empty()) {
      auto drive = core_.FindDrive(request->drive());
      if (!drive.ok()) return ToGrpc(drive.status());
      FillDriveStats(**drive, response->add_drives());
      return grpc::Status::OK;
    }
    for (const DrivePtr& drive : core_.drives()) FillDriveStats(*drive, response->add_drives());
    return grpc::Status::OK;
  }

  grpc::Status HandleSetDriveLimits(const pb::SetDriveLimitsRequest* request,
                                    pb::DriveLimits* response) {
    if (request->drive().empty() == request->group().empty()) {
      return ToGrpc(
          absl::InvalidArgumentError("set limits: name a drive or an --io-group (one of the two)"));
    }
    const block::IoLimits limits = FromProto(request->limits());
    if (absl::Status valid = block::ValidateIoLimits(limits); !valid.ok()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat("set limits: ", valid.message())));
    }
    response->set_drive(request->drive());
    response->set_group(request->group());
    if (!request->drive().empty()) {
      auto drive = core_.FindDrive(request->drive());
      if (!drive.ok()) return ToGrpc(drive.status());
      if ((*drive)->drive == nullptr) {
        return ToGrpc(absl::FailedPreconditionError("set limits: the drive has no I/O"));
      }
      absl::Status set = (*drive)->drive->SetLimits(limits);
      if (!set.ok()) return ToGrpc(set);
      ToProto((*drive)->drive->limits(), response->mutable_limits());
      return grpc::Status::OK;
    }
    const auto groups = core_.control().IoGroups();
    const auto group = groups.find(request->group());
    if (group == groups.end()) {
      std::vector<std::string> names;
      for (const auto& [name, unused] : groups) names.push_back(name);
      return ToGrpc(absl::NotFoundError(
          absl::StrFormat("no --io-group %s (this VM has: %s)", Quote(request->group()),
                          names.empty() ? std::string("none") : absl::StrJoin(names, ", "))));
    }
    group->second->SetLimits(limits);
    ToProto(group->second->limits(), response->mutable_limits());
    return grpc::Status::OK;
  }

  grpc::Status HandleAttachDisk(const pb::AttachDiskRequest* request, pb::DriveStatus* response) {
    absl::StatusOr<std::string> path = RequestedPath(core_.control(), "attach", request->path());
    if (!path.ok()) return ToGrpc(path.status());
    DiskAttachment disk;
    disk.path = *path;
    disk.id = request->id();
    disk.read_only = request->read_only();
    disk.io_group = request->io_group();
    if (!request->cache_mode().empty()) {
      absl::StatusOr<block::CacheMode> mode = block::ParseCacheMode(request->cache_mode());
      if (!mode.ok()) return ToGrpc(Prefixed("attach: cache_mode", mode.status()));
      disk.cache_mode = *mode;
    }
    if (!request->fua_mode().empty()) {
      absl::StatusOr<block::FuaMode> mode = block::ParseFuaMode(request->fua_mode());
      if (!mode.ok()) return ToGrpc(Prefixed("attach: fua_mode", mode.status()));
      disk.fua_mode = *mode;
    }
    if (request->has_lun()) {
      if (request->lun() > kMaxLun) {
        return ToGrpc(absl::InvalidArgumentError(
            absl::StrFormat("attach: LUN %d is past the last one, %d", request->lun(), kMaxLun)));
      }
      disk.lun = static_cast<uint16_t>(request->lun());
    }
    disk.limits = FromProto(request->limits());
    if (absl::Status valid = block::ValidateIoLimits(disk.limits); !valid.ok()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat("attach: ", valid.message())));
    }
    if (!core_.control().MediaPathsConfined()) {
      if (absl::Status usable = CheckImageFile("attach", disk.path); !usable.ok()) {
        return ToGrpc(usable);
      }
    }
    // The file's errors name it (a lock held by another user stays FAILED_PRECONDITION); the
    // VM's (a name or LUN taken, no controller) say what.
    auto image = core_.control().OpenDiskImage(disk);
    if (!image.ok()) {
      return ToGrpc(ImageError("attach", disk.path, image.status(), /*keep_precondition=*/true));
    }
    absl::StatusOr<DriveEntry> entry = core_.control().AttachDisk(disk, *std::move(image));
    if (!entry.ok()) return ToGrpc(Prefixed("attach", entry.status()));
    const DrivePtr drive = core_.AddDrive(*std::move(entry));
    FillDriveStatus(*drive, nullptr, response);
    pb::MediaEvent event;
    event.set_type(pb::MediaEvent::DISK_ATTACHED);
    event.set_drive(drive->name);
    *event.mutable_status() = *response;
    core_.Publish(std::move(event));
    return grpc::Status::OK;
  }

  grpc::Status HandleResizeDisk(const pb::ResizeDiskRequest* request, pb::DriveStatus* response) {
    absl::StatusOr<DrivePtr> found = core_.FindDrive(request->drive());
    if (!found.ok()) return ToGrpc(found.status());
    std::optional<uint64_t> size;
    if (request->size_bytes() != 0) size = request->size_bytes();
    absl::StatusOr<uint64_t> resized = core_.control().ResizeDisk(request->drive(), size);
    if (!resized.ok()) return ToGrpc(Prefixed("resize", resized.status()));
    FillDriveStatus(**found, nullptr, response);
    pb::MediaEvent event;
    event.set_type(pb::MediaEvent::DISK_RESIZED);
    event.set_drive(request->drive());
    *event.mutable_status() = *response;
    core_.Publish(std::move(event));
    return grpc::Status::OK;
  }

  grpc::Status HandleDetachDisk(const pb::DetachDiskRequest* request, pb::DriveStatus* response) {
    absl::StatusOr<DrivePtr> found = core_.FindDrive(request->drive());
    if (!found.ok()) return ToGrpc(found.status());
    FillDriveStatus(**found, nullptr, response);
    found->reset();
    if (absl::Status detached = core_.control().DetachDisk(request->drive()); !detached.ok()) {
      return ToGrpc(Prefixed("detach", detached));
    }
    // The last reference the API held: the image closes (and its lock goes) here, before the
    // reply, unless another call is reading the drive at this very moment.
    core_.RemoveDrive(request->drive());
    pb::MediaEvent event;
    event.set_type(pb::MediaEvent::DISK_DETACHED);
    event.set_drive(request->drive());
    *event.mutable_status() = *response;
    core_.Publish(std::move(event));
    return grpc::Status::OK;
  }

 private:
  ApiCore& core_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeVmService(ApiCore& core) {
  return std::make_unique<VmServiceImpl>(core);
}

}  // namespace api

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

// Every method is served through its streamed form (the generated StreamedService): the handler
// reads the request itself, so a request that does not parse gets INVALID_ARGUMENT saying so
// (ReadRequest) instead of gRPC's INTERNAL with an empty message.
class MediaServiceImpl final : public pb::MediaService::StreamedService {
 public:
  explicit MediaServiceImpl(ApiCore& core) : core_(core) {}

  grpc::Status StreamedListDrives(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::ListDrivesRequest, pb::ListDrivesResponse>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleListDrives(request, response);
    });
  }
  grpc::Status StreamedGetStatus(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::GetStatusRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleGetStatus(request, response);
    });
  }
  grpc::Status StreamedInsert(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::InsertRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleInsert(request, response);
    });
  }
  grpc::Status StreamedEject(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::EjectRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleEject(request, response);
    });
  }
  grpc::Status StreamedSetTray(
      grpc::ServerContext* context,
      grpc::ServerUnaryStreamer<pb::SetTrayRequest, pb::DriveStatus>* stream) override {
    return ServeUnary(core_, context, stream, [this](auto* request, auto* response) {
      return HandleSetTray(request, response);
    });
  }
  grpc::Status StreamedWatch(
      grpc::ServerContext* context,
      grpc::ServerSplitStreamer<pb::WatchRequest, pb::MediaEvent>* stream) override {
    const ApiCore::CallScope call(core_);
    if (grpc::Status denied = core_.Admit(*context); !denied.ok()) return denied;
    pb::WatchRequest request;
    if (grpc::Status read = ReadRequest(stream, &request); !read.ok()) return read;
    return HandleWatch(context, &request, stream);
  }

 private:
  grpc::Status HandleListDrives(const pb::ListDrivesRequest*, pb::ListDrivesResponse* response) {
    for (const DrivePtr& drive : core_.drives()) {
      FillDriveStatus(*drive, nullptr, response->add_drives());
    }
    return grpc::Status::OK;
  }

  grpc::Status HandleGetStatus(const pb::GetStatusRequest* request, pb::DriveStatus* response) {
    auto drive = core_.FindDrive(request->drive());
    if (!drive.ok()) return ToGrpc(drive.status());
    FillDriveStatus(**drive, nullptr, response);
    return grpc::Status::OK;
  }

  grpc::Status HandleInsert(const pb::InsertRequest* request, pb::DriveStatus* response) {
    auto found = core_.FindRemovable(request->drive());
    if (!found.ok()) return ToGrpc(found.status());
    const DriveEntry& drive = **found;
    absl::StatusOr<std::string> checked = RequestedPath(core_.control(), "insert", request->path());
    if (!checked.ok()) return ToGrpc(checked.status());
    const std::string& path = *checked;
    if (!request->format().empty() && request->format() != "raw") {
      return InvalidArgument(
          absl::StrFormat("insert: format %s is not supported (only \"raw\": an ISO or raw image)",
                          Quote(request->format())));
    }
    // Checked again, atomically, by RemovableMedia::Insert; here first so that the answer does not
    // depend on the file.
    const auto before = drive.media->Current();
    if (before->present) {
      return FailedPrecondition(absl::StrFormat("%s already holds a medium (%s); eject it first",
                                                drive.name, before->source));
    }
    if (!core_.control().MediaPathsConfined()) {
      if (absl::Status usable = CheckImageFile("insert", path); !usable.ok()) return ToGrpc(usable);
    }
    auto medium = core_.control().OpenMedium(path);
    if (!medium.ok()) return ToGrpc(ImageError("insert", path, medium.status()));
    // On failure the opened medium is dropped here: nothing changed.
    // The medium's source names the file for every reader: a path relative to the media
    // directory gets the directory in front.
    const std::string root = core_.control().MediaRoot();
    const std::string source =
        path[0] == '/' || root.empty() ? path : absl::StrCat(root, "/", path);
    absl::Status inserted = drive.media->Insert(*std::move(medium), source);
    if (!inserted.ok()) return ToGrpc(Prefixed(drive.name, inserted));
    FillDriveStatus(drive, nullptr, response);
    return grpc::Status::OK;
  }

  grpc::Status HandleEject(const pb::EjectRequest* request, pb::DriveStatus* response) {
    auto found = core_.FindRemovable(request->drive());
    if (!found.ok()) return ToGrpc(found.status());
    absl::Status status = (*found)->media->Eject(request->force());
    if (!status.ok()) return ToGrpc(Prefixed((*found)->name, status));
    FillDriveStatus(**found, nullptr, response);
    return grpc::Status::OK;
  }

  grpc::Status HandleSetTray(const pb::SetTrayRequest* request, pb::DriveStatus* response) {
    auto found = core_.FindRemovable(request->drive());
    if (!found.ok()) return ToGrpc(found.status());
    absl::Status status = (*found)->media->SetTrayOpen(request->open(), request->force());
    if (!status.ok()) return ToGrpc(Prefixed((*found)->name, status));
    FillDriveStatus(**found, nullptr, response);
    return grpc::Status::OK;
  }

  grpc::Status HandleWatch(grpc::ServerContext* context, const pb::WatchRequest* request,
                           grpc::ServerSplitStreamer<pb::WatchRequest, pb::MediaEvent>* writer) {
    // The drives whose media events the stream carries: every removable one, or the one named
    // (a disk has no media events; its resize and detach come through ApiCore::Publish).
    std::vector<DrivePtr> drives;
    if (request->drive().empty()) {
      for (const DrivePtr& drive : core_.drives()) {
        if (drive->media != nullptr) drives.push_back(drive);
      }
    } else {
      auto found = core_.FindDrive(request->drive());
      if (!found.ok()) return ToGrpc(found.status());
      if ((*found)->media != nullptr) drives.push_back(*found);
    }
    WatchQueue queue(core_.options().watch_queue_limit, context, request->drive());
    grpc::Status refusal;
    if (!core_.AddWatcher(&queue, &refusal)) return refusal;
    std::vector<std::unique_ptr<DriveListener>> listeners;
    for (const DrivePtr& drive : drives) {
      listeners.push_back(std::make_unique<DriveListener>(drive, &queue));
      drive->media->AddListener(listeners.back().get());
    }
    // Once RemoveListener() returns the listener is never called again (block/media.h).
    absl::Cleanup unsubscribe = [&] {
      for (size_t i = 0; i < drives.size(); ++i)
        drives[i]->media->RemoveListener(listeners[i].get());
      core_.RemoveWatcher(&queue);
    };
    // The initial metadata tells the client it is subscribed: every change from here on reaches it
    // (ClientReader::WaitForInitialMetadata).
    writer->SendInitialMetadata();
    while (true) {
      WatchQueue::Item item;
      switch (queue.Pop(&item, kWatchPollInterval)) {
        case WatchQueue::Next::kItem: {
          if (item.ready != nullptr) {
            if (!writer->Write(*item.ready)) {
              return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
            }
            break;
          }
          pb::MediaEvent event;
          event.set_type(ToProto(item.type));
          event.set_drive(item.drive->name);
          event.set_by_guest(item.by_guest);
          FillDriveStatus(*item.drive, item.state.get(), event.mutable_status());
          event.set_time_unix_nanos(item.time_unix_nanos);
          if (!writer->Write(event)) {
            return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
          }
          break;
        }
        case WatchQueue::Next::kOverflow:
          return grpc::Status(
              grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrFormat("the watcher fell behind: more than %d events queued, %d dropped; "
                              "read the state again (ListDrives) and watch anew",
                              core_.options().watch_queue_limit, queue.dropped()));
        case WatchQueue::Next::kClosed:
          return grpc::Status::OK;  // the VMM stops
        case WatchQueue::Next::kTimeout:
          break;
      }
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
  }

 private:
  static grpc::Status InvalidArgument(const std::string& message) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
  }
  static grpc::Status FailedPrecondition(const std::string& message) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, message);
  }

  ApiCore& core_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeMediaService(ApiCore& core) {
  return std::make_unique<MediaServiceImpl>(core);
}

}  // namespace api

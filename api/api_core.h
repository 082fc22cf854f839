#ifndef API_API_CORE_H_
#define API_API_CORE_H_

// The API server's insides, shared by its parts (api_core.cc: the state and the helpers both
// services use; media_service.cc, vm_service.cc: the two services; api_server.cc: the server's
// lifecycle). Not for use outside //api:api_server.

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/api_server.h"
#include "api/vm_control.h"
#include "block/media.h"
#include "block/throttle.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"

namespace api {

namespace pb = ::vmm::v1;

// A graceful Shutdown's grace period when the request leaves it at 0 (vmm.proto).
constexpr absl::Duration kDefaultGracePeriod = absl::Milliseconds(5000);
// How often a Watch stream waiting for events checks whether its client went away.
constexpr absl::Duration kWatchPollInterval = absl::Milliseconds(100);

grpc::Status ToGrpc(const absl::Status& status);

// The one authentication check (docs/api.md, "Authentication"): the call's "authorization"
// metadata against `token`; OK when no token is configured. UNAUTHENTICATED otherwise.
grpc::Status Authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& token);

// A client-supplied string for an error message: cut to `max` bytes, control characters escaped
// (the rest, UTF-8 included, as is, so a path reads as the user typed it).
std::string Quote(const std::string& text, size_t max = 80);

pb::MediaEvent::Type ToProto(block::MediaEventType type);

pb::VmInfo::State ToProto(VmRunState state);

void ToProto(const block::IoLimits& limits, pb::IoLimits* out);

block::IoLimits FromProto(const pb::IoLimits& limits);

// A drive's I/O limits and group, into its status.
void FillDriveLimits(const DriveEntry& drive, pb::DriveStatus* out);

// A drive's status; for a CD-ROM from the media snapshot `state` (the current one if null).
void FillDriveStatus(const DriveEntry& drive, const block::MediaState* state, pb::DriveStatus* out);

void FillDriveStats(const DriveEntry& drive, pb::DriveStats* out);

// Paths that passed the PATH_MAX check are shown whole up to this (an error stays well under
// 4 KiB).
constexpr size_t kPathShown = 3072;

// The events of one Watch stream, between the media listeners (any thread: the API's, a vCPU's or
// an iothread's; they must not block) and the stream's gRPC thread.
class WatchQueue {
 public:
  struct Item {
    std::shared_ptr<const DriveEntry> drive;
    block::MediaEventType type;
    bool by_guest;
    std::shared_ptr<const block::MediaState> state;
    int64_t time_unix_nanos;
    // An attach, detach or resize: the event as it is sent (drive is null; it may be gone).
    std::shared_ptr<const pb::MediaEvent> ready;
  };
  enum class Next { kItem, kOverflow, kClosed, kTimeout };

  // `context` is the stream's: cancelling it is how a handler blocked in Write() (a client that
  // stopped reading fills HTTP/2's flow-control window) is set free.
  WatchQueue(size_t limit, grpc::ServerContext* context, std::string drive)
      : limit_(limit), context_(context), drive_(std::move(drive)) {}

  // The drive the stream watches; empty: all.
  const std::string& drive() const { return drive_; }

  // Never waits for the consumer: past the limit the event is dropped and the stream is over (the
  // client learns why when it reads again; one that never does gives up its slot, see
  // ApiCore::AddWatcher).
  void Push(Item item) {
    absl::MutexLock lock(&mutex_);
    if (overflowed_) {
      ++dropped_;
      return;
    }
    if (items_.size() >= limit_) {
      overflowed_ = true;
      ++dropped_;
      return;
    }
    items_.push_back(std::move(item));
  }

  // Ends the stream now, whatever is queued (the server stops and the client does not read).
  void Cancel() { context_->TryCancel(); }

  // The server stops: what is queued is still delivered, then the stream ends.
  void Close() {
    absl::MutexLock lock(&mutex_);
    closed_ = true;
  }

  Next Pop(Item* item, absl::Duration timeout) {
    absl::MutexLock lock(&mutex_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return overflowed_ || closed_ || !items_.empty();
    };
    mutex_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    if (overflowed_) return Next::kOverflow;
    if (!items_.empty()) {
      *item = std::move(items_.front());
      items_.pop_front();
      return Next::kItem;
    }
    return closed_ ? Next::kClosed : Next::kTimeout;
  }

  uint64_t dropped() const {
    absl::MutexLock lock(&mutex_);
    return dropped_;
  }
  bool overflowed() const {
    absl::MutexLock lock(&mutex_);
    return overflowed_;
  }

 private:
  const size_t limit_;
  grpc::ServerContext* const context_;
  const std::string drive_;
  mutable absl::Mutex mutex_;
  std::deque<Item> items_ ABSL_GUARDED_BY(mutex_);
  bool overflowed_ ABSL_GUARDED_BY(mutex_) = false;
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
  uint64_t dropped_ ABSL_GUARDED_BY(mutex_) = 0;
};

// Feeds one drive's media events into a stream's queue.
class DriveListener : public block::MediaListener {
 public:
  DriveListener(std::shared_ptr<const DriveEntry> drive, WatchQueue* queue)
      : drive_(std::move(drive)), queue_(queue) {}
  void OnMediaEvent(const block::MediaEvent& event) override {
    queue_->Push(
        {drive_, event.type, event.by_guest, event.state, absl::GetCurrentTimeNanos(), nullptr});
  }

 private:
  const std::shared_ptr<const DriveEntry> drive_;
  WatchQueue* const queue_;
};

using DrivePtr = std::shared_ptr<const DriveEntry>;

// The state the two services share: the drives, the VmControl and the open Watch streams.
class ApiCore {
 public:
  ApiCore(VmControl& control, const ApiServerOptions& options);

  VmControl& control() { return control_; }
  const ApiServerOptions& options() const { return options_; }
  // The drives now, in order (a disk attached or detached changes the list).
  std::vector<DrivePtr> drives() const;

  absl::StatusOr<DrivePtr> FindDrive(const std::string& name) const;
  // A drive with removable media: FailedPrecondition for a disk.
  absl::StatusOr<DrivePtr> FindRemovable(const std::string& name) const;
  // Hot-plug: a drive joins the list, or leaves it (returned, or null if it was not there).
  DrivePtr AddDrive(DriveEntry entry);
  DrivePtr RemoveDrive(const std::string& name);
  // An attach, detach or resize, to every stream watching all drives or this one.
  void Publish(pb::MediaEvent event);

  void FillVmInfo(pb::VmInfo* out) const;

  // Whether the caller may make this call (the token, when one is configured): the first thing
  // every handler does. UNAUTHENTICATED refusals are returned as they are.
  grpc::Status Admit(const grpc::ServerContext& context) const {
    return Authenticate(context.client_metadata(), options_.auth_token);
  }

  // Every handler holds one while it runs, so that Stop() can let calls finish (and their replies
  // reach the clients) before the server shuts its connections.
  class CallScope {
   public:
    explicit CallScope(ApiCore& core) : core_(core) {
      absl::MutexLock lock(&core_.calls_mutex_);
      ++core_.calls_;
    }
    ~CallScope() {
      absl::MutexLock lock(&core_.calls_mutex_);
      --core_.calls_;
    }
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    ApiCore& core_;
  };
  // Waits until no handler runs, at most `timeout`.
  void WaitForCalls(absl::Duration timeout);

  // Watch streams: register while open; the server's stop closes them all.
  bool AddWatcher(WatchQueue* queue, grpc::Status* refusal);
  void RemoveWatcher(WatchQueue* queue);
  void BeginStop();
  size_t watcher_count();

  grpc::Service* media_service() { return media_service_.get(); }
  grpc::Service* vm_service() { return vm_service_.get(); }

 private:
  VmControl& control_;
  const ApiServerOptions options_;
  mutable absl::Mutex drives_mutex_;
  std::vector<DrivePtr> drives_ ABSL_GUARDED_BY(drives_mutex_);
  std::unique_ptr<grpc::Service> media_service_;
  std::unique_ptr<grpc::Service> vm_service_;

  absl::Mutex calls_mutex_;
  int calls_ ABSL_GUARDED_BY(calls_mutex_) = 0;

  absl::Mutex watchers_mutex_;
  std::set<WatchQueue*> watchers_ ABSL_GUARDED_BY(watchers_mutex_);
  bool stopping_ ABSL_GUARDED_BY(watchers_mutex_) = false;
};

// What the file must be to become a medium or a disk, before anything opens it (a FIFO would
// block the open): an existing, accessible regular file or block device. Errors lead with `verb`.
absl::Status CheckImageFile(absl::string_view verb, const std::string& path);

// The VMM's error opening an image, as the proto promises: NOT_FOUND, PERMISSION_DENIED or (for
// anything else, unless `keep_precondition` keeps FAILED_PRECONDITION: a disk image locked by
// another user) INVALID_ARGUMENT, led by the verb and the path: "insert: /srv/a.iso: no such file
// or directory".
absl::Status ImageError(absl::string_view verb, const std::string& path, const absl::Status& status,
                        bool keep_precondition = false);

// The path an insert or attach opens: a relative one is relative to the VMM's working directory
// (or to --media-dir, which resolves it itself), made absolute here so that the drive's source
// names the file for every reader, wherever they are (under --jail that directory is the jail's
// root). INVALID_ARGUMENT for an empty path, one with a NUL byte or one past PATH_MAX.
absl::StatusOr<std::string> RequestedPath(VmControl& control, absl::string_view verb,
                                          const std::string& requested);

// `status` with `what` in front of its message ("cd0: ...", "attach: ...").
absl::Status Prefixed(absl::string_view what, const absl::Status& status);

// The last LUN a disk may be attached at (SAM-5 flat addressing, as the SCSI target takes).
constexpr uint32_t kMaxLun = 16383;

// Reads the one request of a call. gRPC's own unary handler answers a request that does not
// parse (not protobuf, the wrong message, or a string field that is not UTF-8, which proto3
// forbids) with INTERNAL and an empty message: it is the caller's mistake, and says so here.
template <typename Stream, typename Request>
grpc::Status ReadRequest(Stream* stream, Request* request) {
  if (stream->Read(request)) return grpc::Status::OK;
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrFormat("malformed request: not a %s (its bytes do not parse as that message, or a "
                      "string field such as a path is not UTF-8; proto/vmm/v1/vmm.proto)",
                      Request::descriptor()->full_name()));
}

// A unary call: admitted (CallScope, token), its request read, `handler(request, response)`
// run, and its reply written if it succeeded.
template <typename Request, typename Response, typename Handler>
grpc::Status ServeUnary(ApiCore& core, grpc::ServerContext* context,
                        grpc::ServerUnaryStreamer<Request, Response>* stream, Handler handler) {
  const ApiCore::CallScope call(core);
  if (grpc::Status denied = core.Admit(*context); !denied.ok()) return denied;
  Request request;
  if (grpc::Status read = ReadRequest(stream, &request); !read.ok()) return read;
  Response response;
  grpc::Status status = handler(&request, &response);
  if (status.ok()) stream->Write(response);
  return status;
}

// The two services, for ApiCore to own.
std::unique_ptr<grpc::Service> MakeMediaService(ApiCore& core);
std::unique_ptr<grpc::Service> MakeVmService(ApiCore& core);

}  // namespace api

#endif  // API_API_CORE_H_

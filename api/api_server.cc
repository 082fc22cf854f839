#include "api/api_server.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/server_interceptor.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "api/api_token.h"
#include "api/host_path.h"
#include "api/listen_address.h"
#include "block/stats.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"
#include "vmm/sys_util/status_macros.h"

namespace api {
namespace {

namespace pb = ::vmm::v1;

// A graceful Shutdown's grace period when the request leaves it at 0 (vmm.proto).
constexpr absl::Duration kDefaultGracePeriod = absl::Milliseconds(5000);
// How long Stop() leaves the last replies to reach their clients before closing connections.
constexpr absl::Duration kReplySettle = absl::Milliseconds(20);
// How long past its deadline a server shutdown may take before the server is abandoned.
constexpr absl::Duration kAbandonAfter = absl::Seconds(1);
// How often a Watch stream waiting for events checks whether its client went away.
constexpr absl::Duration kWatchPollInterval = absl::Milliseconds(100);

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// The one authentication check (docs/api.md, "Authentication"): the call's "authorization"
// metadata against `token`; OK when no token is configured. UNAUTHENTICATED otherwise.
grpc::Status Authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  std::vector<absl::string_view> values;
  const auto [begin, end] = metadata.equal_range(kAuthorizationMetadataKey);
  for (auto it = begin; it != end; ++it) values.emplace_back(it->second.data(), it->second.size());
  return ToGrpc(CheckAuthorization(values, token));
}

// Services that are not ours (server reflection) are guarded here: each vmm.v1 handler checks
// its caller itself (ApiCore::Admit), which answers UNAUTHENTICATED; a server interceptor cannot
// answer a call, only cancel it, so an unauthenticated reflection call is cancelled (the client
// sees CANCELLED) before its handler reads a request or writes a reply.
class ForeignServiceGuard final : public grpc::experimental::Interceptor {
 public:
  ForeignServiceGuard(grpc::experimental::ServerRpcInfo* info, const std::string& token)
      : info_(info), token_(token) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      const auto* metadata = methods->GetRecvInitialMetadata();
      if (metadata == nullptr || !Authenticate(*metadata, token_).ok()) {
        // Before Proceed(): the handler starts only after it.
        info_->server_context()->TryCancel();
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string& token_;  // the ApiCore's options, which outlive the server
};

class ForeignServiceGuardFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ForeignServiceGuardFactory(const std::string& token) : token_(token) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (absl::StartsWith(info->method(), "/vmm.v1.")) return nullptr;
    // gRPC takes ownership of the interceptor (deleted with the call).
    return std::make_unique<ForeignServiceGuard>(info, token_).release();
  }

 private:
  const std::string& token_;
};

// A client-supplied string for an error message: cut to `max` bytes, control characters escaped
// (the rest, UTF-8 included, as is, so a path reads as the user typed it).
std::string Quote(const std::string& text, size_t max = 80) {
  std::string shown = "'";
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&shown, "\\x%02x", c);
    } else {
      shown.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > max) shown += "...";
  shown += "'";
  return shown;
}

// Paths that passed the PATH_MAX check are shown whole up to this (an error stays well under
// 4 KiB).
constexpr size_t kPathShown = 3072;

pb::MediaEvent::Type ToProto(block::MediaEventType type) {
  switch (type) {
    case block::MediaEventType::kInserted:
      return pb::MediaEvent::MEDIUM_INSERTED;
    case block::MediaEventType::kRemoved:
      return pb::MediaEvent::MEDIUM_REMOVED;
    case block::MediaEventType::kTrayOpened:
      return pb::MediaEvent::TRAY_OPENED;
    case block::MediaEventType::kTrayClosed:
      return pb::MediaEvent::TRAY_CLOSED;
    case block::MediaEventType::kLockChanged:
      return pb::MediaEvent::LOCK_CHANGED;
    case block::MediaEventType::kEjectRequested:
      return pb::MediaEvent::EJECT_REQUESTED;
  }
  return pb::MediaEvent::TYPE_UNSPECIFIED;
}

pb::VmInfo::State ToProto(VmRunState state) {
  switch (state) {
    case VmRunState::kRunning:
      return pb::VmInfo::RUNNING;
    case VmRunState::kPaused:
      return pb::VmInfo::PAUSED;
    case VmRunState::kStopping:
      return pb::VmInfo::STOPPING;
  }
  return pb::VmInfo::STATE_UNSPECIFIED;
}

void ToProto(const block::IoLimits& limits, pb::IoLimits* out) {
  out->set_iops(limits.iops);
  out->set_bytes_per_second(limits.bytes_per_second);
  out->set_iops_burst(limits.iops_burst);
  out->set_bytes_burst(limits.bytes_burst);
}

block::IoLimits FromProto(const pb::IoLimits& limits) {
  return {.iops = limits.iops(),
          .bytes_per_second = limits.bytes_per_second(),
          .iops_burst = limits.iops_burst(),
          .bytes_burst = limits.bytes_burst()};
}

// A drive's I/O limits and group, into its status.
void FillDriveLimits(const DriveEntry& drive, pb::DriveStatus* out) {
  if (drive.drive == nullptr) return;
  const block::IoLimits limits = drive.drive->limits();
  if (!limits.unlimited()) ToProto(limits, out->mutable_limits());
  if (const std::shared_ptr<block::Throttle> group = drive.drive->group()) {
    out->set_io_group(group->name());
  }
}

// A drive's status; for a CD-ROM from the media snapshot `state` (the current one if null).
void FillDriveStatus(const DriveEntry& drive, const block::MediaState* state,
                     pb::DriveStatus* out) {
  out->set_name(drive.name);
  out->set_kind(drive.cdrom ? pb::DriveStatus::CDROM : pb::DriveStatus::DISK);
  out->set_bus(drive.bus);
  out->set_address(drive.address);
  out->set_removable(drive.media != nullptr);
  if (drive.media == nullptr) {
    out->set_medium_present(true);
    out->set_size_bytes(drive.drive ? drive.drive->info().size_bytes : 0);
    out->set_source(drive.source);
    out->set_read_only(drive.read_only);
    out->set_cache_mode(drive.cache_mode);
    FillDriveLimits(drive, out);
    return;
  }
  std::shared_ptr<const block::MediaState> current;
  if (state == nullptr) {
    current = drive.media->Current();
    state = current.get();
  }
  out->set_medium_present(state->present);
  out->set_tray_open(state->tray_open);
  out->set_locked(state->locked);
  out->set_size_bytes(state->size_bytes());
  out->set_generation(state->generation);
  out->set_source(state->source);
  out->set_read_only(true);
  FillDriveLimits(drive, out);
}

void FillDriveStats(const DriveEntry& drive, pb::DriveStats* out) {
  out->set_drive(drive.name);
  if (drive.drive == nullptr) return;
  const block::StatsSnapshot stats = drive.drive->stats().Snapshot();
  out->set_read_requests(stats.read_requests);
  out->set_read_bytes(stats.read_bytes);
  out->set_write_requests(stats.write_requests);
  out->set_write_bytes(stats.write_bytes);
  out->set_flush_requests(stats.flush_requests);
  out->set_discard_requests(stats.discard_requests);
  out->set_errors(stats.errors);
  out->set_fua_native(stats.fua_native);
  out->set_fua_emulated(stats.fua_emulated);
  out->set_flushes_ignored(stats.flushes_ignored);
  out->set_latency_mean_us(stats.latency.MeanUs());
  out->set_latency_p50_us(stats.latency.PercentileUs(50));
  out->set_latency_p99_us(stats.latency.PercentileUs(99));
  out->set_latency_max_us(stats.latency.max_us);
  if (drive.host_probes) out->set_host_probes(drive.host_probes());
  out->set_throttled_requests(stats.throttled_requests);
  out->set_throttled_us(stats.throttled_us);
}

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
    queue_->Push({drive_, event.type, event.by_guest, event.state, absl::GetCurrentTimeNanos(),
                  nullptr});
  }

 private:
  const std::shared_ptr<const DriveEntry> drive_;
  WatchQueue* const queue_;
};

}  // namespace

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

namespace {

// What the file must be to become a medium or a disk, before anything opens it (a FIFO would
// block the open): an existing, accessible regular file or block device. Errors lead with `verb`.
absl::Status CheckImageFile(absl::string_view verb, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int error = errno;
    const std::string message =
        absl::StrFormat("%s: cannot use %s: %s", verb, Quote(path, kPathShown), strerror(error));
    switch (error) {
      case ENOENT:
      case ENOTDIR:
        return absl::NotFoundError(message);
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(message);
      default:
        return absl::InvalidArgumentError(message);
    }
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s is a directory, not an image", verb, Quote(path, kPathShown)));
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s is neither a regular file nor a block device", verb, Quote(path, kPathShown)));
  }
  return absl::OkStatus();
}

// The VMM's error opening an image, as the proto promises: NOT_FOUND, PERMISSION_DENIED or (for
// anything else, unless `keep_precondition` keeps FAILED_PRECONDITION: a disk image locked by
// another user) INVALID_ARGUMENT, led by the verb and the path: "insert: /srv/a.iso: no such file
// or directory".
absl::Status ImageError(absl::string_view verb, const std::string& path,
                        const absl::Status& status, bool keep_precondition = false) {
  absl::StatusCode code = status.code();
  if (code != absl::StatusCode::kNotFound && code != absl::StatusCode::kPermissionDenied &&
      !(keep_precondition && code == absl::StatusCode::kFailedPrecondition)) {
    code = absl::StatusCode::kInvalidArgument;
  }
  absl::string_view message = status.message();
  // The block layer's errno messages read "open PATH: ...": the path leads without the verb.
  if (absl::string_view rest = message;
      absl::ConsumePrefix(&rest, "open ") && absl::StartsWith(rest, path)) {
    message = rest;
  }
  if (absl::StartsWith(message, path)) return absl::Status(code, absl::StrCat(verb, ": ", message));
  return absl::Status(code,
                      absl::StrFormat("%s: %s: %s", verb, Quote(path, kPathShown), message));
}

// The path an insert or attach opens: a relative one is relative to the VMM's working directory
// (or to --media-dir, which resolves it itself), made absolute here so that the drive's source
// names the file for every reader, wherever they are (under --jail that directory is the jail's
// root). INVALID_ARGUMENT for an empty path, one with a NUL byte or one past PATH_MAX.
absl::StatusOr<std::string> RequestedPath(VmControl& control, absl::string_view verb,
                                          const std::string& requested) {
  if (requested.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(verb, ": the path of the image is empty"));
  }
  const bool as_given = control.MediaPathsConfined() || requested.find('\0') != std::string::npos;
  std::string path = as_given || requested[0] == '/' ? requested : AbsolutePath(requested);
  if (path.size() >= PATH_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the path %s is %d bytes long; the limit is %d (PATH_MAX)", verb,
                        Quote(path), path.size(), PATH_MAX - 1));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the path %s contains a NUL byte", verb, Quote(path)));
  }
  return path;
}

// `status` with `what` in front of its message ("cd0: ...", "attach: ...").
absl::Status Prefixed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrFormat("%s: %s", what, status.message()));
}

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
      return InvalidArgument(absl::StrFormat(
          "insert: format %s is not supported (only \"raw\": an ISO or raw image)",
          Quote(request->format())));
    }
    // Checked again, atomically, by RemovableMedia::Insert; here first so that the answer does not
    // depend on the file.
    const auto before = drive.media->Current();
    if (before->present) {
      return FailedPrecondition(absl::StrFormat(
          "%s already holds a medium (%s); eject it first", drive.name, before->source));
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
    const std::string source = path[0] == '/' || root.empty() ? path : absl::StrCat(root, "/", path);
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
      for (size_t i = 0; i < drives.size(); ++i) drives[i]->media->RemoveListener(listeners[i].get());
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
      return ToGrpc(absl::InvalidArgumentError(
          "set limits: name a drive or an --io-group (one of the two)"));
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
      return ToGrpc(absl::NotFoundError(absl::StrFormat(
          "no --io-group %s (this VM has: %s)", Quote(request->group()),
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
        return ToGrpc(absl::InvalidArgumentError(absl::StrFormat(
            "attach: LUN %d is past the last one, %d", request->lun(), kMaxLun)));
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
    absl::StatusOr<DriveEntry> entry = core_.control().AttachDisk(disk);
    if (!entry.ok()) {
      // The file's errors name it; the VM's (a name or LUN taken, no controller) say what.
      const absl::StatusCode code = entry.status().code();
      if (code == absl::StatusCode::kAlreadyExists || code == absl::StatusCode::kResourceExhausted ||
          code == absl::StatusCode::kUnimplemented ||
          absl::StrContains(entry.status().message(), "controller") ||
          absl::StrContains(entry.status().message(), "group")) {
        return ToGrpc(Prefixed("attach", entry.status()));
      }
      return ToGrpc(ImageError("attach", disk.path, entry.status(), /*keep_precondition=*/true));
    }
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

ApiCore::ApiCore(VmControl& control, const ApiServerOptions& options)
    : control_(control), options_(options) {
  for (DriveEntry& drive : control.Drives()) {
    drives_.push_back(std::make_shared<const DriveEntry>(std::move(drive)));
  }
  media_service_ = std::make_unique<MediaServiceImpl>(*this);
  vm_service_ = std::make_unique<VmServiceImpl>(*this);
}

std::vector<DrivePtr> ApiCore::drives() const {
  absl::MutexLock lock(&drives_mutex_);
  return drives_;
}

absl::StatusOr<DrivePtr> ApiCore::FindDrive(const std::string& name) const {
  if (name.empty()) return absl::InvalidArgumentError("no drive given (the drive field is empty)");
  absl::MutexLock lock(&drives_mutex_);
  std::vector<std::string> names;
  for (const DrivePtr& drive : drives_) {
    if (drive->name == name) return drive;
    names.push_back(drive->name);
  }
  return absl::NotFoundError(absl::StrFormat(
      "no drive %s (this VM has: %s)", Quote(name),
      names.empty() ? std::string("no drives") : absl::StrJoin(names, ", ")));
}

DrivePtr ApiCore::AddDrive(DriveEntry entry) {
  auto drive = std::make_shared<const DriveEntry>(std::move(entry));
  absl::MutexLock lock(&drives_mutex_);
  drives_.push_back(drive);
  return drive;
}

DrivePtr ApiCore::RemoveDrive(const std::string& name) {
  absl::MutexLock lock(&drives_mutex_);
  for (auto it = drives_.begin(); it != drives_.end(); ++it) {
    if ((*it)->name != name) continue;
    DrivePtr drive = std::move(*it);
    drives_.erase(it);
    return drive;
  }
  return nullptr;
}

void ApiCore::Publish(pb::MediaEvent event) {
  event.set_time_unix_nanos(absl::GetCurrentTimeNanos());
  auto ready = std::make_shared<const pb::MediaEvent>(std::move(event));
  absl::MutexLock lock(&watchers_mutex_);
  for (WatchQueue* watcher : watchers_) {
    if (watcher->drive().empty() || watcher->drive() == ready->drive()) {
      watcher->Push({nullptr, block::MediaEventType::kInserted, false, nullptr, 0, ready});
    }
  }
}

absl::StatusOr<DrivePtr> ApiCore::FindRemovable(const std::string& name) const {
  ASSIGN_OR_RETURN(DrivePtr drive, FindDrive(name));
  if (drive->media == nullptr) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s is a disk: it has no removable medium to insert, eject or watch", name));
  }
  return drive;
}

void ApiCore::FillVmInfo(pb::VmInfo* out) const {
  const VmStatus status = control_.Status();
  out->set_state(ToProto(status.state));
  out->set_vcpus(status.vcpus);
  out->set_memory_bytes(status.memory_bytes);
  out->set_kernel(status.kernel);
  out->set_cmdline(status.cmdline);
  out->set_uptime_ms(absl::ToInt64Milliseconds(status.uptime));
  out->set_pid(status.pid);
  out->set_media_dir(control_.MediaRoot());
  for (const DrivePtr& drive : drives()) FillDriveStatus(*drive, nullptr, out->add_drives());
}

void ApiCore::WaitForCalls(absl::Duration timeout) {
  absl::MutexLock lock(&calls_mutex_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(calls_mutex_) { return calls_ == 0; };
  calls_mutex_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

bool ApiCore::AddWatcher(WatchQueue* queue, grpc::Status* refusal) {
  absl::MutexLock lock(&watchers_mutex_);
  if (stopping_) {
    *refusal = grpc::Status(grpc::StatusCode::UNAVAILABLE, "the VMM is stopping");
    return false;
  }
  // A stream that fell behind is over, though its handler may stay blocked in Write() for as long
  // as its client neither reads nor goes away: it no longer takes a slot (H13 of
  // docs/security.md: 32 stopped clients refused every new Watch for good). It is cancelled, which ends it
  // at once if its client is merely slow.
  int open = 0;
  for (WatchQueue* watcher : watchers_) {
    if (watcher->overflowed()) {
      watcher->Cancel();
    } else {
      ++open;
    }
  }
  if (open >= options_.max_watchers) {
    *refusal = grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrFormat("too many watchers (at most %d at once)", options_.max_watchers));
    return false;
  }
  watchers_.insert(queue);
  return true;
}

void ApiCore::RemoveWatcher(WatchQueue* queue) {
  absl::MutexLock lock(&watchers_mutex_);
  watchers_.erase(queue);
}

void ApiCore::BeginStop() {
  absl::MutexLock lock(&watchers_mutex_);
  stopping_ = true;
  for (WatchQueue* queue : watchers_) queue->Close();
}

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                            VmControl& control) {
  if (options.unix_socket_path.empty() && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("the API server needs a unix socket path or a TCP address");
  }
  if (!options.auth_token.empty()) {
    RETURN_IF_ERROR(CheckApiToken(options.auth_token, "the API token"));
  }
  std::string tcp_address;
  if (!options.tcp_address.empty()) {
    if (options.auth_token.empty() && !options.tcp_insecure) {
      // H1 of docs/security.md: any local user could insert media and shut the VM down.
      return absl::FailedPreconditionError(absl::StrFormat(
          "--api-tcp %s without authentication: every local user could control the VM. Give "
          "--api-token-file=FILE (a secret only the VMM's user can read; clients send it, e.g. "
          "vmmctl --api-token-file=FILE), or accept the risk with --api-tcp-insecure",
          options.tcp_address));
    }
    ASSIGN_OR_RETURN(tcp_address,
                     ParseTcpListenAddress(options.tcp_address, options.tcp_listen_any));
  }
  // The unix socket is bound in a private directory and moved into place once it is mode 0600
  // (StagedUnixSocket): no process-wide umask while the VMM's other threads run.
  std::optional<StagedUnixSocket> staged_socket;
  if (!options.unix_socket_path.empty()) {
    // Labelled with its flag: errors read "--api-socket PATH: ..." (both binaries call it that).
    ASSIGN_OR_RETURN(staged_socket,
                     StagedUnixSocket::Create(options.unix_socket_path, "--api-socket"));
  }
  static std::once_flag reflection_once;
  std::call_once(reflection_once, [] { grpc::reflection::InitProtoReflectionServerBuilderPlugin(); });

  std::unique_ptr<ApiServer> server(new ApiServer());
  server->core_ = std::make_unique<ApiCore>(control, options);
  std::vector<std::string> where;
  // Linux nice values are per thread and inherited by the threads a thread creates. gRPC starts
  // its threads (timers, executors, the sync server's pollers and workers) from the thread that
  // first initializes it and from its own threads: build everything on a thread that lowered
  // its own priority, and all of them run at that priority. (Nothing else in the VMM uses gRPC.)
  std::thread starter([&] {
    if (options.thread_nice > 0) {
      const int tid = static_cast<int>(syscall(SYS_gettid));
      errno = 0;
      const int current = getpriority(PRIO_PROCESS, tid);
      if (errno == 0) {
        setpriority(PRIO_PROCESS, tid, std::min(current + options.thread_nice, 19));
      }
    }
    grpc::ServerBuilder builder;
    if (staged_socket.has_value()) {
      builder.AddListeningPort("unix:" + staged_socket->bind_path(),
                               grpc::InsecureServerCredentials());
      where.push_back("unix:" + options.unix_socket_path);
    }
    if (!tcp_address.empty()) {
      builder.AddListeningPort(tcp_address, grpc::InsecureServerCredentials(), &server->tcp_port_);
      where.push_back(tcp_address);
    }
    // gRPC sets SO_REUSEPORT on TCP listeners by default: a second VMM could then bind the same
    // port and take half of the connections. One port, one VMM.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // See ApiServerOptions::max_threads.
    grpc::ResourceQuota quota("microvm-api");
    quota.SetMaxThreads(options.max_threads);
    quota.Resize(options.max_memory_bytes);
    builder.SetResourceQuota(quota);
    builder.RegisterService(server->core_->media_service());
    builder.RegisterService(server->core_->vm_service());
    if (!server->core_->options().auth_token.empty()) {
      std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
      guards.push_back(
          std::make_unique<ForeignServiceGuardFactory>(server->core_->options().auth_token));
      builder.experimental().SetInterceptorCreators(std::move(guards));
    }
    server->server_ = builder.BuildAndStart();
  });
  starter.join();
  if (server->server_ == nullptr || (!tcp_address.empty() && server->tcp_port_ == 0)) {
    if (server->server_ != nullptr) server->server_->Shutdown();
    server->stopped_ = true;
    return absl::UnavailableError(absl::StrFormat(
        "cannot start the API server on %s (address in use, or no permission?)",
        absl::StrJoin(where, " and ")));
  }
  if (staged_socket.has_value()) {
    struct stat st {};
    if (absl::Status published = staged_socket->Publish(&st); !published.ok()) {
      server->Stop();  // the staged socket goes with its private directory
      return published;
    }
    server->unix_socket_path_ = options.unix_socket_path;
    server->socket_device_ = st.st_dev;
    server->socket_inode_ = st.st_ino;
  }
  return server;
}

size_t ApiCore::watcher_count() {
  absl::MutexLock lock(&watchers_mutex_);
  return watchers_.size();
}

size_t ApiServer::watcher_count() const { return core_ != nullptr ? core_->watcher_count() : 0; }

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const absl::Time deadline = absl::Now() + core_->options().stop_grace;
  core_->BeginStop();
  // Let the calls in progress finish and their replies (a Watch's final status, a Shutdown's
  // reply) reach the clients while the connections are still up: once gRPC has sent GOAWAY it
  // closes a connection as soon as its last stream is done, and a client that writes to it then
  // (a window update, a ping) fails its streams with UNAVAILABLE before reading their status.
  core_->WaitForCalls(core_->options().stop_grace);
  absl::SleepFor(kReplySettle);
  // A Watch whose client stopped reading stays blocked in Write() for as long as that client
  // lives: its bytes wait for room in the socket, and neither cancelling the call nor the
  // shutdown deadline completes the write (measured with gRPC 1.51: Shutdown() waited for ever,
  // H13 of docs/security.md). So the shutdown runs on a thread of its own, and if it has not
  // finished shortly after the deadline the server is abandoned: its threads, the core and the
  // drives they use stay allocated (and the plugin loaded) until the process exits, which the
  // VMM does next. Nothing else waits for them.
  auto finished = std::make_shared<absl::Notification>();
  grpc::Server* server = server_.get();
  const absl::Time shutdown_deadline = std::max(deadline, absl::Now());
  std::thread shutdown([server, shutdown_deadline, finished] {
    server->Shutdown(absl::ToChronoTime(shutdown_deadline));
    server->Wait();
    finished->Notify();
  });
  if (finished->WaitForNotificationWithDeadline(shutdown_deadline + kAbandonAfter)) {
    shutdown.join();
  } else {
    shutdown.detach();
    abandoned_ = true;
    [[maybe_unused]] grpc::Server* leaked_server = server_.release();
    [[maybe_unused]] ApiCore* leaked_core = core_.release();
#if defined(__SANITIZE_ADDRESS__)
    // Left on purpose (above): tell LeakSanitizer, which otherwise reports them once the stuck
    // shutdown thread has finished and nothing points at them any more.
    __lsan_ignore_object(leaked_server);
    __lsan_ignore_object(leaked_core);
#endif
  }
  if (!unix_socket_path_.empty()) {
    struct stat st {};
    if (lstat(unix_socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == socket_device_ && st.st_ino == socket_inode_) {
      unlink(unix_socket_path_.c_str());
    }
  }
}

}  // namespace api

#include "api/api_core.h"

#include <limits.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "api/api_token.h"
#include "block/stats.h"
#include "vmm/sys_util/host_path.h"
#include "vmm/sys_util/status_macros.h"

namespace api {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status Authenticate(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  std::vector<absl::string_view> values;
  const auto [begin, end] = metadata.equal_range(kAuthorizationMetadataKey);
  for (auto it = begin; it != end; ++it) values.emplace_back(it->second.data(), it->second.size());
  return ToGrpc(CheckAuthorization(values, token));
}

std::string Quote(const std::string& text, size_t max) {
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

void FillDriveLimits(const DriveEntry& drive, pb::DriveStatus* out) {
  if (drive.drive == nullptr) return;
  const block::IoLimits limits = drive.drive->limits();
  if (!limits.unlimited()) ToProto(limits, out->mutable_limits());
  if (const std::shared_ptr<block::Throttle> group = drive.drive->group()) {
    out->set_io_group(group->name());
  }
}

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

absl::Status ImageError(absl::string_view verb, const std::string& path, const absl::Status& status,
                        bool keep_precondition) {
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
  return absl::Status(code, absl::StrFormat("%s: %s: %s", verb, Quote(path, kPathShown), message));
}

absl::StatusOr<std::string> RequestedPath(VmControl& control, absl::string_view verb,
                                          const std::string& requested) {
  if (requested.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(verb, ": the path of the image is empty"));
  }
  const bool as_given = control.MediaPathsConfined() || requested.find('\0') != std::string::npos;
  std::string path =
      as_given || requested[0] == '/' ? requested : sys_util::AbsolutePath(requested);
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

absl::Status Prefixed(absl::string_view what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrFormat("%s: %s", what, status.message()));
}

ApiCore::ApiCore(VmControl& control, const ApiServerOptions& options)
    : control_(control), options_(options) {
  for (DriveEntry& drive : control.Drives()) {
    drives_.push_back(std::make_shared<const DriveEntry>(std::move(drive)));
  }
  media_service_ = MakeMediaService(*this);
  vm_service_ = MakeVmService(*this);
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
  return absl::NotFoundError(
      absl::StrFormat("no drive %s (this VM has: %s)", Quote(name),
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
  out->set_firmware(status.firmware);
  for (const std::string& name : status.boot_order) out->add_boot_order(name);
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

size_t ApiCore::watcher_count() {
  absl::MutexLock lock(&watchers_mutex_);
  return watchers_.size();
}

}  // namespace api

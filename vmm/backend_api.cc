#include "vmm/backend_api.h"

#include <unistd.h>

#include "absl/time/clock.h"
#include "vmm/vm_api.h"

namespace vmm {

BackendApiControl::BackendApiControl(const Storage& storage, std::string description,
                                     absl::Time launch_time, pid_t host_pid,
                                     absl::AnyInvocable<void()> stop,
                                     const MediaDirectory* media_dir)
    : storage_(storage),
      description_(std::move(description)),
      launch_time_(launch_time),
      host_pid_(host_pid),
      media_dir_(media_dir),
      stop_(std::move(stop)) {}

std::vector<api::DriveEntry> BackendApiControl::Drives() const { return DriveEntries(storage_); }

absl::StatusOr<std::shared_ptr<block::BlockBackend>> BackendApiControl::OpenMedium(
    const std::string& path) {
  const block::raw::RawFileOptions options = storage_.MediumFileOptions();
  if (media_dir_ != nullptr) return media_dir_->OpenMedium(path, options);
  return Storage::OpenMedium(path, options);
}

api::VmStatus BackendApiControl::Status() const {
  api::VmStatus status;
  status.state = stopping_.load() ? api::VmRunState::kStopping : api::VmRunState::kRunning;
  status.cmdline = description_;
  status.uptime = absl::Now() - launch_time_;
  status.pid = static_cast<uint32_t>(host_pid_);
  return status;
}

absl::Status BackendApiControl::Pause() {
  return absl::FailedPreconditionError(
      "a vhost-user back end has no vCPUs: pause the VM in its front end (QEMU: stop)");
}

absl::Status BackendApiControl::Resume() {
  return absl::FailedPreconditionError(
      "a vhost-user back end has no vCPUs: resume the VM in its front end (QEMU: cont)");
}

absl::Status BackendApiControl::Shutdown(bool /*force*/, absl::Duration /*grace_period*/) {
  // The front end owns the guest; the back end just stops serving (in-flight requests complete
  // first: the device is stopped, not abandoned).
  stopping_.store(true);
  absl::MutexLock lock(&mutex_);
  if (stop_) {
    auto stop = std::move(stop_);
    stop_ = nullptr;
    stop();
  }
  return absl::OkStatus();
}

}  // namespace vmm

#ifndef VMM_BACKEND_API_H_
#define VMM_BACKEND_API_H_

#include <atomic>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "api/vm_control.h"
#include "vmm/media_directory.h"
#include "vmm/storage.h"

namespace vmm {

// The control API's view of a vhost-user back end (api::VmControl): the drives and media the
// storage wired, changed through the block layer exactly as in the VMM. There are no vCPUs here
// (the front end runs the guest), so Pause/Resume are refused; Shutdown stops serving.
class BackendApiControl : public api::VmControl {
 public:
  // `storage` outlives this object; `stop` is called once, on the first Shutdown.
  // With `media_dir`, media come from that directory only (MediaDirectory); it must outlive this.
  // `host_pid`: the process's id as whoever started it sees it (SandboxFromFlags::supervised).
  BackendApiControl(const Storage& storage, std::string description, absl::Time launch_time,
                    pid_t host_pid, absl::AnyInvocable<void()> stop,
                    const MediaDirectory* media_dir = nullptr);

  std::vector<api::DriveEntry> Drives() const override;
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(const std::string& path) override;
  bool MediaPathsConfined() const override { return media_dir_ != nullptr; }
  std::string MediaRoot() const override { return media_dir_ != nullptr ? media_dir_->path() : ""; }
  std::map<std::string, std::shared_ptr<block::Throttle>> IoGroups() const override {
    return storage_.io_groups();
  }
  api::VmStatus Status() const override;
  absl::Status Pause() override;
  absl::Status Resume() override;
  absl::Status Shutdown(bool force, absl::Duration grace_period) override;

 private:
  const Storage& storage_;
  const std::string description_;
  const absl::Time launch_time_;
  const pid_t host_pid_;
  const MediaDirectory* const media_dir_;
  absl::Mutex mutex_;
  absl::AnyInvocable<void()> stop_ ABSL_GUARDED_BY(mutex_);
  std::atomic<bool> stopping_{false};
};

}  // namespace vmm

#endif  // VMM_BACKEND_API_H_

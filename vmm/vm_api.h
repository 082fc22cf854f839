#ifndef VMM_VM_API_H_
#define VMM_VM_API_H_

#include <memory>
#include <string>
#include <vector>

#include "api/vm_control.h"
#include "vmm/media_directory.h"
#include "vmm/vm.h"

namespace vmm {

// The API's entry for one drive, and for every drive `storage` wired, in its order.
api::DriveEntry DriveEntryOf(const AttachedDrive& attached);
std::vector<api::DriveEntry> DriveEntries(const Storage& storage);

// The control API's view of a Vm (api::VmControl): its drives as the storage wired them, media
// opened as Storage::OpenMedium does, pause/resume/stop through the Vm. The Vm must outlive it.
class VmApiControl : public api::VmControl {
 public:
  // With `media_dir`, media come from that directory only (MediaDirectory); it must outlive this.
  explicit VmApiControl(Vm& vm, const MediaDirectory* media_dir = nullptr)
      : vm_(vm), media_dir_(media_dir) {}

  std::vector<api::DriveEntry> Drives() const override;
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(const std::string& path) override;
  bool MediaPathsConfined() const override { return media_dir_ != nullptr; }
  std::string MediaRoot() const override { return media_dir_ != nullptr ? media_dir_->path() : ""; }
  std::map<std::string, std::shared_ptr<block::Throttle>> IoGroups() const override {
    return vm_.storage().io_groups();
  }
  absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> OpenDiskImage(
      const api::DiskAttachment& disk) override;
  absl::StatusOr<api::DriveEntry> AttachDisk(
      const api::DiskAttachment& disk, std::shared_ptr<block::raw::RawFileBackend> image) override;
  absl::Status DetachDisk(const std::string& name) override;
  absl::StatusOr<uint64_t> ResizeDisk(const std::string& name,
                                      std::optional<uint64_t> size_bytes) override {
    return vm_.storage().ResizeDisk(name, size_bytes);
  }
  api::VmStatus Status() const override;
  absl::Status Pause() override { return vm_.Pause(); }
  absl::Status Resume() override { return vm_.Resume(); }
  absl::Status Reset() override { return vm_.RequestReset(); }
  absl::Status SetBootOrder(const std::vector<std::string>& drives) override {
    return vm_.SetBootOrder(drives);
  }
  absl::Status Shutdown(bool force, absl::Duration grace_period) override;

 private:
  Vm& vm_;
  const MediaDirectory* const media_dir_;
};

}  // namespace vmm

#endif  // VMM_VM_API_H_

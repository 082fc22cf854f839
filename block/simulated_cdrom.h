#ifndef BLOCK_SIMULATED_CDROM_H_
#define BLOCK_SIMULATED_CDROM_H_

#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "block/host_cdrom.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block {

// A host optical drive simulated over an ISO file, for benchmarks and tests of the host CD-ROM
// path where no /dev/sr* exists: every status probe takes `probe_delay` (a real drive answers a
// TEST UNIT READY in milliseconds) and is counted. Served through HostCdrom, it shows that the I/O
// path never probes: the count stays where Refresh() left it however much the guest reads.
class SimulatedCdromDevice : public CdromDevice {
 public:
  SimulatedCdromDevice(std::string iso_path, std::chrono::microseconds probe_delay)
      : path_(std::move(iso_path)), probe_delay_(probe_delay) {}

  const std::string& path() const override { return path_; }
  std::string kernel_name() const override { return "sim0"; }
  absl::StatusOr<HostDriveStatus> DriveStatus() override {
    Probe();
    return HostDriveStatus::kDiscOk;
  }
  absl::StatusOr<uint64_t> CapacityBytes() override {
    Probe();
    struct stat st {};
    if (stat(path_.c_str(), &st) != 0) return sys_util::ErrnoStatus(errno, path_);
    return static_cast<uint64_t>(st.st_size);
  }
  absl::Status LockDoor(bool) override { return absl::OkStatus(); }
  absl::Status Eject() override { return absl::OkStatus(); }
  absl::Status CloseTray() override { return absl::OkStatus(); }

  // Probes so far (DriveStatus and CapacityBytes calls). Thread-safe.
  uint64_t probes() const { return probes_.load(); }

 private:
  void Probe() {
    probes_.fetch_add(1);
    std::this_thread::sleep_for(probe_delay_);
  }

  const std::string path_;
  const std::chrono::microseconds probe_delay_;
  std::atomic<uint64_t> probes_{0};
};

}  // namespace block

#endif  // BLOCK_SIMULATED_CDROM_H_

#ifndef DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_H_
#define DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/iothread.h"
#include "devices/scsi/target.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/sys_util/rate_limited_log.h"

namespace devices::virtio::scsi {

struct VirtioScsiOptions {
  // Request queues (virtio 1.2 §5.6.4 num_queues); queues 0 and 1 are control and event.
  uint32_t num_request_queues = 1;
  // The iothreads serving the queues, 1 to 64, started by the assembly (devices::StartIoThreads:
  // the device starts no thread of its own). Request queue i runs on
  // iothreads[queue_to_iothread[i]] when given (QEMU's iothread-vq-mapping), else on
  // iothreads[i % size]. The control and event queues run on iothreads[0]. A thread whose
  // poll_max_ns is not 0 also polls its request queues' avail rings before it sleeps.
  std::vector<std::shared_ptr<IoThread>> iothreads;
  std::vector<uint32_t> queue_to_iothread;
  uint16_t queue_size = 256;
  // Where the errors a guest can cause at will go (a queue broken by the driver), rate-limited.
  sys_util::LogOptions guest_error_log;
};

// A virtio-scsi host adapter (virtio 1.2 §5.6) in front of SCSI targets. Each request queue is
// served on its iothread: the queue's notify eventfd (an ioeventfd: no VM exit reaches the VMM)
// and the targets' block completion fds are in that thread's epoll set, completions are pushed to
// the used ring there and signalled with the queue's MSI-X vector (irqfd). Nothing on that path
// takes a lock. A guest that breaks the ring rules gets DEVICE_NEEDS_RESET; malformed requests
// whose response buffer is usable get a virtio-scsi error response and the device goes on.
class VirtioScsi : public VirtioDevice {
 public:
  static absl::StatusOr<std::unique_ptr<VirtioScsi>> Create(
      VirtioScsiOptions options, std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets);
  ~VirtioScsi() override;

  uint32_t device_type() const override { return kDeviceTypeScsi; }
  uint64_t device_features() const override { return 0; }
  std::vector<uint16_t> queue_max_sizes() const override;
  uint32_t config_size() const override;
  void ReadConfig(uint32_t offset, std::span<uint8_t> data) override;
  void WriteConfig(uint32_t offset, std::span<const uint8_t> data) override;
  absl::Status Activate(VirtioActivation activation) override;
  void Reset() override;
  // Completes every command in flight and stops the queues; the targets keep their state (no
  // unit attention, unlike Reset()).
  void Stop() override;

  const VirtioScsiOptions& options() const { return options_; }

  class RequestWorker;
  class ControlWorker;
  struct ThreadState;

 private:
  VirtioScsi(VirtioScsiOptions options,
             std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets);
  // Activate()'s set-up of every thread and queue; StopWorkers() undoes a partial one.
  absl::Status AttachQueues(const VirtioActivation& activation);
  // Stops every worker: waits for their commands in flight, unregisters their fds.
  void StopWorkers();
  // Completes every command in flight on every iothread (for task management functions).
  void DrainAllRequests();
  uint32_t IothreadFor(uint32_t request_queue) const;

  const VirtioScsiOptions options_;
  sys_util::RateLimitedLog guest_errors_{"virtio-scsi", options_.guest_error_log};
  const std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets_;
  // One per iothread; touched only on its iothread once activated.
  std::vector<std::unique_ptr<ThreadState>> thread_states_;

  std::atomic<uint32_t> sense_size_;
  std::atomic<uint32_t> cdb_size_;
  // Activate() and Reset() are serialized by the transport (VirtioDevice's contract).
  bool active_ = false;
};

}  // namespace devices::virtio::scsi

#endif  // DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_H_

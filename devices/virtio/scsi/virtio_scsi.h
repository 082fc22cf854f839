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
#include "devices/virtio/scsi/wire.h"
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

class VirtioScsi;

// Changes the logical units of a controller while the guest runs (hot-plug): the assembly keeps
// it (VirtioScsi::hotplug()) and it stays valid after the device is gone, when its calls change
// the targets alone. Its lock also serializes the device's activation, reset and stop, so a unit
// is never half in the queues. Thread-safe; not to be called from an iothread.
class ScsiHotplug {
 public:
  // Adds `unit` at `target`:`lun` on every queue, then tells the guest: REPORTED LUNS DATA HAS
  // CHANGED on the target's other units (SPC-4), and a TRANSPORT_RESET event with reason RESCAN
  // (virtio 1.2 §5.6.6.3.1) when the driver took VIRTIO_SCSI_F_HOTPLUG, upon which Linux scans
  // that LUN. NotFound for a target the controller does not have, AlreadyExists for a LUN in use.
  absl::Status Attach(uint8_t target, uint16_t lun,
                      std::shared_ptr<devices::scsi::LogicalUnit> unit);
  // Takes the unit at `target`:`lun` out: new commands to it get LOGICAL UNIT NOT SUPPORTED, the
  // commands it has in flight complete first (on each queue's iothread: nothing is cancelled or
  // lost), then the guest is told as for Attach (reason REMOVED). Returns the unit; NotFound if
  // there is none.
  absl::StatusOr<std::shared_ptr<devices::scsi::LogicalUnit>> Detach(uint8_t target, uint16_t lun);
  // The unit's drive was resized: the unit takes its new capacity (LogicalUnit::CapacityChanged,
  // a unit attention), and a PARAM_CHANGE event carrying CAPACITY DATA HAS CHANGED (2Ah/09h) goes
  // to the driver when it took VIRTIO_SCSI_F_CHANGE, upon which Linux re-reads the capacity.
  void CapacityChanged(uint8_t target, uint16_t lun);

 private:
  friend class VirtioScsi;
  struct Key {
    explicit Key() = default;
  };

 public:
  ScsiHotplug(Key, std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets)
      : targets_(std::move(targets)) {}

 private:
  absl::Mutex mutex_;
  VirtioScsi* device_ ABSL_GUARDED_BY(mutex_) = nullptr;
  const std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets_;
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
  uint64_t device_features() const override { return kFeatureHotplug | kFeatureChange; }
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
  // For changing the units while the guest runs.
  const std::shared_ptr<ScsiHotplug>& hotplug() const { return hotplug_; }

  class RequestWorker;
  class QueueWorker;
  class ControlWorker;
  class EventWorker;
  struct ThreadState;

 private:
  friend class ScsiHotplug;
  VirtioScsi(VirtioScsiOptions options,
             std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets);
  // Activate()'s set-up of every thread and queue; StopWorkers() undoes a partial one.
  absl::Status AttachQueues(const VirtioActivation& activation);
  // Stops every worker: waits for their commands in flight, unregisters their fds.
  void StopWorkers();
  // Completes every command in flight on every iothread (for task management functions).
  void DrainAllRequests();
  uint32_t IothreadFor(uint32_t request_queue) const;
  // ScsiHotplug's work on the queues, under its lock: a unit into (or out of, after draining it)
  // every thread's target queue; an event to the driver.
  absl::Status AddUnitToQueues(uint8_t target, uint16_t lun,
                               const std::shared_ptr<devices::scsi::LogicalUnit>& unit);
  void RemoveUnitFromQueues(uint8_t target, uint16_t lun);
  void SendEvent(uint32_t event, uint8_t target, uint16_t lun, uint32_t reason);

  const VirtioScsiOptions options_;
  sys_util::RateLimitedLog guest_errors_{"virtio-scsi", options_.guest_error_log};
  const std::map<uint8_t, std::shared_ptr<devices::scsi::Target>> targets_;
  const std::shared_ptr<ScsiHotplug> hotplug_;
  // One per iothread; touched only on its iothread once activated.
  std::vector<std::unique_ptr<ThreadState>> thread_states_;

  std::atomic<uint32_t> sense_size_;
  std::atomic<uint32_t> cdb_size_;
  // Activate(), Reset() and Stop() are serialized by the transport (VirtioDevice's contract) and
  // with hot-plug by hotplug_->mutex_, which they hold.
  bool active_ = false;
  uint64_t features_ = 0;  // negotiated at activation
};

}  // namespace devices::virtio::scsi

#endif  // DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_H_

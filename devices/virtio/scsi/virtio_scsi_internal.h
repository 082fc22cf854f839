#ifndef DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_INTERNAL_H_
#define DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_INTERNAL_H_

// The insides virtio_scsi.cc (the queues) and virtio_scsi_hotplug.cc (units coming and going, the
// event queue) share. Not for use outside //devices/virtio/scsi.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "devices/iothread.h"
#include "devices/scsi/iovec_util.h"
#include "devices/scsi/target.h"
#include "devices/virtio/scsi/virtio_scsi.h"
#include "devices/virtio/scsi/wire.h"
#include "devices/virtio/split_queue.h"
#include "vmm/sys_util/eventfd.h"

namespace devices::virtio::scsi {

namespace sc = ::devices::scsi;

// Everything of one activation that lives on one iothread.
struct VirtioScsi::ThreadState {
  IoThread* thread = nullptr;
  std::map<uint8_t, std::unique_ptr<sc::TargetQueue>> target_queues;
  std::vector<std::unique_ptr<RequestWorker>> workers;
  std::unique_ptr<ControlWorker> control;
  std::unique_ptr<EventWorker> event;  // iothread 0's, once the driver enabled the event queue
  std::vector<int> fds;                // registered with the thread
  std::vector<int> pollers;

  void SubmitAll() {
    for (auto& [id, queue] : target_queues) queue->Submit();
  }
  size_t InFlight() const {
    size_t total = 0;
    for (const auto& [id, queue] : target_queues) total += queue->in_flight();
    return total;
  }
  void ProcessCompletions();
  // Signals every request queue that pushed used entries since its last interrupt.
  void FlushInterrupts();
  // Waits (on this thread) until no command is in flight.
  void Drain();

  // Set-up at activation, each run on this thread. A failure leaves what was set up registered
  // in `fds` and `pollers`, for StopWorkers() to undo.
  absl::Status OpenTargetQueues(const std::map<uint8_t, std::shared_ptr<sc::Target>>& targets);
  absl::Status WatchNotify(int notify_fd, absl::AnyInvocable<void()> on_notify);
  absl::Status AttachControlQueue(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
                                  VirtioDeviceEvents* events);
  absl::Status AttachRequestQueue(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
                                  VirtioDeviceEvents* events);
  absl::Status AttachEventQueue(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
                                VirtioDeviceEvents* events);

  // Hot-plug, on this thread: the unit's queue made and its completions watched; or taken out of
  // dispatch, drained (its commands complete and are answered) and dropped.
  absl::Status AddUnit(uint8_t target, uint16_t lun, std::shared_ptr<sc::LogicalUnit> unit);
  void RemoveUnit(uint8_t target, uint16_t lun);
};

// What the control and event queues' workers share: the ring, its interrupt and doorbell, the
// device's event sink, and the broken state a driver that breaks the ring rules puts the queue in
// (DEVICE_NEEDS_RESET, §2.1.2; the queue is left alone until the reset).
class VirtioScsi::QueueWorker {
 public:
  int notify_fd() const { return notify_fd_; }

 protected:
  QueueWorker(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
              VirtioDeviceEvents* events, const char* name)
      : device_(device),
        queue_(std::move(queue)),
        interrupt_(spec.interrupt),
        notify_fd_(spec.notify_fd),
        events_(events),
        name_(name) {}

  void Break(absl::string_view why) {
    broken_ = true;
    device_.guest_errors_.Warning("the %s needs a reset: %s", name_, why);
    events_->NeedsReset();
  }

  VirtioScsi& device_;
  SplitQueue queue_;
  VirtioInterrupt* const interrupt_;
  const int notify_fd_;
  VirtioDeviceEvents* const events_;
  const char* const name_;  // "control queue", "event queue"
  bool broken_ = false;
};

// The event queue (§5.6.6.3), on iothread 0: the driver keeps device-writable buffers there, and
// the device fills one per event it has. An event with no buffer to carry it is dropped and the
// next one delivered says so (VIRTIO_SCSI_T_EVENTS_MISSED), as soon as the driver adds a buffer:
// Linux then rescans the whole host.
class VirtioScsi::EventWorker : public QueueWorker {
 public:
  EventWorker(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
              VirtioDeviceEvents* events)
      : QueueWorker(device, std::move(queue), spec, events, "event queue") {}

  // The driver made buffers available: only a missed event needs one now.
  void OnNotify() {
    sys_util::DrainEventFd(notify_fd_);
    if (missed_) Send(Event{kEventNoEvent, {}, 0});
  }

  void Send(Event event) {
    if (broken_) return;
    while (true) {
      absl::StatusOr<std::optional<DescriptorChain>> chain = queue_.Pop();
      if (!chain.ok()) {
        Break(chain.status().message());
        return;
      }
      if (chain->has_value()) {
        Deliver(**chain, event);
        return;
      }
      // No buffer: ask for a notification when one comes, unless one came meanwhile.
      if (!queue_.EnableNotifications()) {
        missed_ = true;
        return;
      }
    }
  }

 private:
  void Deliver(const DescriptorChain& chain, Event event) {
    if (chain.writable_bytes < sizeof(Event)) {
      // §5.6.6.3: event buffers are at least event_info_size (16) bytes, device-writable.
      Break(absl::StrFormat("an event buffer of %u writable bytes, need %u", chain.writable_bytes,
                            sizeof(Event)));
      return;
    }
    if (missed_) event.event |= kEventsMissed;
    missed_ = false;
    sc::ScatterTo(chain.writable, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&event),
                                                           sizeof(event)));
    if (absl::Status pushed = queue_.PushUsed(chain.head, sizeof(event)); !pushed.ok()) {
      Break(pushed.message());
      return;
    }
    if (queue_.ShouldInterrupt()) interrupt_->Signal();
  }

  bool missed_ = false;
};

// Runs `set_up` on `thread` (a device's state there is touched only there) and returns its status.
inline absl::Status OnThread(IoThread& thread, absl::AnyInvocable<absl::Status()> set_up) {
  absl::Status status;
  thread.RunSync([&] { status = set_up(); });
  return status;
}

}  // namespace devices::virtio::scsi

#endif  // DEVICES_VIRTIO_SCSI_VIRTIO_SCSI_INTERNAL_H_

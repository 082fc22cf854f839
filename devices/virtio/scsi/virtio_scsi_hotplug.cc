// Units attached to and detached from a running controller, and the event queue that tells the
// driver (virtio 1.2 §5.6.6.3): docs/virtio-scsi.md, "Hot-plug".
#include <poll.h>

#include <algorithm>
#include <memory>
#include <utility>

#include "devices/scsi/lun.h"
#include "devices/virtio/scsi/virtio_scsi.h"
#include "devices/virtio/scsi/virtio_scsi_internal.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::virtio::scsi {

absl::Status VirtioScsi::ThreadState::AddUnit(uint8_t target, uint16_t lun,
                                              std::shared_ptr<sc::LogicalUnit> unit) {
  auto queue = target_queues.find(target);
  if (queue == target_queues.end()) return absl::OkStatus();  // not active on this thread
  ASSIGN_OR_RETURN(const int fd, queue->second->AddUnit(lun, std::move(unit)));
  if (absl::Status watched = thread->AddFd(fd, [this] { ProcessCompletions(); }); !watched.ok()) {
    queue->second->TakeUnit(lun);
    return watched;
  }
  fds.push_back(fd);
  return absl::OkStatus();
}

void VirtioScsi::ThreadState::RemoveUnit(uint8_t target, uint16_t lun) {
  auto target_queue = target_queues.find(target);
  if (target_queue == target_queues.end()) return;
  std::unique_ptr<sc::LuQueue> queue = target_queue->second->TakeUnit(lun);
  if (queue == nullptr) return;
  // Every command the unit has in flight completes and is answered before its queue goes, so no
  // write the guest was told of is lost; limited requests still wait for their budget (the
  // assembly lifts the drive's limits before it detaches).
  queue->Submit();
  while (queue->in_flight() > 0) {
    pollfd ready{queue->completion_fd(), POLLIN, 0};
    poll(&ready, 1, 100);
    queue->ProcessCompletions();
  }
  FlushInterrupts();
  const int fd = queue->completion_fd();
  thread->RemoveFd(fd);
  fds.erase(std::remove(fds.begin(), fds.end(), fd), fds.end());
}

absl::Status VirtioScsi::ThreadState::AttachEventQueue(VirtioScsi& device, SplitQueue queue,
                                                       const VirtioQueue& spec,
                                                       VirtioDeviceEvents* events) {
  event = std::make_unique<EventWorker>(device, std::move(queue), spec, events);
  return WatchNotify(spec.notify_fd, [worker = event.get()] { worker->OnNotify(); });
}

absl::Status VirtioScsi::AddUnitToQueues(uint8_t target, uint16_t lun,
                                         const std::shared_ptr<sc::LogicalUnit>& unit) {
  if (!active_) return absl::OkStatus();  // the next activation starts from the targets
  for (size_t i = 0; i < thread_states_.size(); ++i) {
    ThreadState* state = thread_states_[i].get();
    absl::Status added =
        OnThread(*state->thread, [&] { return state->AddUnit(target, lun, unit); });
    if (!added.ok()) {
      for (size_t j = 0; j < i; ++j) {
        ThreadState* undo = thread_states_[j].get();
        undo->thread->RunSync([&] { undo->RemoveUnit(target, lun); });
      }
      return added;
    }
  }
  return absl::OkStatus();
}

void VirtioScsi::RemoveUnitFromQueues(uint8_t target, uint16_t lun) {
  if (!active_) return;
  for (const std::unique_ptr<ThreadState>& state_ptr : thread_states_) {
    ThreadState* state = state_ptr.get();
    state->thread->RunSync([&] { state->RemoveUnit(target, lun); });
  }
}

void VirtioScsi::SendEvent(uint32_t event, uint8_t target, uint16_t lun, uint32_t reason) {
  if (!active_) return;  // the driver scans when it starts
  const uint64_t needed = event == kEventParamChange ? kFeatureChange : kFeatureHotplug;
  if ((features_ & needed) == 0) return;  // §5.6.6.3: only what the driver negotiated
  Event out{};
  out.event = event;
  const uint64_t address = sc::EncodeLun(lun);
  out.lun[0] = 1;
  out.lun[1] = target;
  out.lun[2] = static_cast<uint8_t>(address >> 56);
  out.lun[3] = static_cast<uint8_t>(address >> 48);
  out.reason = reason;
  ThreadState* state = thread_states_[0].get();
  state->thread->RunSync([state, out] {
    if (state->event != nullptr) state->event->Send(out);
  });
}

absl::Status ScsiHotplug::Attach(uint8_t target, uint16_t lun,
                                 std::shared_ptr<sc::LogicalUnit> unit) {
  absl::MutexLock lock(&mutex_);
  const auto found = targets_.find(target);
  if (found == targets_.end()) {
    return absl::NotFoundError(absl::StrFormat("the controller has no target %d", target));
  }
  RETURN_IF_ERROR(found->second->AddLogicalUnit(lun, unit));
  if (device_ != nullptr) {
    if (absl::Status added = device_->AddUnitToQueues(target, lun, unit); !added.ok()) {
      (void)found->second->RemoveLogicalUnit(lun);
      return added;
    }
  }
  // The unit attention first, then the event, so the scan the event starts finds it.
  found->second->ReportLunsChanged(lun);
  if (device_ != nullptr) device_->SendEvent(kEventTransportReset, target, lun, kResetRescan);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<sc::LogicalUnit>> ScsiHotplug::Detach(uint8_t target, uint16_t lun) {
  absl::MutexLock lock(&mutex_);
  const auto found = targets_.find(target);
  if (found == targets_.end()) {
    return absl::NotFoundError(absl::StrFormat("the controller has no target %d", target));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<sc::LogicalUnit> unit, found->second->RemoveLogicalUnit(lun));
  if (device_ != nullptr) device_->RemoveUnitFromQueues(target, lun);
  found->second->ReportLunsChanged();
  if (device_ != nullptr) device_->SendEvent(kEventTransportReset, target, lun, kResetRemoved);
  return unit;
}

void ScsiHotplug::CapacityChanged(uint8_t target, uint16_t lun) {
  absl::MutexLock lock(&mutex_);
  const auto found = targets_.find(target);
  if (found == targets_.end()) return;
  if (std::shared_ptr<sc::LogicalUnit> unit = found->second->Find(lun)) unit->CapacityChanged();
  // The reason carries the sense code: ASC in the low byte, ASCQ in the next (§5.6.6.3.2).
  constexpr uint32_t kCapacityDataHasChanged = 0x2a | (0x09 << 8);
  if (device_ != nullptr) {
    device_->SendEvent(kEventParamChange, target, lun, kCapacityDataHasChanged);
  }
}

}  // namespace devices::virtio::scsi

#include "devices/virtio/scsi/virtio_scsi.h"

#include <poll.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "devices/scsi/iovec_util.h"
#include "devices/scsi/lun.h"
#include "devices/virtio/scsi/virtio_scsi_internal.h"
#include "devices/virtio/scsi/wire.h"
#include "devices/virtio/split_queue.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::virtio::scsi {

namespace sc = ::devices::scsi;

namespace {

// The largest sense and CDB sizes a driver may set (§5.6.4; QEMU's limits). Larger writes are
// ignored. Within them the request layout always follows the driver's sizes: a CDB longer than
// the target reads (sc::kMaxCdbSize) or a sense area longer than the sense data is skipped over,
// never taken as data.
constexpr uint32_t kMaxConfigCdbSize = 255;
constexpr uint32_t kMaxConfigSenseSize = 65535;
constexpr uint16_t kControlQueueSize = 128;

// Splits `buffers` after `prefix` bytes: the first part into `head`, the rest into `tail`.
// Requires TotalLength(buffers) >= prefix.
void SplitAt(std::span<const iovec> buffers, uint64_t prefix, std::vector<iovec>* head,
             std::vector<iovec>* tail) {
  head->clear();
  tail->clear();
  for (const iovec& buffer : buffers) {
    if (prefix >= buffer.iov_len) {
      if (buffer.iov_len != 0) head->push_back(buffer);
      prefix -= buffer.iov_len;
      continue;
    }
    if (prefix > 0) {
      head->push_back({buffer.iov_base, prefix});
      tail->push_back({static_cast<uint8_t*>(buffer.iov_base) + prefix, buffer.iov_len - prefix});
      prefix = 0;
      continue;
    }
    tail->push_back(buffer);
  }
}

}  // namespace

// ThreadState and EventWorker: virtio_scsi_internal.h.

// One request queue (§5.6.6).
class VirtioScsi::RequestWorker {
 public:
  RequestWorker(VirtioScsi& device, ThreadState& state, SplitQueue queue, const VirtioQueue& spec,
                VirtioDeviceEvents* events)
      : device_(device),
        state_(state),
        queue_(std::move(queue)),
        interrupt_(spec.interrupt),
        notify_fd_(spec.notify_fd),
        events_(events),
        slots_(queue_.size()) {
    for (Slot& slot : slots_) {
      slot.worker = this;
      slot.task.user_data = &slot;
    }
  }

  int notify_fd() const { return notify_fd_; }

  void OnNotify() {
    sys_util::DrainEventFd(notify_fd_);
    ProcessAvailable();
  }

  // Pops and starts every available request; true if there was any.
  bool ProcessAvailable() {
    if (broken_) return false;
    bool progress = false;
    while (true) {
      if (!polling_) queue_.DisableNotifications();
      while (true) {
        absl::StatusOr<std::optional<DescriptorChain>> chain = queue_.Pop();
        if (!chain.ok()) Break(chain.status().message());
        if (broken_ || !chain->has_value()) break;
        progress = true;
        Start(**chain);
        if (broken_) break;
      }
      // While the iothread polls, notifications stay off (EndPolling turns them back on).
      if (broken_ || polling_ || !queue_.EnableNotifications()) break;
    }
    // Commands started before a break still go out: they complete, and are dropped (Complete()).
    if (progress) state_.SubmitAll();
    FlushInterrupt();
    return progress;
  }

  // TargetQueue's completion handler: back to the worker that owns the task's slot.
  static void OnTaskComplete(sc::Task& task) {
    static_cast<Slot*>(task.user_data)->worker->Complete(task);
  }

  // A command finished.
  void Complete(sc::Task& task) {
    Slot& slot = *static_cast<Slot*>(task.user_data);
    if (broken_) {
      // After DEVICE_NEEDS_RESET the device must not touch the queue (§2.1.2).
      slot.busy = false;
      return;
    }
    const uint32_t sense_size = slot.sense_size;
    if (task.overrun()) {
      // The command needed more buffer than the driver gave: QEMU answers VIRTIO_SCSI_S_OVERRUN
      // (§5.6.6.1), and Linux turns it into DID_ERROR.
      RespondError(slot, kResponseOverrun);
      return;
    }
    CommandResponse response{};
    response.status = static_cast<uint8_t>(task.status());
    response.response = kResponseOk;
    const bool has_sense = task.status() != sc::Status::kGood;
    const auto sense = task.sense_data();
    response.sense_len = has_sense ? std::min<uint32_t>(sense_size, sense.size()) : 0;
    const uint64_t residual =
        !slot.data_in.empty() ? task.data_in_residual() : task.data_out_residual();
    response.residual = static_cast<uint32_t>(std::min<uint64_t>(residual, UINT32_MAX));
    const uint64_t data_in_written = sc::TotalLength(slot.data_in) - task.data_in_residual();
    Respond(slot, response, std::span<const uint8_t>(sense.data(), response.sense_len),
            data_in_written);
  }

  // The iothread's polling phase (IoThread::AddPoller's hooks): the driver need not kick while
  // the avail ring is being polled (virtio 1.2 §2.7.10, as QEMU's virtio_queue_aio_poll_begin).
  void BeginPolling() {
    if (broken_) return;
    polling_ = true;
    queue_.DisableNotifications();
  }
  // Notifications on again; true if buffers arrived while they were off.
  bool EndPolling() {
    polling_ = false;
    if (broken_) return false;
    return queue_.EnableNotifications();
  }

  void FlushInterrupt() {
    if (pushed_ && queue_.ShouldInterrupt()) interrupt_->Signal();
    pushed_ = false;
  }

 private:
  struct Slot {
    RequestWorker* worker = nullptr;
    sc::Task task;
    bool busy = false;
    uint16_t head = 0;
    uint32_t sense_size = kDefaultSenseSize;
    std::vector<iovec> header;    // readable: CommandHeader + CDB
    std::vector<iovec> data_out;  // readable rest
    std::vector<iovec> response;  // writable: CommandResponse + sense
    std::vector<iovec> data_in;   // writable rest
  };

  void Break(absl::string_view why) {
    broken_ = true;
    device_.guest_errors_.Warning("a request queue needs a reset: %s", why);
    events_->NeedsReset();
  }

  void Start(const DescriptorChain& chain) {
    Slot& slot = slots_[chain.head];
    if (slot.busy) {
      // The driver made a descriptor available again while the device still owns it (§2.7.13).
      Break("a descriptor chain in use was made available again");
      return;
    }
    const uint32_t cdb_size = device_.cdb_size_.load(std::memory_order_relaxed);
    slot.sense_size = device_.sense_size_.load(std::memory_order_relaxed);
    const uint64_t header_size = sizeof(CommandHeader) + cdb_size;
    const uint64_t response_size = sizeof(CommandResponse) + slot.sense_size;
    slot.head = chain.head;
    if (chain.writable_bytes < response_size) {
      // Not even room for a response: the driver broke §5.6.6's layout.
      Break(absl::StrFormat("response buffer of %u bytes, need %u", chain.writable_bytes,
                            response_size));
      return;
    }
    slot.busy = true;
    SplitAt(chain.writable, response_size, &slot.response, &slot.data_in);
    if (chain.readable_bytes < header_size) {
      RespondError(slot, kResponseFailure);
      return;
    }
    SplitAt(chain.readable, header_size, &slot.header, &slot.data_out);
    // The target reads at most sc::kMaxCdbSize CDB bytes; the rest of a longer CDB area is skipped.
    const uint32_t cdb_bytes = std::min<uint32_t>(cdb_size, sc::kMaxCdbSize);
    uint8_t header_bytes[sizeof(CommandHeader) + sc::kMaxCdbSize];
    sc::GatherFrom(slot.header,
                   std::span<uint8_t>(header_bytes, sizeof(CommandHeader) + cdb_bytes));
    CommandHeader header;
    std::memcpy(&header, header_bytes, sizeof(header));
    const LunAddress address = DecodeLunField(header.lun);
    auto target = state_.target_queues.find(address.target);
    if (!address.valid || target == state_.target_queues.end()) {
      RespondError(slot, kResponseBadTarget);
      return;
    }
    if (!slot.data_in.empty() && !slot.data_out.empty()) {
      // Bidirectional commands need VIRTIO_SCSI_F_INOUT, which is not offered.
      RespondError(slot, kResponseFailure);
      return;
    }
    sc::Task& task = slot.task;
    task.SetCdb(std::span<const uint8_t>(header_bytes + sizeof(CommandHeader), cdb_bytes));
    task.lun = address.sam_lun;
    task.data_in = slot.data_in;
    task.data_out = slot.data_out;
    if (target->second->Execute(task) == sc::Execution::kCompleted) Complete(task);
  }

  void RespondError(Slot& slot, uint8_t code) {
    CommandResponse response{};
    response.response = code;
    Respond(slot, response, {}, 0);
  }

  void Respond(Slot& slot, const CommandResponse& response, std::span<const uint8_t> sense,
               uint64_t data_in_written) {
    // The response header and the sense data; the rest of the driver's sense area is left alone
    // (sense_len says how much is valid).
    uint8_t bytes[sizeof(CommandResponse) + sc::kFixedSenseSize] = {};
    std::memcpy(bytes, &response, sizeof(response));
    const size_t sense_bytes = std::min<size_t>(sense.size(), sc::kFixedSenseSize);
    // An empty span may have a null data(), which memcpy must not be given even for 0 bytes.
    if (sense_bytes > 0) std::memcpy(bytes + sizeof(response), sense.data(), sense_bytes);
    const uint64_t response_size = sizeof(CommandResponse) + slot.sense_size;
    sc::ScatterTo(slot.response,
                  std::span<const uint8_t>(bytes, sizeof(CommandResponse) + sense_bytes));
    slot.busy = false;
    const uint64_t written = response_size + data_in_written;
    absl::Status status =
        queue_.PushUsed(slot.head, static_cast<uint32_t>(std::min<uint64_t>(written, UINT32_MAX)));
    if (!status.ok()) {
      Break(status.message());
      return;
    }
    pushed_ = true;
  }

  VirtioScsi& device_;
  ThreadState& state_;
  SplitQueue queue_;
  VirtioInterrupt* const interrupt_;
  const int notify_fd_;
  VirtioDeviceEvents* const events_;
  std::vector<Slot> slots_;  // by descriptor head
  bool pushed_ = false;
  bool broken_ = false;
  bool polling_ = false;  // the iothread is busy-polling this queue: notifications are off
};

// The control queue (§5.6.6.2): task management and asynchronous-notification requests, answered
// on iothread 0. Task management functions first complete every command in flight on every queue
// (commands are never cancelled half-way: a task that is "aborted" has finished by the time the
// function answers, which SAM-5 7.3 allows), then act.
class VirtioScsi::ControlWorker : public QueueWorker {
 public:
  ControlWorker(VirtioScsi& device, SplitQueue queue, const VirtioQueue& spec,
                VirtioDeviceEvents* events)
      : QueueWorker(device, std::move(queue), spec, events, "control queue") {}

  void OnNotify() {
    sys_util::DrainEventFd(notify_fd_);
    if (broken_) return;
    bool pushed = false;
    // As on the request queues: consume everything, then re-arm notifications (avail_event with
    // EVENT_IDX) and look again, or the driver's next request would not be notified.
    do {
      queue_.DisableNotifications();
      while (true) {
        absl::StatusOr<std::optional<DescriptorChain>> chain = queue_.Pop();
        if (!chain.ok()) {
          Break(chain.status().message());
          return;
        }
        if (!chain->has_value()) break;
        std::optional<uint32_t> written = Handle(**chain);
        if (!written) {
          Break("a control request too malformed to answer");
          return;
        }
        if (absl::Status pushed_used = queue_.PushUsed((*chain)->head, *written);
            !pushed_used.ok()) {
          Break(pushed_used.message());
          return;
        }
        pushed = true;
      }
    } while (queue_.EnableNotifications());
    if (pushed && queue_.ShouldInterrupt()) interrupt_->Signal();
  }

 private:
  // Returns the bytes written, or nullopt for a request too malformed to answer.
  std::optional<uint32_t> Handle(const DescriptorChain& chain) {
    uint32_t type = 0;
    if (sc::GatherFrom(chain.readable, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&type),
                                                          sizeof(type))) != sizeof(type)) {
      return std::nullopt;
    }
    if (type == kControlTmf) {
      TmfRequest request{};
      if (chain.readable_bytes < sizeof(request) || chain.writable_bytes < 1) return std::nullopt;
      sc::GatherFrom(chain.readable,
                     std::span<uint8_t>(reinterpret_cast<uint8_t*>(&request), sizeof(request)));
      const uint8_t response = TaskManagement(request);
      sc::ScatterTo(chain.writable, std::span<const uint8_t>(&response, 1));
      return 1;
    }
    if (type == kControlAnQuery || type == kControlAnSubscribe) {
      AnRequest request{};
      if (chain.readable_bytes < sizeof(request) || chain.writable_bytes < sizeof(AnResponse)) {
        return std::nullopt;
      }
      // No asynchronous notifications are offered: event_actual is empty (§5.6.6.2.1), and Linux
      // polls media with GET EVENT STATUS NOTIFICATION instead.
      AnResponse response{};
      response.event_actual = 0;
      response.response = kResponseOk;
      sc::ScatterTo(
          chain.writable,
          std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&response), sizeof(response)));
      return sizeof(response);
    }
    // Unknown control request: answer with the first byte of a response, as far as one fits.
    if (chain.writable_bytes < 1) return std::nullopt;
    const uint8_t response = kResponseFailure;
    sc::ScatterTo(chain.writable, std::span<const uint8_t>(&response, 1));
    return 1;
  }

  uint8_t TaskManagement(const TmfRequest& request) {
    const LunAddress address = DecodeLunField(request.lun);
    auto target = device_.targets_.find(address.target);
    if (!address.valid || target == device_.targets_.end()) return kResponseBadTarget;
    switch (request.subtype) {
      case kTmfAbortTask:
      case kTmfAbortTaskSet:
      case kTmfClearTaskSet:
        device_.DrainAllRequests();
        return kTmfFunctionComplete;
      case kTmfQueryTask:
      case kTmfQueryTaskSet:
        // After a drain nothing is in flight: "no such task" is FUNCTION COMPLETE (SAM-5 7.6).
        device_.DrainAllRequests();
        return kTmfFunctionComplete;
      case kTmfLogicalUnitReset: {
        // The same strict decoding as commands: a LUN with a bus identifier or a second level
        // names no unit of this target.
        const std::optional<uint16_t> lun = sc::DecodeLun(address.sam_lun);
        std::shared_ptr<sc::LogicalUnit> unit =
            lun.has_value() ? target->second->Find(*lun) : nullptr;
        if (unit == nullptr) return kTmfIncorrectLun;
        device_.DrainAllRequests();
        unit->Reset();
        return kTmfFunctionComplete;
      }
      case kTmfItNexusReset:
        device_.DrainAllRequests();
        target->second->Reset();
        return kTmfFunctionComplete;
      case kTmfClearAca:
      default:
        return kTmfFunctionRejected;
    }
  }
};

void VirtioScsi::ThreadState::FlushInterrupts() {
  for (auto& worker : workers) worker->FlushInterrupt();
}

void VirtioScsi::ThreadState::ProcessCompletions() {
  for (auto& [id, queue] : target_queues) queue->ProcessCompletions();
  // Completions may have been followed by new requests their handlers issued.
  SubmitAll();
  for (auto& worker : workers) worker->FlushInterrupt();
}

void VirtioScsi::ThreadState::Drain() {
  SubmitAll();
  while (InFlight() > 0) {
    std::vector<pollfd> fds;
    for (auto& [id, queue] : target_queues) {
      for (int fd : queue->completion_fds()) fds.push_back({fd, POLLIN, 0});
    }
    poll(fds.data(), fds.size(), 100);
    ProcessCompletions();
  }
}

absl::StatusOr<std::unique_ptr<VirtioScsi>> VirtioScsi::Create(
    VirtioScsiOptions options, std::map<uint8_t, std::shared_ptr<sc::Target>> targets) {
  if (options.num_request_queues == 0 || options.num_request_queues > 1024) {
    return absl::InvalidArgumentError("virtio-scsi needs 1 to 1024 request queues");
  }
  if (options.iothreads.empty() || options.iothreads.size() > 64) {
    return absl::InvalidArgumentError("virtio-scsi needs 1 to 64 iothreads");
  }
  for (const std::shared_ptr<IoThread>& thread : options.iothreads) {
    if (thread == nullptr) return absl::InvalidArgumentError("virtio-scsi: a null iothread");
  }
  if (!options.queue_to_iothread.empty()) {
    if (options.queue_to_iothread.size() != options.num_request_queues) {
      return absl::InvalidArgumentError("the queue to iothread mapping needs one entry per queue");
    }
    for (uint32_t thread : options.queue_to_iothread) {
      if (thread >= options.iothreads.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("queue mapped to iothread %u of %u", thread, options.iothreads.size()));
      }
    }
  }
  if (options.queue_size == 0 || (options.queue_size & (options.queue_size - 1)) != 0 ||
      options.queue_size > 32768) {
    return absl::InvalidArgumentError("virtio-scsi queue size must be a power of two <= 32768");
  }
  std::unique_ptr<VirtioScsi> device(new VirtioScsi(std::move(options), std::move(targets)));
  for (const std::shared_ptr<IoThread>& thread : device->options_.iothreads) {
    device->thread_states_.push_back(std::make_unique<ThreadState>());
    device->thread_states_.back()->thread = thread.get();
  }
  absl::MutexLock lock(&device->hotplug_->mutex_);
  device->hotplug_->device_ = device.get();
  return device;
}

VirtioScsi::VirtioScsi(VirtioScsiOptions options,
                       std::map<uint8_t, std::shared_ptr<sc::Target>> targets)
    : options_(std::move(options)),
      targets_(std::move(targets)),
      hotplug_(std::make_shared<ScsiHotplug>(ScsiHotplug::Key(), targets_)),
      sense_size_(kDefaultSenseSize),
      cdb_size_(kDefaultCdbSize) {}

// The iothreads are shared with whoever started them: the last owner stops them.
VirtioScsi::~VirtioScsi() {
  absl::MutexLock lock(&hotplug_->mutex_);
  StopWorkers();
  hotplug_->device_ = nullptr;
}

std::vector<uint16_t> VirtioScsi::queue_max_sizes() const {
  std::vector<uint16_t> sizes = {kControlQueueSize, kControlQueueSize};
  sizes.insert(sizes.end(), options_.num_request_queues, options_.queue_size);
  return sizes;
}

uint32_t VirtioScsi::config_size() const { return sizeof(Config); }

void VirtioScsi::ReadConfig(uint32_t offset, std::span<uint8_t> data) {
  Config config{};
  config.num_queues = options_.num_request_queues;
  // §5.6.4: seg_max is the most segments in one command; two descriptors carry header and response.
  config.seg_max = options_.queue_size - 2;
  config.max_sectors = 0xffff;
  config.cmd_per_lun = options_.queue_size;
  config.event_info_size = 16;
  config.sense_size = sense_size_.load();
  config.cdb_size = cdb_size_.load();
  config.max_channel = 0;
  config.max_target = targets_.empty() ? 0 : targets_.rbegin()->first;
  config.max_lun = sc::kMaxLun;
  const auto* bytes = reinterpret_cast<const uint8_t*>(&config);
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = offset + i < sizeof(config) ? bytes[offset + i] : 0;
  }
}

void VirtioScsi::WriteConfig(uint32_t offset, std::span<const uint8_t> data) {
  // Only sense_size and cdb_size are driver-writable (§5.6.4), as whole 32-bit fields.
  if (data.size() != 4) return;
  uint32_t value;
  std::memcpy(&value, data.data(), sizeof(value));
  if (offset == kConfigSenseSizeOffset && value <= kMaxConfigSenseSize) sense_size_.store(value);
  if (offset == kConfigCdbSizeOffset && value <= kMaxConfigCdbSize) cdb_size_.store(value);
}

uint32_t VirtioScsi::IothreadFor(uint32_t request_queue) const {
  if (!options_.queue_to_iothread.empty()) return options_.queue_to_iothread[request_queue];
  return request_queue % options_.iothreads.size();
}

absl::Status VirtioScsi::ThreadState::OpenTargetQueues(
    const std::map<uint8_t, std::shared_ptr<sc::Target>>& targets) {
  for (const auto& [id, target] : targets) {
    ASSIGN_OR_RETURN(std::unique_ptr<sc::TargetQueue> queue,
                     target->CreateQueue(&RequestWorker::OnTaskComplete));
    for (int fd : queue->completion_fds()) {
      RETURN_IF_ERROR(thread->AddFd(fd, [this] { ProcessCompletions(); }));
      fds.push_back(fd);
    }
    target_queues[id] = std::move(queue);
  }
  return absl::OkStatus();
}

absl::Status VirtioScsi::ThreadState::WatchNotify(int notify_fd,
                                                  absl::AnyInvocable<void()> on_notify) {
  RETURN_IF_ERROR(thread->AddFd(notify_fd, std::move(on_notify), IoThread::Trigger::kEdge));
  fds.push_back(notify_fd);
  return absl::OkStatus();
}

absl::Status VirtioScsi::ThreadState::AttachControlQueue(VirtioScsi& device, SplitQueue queue,
                                                         const VirtioQueue& spec,
                                                         VirtioDeviceEvents* events) {
  control = std::make_unique<ControlWorker>(device, std::move(queue), spec, events);
  return WatchNotify(spec.notify_fd, [worker = control.get()] { worker->OnNotify(); });
}

absl::Status VirtioScsi::ThreadState::AttachRequestQueue(VirtioScsi& device, SplitQueue queue,
                                                         const VirtioQueue& spec,
                                                         VirtioDeviceEvents* events) {
  workers.push_back(std::make_unique<RequestWorker>(device, *this, std::move(queue), spec, events));
  RequestWorker* worker = workers.back().get();
  RETURN_IF_ERROR(WatchNotify(spec.notify_fd, [worker] { worker->OnNotify(); }));
  if (thread->poll_max_ns() > 0) {
    // Polls the avail ring and the block completions (as QEMU's iothread polls its virtqueues and
    // io_uring together), so a busy queue is served without waking through the eventfds.
    pollers.push_back(thread->AddPoller(
        [worker, this] {
          bool progress = worker->ProcessAvailable();
          const size_t before = InFlight();
          if (before > 0) {
            ProcessCompletions();
            progress |= InFlight() < before;
          }
          return progress;
        },
        [worker] { worker->BeginPolling(); }, [worker] { return worker->EndPolling(); }));
  }
  // Requests the driver queued before DRIVER_OK.
  worker->ProcessAvailable();
  return absl::OkStatus();
}

absl::Status VirtioScsi::Activate(VirtioActivation activation) {
  absl::MutexLock lock(&hotplug_->mutex_);
  if (active_) return absl::FailedPreconditionError("virtio-scsi is already active");
  active_ = true;
  features_ = activation.features;  // from here StopWorkers() undoes a partial set-up
  absl::Status status = AttachQueues(activation);
  if (!status.ok()) StopWorkers();
  return status;
}

absl::Status VirtioScsi::AttachQueues(const VirtioActivation& activation) {
  // Each thread's target queues and completion handling, set up on that thread.
  for (const std::unique_ptr<ThreadState>& state : thread_states_) {
    RETURN_IF_ERROR(OnThread(*state->thread, [&] { return state->OpenTargetQueues(targets_); }));
  }
  for (const VirtioQueue& spec : activation.queues) {
    ASSIGN_OR_RETURN(SplitQueue queue, SplitQueue::Create(*activation.memory, spec.config));
    if (spec.index == kEventQueue) {
      ThreadState& state = *thread_states_[0];
      RETURN_IF_ERROR(OnThread(*state.thread, [&] {
        return state.AttachEventQueue(*this, std::move(queue), spec, activation.events);
      }));
      continue;
    }
    if (spec.index == kControlQueue) {
      ThreadState& state = *thread_states_[0];
      RETURN_IF_ERROR(OnThread(*state.thread, [&] {
        return state.AttachControlQueue(*this, std::move(queue), spec, activation.events);
      }));
      continue;
    }
    const uint32_t request_queue = spec.index - kFirstRequestQueue;
    if (request_queue >= options_.num_request_queues) continue;
    ThreadState& state = *thread_states_[IothreadFor(request_queue)];
    RETURN_IF_ERROR(OnThread(*state.thread, [&] {
      return state.AttachRequestQueue(*this, std::move(queue), spec, activation.events);
    }));
  }
  return absl::OkStatus();
}

void VirtioScsi::StopWorkers() {
  if (!active_) return;
  active_ = false;
  for (auto& state_ptr : thread_states_) {
    ThreadState* state = state_ptr.get();
    state->thread->RunSync([state] {
      state->Drain();
      for (int fd : state->fds) state->thread->RemoveFd(fd);
      for (int id : state->pollers) state->thread->RemovePoller(id);
      state->fds.clear();
      state->pollers.clear();
      state->control.reset();
      state->event.reset();
      state->workers.clear();
      state->target_queues.clear();
    });
  }
}

void VirtioScsi::DrainAllRequests() {
  for (auto& state_ptr : thread_states_) {
    ThreadState* state = state_ptr.get();
    state->thread->RunSync([state] { state->Drain(); });
  }
}

void VirtioScsi::Stop() {
  absl::MutexLock lock(&hotplug_->mutex_);
  StopWorkers();
}

void VirtioScsi::Reset() {
  absl::MutexLock lock(&hotplug_->mutex_);
  StopWorkers();
  // A device reset is a bus reset for the units behind it (unit attention 06/29/00).
  for (const auto& [id, target] : targets_) target->Reset();
  sense_size_.store(kDefaultSenseSize);
  cdb_size_.store(kDefaultCdbSize);
}

}  // namespace devices::virtio::scsi

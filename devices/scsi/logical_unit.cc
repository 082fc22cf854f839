#include "devices/scsi/logical_unit.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "vmm/sys_util/status_macros.h"

namespace devices::scsi {
namespace {

// WRITE SAME of zeros points every iovec here: no allocation, no copy.
constexpr size_t kPatternBytes = 64 * 1024;
alignas(4096) const uint8_t kZeros[kPatternBytes] = {};
// Iovecs per WRITE SAME request: 16 x 64 KiB = 1 MiB per request.
constexpr size_t kPatternIovecs = 16;

std::string DefaultSerial(const LogicalUnitOptions& options, const block::Drive& drive) {
  if (!options.serial.empty()) return options.serial;
  if (!drive.name().empty()) return drive.name();
  return "0";
}

}  // namespace

Sense SenseForBlockError(int error, block::RequestType type) {
  switch (error) {
    case EROFS:
      return sense::kWriteProtected;
    case ERANGE:
      return sense::kLbaOutOfRange;
    case ENOMEDIUM:
      return sense::kMediumNotPresent;
    case ENOSPC:
    case EDQUOT:
      // SBC-3: a thin-provisioned unit out of space for a write.
      return sense::kSpaceAllocationFailedWriteProtect;
    case EINVAL:
      // Requests built here are aligned and in range; the drive refusing one is our bug.
      return sense::kInternalTargetFailure;
    default:
      return type == block::RequestType::kRead ? sense::kUnrecoveredReadError : sense::kWriteError;
  }
}

Sense NotReadySense(const MediumInfo& medium) {
  return medium.tray_open ? sense::kMediumNotPresentTrayOpen : sense::kMediumNotPresentTrayClosed;
}

// ---- LogicalUnit ----

LogicalUnit::LogicalUnit(uint8_t type, std::shared_ptr<block::Drive> drive,
                         LogicalUnitOptions options, std::span<const CommandInfo> table,
                         bool discard)
    : type_(type),
      drive_(std::move(drive)),
      media_(drive_->media()),
      options_(std::move(options)),
      serial_(DefaultSerial(options_, *drive_)),
      default_wce_(drive_->info().write_cache_enabled),
      wce_(default_wce_) {
  first_entry_.fill(-1);
  for (const CommandInfo& info : table) {
    if ((info.flags & kNeedsDiscard) && !discard) continue;
    if (first_entry_[info.opcode] < 0) {
      first_entry_[info.opcode] = static_cast<int16_t>(enabled_.size());
    }
    if (info.service_action != kNoServiceAction) has_service_actions_[info.opcode] = true;
    enabled_.push_back(&info);
  }
  absl::MutexLock lock(&mutex_);
  if (options_.power_on_unit_attention) pending_ua_ = kUaPowerOn;
  if (media_ != nullptr) {
    media_generation_ = media_->Current()->generation;
    seen_generation_.store(media_generation_, std::memory_order_relaxed);
  }
  UpdateAttentionLocked();
}

LogicalUnit::~LogicalUnit() = default;

absl::StatusOr<std::unique_ptr<LuQueue>> LogicalUnit::CreateQueue(TaskCompletion completion) {
  // Units are made by their factories as shared_ptrs; a queue keeps its unit alive.
  auto queue = std::make_unique<LuQueue>(LuQueue::Key(), shared_from_this(), std::move(completion));
  LuQueue* q = queue.get();
  ASSIGN_OR_RETURN(q->block_,
                   drive_->CreateQueue([q](uint64_t cookie, block::Completion completion) {
                     q->OnBlockCompletion(cookie, completion);
                   }));
  return queue;
}

const CommandInfo* LogicalUnit::Find(uint8_t opcode, int service_action) const {
  const int16_t first = first_entry_[opcode];
  if (first < 0) return nullptr;
  if (!has_service_actions_[opcode]) return enabled_[first];
  for (size_t i = first; i < enabled_.size() && enabled_[i]->opcode == opcode; ++i) {
    if (enabled_[i]->service_action == service_action) return enabled_[i];
  }
  return nullptr;
}

bool LogicalUnit::HasServiceActions(uint8_t opcode) const { return has_service_actions_[opcode]; }

Sense LogicalUnit::SelectModePage(std::span<const uint8_t> page, const MediumInfo& medium,
                                  bool apply) {
  // Default: a page is accepted only if it changes nothing (SPC-4: parameters that are not
  // changeable must be sent with their current values).
  const uint8_t code = page[0] & 0x3f;
  std::array<uint8_t, 256> current{};
  const size_t length = BuildModePage(code, PageControl::kCurrent, medium, current);
  if (length == 0 || page.size() != length) return sense::kInvalidFieldInParameterList;
  // The PS bit (byte 0 bit 7) is reserved in MODE SELECT parameter data.
  if ((page[0] & 0x7f) != (current[0] & 0x7f)) return sense::kInvalidFieldInParameterList;
  if (!std::equal(page.begin() + 1, page.end(), current.begin() + 1)) {
    return sense::kInvalidFieldInParameterList;
  }
  return sense::kNoSense;
}

void LogicalUnit::Reset() {
  {
    absl::MutexLock lock(&mutex_);
    if (options_.power_on_unit_attention) pending_ua_ |= kUaPowerOn;
    deferred_sense_.reset();
    UpdateAttentionLocked();
  }
  set_write_cache_enabled(default_wce_);
  // Not under mutex_: RemovableMedia calls its listeners (a CdRom among them) synchronously.
  if (media_ != nullptr) media_->SetLocked(false, /*by_guest=*/true);
}

void LogicalUnit::CapacityChanged() {
  if (media_ != nullptr || fixed_medium_.block_size == 0) return;
  fixed_blocks_.store(drive_->info().size_bytes / fixed_medium_.block_size,
                      std::memory_order_release);
  absl::MutexLock lock(&mutex_);
  pending_ua_ |= kUaCapacityChanged;
  UpdateAttentionLocked();
}

void LogicalUnit::ReportLunsChanged() {
  absl::MutexLock lock(&mutex_);
  pending_ua_ |= kUaLunsChanged;
  UpdateAttentionLocked();
}

Sense LogicalUnit::TakeRequestSense(const MediumInfo& medium) {
  absl::MutexLock lock(&mutex_);
  if (media_ != nullptr && medium.generation != media_generation_) {
    NoteMediumChangeLocked(medium);
  }
  Sense result = sense::kNoSense;
  if (deferred_sense_.has_value()) {
    result = *deferred_sense_;
    deferred_sense_.reset();
  } else if (pending_ua_ != 0) {
    // SPC-4: a pending unit attention is reported as REQUEST SENSE data, and cleared.
    result = TakeUnitAttentionLocked();
  } else if (not_ready_stage_ != 0 && medium.ready) {
    result = not_ready_stage_ == 1 ? sense::kMediumNotPresent : sense::kNotReadyToReadyChange;
    not_ready_stage_ = not_ready_stage_ == 1 ? 2 : 0;
  } else if (media_ != nullptr && !medium.ready) {
    // SPC-4: with no error pending, the sense describes the unit's current condition.
    result = NotReadySense(medium);
  }
  UpdateAttentionLocked();
  return result;
}

std::optional<Sense> LogicalUnit::CheckAttention(const CommandInfo* info, uint8_t opcode,
                                                 const MediumInfo& medium) {
  absl::MutexLock lock(&mutex_);
  if (media_ != nullptr && medium.generation != media_generation_) {
    NoteMediumChangeLocked(medium);
  }
  // The deferred sense belongs to the command that failed; the next command (other than the
  // REQUEST SENSE that fetches it) discards it, as QEMU does.
  if (deferred_sense_.has_value() && opcode != op::kRequestSense) deferred_sense_.reset();

  std::optional<Sense> result;
  const bool exempt = info != nullptr && (info->flags & kAllowedWithUnitAttention);
  if (!exempt) {
    if (pending_ua_ != 0) {
      result = TakeUnitAttentionLocked();
    } else if (not_ready_stage_ != 0 && medium.ready) {
      // MediaChangeReport::kNotReadyThenUnitAttention (QEMU ide/atapi.c ide_atapi_cmd()).
      if (not_ready_stage_ == 1) {
        result = sense::kMediumNotPresent;
        not_ready_stage_ = 2;
      } else {
        result = sense::kNotReadyToReadyChange;
        not_ready_stage_ = 0;
      }
    }
  }
  if (result.has_value()) deferred_sense_ = *result;
  UpdateAttentionLocked();
  return result;
}

void LogicalUnit::RecordSense(const Sense& sense) {
  absl::MutexLock lock(&mutex_);
  deferred_sense_ = sense;
  UpdateAttentionLocked();
}

void LogicalUnit::NoteMediumChangeLocked(const MediumInfo& medium) {
  media_generation_ = medium.generation;
  seen_generation_.store(medium.generation, std::memory_order_release);
  if (options_.media_change_report == MediaChangeReport::kUnitAttentions) {
    // QEMU scsi-disk.c scsi_cd_change_media_cb(): MEDIUM NOT PRESENT first, and once that was
    // reported, NOT READY TO READY CHANGE if a medium is loaded.
    pending_ua_ |= kUaMediumNotPresent;
    pending_ua_ &= ~kUaMediumChanged;
    changed_after_not_present_ = medium.present;
  } else {
    not_ready_stage_ = medium.present ? 1 : 0;
  }
}

Sense LogicalUnit::TakeUnitAttentionLocked() {
  const uint32_t bit = 1u << std::countr_zero(pending_ua_);  // the highest priority pending
  pending_ua_ &= ~bit;
  switch (bit) {
    case kUaPowerOn:
      return sense::kPowerOnOrReset;
    case kUaMediumNotPresent:
      if (changed_after_not_present_) {
        changed_after_not_present_ = false;
        pending_ua_ |= kUaMediumChanged;
      }
      return sense::kMediumNotPresentAttention;
    case kUaCapacityChanged:
      return sense::kCapacityDataChanged;
    case kUaLunsChanged:
      return sense::kReportedLunsDataChanged;
    default:
      return sense::kNotReadyToReadyChange;
  }
}

void LogicalUnit::UpdateAttentionLocked() {
  attention_.store(pending_ua_ != 0 || not_ready_stage_ != 0 || deferred_sense_.has_value(),
                   std::memory_order_release);
}

// ---- LuQueue ----

LuQueue::LuQueue(Key, std::shared_ptr<LogicalUnit> lu, TaskCompletion completion)
    : lu_(std::move(lu)), completion_(std::move(completion)) {}

LuQueue::~LuQueue() = default;

MediumInfo LuQueue::MediumFor(const block::MediaState& state) {
  if (!cached_valid_ || cached_generation_ != state.generation) {
    const block::DriveInfo info = lu_->drive_->InfoFor(state);
    cached_medium_ = MediumInfo{};
    cached_medium_.generation = state.generation;
    cached_medium_.block_size = 2048;  // MMC-6: a CD/DVD data block (mode 1 / DVD sector)
    cached_medium_.blocks = info.size_bytes / 2048;
    cached_medium_.backend_block_size = info.logical_block_size;
    cached_medium_.read_only = true;
    cached_generation_ = state.generation;
    cached_valid_ = true;
  }
  MediumInfo medium = cached_medium_;
  medium.present = state.present;
  medium.tray_open = state.tray_open;
  medium.ready = state.ready();
  medium.locked = state.locked;
  if (!medium.present) medium.blocks = 0;
  return medium;
}

Execution LuQueue::Execute(Task& task) {
  task.ResetResults();
  LogicalUnit& lu = *lu_;
  const std::span<const uint8_t> cdb = task.cdb();
  const uint8_t opcode = cdb.empty() ? 0 : cdb[0];
  // The service action, where the opcode has them, is CDB byte 1 bits 4-0 (SPC-4); a CDB
  // too short to hold it matches nothing and then fails the length check below.
  const CommandInfo* info = nullptr;
  if (!cdb.empty()) {
    info = lu.Find(opcode, cdb.size() > 1 ? (cdb[1] & 0x1f) : -1);
  }

  MediumInfo medium;
  std::shared_ptr<const block::MediaState> state;
  if (lu.media_ != nullptr) {
    state = lu.media_->Current();
    medium = MediumFor(*state);
  } else {
    medium = lu.fixed_medium_;
    medium.blocks = lu.fixed_blocks_.load(std::memory_order_acquire);
  }

  if (lu.attention_.load(std::memory_order_acquire) ||
      (state != nullptr &&
       state->generation != lu.seen_generation_.load(std::memory_order_acquire))) {
    if (std::optional<Sense> attention = lu.CheckAttention(info, opcode, medium)) {
      task.status_ = Status::kCheckCondition;
      task.sense_ = *attention;
      return Execution::kCompleted;  // already recorded as the deferred sense
    }
  }
  // Validation order: an opcode the unit lacks, then a CDB shorter than the opcode's group
  // (SPC-4: the group fixes the length), then an unknown service action.
  if (cdb.empty()) return Complete(task, sense::kInvalidFieldInCdb);
  if (!lu.Offers(opcode)) return Complete(task, sense::kInvalidCommandOperationCode);
  if (cdb.size() < CdbLengthForOpcode(opcode)) return Complete(task, sense::kInvalidFieldInCdb);
  if (info == nullptr) return Complete(task, sense::kInvalidCommandOperationCode);
  if ((info->flags & kNeedsMedium) && !medium.ready) {
    return Complete(task, NotReadySense(medium));
  }
  CommandContext ctx(*this, task, *info, medium);
  return info->handler(ctx);
}

Execution LuQueue::Complete(Task& task, const Sense& sense) {
  if (sense == sense::kNoSense) {
    task.status_ = Status::kGood;
    task.sense_ = sense::kNoSense;
  } else {
    task.status_ = Status::kCheckCondition;
    task.sense_ = sense;
    task.in_transferred_ = 0;
    task.out_transferred_ = 0;
    lu_->RecordSense(sense);
  }
  return Execution::kCompleted;
}

void LuQueue::Submit() {
  need_submit_ = false;
  block_->Submit();
}

void LuQueue::ProcessCompletions() {
  block_->ProcessCompletions();
  // Follow-up requests (the read of a READ with FUA) enqueued by the handler.
  if (need_submit_) Submit();
}

void LuQueue::Enqueue(Task& task, const block::Request& request) {
  ++task.io_.pending;
  need_submit_ = true;
  block_->Enqueue(request, reinterpret_cast<uint64_t>(&task));
}

Execution LuQueue::Started(Task& task) {
  ++tasks_in_flight_;
  return Execution::kInFlight;
}

void LuQueue::OnBlockCompletion(uint64_t cookie, block::Completion completion) {
  Task& task = *reinterpret_cast<Task*>(cookie);
  Task::Io& io = task.io_;
  if (!completion.ok() && io.error == 0) {
    io.error = completion.error;
    io.error_type =
        io.step == Task::Step::kReadAfterFlush ? block::RequestType::kFlush : io.main_type;
  }
  if (--io.pending > 0) return;
  if (io.error == 0 && io.step == Task::Step::kReadAfterFlush) {
    io.step = Task::Step::kFinish;
    Enqueue(task, io.deferred);
    return;
  }
  FinishIo(task);
}

void LuQueue::FinishIo(Task& task) {
  Task::Io& io = task.io_;
  if (io.error != 0) {
    Sense sense = SenseForBlockError(io.error, io.error_type);
    if (io.error == ENOMEDIUM && lu_->media_ != nullptr) {
      sense = NotReadySense(MediumFor(*lu_->media_->Current()));
    }
    Complete(task, sense);
  } else {
    task.status_ = Status::kGood;
  }
  --tasks_in_flight_;
  completion_(task);
}

// ---- CommandContext ----

Execution CommandContext::Good() { return queue_.Complete(task_, sense::kNoSense); }

Execution CommandContext::Fail(const Sense& sense) { return queue_.Complete(task_, sense); }

Execution CommandContext::DataIn(std::span<const uint8_t> data, uint64_t allocation_length) {
  const uint64_t limit = std::min<uint64_t>(allocation_length, data.size());
  task_.in_transferred_ = ScatterTo(task_.data_in, data.first(static_cast<size_t>(limit)));
  return queue_.Complete(task_, sense::kNoSense);
}

Execution CommandContext::Finish(const DataInWriter& writer) {
  task_.in_transferred_ = writer.transferred();
  return queue_.Complete(task_, sense::kNoSense);
}

bool CommandContext::ReadDataOut(std::span<uint8_t> out) {
  if (GatherFrom(task_.data_out, out) < out.size()) {
    task_.overrun_ = true;
    return false;
  }
  task_.out_transferred_ = out.size();
  return true;
}

Execution CommandContext::Overrun() {
  task_.overrun_ = true;
  return Fail(sense::kInvalidFieldInCdb);
}

Execution CommandContext::StartRead(uint64_t offset, uint64_t length, bool flush_first) {
  Task::Io& io = task_.io_;
  io.pending = 0;
  io.error = 0;
  io.main_type = block::RequestType::kRead;
  io.step = Task::Step::kFinish;
  block::Request read;
  read.type = block::RequestType::kRead;
  read.offset = offset;
  if (TotalLength(task_.data_in) == length) {
    read.buffers = task_.data_in;
  } else {
    TrimInto(task_.data_in, length, &io.iov);
    read.buffers = io.iov;
  }
  task_.in_transferred_ = length;
  if (flush_first) {
    io.deferred = read;
    io.step = Task::Step::kReadAfterFlush;
    block::Request flush;
    flush.type = block::RequestType::kFlush;
    queue_.Enqueue(task_, flush);
  } else {
    queue_.Enqueue(task_, read);
  }
  return queue_.Started(task_);
}

Execution CommandContext::StartWrite(uint64_t offset, uint64_t length, bool fua) {
  Task::Io& io = task_.io_;
  io.pending = 0;
  io.error = 0;
  io.main_type = block::RequestType::kWrite;
  io.step = Task::Step::kFinish;
  block::Request write;
  write.type = block::RequestType::kWrite;
  write.offset = offset;
  write.fua = fua;
  if (TotalLength(task_.data_out) == length) {
    write.buffers = task_.data_out;
  } else {
    TrimInto(task_.data_out, length, &io.iov);
    write.buffers = io.iov;
  }
  task_.out_transferred_ = length;
  queue_.Enqueue(task_, write);
  return queue_.Started(task_);
}

Execution CommandContext::StartFlush() {
  Task::Io& io = task_.io_;
  io.pending = 0;
  io.error = 0;
  io.main_type = block::RequestType::kFlush;
  io.step = Task::Step::kFinish;
  block::Request flush;
  flush.type = block::RequestType::kFlush;
  queue_.Enqueue(task_, flush);
  return queue_.Started(task_);
}

Execution CommandContext::StartWriteSame(uint64_t offset, uint64_t count, uint32_t block_size,
                                         bool zeros, bool used_data_out) {
  Task::Io& io = task_.io_;
  io.pending = 0;
  io.error = 0;
  io.main_type = block::RequestType::kWrite;
  io.step = Task::Step::kFinish;

  // The pattern: kPatternBytes of repeated blocks (block sizes divide it; see Disk::Create).
  const uint8_t* pattern = kZeros;
  if (!zeros) {
    if (io.pattern == nullptr) {
      io.pattern.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, kPatternBytes)));
      if (io.pattern == nullptr) return Fail(sense::kInternalTargetFailure);
    }
    uint8_t* p = io.pattern.get();
    GatherFrom(task_.data_out, std::span<uint8_t>(p, block_size));
    for (size_t filled = block_size; filled < kPatternBytes; filled *= 2) {
      std::memcpy(p + filled, p, std::min(filled, kPatternBytes - filled));
    }
    pattern = p;
  }
  if (used_data_out) task_.out_transferred_ = block_size;

  // io.iov: kPatternIovecs entries of a whole pattern (every full request uses them all), then
  // the tail request's entries. The requests only read the array, so they share it.
  const uint64_t total = count * block_size;
  const uint64_t per_request = kPatternIovecs * kPatternBytes;
  const uint64_t tail = total % per_request;
  io.iov.clear();
  io.iov.resize(kPatternIovecs, iovec{const_cast<uint8_t*>(pattern), kPatternBytes});
  for (uint64_t left = tail; left > 0;) {
    const uint64_t n = std::min<uint64_t>(left, kPatternBytes);
    io.iov.push_back(iovec{const_cast<uint8_t*>(pattern), static_cast<size_t>(n)});
    left -= n;
  }
  const std::span<const iovec> full(io.iov.data(), kPatternIovecs);
  const std::span<const iovec> partial(io.iov.data() + kPatternIovecs,
                                       io.iov.size() - kPatternIovecs);
  uint64_t position = offset;
  for (uint64_t i = 0; i < total / per_request; ++i) {
    block::Request write;
    write.type = block::RequestType::kWrite;
    write.offset = position;
    write.buffers = full;
    queue_.Enqueue(task_, write);
    position += per_request;
  }
  if (tail > 0) {
    block::Request write;
    write.type = block::RequestType::kWrite;
    write.offset = position;
    write.buffers = partial;
    queue_.Enqueue(task_, write);
  }
  return queue_.Started(task_);
}

Execution CommandContext::StartDiscards(std::span<const Range> ranges) {
  Task::Io& io = task_.io_;
  io.pending = 0;
  io.error = 0;
  io.main_type = block::RequestType::kDiscard;
  io.step = Task::Step::kFinish;
  for (const Range& range : ranges) {
    if (range.length == 0) continue;
    block::Request discard;
    discard.type = block::RequestType::kDiscard;
    discard.offset = range.offset;
    discard.discard_length = range.length;
    queue_.Enqueue(task_, discard);
  }
  if (io.pending == 0) return Good();
  return queue_.Started(task_);
}

}  // namespace devices::scsi

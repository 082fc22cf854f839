#include "devices/scsi/target.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/strings/str_cat.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/lun.h"
#include "devices/scsi/spc.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::scsi {

absl::Status Target::AddLogicalUnit(uint16_t lun, std::shared_ptr<LogicalUnit> unit) {
  if (unit == nullptr) return absl::InvalidArgumentError("no logical unit");
  if (lun > kMaxLun) return absl::InvalidArgumentError(absl::StrCat("LUN ", lun, " > ", kMaxLun));
  absl::MutexLock lock(&mutex_);
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it != luns_.end() && *it == lun) {
    return absl::AlreadyExistsError(absl::StrCat("LUN ", lun, " is taken"));
  }
  units_.insert(units_.begin() + (it - luns_.begin()), std::move(unit));
  luns_.insert(it, lun);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<LogicalUnit>> Target::RemoveLogicalUnit(uint16_t lun) {
  absl::MutexLock lock(&mutex_);
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it == luns_.end() || *it != lun) return absl::NotFoundError(absl::StrCat("no LUN ", lun));
  const auto index = it - luns_.begin();
  std::shared_ptr<LogicalUnit> unit = std::move(units_[index]);
  units_.erase(units_.begin() + index);
  luns_.erase(it);
  return unit;
}

std::shared_ptr<LogicalUnit> Target::Find(uint16_t lun) const {
  absl::MutexLock lock(&mutex_);
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it == luns_.end() || *it != lun) return nullptr;
  return units_[it - luns_.begin()];
}

std::vector<uint16_t> Target::luns() const {
  absl::MutexLock lock(&mutex_);
  return luns_;
}

std::vector<std::pair<uint16_t, std::shared_ptr<LogicalUnit>>> Target::Snapshot() const {
  absl::MutexLock lock(&mutex_);
  std::vector<std::pair<uint16_t, std::shared_ptr<LogicalUnit>>> inventory;
  for (size_t i = 0; i < luns_.size(); ++i) inventory.emplace_back(luns_[i], units_[i]);
  return inventory;
}

absl::StatusOr<std::unique_ptr<TargetQueue>> Target::CreateQueue(TaskCompletion completion) {
  // The units' queues share the one handler the transport gave.
  auto queue = std::make_unique<TargetQueue>(
      TargetQueue::Key(), std::make_shared<TaskCompletion>(std::move(completion)));
  for (const auto& [lun, unit] : Snapshot()) RETURN_IF_ERROR(queue->AddUnit(lun, unit).status());
  return queue;
}

void Target::Reset() {
  for (const auto& [lun, unit] : Snapshot()) unit->Reset();
}

void Target::ReportLunsChanged(std::optional<uint16_t> except) {
  for (const auto& [lun, unit] : Snapshot()) {
    if (lun != except) unit->ReportLunsChanged();
  }
}

TargetQueue::TargetQueue(Key, std::shared_ptr<TaskCompletion> completion)
    : completion_(std::move(completion)) {}

absl::StatusOr<int> TargetQueue::AddUnit(uint16_t lun, std::shared_ptr<LogicalUnit> unit) {
  if (unit == nullptr) return absl::InvalidArgumentError("no logical unit");
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it != luns_.end() && *it == lun) {
    return absl::AlreadyExistsError(absl::StrCat("LUN ", lun, " is taken"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LuQueue> lu_queue,
                   unit->CreateQueue([shared = completion_](Task& task) { (*shared)(task); }));
  lu_queue->set_inventory(this);
  const int fd = lu_queue->completion_fd();
  const auto index = it - luns_.begin();
  fds_.insert(fds_.begin() + index, fd);
  queues_.insert(queues_.begin() + index, std::move(lu_queue));
  luns_.insert(it, lun);
  return fd;
}

std::unique_ptr<LuQueue> TargetQueue::TakeUnit(uint16_t lun) {
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it == luns_.end() || *it != lun) return nullptr;
  const auto index = it - luns_.begin();
  std::unique_ptr<LuQueue> queue = std::move(queues_[index]);
  queues_.erase(queues_.begin() + index);
  fds_.erase(fds_.begin() + index);
  luns_.erase(it);
  return queue;
}

LuQueue* TargetQueue::Find(uint16_t lun) const {
  const auto it = std::lower_bound(luns_.begin(), luns_.end(), lun);
  if (it == luns_.end() || *it != lun) return nullptr;
  return queues_[it - luns_.begin()].get();
}

Execution TargetQueue::Execute(Task& task) {
  const std::optional<uint16_t> lun = DecodeLun(task.lun);
  LuQueue* queue = lun.has_value() ? Find(*lun) : nullptr;
  if (queue == nullptr) return ExecuteWithoutUnit(task);
  return queue->Execute(task);
}

void TargetQueue::Submit() {
  for (const std::unique_ptr<LuQueue>& queue : queues_) queue->Submit();
}

void TargetQueue::ProcessCompletions() {
  for (const std::unique_ptr<LuQueue>& queue : queues_) queue->ProcessCompletions();
}

void TargetQueue::ProcessCompletions(size_t index) {
  if (index < queues_.size()) queues_[index]->ProcessCompletions();
}

size_t TargetQueue::in_flight() const {
  size_t total = 0;
  for (const std::unique_ptr<LuQueue>& queue : queues_) total += queue->in_flight();
  return total;
}

Execution TargetQueue::ExecuteWithoutUnit(Task& task) {
  task.ResetResults();
  const std::span<const uint8_t> cdb = task.cdb();
  auto fail = [&task](const Sense& sense) {
    task.status_ = Status::kCheckCondition;
    task.sense_ = sense;
    return Execution::kCompleted;
  };
  auto data_in = [&task](std::span<const uint8_t> data, uint64_t allocation_length) {
    task.in_transferred_ =
        ScatterTo(task.data_in, data.first(std::min<uint64_t>(data.size(), allocation_length)));
    return Execution::kCompleted;
  };
  if (cdb.empty()) return fail(sense::kLogicalUnitNotSupported);
  const uint8_t opcode = cdb[0];
  const bool short_cdb = cdb.size() < CdbLengthForOpcode(opcode);
  const uint8_t* c = task.cdb_.data();  // zero-padded copy
  switch (opcode) {
    case op::kInquiry: {
      if (short_cdb) return fail(sense::kInvalidFieldInCdb);
      const bool evpd = c[1] & 0x01;
      if ((c[1] & 0x02) || (!evpd && c[2] != 0)) return fail(sense::kInvalidFieldInCdb);
      const uint16_t allocation = Be16(c + 3);
      const uint8_t byte0 = kQualifierNotSupported | kTypeNoDevice;
      if (evpd) {
        if (c[2] != 0x00) return fail(sense::kInvalidFieldInCdb);
        const std::array<uint8_t, 4> page = {byte0, 0x00, 0x00, 0x00};
        return data_in(page, allocation);
      }
      std::array<uint8_t, spc::kStandardInquirySize> data;
      spc::BuildStandardInquiry(byte0, false, LogicalUnitOptions{}, "VIRTUAL TARGET", data);
      return data_in(data, allocation);
    }
    case op::kReportLuns: {
      if (short_cdb || !spc::ValidSelectReport(c[2])) return fail(sense::kInvalidFieldInCdb);
      DataInWriter out(task.data_in, Be32(c + 6));
      spc::WriteReportLuns(luns_, c[2], out);
      task.in_transferred_ = out.transferred();
      return Execution::kCompleted;
    }
    case op::kRequestSense: {
      if (short_cdb || (c[1] & 0x01)) return fail(sense::kInvalidFieldInCdb);
      return data_in(EncodeFixedSense(sense::kLogicalUnitNotSupported), c[4]);
    }
    default:
      return fail(sense::kLogicalUnitNotSupported);
  }
}

}  // namespace devices::scsi

#ifndef DEVICES_SCSI_TARGET_H_
#define DEVICES_SCSI_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/scsi/logical_unit.h"
#include "devices/scsi/task.h"

namespace devices::scsi {

class TargetQueue;

// A SCSI target device (SAM-5): logical units by LUN. A transport that addresses targets (a
// virtio-scsi controller) keeps one Target per target id and answers a missing target itself (for
// virtio-scsi: VIRTIO_SCSI_S_BAD_TARGET); a missing LUN of an existing target is answered here as
// SPC-4 requires:
//   INQUIRY         standard data with PERIPHERAL QUALIFIER 011b and TYPE 1Fh (SPC-4);
//                   EVPD: page 00h listing no pages;
//   REPORT LUNS     the target's LUNs (any LUN may be asked);
//   REQUEST SENSE   GOOD, with sense data 05/25/00 LOGICAL UNIT NOT SUPPORTED (SPC-4);
//   anything else   CHECK CONDITION 05/25/00 LOGICAL UNIT NOT SUPPORTED.
// LUNs are given in SAM-5 form (lun.h): peripheral or flat single-level addressing.
//
// Configure the units first: AddLogicalUnit() fails once a queue exists.
class Target {
 public:
  Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  absl::Status AddLogicalUnit(uint16_t lun, std::shared_ptr<LogicalUnit> unit);
  // Null when there is no unit at `lun`.
  std::shared_ptr<LogicalUnit> Find(uint16_t lun) const;
  // Ascending.
  std::span<const uint16_t> luns() const { return luns_; }

  // A queue for the calling thread, with one LuQueue per unit; `completion` is called for every
  // task it left in flight, from its ProcessCompletions().
  absl::StatusOr<std::unique_ptr<TargetQueue>> CreateQueue(TaskCompletion completion);

  // LogicalUnit::Reset() of every unit (I_T NEXUS RESET, a transport reset).
  void Reset();

 private:
  std::vector<uint16_t> luns_;
  std::vector<std::shared_ptr<LogicalUnit>> units_;  // parallel to luns_
  bool frozen_ = false;
};

// The per-thread half of a Target: one thread's LuQueues, dispatched by the task's LUN. Same
// contract as LuQueue (see logical_unit.h): Execute() per task, Submit() per batch, and
// ProcessCompletions() when a completion fd is readable. Each unit's drive has its own
// completion fd; a transport either watches all of them and calls ProcessCompletions(index) for
// the one that fired, or calls ProcessCompletions() (every unit) on any.
class TargetQueue final : public LunInventory {
 public:
  Execution Execute(Task& task);
  void Submit();
  std::span<const int> completion_fds() const { return fds_; }
  void ProcessCompletions();
  void ProcessCompletions(size_t index);
  size_t in_flight() const;

  std::span<const uint16_t> luns() const override { return luns_; }
  // The queue of the unit at `lun`, or null.
  LuQueue* Find(uint16_t lun) const;

 private:
  friend class Target;
  struct Key {
    explicit Key() = default;
  };

 public:
  TargetQueue(Key, std::vector<uint16_t> luns);

 private:
  // SPC-4 answers for a LUN without a unit (see Target).
  Execution ExecuteWithoutUnit(Task& task);

  const std::vector<uint16_t> luns_;
  std::vector<std::unique_ptr<LuQueue>> queues_;  // parallel to luns_
  std::vector<int> fds_;
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_TARGET_H_

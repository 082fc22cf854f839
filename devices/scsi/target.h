#ifndef DEVICES_SCSI_TARGET_H_
#define DEVICES_SCSI_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
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
// Units may be added and removed at any time (hot-plug). The Target is the inventory a new queue
// starts from; a transport that already has queues applies the change to each of them on its
// own thread (TargetQueue::AddUnit, TakeUnit), and tells the other units that the inventory
// changed (ReportLunsChanged). Thread-safe.
class Target {
 public:
  Target() = default;
  Target(const Target&) = delete;
  Target& operator=(const Target&) = delete;

  // InvalidArgument for a null unit or a LUN past kMaxLun, AlreadyExists for a LUN in use.
  absl::Status AddLogicalUnit(uint16_t lun, std::shared_ptr<LogicalUnit> unit);
  // Takes the unit at `lun` out of the inventory (NotFound if none); queues keep theirs until
  // the transport takes it out of them.
  absl::StatusOr<std::shared_ptr<LogicalUnit>> RemoveLogicalUnit(uint16_t lun);
  // Null when there is no unit at `lun`.
  std::shared_ptr<LogicalUnit> Find(uint16_t lun) const;
  // Ascending.
  std::vector<uint16_t> luns() const;

  // A queue for the calling thread, with one LuQueue per unit; `completion` is called for every
  // task it left in flight, from its ProcessCompletions().
  absl::StatusOr<std::unique_ptr<TargetQueue>> CreateQueue(TaskCompletion completion);

  // LogicalUnit::Reset() of every unit (I_T NEXUS RESET, a transport reset).
  void Reset();
  // LogicalUnit::ReportLunsChanged() of every unit but `except` (the one just added, whose
  // power-on unit attention says more).
  void ReportLunsChanged(std::optional<uint16_t> except = std::nullopt);

 private:
  // The inventory as it is now, (LUN, unit) ascending, for work done outside mutex_.
  std::vector<std::pair<uint16_t, std::shared_ptr<LogicalUnit>>> Snapshot() const;

  mutable absl::Mutex mutex_;
  std::vector<uint16_t> luns_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::shared_ptr<LogicalUnit>> units_ ABSL_GUARDED_BY(mutex_);  // parallel to luns_
};

// The per-thread half of a Target: one thread's LuQueues, dispatched by the task's LUN. Same
// contract as LuQueue (see logical_unit.h): Execute() per task, Submit() per batch, and
// ProcessCompletions() when a completion fd is readable. Each unit's drive has its own
// completion fd; a transport either watches all of them and calls ProcessCompletions(index) for
// the one that fired, or calls ProcessCompletions() (every unit) on any. Not thread-safe: every
// call comes from the thread that created it.
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

  // Hot-plug, on this queue's thread. AddUnit makes the unit's queue here and returns its
  // completion fd for the transport to watch. TakeUnit stops dispatching to the unit at `lun`
  // (its LUN answers as a missing one from the next command on) and hands its queue over, null if
  // there is none: the transport drains what it has in flight (Submit, then ProcessCompletions
  // until in_flight() is 0; completions go to this queue's handler), stops watching its fd and
  // destroys it.
  absl::StatusOr<int> AddUnit(uint16_t lun, std::shared_ptr<LogicalUnit> unit);
  std::unique_ptr<LuQueue> TakeUnit(uint16_t lun);

 private:
  friend class Target;
  struct Key {
    explicit Key() = default;
  };

 public:
  TargetQueue(Key, std::shared_ptr<TaskCompletion> completion);

 private:
  // SPC-4 answers for a LUN without a unit (see Target).
  Execution ExecuteWithoutUnit(Task& task);

  // The transport's handler, shared by the units' queues.
  const std::shared_ptr<TaskCompletion> completion_;
  std::vector<uint16_t> luns_;
  std::vector<std::unique_ptr<LuQueue>> queues_;  // parallel to luns_
  std::vector<int> fds_;                          // parallel to luns_
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_TARGET_H_

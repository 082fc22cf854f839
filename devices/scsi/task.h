#ifndef DEVICES_SCSI_TASK_H_
#define DEVICES_SCSI_TASK_H_

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "block/request.h"
#include "devices/scsi/constants.h"
#include "devices/scsi/sense.h"

namespace devices::scsi {

class LuQueue;
class CommandContext;

// The longest CDB kept. SPC-4 allows up to 260 bytes (variable-length CDBs, group 3); nothing this
// target implements is longer than 16, and virtio-scsi's default cdb_size is 32.
inline constexpr size_t kMaxCdbSize = 32;

// How LuQueue::Execute() / TargetQueue::Execute() left a task.
enum class Execution {
  // Done: the results are in the task now. The completion handler is NOT called for it.
  kCompleted,
  // Block I/O is in flight. The queue calls its completion handler with the task, exactly once,
  // from ProcessCompletions() on the queue's thread. Until then the task, its data buffers and the
  // iovec arrays its spans point at must stay alive and unchanged.
  kInFlight,
};

// Called for each task that Execute() left kInFlight, from ProcessCompletions().
using TaskCompletion = absl::AnyInvocable<void(class Task&)>;

// One SCSI command (a SAM-5 "task"), owned by the transport. A transport keeps a pool of these (one
// per request slot, e.g. per virtqueue descriptor) and reuses them: Execute() resets the results
// and allocates nothing in the common case (a task keeps the capacity of its internal scratch
// space: a trimmed iovec copy when the data buffer is longer than the transfer, and WRITE SAME's
// pattern buffer).
class Task {
 public:
  Task();
  ~Task();
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;

  // ---- Inputs, set by the transport before Execute() ----

  // Copies the CDB: at most kMaxCdbSize bytes (the rest is ignored; no command here is longer).
  // `cdb.size()` is what the transport received (virtio-scsi: its cdb_size; ATAPI: 12). A command
  // whose group needs more bytes than that fails with ILLEGAL REQUEST, INVALID FIELD IN CDB; no
  // byte past the CDB is ever read.
  void SetCdb(std::span<const uint8_t> cdb);
  std::span<const uint8_t> cdb() const { return {cdb_.data(), cdb_size_}; }

  // SAM-5 eight-byte LUN (see lun.h); read only by TargetQueue.
  uint64_t lun = 0;
  // Data-in buffers (device to initiator: what the guest reads) and data-out buffers (initiator to
  // device), in host memory the transport has validated. Either may be empty.
  std::span<const iovec> data_in;
  std::span<const iovec> data_out;
  // For the transport (e.g. its request slot); never touched here.
  void* user_data = nullptr;

  // ---- Results, valid once the task completed ----

  Status status() const { return status_; }
  // NO SENSE for GOOD.
  const Sense& sense() const { return sense_; }
  // SPC-4 fixed-format sense data (18 bytes) for the transport's sense buffer; a transport
  // with a shorter sense buffer truncates (SAM-5: the sense data length is the transport's).
  std::array<uint8_t, kFixedSenseSize> sense_data() const { return EncodeFixedSense(sense_); }
  // Bytes of the data-in / data-out buffers that were not transferred (SAM-5 residual: the
  // buffer length minus the bytes moved). Computed from the spans, so call before changing them.
  uint64_t data_in_residual() const;
  uint64_t data_out_residual() const;
  // The command needed more buffer, in its data direction, than the transport supplied (a transfer
  // length or parameter list length beyond the data-out buffer, or a READ's transfer beyond the
  // data-in buffer). Such a command transfers nothing and fails with CHECK CONDITION, ILLEGAL
  // REQUEST, INVALID FIELD IN CDB; a transport that has an overrun response of its own (virtio-scsi
  // VIRTIO_SCSI_S_OVERRUN, as QEMU answers) may report that instead. Allocation-length commands
  // (INQUIRY, MODE SENSE...) never overrun: their data is truncated to the smaller of the
  // allocation length and the data-in buffer (SPC-4).
  bool overrun() const { return overrun_; }

 private:
  friend class LuQueue;
  friend class CommandContext;
  friend class TargetQueue;

  struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
  };

  // What a multi-request command does when its outstanding requests finish.
  enum class Step : uint8_t {
    kFinish,          // complete the task
    kReadAfterFlush,  // a READ with FUA: the flush is done, now issue `deferred`
  };

  // Block I/O state; meaningful only while the task is in flight.
  struct Io {
    uint32_t pending = 0;  // block requests outstanding
    int error = 0;         // the first failure's errno
    block::RequestType error_type = block::RequestType::kRead;
    block::RequestType main_type = block::RequestType::kRead;
    Step step = Step::kFinish;
    block::Request deferred;  // issued by kReadAfterFlush
    std::vector<iovec> iov;   // trimmed data buffers, or WRITE SAME's repeated pattern
    std::unique_ptr<uint8_t, FreeDeleter> pattern;  // WRITE SAME of a non-zero block
  };

  void ResetResults() {
    status_ = Status::kGood;
    sense_ = sense::kNoSense;
    in_transferred_ = 0;
    out_transferred_ = 0;
    overrun_ = false;
  }

  std::array<uint8_t, kMaxCdbSize> cdb_{};
  uint8_t cdb_size_ = 0;
  Status status_ = Status::kGood;
  Sense sense_;
  uint64_t in_transferred_ = 0;
  uint64_t out_transferred_ = 0;
  bool overrun_ = false;
  Io io_;
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_TASK_H_

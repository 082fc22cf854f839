#ifndef BLOCK_RAW_RECORDING_RING_H_
#define BLOCK_RAW_RECORDING_RING_H_

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "block/raw/uring_ops.h"

namespace block::raw {

// What a test can see of one submission.
struct SqeRecord {
  UringOpcode opcode = UringOpcode::kReadv;
  uint64_t offset = 0;
  uint64_t length = 0;  // bytes (the iovecs' total for kReadv/kWritev)
  unsigned iovec_count = 0;
  int rw_flags = 0;
  unsigned fsync_flags = 0;
  int fallocate_mode = 0;
};

// A perturbation applied to the next `times` submissions that match `opcode` (any, if unset).
struct RingFault {
  std::optional<UringOpcode> opcode;
  int times = 1;
  // Non-zero: the operation is not issued and completes with -error (EAGAIN, EIO, ENOSPC...).
  int error = 0;
  // For kReadv/kWritev with error == 0: only the first `short_bytes` bytes are issued, so the
  // kernel really transfers that much and reports a short count. 0 means half the length, rounded
  // down to a multiple of 512 (so that O_DIRECT still accepts it) when the length is at least 1024.
  bool short_transfer = false;
  uint64_t short_bytes = 0;
};

// A test double for the ring: forwards to a real ring (`inner`) while recording every SQE and
// counting Submit() calls, and applies RingFaults. Injected errors complete at the next Reap()
// after the Submit() that carried them, and signal the inner ring's completion eventfd like a
// real completion would.
class RecordingRing final : public UringOps {
 public:
  explicit RecordingRing(std::unique_ptr<UringOps> inner) : inner_(std::move(inner)) {}

  // Every SQE prepared so far, in order (including ones that faults replaced).
  const std::vector<SqeRecord>& records() const { return records_; }
  void ClearRecords() { records_.clear(); }
  // How many times Submit() (io_uring_submit) was called.
  int submit_calls() const { return submit_calls_; }
  void AddFault(const RingFault& fault) { faults_.push_back(fault); }

  unsigned entries() const override { return inner_->entries(); }
  bool Prep(const SqeSpec& sqe) override;
  int Submit() override;
  size_t Reap(std::span<CqeResult> out) override;
  int completion_fd() const override { return inner_->completion_fd(); }

 private:
  // The first fault matching `opcode`, with its remaining count consumed; nullopt if none.
  std::optional<RingFault> TakeFault(UringOpcode opcode);

  std::unique_ptr<UringOps> inner_;
  std::vector<SqeRecord> records_;
  int submit_calls_ = 0;
  std::deque<RingFault> faults_;
  // Injected completions waiting for Submit(), and those Reap() will return.
  std::vector<CqeResult> prepared_injected_;
  std::deque<CqeResult> ready_injected_;
  // Truncated iovec arrays for short transfers, by user_data, until the operation completes.
  std::map<uint64_t, std::vector<iovec>> truncated_;
};

}  // namespace block::raw

#endif  // BLOCK_RAW_RECORDING_RING_H_

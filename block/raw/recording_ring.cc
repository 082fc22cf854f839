#include "block/raw/recording_ring.h"

#include <sys/eventfd.h>

#include <algorithm>

namespace block::raw {

std::optional<RingFault> RecordingRing::TakeFault(UringOpcode opcode) {
  for (auto it = faults_.begin(); it != faults_.end(); ++it) {
    if (it->opcode.has_value() && *it->opcode != opcode) continue;
    RingFault fault = *it;
    if (--it->times <= 0) faults_.erase(it);
    return fault;
  }
  return std::nullopt;
}

bool RecordingRing::Prep(const SqeSpec& sqe) {
  const bool is_rw = sqe.opcode == UringOpcode::kReadv || sqe.opcode == UringOpcode::kWritev;
  std::optional<RingFault> fault = TakeFault(sqe.opcode);
  if (fault.has_value() && fault->error != 0) {
    // Replaces the operation: nothing reaches the kernel.
    records_.push_back({sqe.opcode, sqe.offset, sqe.length, sqe.iovec_count, sqe.rw_flags,
                        sqe.fsync_flags, sqe.fallocate_mode});
    prepared_injected_.push_back({sqe.user_data, -fault->error});
    return true;
  }
  SqeSpec issued = sqe;
  if (fault.has_value() && fault->short_transfer && is_rw && sqe.length > 1) {
    uint64_t keep = fault->short_bytes;
    if (keep == 0) {
      keep = sqe.length >= 1024 ? sqe.length / 2 / 512 * 512 : sqe.length / 2;
    }
    keep = std::min(keep, sqe.length - 1);
    std::vector<iovec> truncated;
    for (unsigned i = 0; i < sqe.iovec_count && keep > 0; ++i) {
      iovec part = sqe.iovecs[i];
      part.iov_len = std::min<uint64_t>(part.iov_len, keep);
      keep -= part.iov_len;
      truncated.push_back(part);
    }
    std::vector<iovec>& stored = truncated_[sqe.user_data] = std::move(truncated);
    issued.iovecs = stored.data();
    issued.iovec_count = static_cast<unsigned>(stored.size());
  }
  if (!inner_->Prep(issued)) {
    truncated_.erase(sqe.user_data);
    return false;
  }
  records_.push_back({sqe.opcode, sqe.offset, sqe.length, sqe.iovec_count, sqe.rw_flags,
                      sqe.fsync_flags, sqe.fallocate_mode});
  return true;
}

int RecordingRing::Submit() {
  ++submit_calls_;
  const int injected = static_cast<int>(prepared_injected_.size());
  if (injected > 0) {
    ready_injected_.insert(ready_injected_.end(), prepared_injected_.begin(),
                           prepared_injected_.end());
    prepared_injected_.clear();
    eventfd_write(inner_->completion_fd(), 1);
  }
  const int result = inner_->Submit();
  return result < 0 ? result : result + injected;
}

size_t RecordingRing::Reap(std::span<CqeResult> out) {
  size_t count = 0;
  while (count < out.size() && !ready_injected_.empty()) {
    out[count++] = ready_injected_.front();
    ready_injected_.pop_front();
  }
  const size_t real = inner_->Reap(out.subspan(count));
  for (size_t i = count; i < count + real; ++i) truncated_.erase(out[i].user_data);
  return count + real;
}

}  // namespace block::raw

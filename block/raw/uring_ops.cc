#include "block/raw/uring_ops.h"

#include <liburing.h>

#include <cerrno>
#include <memory>

#include "absl/strings/str_cat.h"
#include "vmm/sys_util/status_macros.h"

namespace block::raw {
namespace {

class LiburingOps final : public UringOps {
 public:
  LiburingOps() = default;
  ~LiburingOps() override {
    if (initialized_) io_uring_queue_exit(&ring_);
  }
  LiburingOps(const LiburingOps&) = delete;
  LiburingOps& operator=(const LiburingOps&) = delete;

  absl::Status Init(unsigned entries) {
    // io_uring_queue_init(3) returns -errno; it does not set errno.
    const int result = io_uring_queue_init(entries, &ring_, 0);
    if (result < 0) {
      return absl::ErrnoToStatus(-result, absl::StrCat("io_uring_queue_init(", entries, ")"));
    }
    initialized_ = true;
    entries_ = ring_.sq.ring_entries;
    return absl::OkStatus();
  }

  unsigned entries() const override { return entries_; }

  bool Prep(const SqeSpec& spec) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    switch (spec.opcode) {
      case UringOpcode::kReadv:
        io_uring_prep_readv(sqe, spec.fd, spec.iovecs, spec.iovec_count, spec.offset);
        sqe->rw_flags = spec.rw_flags;
        break;
      case UringOpcode::kWritev:
        io_uring_prep_writev2(sqe, spec.fd, spec.iovecs, spec.iovec_count, spec.offset,
                              spec.rw_flags);
        break;
      case UringOpcode::kFsync:
        io_uring_prep_fsync(sqe, spec.fd, spec.fsync_flags);
        break;
      case UringOpcode::kFallocate:
        io_uring_prep_fallocate(sqe, spec.fd, spec.fallocate_mode, spec.offset, spec.length);
        break;
    }
    io_uring_sqe_set_data64(sqe, spec.user_data);
    return true;
  }

  int Submit() override { return io_uring_submit(&ring_); }

  size_t Reap(std::span<CqeResult> out) override {
    size_t count = 0;
    unsigned head;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      if (count == out.size()) break;
      out[count].user_data = io_uring_cqe_get_data64(cqe);
      out[count].res = cqe->res;
      ++count;
    }
    io_uring_cq_advance(&ring_, static_cast<unsigned>(count));
    return count;
  }

  absl::Status RegisterEventFd(int fd) override {
    const int result = io_uring_register_eventfd(&ring_, fd);
    if (result < 0) return absl::ErrnoToStatus(-result, "io_uring_register_eventfd");
    return absl::OkStatus();
  }

 private:
  io_uring ring_{};
  bool initialized_ = false;
  unsigned entries_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<UringOps>> CreateLiburingOps(unsigned entries) {
  auto ops = std::make_unique<LiburingOps>();
  RETURN_IF_ERROR(ops->Init(entries));
  return std::unique_ptr<UringOps>(std::move(ops));
}

}  // namespace block::raw

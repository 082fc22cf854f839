#ifndef BLOCK_RAW_URING_OPS_H_
#define BLOCK_RAW_URING_OPS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace block::raw {

// The io_uring operations the raw backend uses (io_uring_enter(2), "IORING_OP_*").
enum class UringOpcode : uint8_t {
  kReadv,      // IORING_OP_READV
  kWritev,     // IORING_OP_WRITEV (rw_flags as for pwritev2(2), e.g. RWF_DSYNC)
  kFsync,      // IORING_OP_FSYNC (fsync_flags IORING_FSYNC_DATASYNC: fdatasync(2))
  kFallocate,  // IORING_OP_FALLOCATE (Linux 5.6; mode as for fallocate(2))
};

// One submission queue entry in the backend's own terms: the subset of struct io_uring_sqe it
// fills. The iovec array must stay valid until the entry has been submitted (the kernel copies it
// then: IORING_FEAT_SUBMIT_STABLE, io_uring_setup(2)); the backend keeps it until the completion
// anyway.
struct SqeSpec {
  UringOpcode opcode = UringOpcode::kReadv;
  int fd = -1;
  const iovec* iovecs = nullptr;  // kReadv, kWritev
  unsigned iovec_count = 0;
  uint64_t offset = 0;
  // kFallocate: the byte count; kReadv/kWritev: the iovecs' total (informative).
  uint64_t length = 0;
  int rw_flags = 0;          // kReadv/kWritev
  unsigned fsync_flags = 0;  // kFsync
  int fallocate_mode = 0;    // kFallocate
  uint64_t user_data = 0;
};

// One completion queue entry: `res` is the byte count or 0 on success, -errno on failure.
struct CqeResult {
  uint64_t user_data = 0;
  int32_t res = 0;
};

// The seam between the backend's queue logic and liburing: production uses CreateLiburingOps();
// tests wrap it (block/raw/recording_ring.h) to observe every submission and inject short transfers
// or errors. One virtual call per operation; nothing else sits on the I/O path.
class UringOps {
 public:
  virtual ~UringOps() = default;

  // The submission queue's size (io_uring_queue_init's `entries`).
  virtual unsigned entries() const = 0;
  // Fills the next free SQE; false (and nothing queued) when the submission queue is full.
  virtual bool Prep(const SqeSpec& sqe) = 0;
  // io_uring_submit(3): hands every prepared SQE to the kernel in one io_uring_enter(2). Returns
  // how many the kernel consumed (the rest stay queued for the next call) or -errno.
  virtual int Submit() = 0;
  // Copies up to out.size() completions into `out`, marks them seen and returns how many there
  // were. Never blocks.
  virtual size_t Reap(std::span<CqeResult> out) = 0;
  // io_uring_register_eventfd(3): `fd` is signalled whenever a completion is posted.
  virtual absl::Status RegisterEventFd(int fd) = 0;
};

// A real ring (io_uring_queue_init(3) with `entries` SQEs, no setup flags), torn down with
// io_uring_queue_exit(3).
absl::StatusOr<std::unique_ptr<UringOps>> CreateLiburingOps(unsigned entries);

}  // namespace block::raw

#endif  // BLOCK_RAW_URING_OPS_H_

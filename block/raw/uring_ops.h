#ifndef BLOCK_RAW_URING_OPS_H_
#define BLOCK_RAW_URING_OPS_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

struct io_uring;  // liburing.h

namespace block::raw {

// The io_uring operations the raw backend uses (io_uring_enter(2), "IORING_OP_*").
enum class UringOpcode : uint8_t {
  kReadv,      // IORING_OP_READV
  kWritev,     // IORING_OP_WRITEV (rw_flags as for pwritev2(2), e.g. RWF_DSYNC)
  kFsync,      // IORING_OP_FSYNC (fsync_flags IORING_FSYNC_DATASYNC: fdatasync(2))
  kFallocate,  // IORING_OP_FALLOCATE (Linux 5.6; mode as for fallocate(2))
  kFadvise,    // IORING_OP_FADVISE (Linux 5.6; advice as for posix_fadvise(2))
};

// One submission queue entry in the backend's own terms: the subset of struct io_uring_sqe it
// fills. Every entry acts on the ring's one file (see CreateLockedDownRing). The iovec array must
// stay valid until the entry has been submitted (the kernel copies it then:
// IORING_FEAT_SUBMIT_STABLE, io_uring_setup(2)); the backend keeps it until the completion anyway.
struct SqeSpec {
  UringOpcode opcode = UringOpcode::kReadv;
  const iovec* iovecs = nullptr;  // kReadv, kWritev
  unsigned iovec_count = 0;
  uint64_t offset = 0;
  // kFallocate, kFadvise: the byte count; kReadv/kWritev: the iovecs' total (informative).
  uint64_t length = 0;
  int rw_flags = 0;          // kReadv/kWritev
  unsigned fsync_flags = 0;  // kFsync
  int fallocate_mode = 0;    // kFallocate
  int fadvise_advice = 0;    // kFadvise
  uint64_t user_data = 0;
};

// One completion queue entry: `res` is the byte count or 0 on success, -errno on failure.
struct CqeResult {
  uint64_t user_data = 0;
  int32_t res = 0;
};

// The seam between the backend's queue logic and liburing: production uses CreateLockedDownRing();
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
  // An eventfd (owned by the ring) signalled whenever a completion is posted
  // (io_uring_register_eventfd(3)); the owner may also signal it itself, to wake its loop.
  virtual int completion_fd() const = 0;
};

// A real ring with `entries` SQEs for the one file `file_fd`, locked down before anything uses it
// (io_uring_register(2)), so that a thread which can write the ring's memory (a compromised
// iothread preparing entries by hand) reaches nothing but that file:
//   - created disabled (IORING_SETUP_R_DISABLED, Linux 5.10), so nothing runs before the rest;
//   - `file_fd` registered as fixed file 0 and the ring's own eventfd registered for completions;
//   - restricted (IORING_REGISTER_RESTRICTIONS) to the five operations of UringOpcode, each entry
//     required to carry IOSQE_FIXED_FILE and no other flag, so it can name fixed file 0 only;
//     any other operation (IORING_OP_OPENAT, SOCKET, CONNECT, ...) completes with -EACCES;
//   - no register operation allowed once enabled but IORING_UNREGISTER_FILES (which the ring
//     uses as it goes, so the file's lock is released with it): no file, buffer, eventfd or
//     credential can be added to the ring later (io_uring_register(2) answers EACCES);
//   - then enabled (IORING_REGISTER_ENABLE_RINGS).
// The ring keeps no reference to `file_fd` beyond the kernel's own (the registered file holds the
// open file description); torn down with io_uring_queue_exit(3).
absl::StatusOr<std::unique_ptr<UringOps>> CreateLockedDownRing(unsigned entries, int file_fd);

class LockedDownRing;  // uring_ops.cc

// Rings made while the process may still call io_uring_setup (before its sandbox), handed out
// later to bind to an image. A fresh ring carries no restriction, so a thread that can call
// io_uring_setup can queue any operation the kernel has (IORING_OP_UNLINKAT, RENAMEAT, CONNECT,
// ...) whatever its seccomp filter refuses: no thread of the VMM may call it once the sandbox is
// in force (vmm/sandbox/thread_policy.cc), and every ring comes from here.
//
// A ring of the pool is made as CreateLockedDownRing's, but without a file: disabled, its eventfd
// registered, restricted to the same five operations on fixed files only, with two register
// operations left allowed, IORING_REGISTER_FILES and IORING_UNREGISTER_FILES, then enabled. Take()
// registers the image as fixed file 0; Recycle() unregisters it and keeps the ring for the next
// Take(). Whoever can call io_uring_register (the control threads; never an iothread) can thus
// point a ring at a descriptor it holds, and do to it no more than read, write, sync, fallocate
// and fadvise, which its own system calls already do. Thread-safe.
class RingPool {
 public:
  // `count` rings of `entries` SQEs each, made now.
  static absl::StatusOr<std::shared_ptr<RingPool>> Create(unsigned count, unsigned entries);
  ~RingPool();

  // A ring bound to `file_fd` (fixed file 0), for one queue. ResourceExhausted when every ring is
  // taken (the message says how many the pool has).
  absl::StatusOr<std::unique_ptr<UringOps>> Take(int file_fd);
  // Gives back a ring Take() returned, drained (nothing prepared, in flight or left to reap): its
  // file is unregistered (so the image's lock goes with its last descriptor), its eventfd read
  // empty, and it waits for the next Take(). The VMM's threads may all unregister (its iothreads
  // and vCPU threads may call io_uring_register for IORING_UNREGISTER_FILES only); on a thread
  // that may not, the ring keeps its file, and with it the image's lock, until the next Take() or
  // Recycle() on a thread that may. A ring that is not the pool's, or not drained, is destroyed.
  void Recycle(std::unique_ptr<UringOps> ring);

  size_t available() const;

  explicit RingPool(unsigned size);  // Create() fills it

 private:
  const unsigned size_;  // named in the message when it is empty
  mutable absl::Mutex mutex_;
  // Rings given back on a thread that could not unregister their file (Recycle).
  void UnbindDeferred();

  std::vector<std::unique_ptr<LockedDownRing>> idle_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<LockedDownRing>> unbind_later_ ABSL_GUARDED_BY(mutex_);
};

// CreateLockedDownRing's set-up on a ring the caller owns: `ring` zero-initialized, `event_fd` the
// eventfd to register. On success the ring is enabled and the caller tears it down with
// io_uring_queue_exit(3); on error nothing is left to tear down. (The tests attack a ring set up
// by exactly this code through liburing directly.)
absl::Status SetUpLockedDownRing(unsigned entries, int file_fd, int event_fd, io_uring& ring);
// The pool's set-up (RingPool above) on a ring the caller owns: no file yet; register one with
// io_uring_register_files(3) and take it away with io_uring_unregister_files(3).
absl::Status SetUpPooledRing(unsigned entries, int event_fd, io_uring& ring);

}  // namespace block::raw

#endif  // BLOCK_RAW_URING_OPS_H_

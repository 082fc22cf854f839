#include "block/raw/uring_ops.h"

#include <liburing.h>

#include <array>
#include <cerrno>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace block::raw {
namespace {

// The fixed-file index of the ring's one file (io_uring_register_files(3)).
constexpr int kFileIndex = 0;

// liburing's calls return -errno and leave errno alone (a plain -1 would be the libc convention).
absl::Status UringError(int result, const char* call) {
  return absl::ErrnoToStatus(result == -1 ? errno : -result, call);
}

io_uring_restriction SqeOp(uint8_t op) {
  io_uring_restriction restriction{};
  restriction.opcode = IORING_RESTRICTION_SQE_OP;
  restriction.sqe_op = op;
  return restriction;
}

io_uring_restriction SqeFlags(uint16_t kind, uint8_t flags) {
  io_uring_restriction restriction{};
  restriction.opcode = kind;
  restriction.sqe_flags = flags;
  return restriction;
}

// The registrations and restrictions, on a ring created disabled; then it is enabled. `file_fd` < 0:
// a ring of the pool, whose file is registered later (RingPool::Take).
absl::Status LockDown(io_uring& ring, int file_fd, int event_fd) {
  int result;
  if (file_fd >= 0) {
    result = io_uring_register_files(&ring, &file_fd, 1);
    if (result < 0) return UringError(result, "io_uring_register_files");
  }
  result = io_uring_register_eventfd(&ring, event_fd);
  if (result < 0) return UringError(result, "io_uring_register_eventfd");
  // Register operations allowed once enabled: IORING_UNREGISTER_FILES, which only takes away (the
  // owner drops the file before the ring goes, so that the image's lock goes with its last
  // descriptor at once rather than whenever the kernel's deferred ring teardown runs); for a ring
  // of the pool also IORING_REGISTER_FILES, to be bound to the next image.
  std::vector<io_uring_restriction> restrictions;
  auto allow_register = [&restrictions](uint8_t op) {
    io_uring_restriction restriction{};
    restriction.opcode = IORING_RESTRICTION_REGISTER_OP;
    restriction.register_op = op;
    restrictions.push_back(restriction);
  };
  allow_register(IORING_UNREGISTER_FILES);
  if (file_fd < 0) allow_register(IORING_REGISTER_FILES);
  for (uint8_t op : {IORING_OP_READV, IORING_OP_WRITEV, IORING_OP_FSYNC, IORING_OP_FALLOCATE,
                     IORING_OP_FADVISE}) {
    restrictions.push_back(SqeOp(op));
  }
  restrictions.push_back(SqeFlags(IORING_RESTRICTION_SQE_FLAGS_REQUIRED, IOSQE_FIXED_FILE));
  restrictions.push_back(SqeFlags(IORING_RESTRICTION_SQE_FLAGS_ALLOWED, IOSQE_FIXED_FILE));
  // Through io_uring_register itself: Debian 12's liburing 2.3 declares
  // io_uring_register_restrictions() and io_uring_enable_rings() but does not export them.
  result = io_uring_register(ring.ring_fd, IORING_REGISTER_RESTRICTIONS, restrictions.data(),
                             restrictions.size());
  if (result < 0) return UringError(result, "IORING_REGISTER_RESTRICTIONS");
  result = io_uring_register(ring.ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
  if (result < 0) return UringError(result, "IORING_REGISTER_ENABLE_RINGS");
  return absl::OkStatus();
}

// A ring created disabled and locked down (LockDown); on error nothing is left to tear down.
absl::Status SetUp(unsigned entries, int file_fd, int event_fd, io_uring& ring) {
  io_uring_params params{};
  params.flags = IORING_SETUP_R_DISABLED;
  const int result = io_uring_queue_init_params(entries, &ring, &params);
  if (result < 0) return UringError(result, "io_uring_queue_init_params");
  absl::Status status = LockDown(ring, file_fd, event_fd);
  if (!status.ok()) {
    io_uring_queue_exit(&ring);
    return absl::Status(status.code(), absl::StrCat("locking the ring down: ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace

class LockedDownRing final : public UringOps {
 public:
  LockedDownRing() = default;
  ~LockedDownRing() override {
    if (!initialized_) return;
    if (bound_) io_uring_unregister_files(&ring_);
    io_uring_queue_exit(&ring_);
  }
  LockedDownRing(const LockedDownRing&) = delete;
  LockedDownRing& operator=(const LockedDownRing&) = delete;

  // `file_fd` < 0: a ring of `pool`, bound later (Bind).
  absl::Status Init(unsigned entries, int file_fd, const RingPool* pool = nullptr) {
    ASSIGN_OR_RETURN(event_fd_, sys_util::MakeEventFd());
    RETURN_IF_ERROR(SetUp(entries, file_fd, event_fd_.get(), ring_));
    initialized_ = true;
    bound_ = file_fd >= 0;
    pool_ = pool;
    entries_ = ring_.sq.ring_entries;
    return absl::OkStatus();
  }

  absl::Status Bind(int file_fd) {
    const int result = io_uring_register_files(&ring_, &file_fd, 1);
    if (result < 0) return UringError(result, "io_uring_register_files");
    bound_ = true;
    return absl::OkStatus();
  }
  // Nothing prepared and nothing left to reap (what a queue checks before it gives a ring back).
  bool Drained() { return io_uring_sq_ready(&ring_) == 0 && io_uring_cq_ready(&ring_) == 0; }
  // Back to no file, for the pool. Fails on a thread whose filter refuses IORING_UNREGISTER_FILES
  // (none of the VMM's: vmm/sandbox/thread_policy.cc).
  bool Unbind() {
    if (bound_ && io_uring_unregister_files(&ring_) < 0) return false;
    bound_ = false;
    sys_util::DrainEventFd(event_fd_.get());
    return true;
  }
  const RingPool* pool() const { return pool_; }

  unsigned entries() const override { return entries_; }

  bool Prep(const SqeSpec& spec) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) return false;
    switch (spec.opcode) {
      case UringOpcode::kReadv:
        io_uring_prep_readv(sqe, kFileIndex, spec.iovecs, spec.iovec_count, spec.offset);
        sqe->rw_flags = spec.rw_flags;
        break;
      case UringOpcode::kWritev:
        io_uring_prep_writev2(sqe, kFileIndex, spec.iovecs, spec.iovec_count, spec.offset,
                              spec.rw_flags);
        break;
      case UringOpcode::kFsync:
        io_uring_prep_fsync(sqe, kFileIndex, spec.fsync_flags);
        break;
      case UringOpcode::kFallocate:
        io_uring_prep_fallocate(sqe, kFileIndex, spec.fallocate_mode, spec.offset, spec.length);
        break;
      case UringOpcode::kFadvise:
        io_uring_prep_fadvise(sqe, kFileIndex, spec.offset, static_cast<off_t>(spec.length),
                              spec.fadvise_advice);
        break;
    }
    sqe->flags |= IOSQE_FIXED_FILE;
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

  int completion_fd() const override { return event_fd_.get(); }

 private:
  // The ring's registered eventfd: closed only after the destructor's body has torn the ring down.
  sys_util::ScopedFd event_fd_;
  io_uring ring_{};
  bool initialized_ = false;
  bool bound_ = false;
  const RingPool* pool_ = nullptr;  // the pool it came from, compared only
  unsigned entries_ = 0;
};

absl::Status SetUpLockedDownRing(unsigned entries, int file_fd, int event_fd, io_uring& ring) {
  return SetUp(entries, file_fd, event_fd, ring);
}

absl::Status SetUpPooledRing(unsigned entries, int event_fd, io_uring& ring) {
  return SetUp(entries, -1, event_fd, ring);
}

absl::StatusOr<std::shared_ptr<RingPool>> RingPool::Create(unsigned count, unsigned entries) {
  auto pool = std::make_shared<RingPool>(count);
  absl::MutexLock lock(&pool->mutex_);
  for (unsigned i = 0; i < count; ++i) {
    auto ring = std::make_unique<LockedDownRing>();
    if (absl::Status made = ring->Init(entries, -1, pool.get()); !made.ok()) {
      return absl::Status(made.code(), absl::StrCat("making io_uring ", i + 1, " of ", count,
                                                    " for the ring pool: ", made.message()));
    }
    pool->idle_.push_back(std::move(ring));
  }
  return pool;
}

RingPool::RingPool(unsigned size) : size_(size) {}
RingPool::~RingPool() = default;

void RingPool::UnbindDeferred() {
  std::vector<std::unique_ptr<LockedDownRing>> waiting;
  {
    absl::MutexLock lock(&mutex_);
    waiting.swap(unbind_later_);
  }
  for (std::unique_ptr<LockedDownRing>& ring : waiting) {
    const bool unbound = ring->Unbind();
    absl::MutexLock lock(&mutex_);
    (unbound ? idle_ : unbind_later_).push_back(std::move(ring));
  }
}

absl::StatusOr<std::unique_ptr<UringOps>> RingPool::Take(int file_fd) {
  UnbindDeferred();
  std::unique_ptr<LockedDownRing> ring;
  {
    absl::MutexLock lock(&mutex_);
    if (idle_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", size_,
                       " io_urings of the VMM are in use (one per drive and iothread; they are "
                       "made before the sandbox: raise --io-rings)"));
    }
    ring = std::move(idle_.back());
    idle_.pop_back();
  }
  if (absl::Status bound = ring->Bind(file_fd); !bound.ok()) {
    Recycle(std::move(ring));
    return bound;
  }
  return std::unique_ptr<UringOps>(std::move(ring));
}

void RingPool::Recycle(std::unique_ptr<UringOps> ring) {
  auto* ours = dynamic_cast<LockedDownRing*>(ring.get());
  if (ours == nullptr || ours->pool() != this || !ours->Drained()) return;  // destroyed
  ring.release();
  std::unique_ptr<LockedDownRing> owned(ours);
  const bool unbound = owned->Unbind();
  {
    absl::MutexLock lock(&mutex_);
    (unbound ? idle_ : unbind_later_).push_back(std::move(owned));
  }
  if (unbound) UnbindDeferred();  // this thread may: those given back where it could not
}

size_t RingPool::available() const {
  absl::MutexLock lock(&mutex_);
  return idle_.size() + unbind_later_.size();
}

absl::StatusOr<std::unique_ptr<UringOps>> CreateLockedDownRing(unsigned entries, int file_fd) {
  auto ring = std::make_unique<LockedDownRing>();
  RETURN_IF_ERROR(ring->Init(entries, file_fd));
  return std::unique_ptr<UringOps>(std::move(ring));
}

}  // namespace block::raw

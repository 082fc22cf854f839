#include "block/raw/raw_file_queue.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <linux/io_uring.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <deque>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "block/raw/bounce_arena.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"

namespace block::raw {
namespace {

// Consecutive -EAGAIN/-EINTR results tolerated for one request before it fails with EIO. QEMU's
// block/io_uring.c (luring_process_completions) resubmits these without limit; the bound only keeps
// a persistently refusing file from spinning the iothread forever.
constexpr int kMaxRetries = 1000;
// Completions copied out of the ring per Reap() call.
constexpr size_t kReapBatch = 64;

// Bounce memory one queue may hold at once (its BounceArena). Bounced requests are sized by the
// guest (misaligned buffers under O_DIRECT): unbounded, 256 such 8 MiB writes from a 32 MiB guest
// took 2 GB of host memory (H6 of docs/security.md), and heap buffers bounded by a
// budget still left the heap fragmented at 0.7-0.9 GB (H6 too). Requests beyond the
// arena wait, in order, until earlier ones complete; a request larger than the arena goes through
// it in arena-sized chunks, one after the other.
constexpr uint64_t kBounceBudgetBytes = uint64_t{16} << 20;
constexpr size_t kPageBytes = 4096;

// How far a queue reads ahead of a stream of reads of a medium read front to back
// (RawFileOptions::sequential), and the least it asks for at a time (a hint per request of a
// guest reading 128 KiB at a time would be one system call's work per request for the kernel).
constexpr uint64_t kReadAheadBytes = uint64_t{1} << 20;
constexpr uint64_t kReadAheadStep = 256 << 10;

// One request between Enqueue() and its completion.
struct Op {
  bool busy = false;
  uint64_t cookie = 0;
  RequestType type = RequestType::kRead;
  bool fua = false;
  // The next byte to transfer (or to discard) and how many are left.
  uint64_t offset = 0;
  uint64_t remaining = 0;
  // Reads and writes: our own copy of the iovec array (or one iovec over `bounce`), advanced past
  // what short transfers already moved; the caller's array is never modified. iovecs[first..] is
  // what is left.
  std::vector<iovec> iovecs;
  size_t first = 0;
  // Set when the caller's buffers cannot go to the kernel as they are (O_DIRECT alignment, or more
  // than IOV_MAX of them): the data goes through a piece of the queue's BounceArena
  // (bounce_bytes at bounce_offset; 0 bytes: not bounced), one chunk of at most that size at a
  // time, and `caller` receives each chunk after a read. caller_done: bytes of the caller's
  // buffers that finished chunks covered; chunk_length: the chunk in the kernel now.
  size_t bounce_offset = 0;
  size_t bounce_bytes = 0;
  uint64_t bounce_total = 0;
  uint64_t caller_done = 0;
  uint64_t chunk_length = 0;
  std::span<const iovec> caller;
  int retries = 0;
  // The queue's own read-ahead hint (POSIX_FADV_WILLNEED for offset, remaining): no caller, no
  // completion reported, its result ignored.
  bool read_ahead = false;
};

class RawFileQueue final : public BlockQueue {
 public:
  RawFileQueue(std::shared_ptr<const RawFileBackend> backend, std::unique_ptr<UringOps> ring,
               CompletionHandler handler)
      : backend_(std::move(backend)),
        info_(backend_->info()),
        direct_io_(backend_->direct_io()),
        reads_ahead_(backend_->reads_ahead()),
        memory_alignment_(backend_->memory_alignment()),
        handler_(std::move(handler)),
        bounce_arena_(kBounceBudgetBytes, std::max<size_t>(kPageBytes, memory_alignment_)),
        ring_(std::move(ring)) {}

  // The kernel may still be reading or writing buffers of submitted requests: wait for every one of
  // them (io_uring_queue_exit(3) does not wait for in-flight I/O before the memory is reused).
  // Completions arriving here are dropped without calling the handler. A ring left with nothing in
  // it goes back to the backend for the next queue (see RawFileBackend::CreateQueue).
  ~RawFileQueue() override {
    pending_.clear();
    bounce_waiting_.clear();
    std::array<CqeResult, kReapBatch> batch;
    bool drained = true;
    while (kernel_in_flight_ > prepared_) {
      const size_t count = ring_->Reap(batch);
      kernel_in_flight_ -= std::min<size_t>(count, kernel_in_flight_);
      if (count > 0) continue;
      pollfd pfd = {ring_->completion_fd(), POLLIN, 0};
      if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
        drained = false;
        break;
      }
      DrainEventFd();
    }
    // Entries prepared but never submitted would go to the kernel with the next queue's first
    // submission, pointing at buffers freed with this queue: such a ring is not reused.
    if (drained && prepared_ == 0 && ring_->Reap(batch) == 0) {
      DrainEventFd();
      backend_->ReturnRing(std::move(ring_));
    }
  }

  RawFileQueue(const RawFileQueue&) = delete;
  RawFileQueue& operator=(const RawFileQueue&) = delete;

  void Enqueue(const Request& request, uint64_t cookie) override;
  void Submit() override {
    IssuePending();
    SubmitPrepared();
    // Requests completed without I/O still complete from ProcessCompletions(): wake the loop.
    if (!ready_.empty()) Kick();
  }
  int completion_fd() const override { return ring_->completion_fd(); }
  void ProcessCompletions() override;
  size_t in_flight() const override { return in_flight_; }

 private:
  struct Done {
    uint64_t cookie;
    int error;
  };

  // 0 when the request can go to the kernel, else the errno it completes with; `trivial` is set for
  // requests that are complete without any I/O.
  int Validate(const Request& request, uint64_t length, bool* trivial) const;
  bool NeedsBounce(std::span<const iovec> buffers) const;
  // With reads_ahead_: a read of [offset, offset + length) that continues the stream asks the
  // kernel for up to kReadAheadBytes beyond it, once per byte; a read elsewhere starts a new
  // stream there.
  void FollowStream(uint64_t offset, uint64_t length);
  // Gives op its piece of the bounce arena and starts its first chunk; false when the arena has no
  // room now. Completes it with ENOMEM if the arena cannot be mapped at all.
  bool StartBounced(uint32_t index);
  // Queues op's next chunk for the kernel (copying a write's data in).
  void StartChunk(uint32_t index);
  // Starts waiting bounced requests, in order, while the budget allows.
  void AdmitBounced();
  uint32_t AcquireOp();
  void ReleaseOp(uint32_t index);
  SqeSpec MakeSqe(uint32_t index) const;
  // Moves requests from the FIFO into free SQEs, keeping at most entries() in the kernel so the
  // completion queue (2 x entries, io_uring_setup(2)) can never overflow.
  void IssuePending();
  // One io_uring_submit(3) for everything prepared.
  void SubmitPrepared();
  void HandleCqe(const CqeResult& cqe);
  void Finish(uint32_t index, int error);
  void Kick() { sys_util::SignalEventFd(ring_->completion_fd()); }
  void DrainEventFd() { sys_util::DrainEventFd(ring_->completion_fd()); }

  const std::shared_ptr<const RawFileBackend> backend_;
  const BackendInfo info_;
  const bool direct_io_;
  const bool reads_ahead_;
  const uint32_t memory_alignment_;
  CompletionHandler handler_;
  // Slots, reused; an index is the SQE's user_data. unique_ptr keeps each Op in place while the
  // vector grows.
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<uint32_t> free_;
  // Requests waiting for an SQE (new ones at the back, resubmitted remainders at the front).
  std::deque<uint32_t> pending_;
  // Requests that completed without I/O, reported at the next ProcessCompletions().
  std::deque<Done> ready_;
  // Requests that need bounce memory the arena cannot give yet (their Op holds everything but
  // that), in arrival order.
  std::deque<uint32_t> bounce_waiting_;
  BounceArena bounce_arena_;
  size_t in_flight_ = 0;         // enqueued, not yet reported to the handler
  size_t kernel_in_flight_ = 0;  // prepared SQEs whose CQE has not been reaped
  size_t prepared_ = 0;          // prepared SQEs the kernel has not consumed yet
  // The read-ahead (FollowStream): where the last read ended, and how far the kernel has been
  // asked to read.
  uint64_t stream_end_ = 0;
  uint64_t advised_end_ = 0;
  // Declared last, so destroyed first: the ring goes before the buffers it may point at.
  std::unique_ptr<UringOps> ring_;
};

int RawFileQueue::Validate(const Request& request, uint64_t length, bool* trivial) const {
  *trivial = false;
  const uint64_t size = backend_->size_bytes();
  const bool in_range = length <= size && request.offset <= size - length;
  switch (request.type) {
    case RequestType::kRead:
    case RequestType::kWrite:
      if (request.type == RequestType::kWrite && info_.read_only) return EROFS;
      // Never issue I/O outside the medium, even though the drive layer checks too.
      if (!in_range) return ERANGE;
      // O_DIRECT rejects misaligned file ranges (open(2), "O_DIRECT"); a bounce buffer cannot fix
      // those without read-modify-write, which is the drive layer's business if anyone's.
      if (direct_io_ && ((request.offset | length) % info_.logical_block_size) != 0) return EINVAL;
      if (length == 0) *trivial = true;
      return 0;
    case RequestType::kFlush:
      // Nothing of ours to make durable on a read-only file.
      if (info_.read_only) *trivial = true;
      return 0;
    case RequestType::kDiscard:
      if (info_.read_only) return EROFS;
      if (!in_range) return ERANGE;
      if (length == 0) *trivial = true;
      return 0;
  }
  return EINVAL;
}

bool RawFileQueue::NeedsBounce(std::span<const iovec> buffers) const {
  // readv(2): more than IOV_MAX iovecs is EINVAL; one linear buffer avoids that in every mode.
  if (buffers.size() > IOV_MAX) return true;
  if (!direct_io_) return false;
  // Linux checks each segment: its address against the DMA alignment and its length against the
  // logical block size (iov_iter_is_aligned(), via statx's stx_dio_mem_align/stx_dio_offset_align).
  const uintptr_t memory_mask = memory_alignment_ - 1;
  const uint64_t length_mask = info_.logical_block_size - 1;
  for (const iovec& buffer : buffers) {
    if ((reinterpret_cast<uintptr_t>(buffer.iov_base) & memory_mask) != 0) return true;
    if ((buffer.iov_len & length_mask) != 0) return true;
  }
  return false;
}

uint32_t RawFileQueue::AcquireOp() {
  uint32_t index;
  if (free_.empty()) {
    index = static_cast<uint32_t>(ops_.size());
    ops_.push_back(std::make_unique<Op>());
  } else {
    index = free_.back();
    free_.pop_back();
  }
  ops_[index]->busy = true;
  return index;
}

void RawFileQueue::ReleaseOp(uint32_t index) {
  Op& op = *ops_[index];
  op.busy = false;
  op.read_ahead = false;
  op.iovecs.clear();  // keeps its capacity for the next request
  if (op.bounce_bytes != 0) bounce_arena_.Free(op.bounce_offset, op.bounce_bytes);
  op.bounce_bytes = 0;
  op.caller = {};
  free_.push_back(index);
}

void RawFileQueue::Enqueue(const Request& request, uint64_t cookie) {
  ++in_flight_;
  const uint64_t length = request.length();
  bool trivial = false;
  if (const int error = Validate(request, length, &trivial); error != 0 || trivial) {
    ready_.push_back({cookie, error});
    return;
  }
  // Data already lost from the page cache (RawFileBackend::lost_writeback_error): nothing may be
  // reported durable any more. Plain reads and writes go on.
  if (const int lost = backend_->lost_writeback_error();
      lost != 0 && (request.type == RequestType::kFlush ||
                    (request.type == RequestType::kWrite && request.fua))) {
    ready_.push_back({cookie, lost});
    return;
  }
  const uint32_t index = AcquireOp();
  Op& op = *ops_[index];
  op.cookie = cookie;
  op.type = request.type;
  op.fua = request.fua;
  op.offset = request.offset;
  op.remaining = length;
  op.first = 0;
  op.retries = 0;
  if (request.type == RequestType::kRead || request.type == RequestType::kWrite) {
    if (NeedsBounce(request.buffers)) {
      op.caller = request.buffers;  // the caller keeps its iovec array until completion
      op.bounce_total = length;
      op.caller_done = 0;
      // Behind others already waiting, or over the budget: wait (order is kept).
      if (!bounce_waiting_.empty() || !StartBounced(index)) bounce_waiting_.push_back(index);
      return;
    } else {
      op.iovecs.assign(request.buffers.begin(), request.buffers.end());
    }
  }
  pending_.push_back(index);
  if (reads_ahead_ && request.type == RequestType::kRead) FollowStream(request.offset, length);
}

void RawFileQueue::FollowStream(uint64_t offset, uint64_t length) {
  const uint64_t end = offset + length;
  const bool continues = offset == stream_end_;
  stream_end_ = end;
  if (!continues) {
    // A jump (a seek, another file of the disc): nothing is asked for until the reads show a
    // stream again, so random reads cost no hints.
    advised_end_ = end;
    return;
  }
  const uint64_t from = std::max(advised_end_, end);
  const uint64_t to = std::min(end + kReadAheadBytes, backend_->size_bytes());
  if (to <= from || to - from < std::min(kReadAheadStep, to - end)) return;
  advised_end_ = to;
  const uint32_t index = AcquireOp();
  Op& op = *ops_[index];
  op.read_ahead = true;
  op.type = RequestType::kRead;
  op.cookie = 0;
  op.offset = from;
  op.remaining = to - from;
  op.first = 0;
  op.retries = 0;
  // Behind the read that prompted it, in the same submission.
  pending_.push_back(index);
}

namespace {

// Copies `length` bytes between the flat buffer `flat` and the iovecs `buffers`, starting `skip`
// bytes into the latter: into the iovecs for a read's data, out of them for a write's.
enum class CopyDirection { kToIovecs, kFromIovecs };
void CopyIovecs(std::span<const iovec> buffers, uint64_t skip, char* flat, uint64_t length,
                CopyDirection direction) {
  for (const iovec& buffer : buffers) {
    if (length == 0) break;
    if (skip >= buffer.iov_len) {
      skip -= buffer.iov_len;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(buffer.iov_len - skip, length);
    char* segment = static_cast<char*>(buffer.iov_base) + skip;
    if (direction == CopyDirection::kToIovecs) {
      std::memcpy(segment, flat, n);
    } else {
      std::memcpy(flat, segment, n);
    }
    flat += n;
    length -= n;
    skip = 0;
  }
}

}  // namespace

bool RawFileQueue::StartBounced(uint32_t index) {
  Op& op = *ops_[index];
  const size_t wanted =
      static_cast<size_t>(std::min<uint64_t>(op.bounce_total, bounce_arena_.capacity()));
  const std::optional<size_t> offset = bounce_arena_.Allocate(wanted);
  if (!offset.has_value()) {
    if (bounce_arena_.bytes_in_use() != 0) return false;  // wait for earlier requests
    const uint64_t cookie = op.cookie;                    // an empty arena that cannot be mapped
    ReleaseOp(index);
    ready_.push_back({cookie, ENOMEM});
    return true;
  }
  op.bounce_offset = *offset;
  op.bounce_bytes = wanted;
  StartChunk(index);
  return true;
}

void RawFileQueue::StartChunk(uint32_t index) {
  Op& op = *ops_[index];
  const uint64_t chunk = std::min<uint64_t>(op.bounce_total - op.caller_done, op.bounce_bytes);
  char* memory = bounce_arena_.at(op.bounce_offset);
  if (op.type == RequestType::kWrite) {
    CopyIovecs(op.caller, op.caller_done, memory, chunk, CopyDirection::kFromIovecs);
  }
  op.chunk_length = chunk;
  op.remaining = chunk;
  op.first = 0;
  op.iovecs.assign(1, iovec{memory, static_cast<size_t>(chunk)});
  pending_.push_back(index);
}

void RawFileQueue::AdmitBounced() {
  while (!bounce_waiting_.empty() && StartBounced(bounce_waiting_.front())) {
    bounce_waiting_.pop_front();
  }
}

SqeSpec RawFileQueue::MakeSqe(uint32_t index) const {
  const Op& op = *ops_[index];
  SqeSpec sqe;
  sqe.user_data = index;
  sqe.offset = op.offset;
  sqe.length = op.remaining;
  if (op.read_ahead) {
    // posix_fadvise(2) WILLNEED: the kernel starts reading the range into the page cache and
    // returns; io_uring runs it on one of its own workers, so the iothread never waits for it.
    sqe.opcode = UringOpcode::kFadvise;
    sqe.fadvise_advice = POSIX_FADV_WILLNEED;
    return sqe;
  }
  switch (op.type) {
    case RequestType::kRead:
    case RequestType::kWrite:
      sqe.opcode = op.type == RequestType::kRead ? UringOpcode::kReadv : UringOpcode::kWritev;
      sqe.iovecs = op.iovecs.data() + op.first;
      sqe.iovec_count = static_cast<unsigned>(op.iovecs.size() - op.first);
      // Native FUA: RWF_DSYNC makes this one write durable (pwritev2(2): "per-I/O O_DSYNC"), as
      // io_uring passes rw_flags through to the kiocb (io_uring_enter(2), IORING_OP_WRITEV). With
      // FuaMode::kEmulate the drive layer follows the write with a flush instead.
      if (op.type == RequestType::kWrite && op.fua && info_.native_fua) sqe.rw_flags = RWF_DSYNC;
      break;
    case RequestType::kFlush:
      sqe.opcode = UringOpcode::kFsync;
      // fdatasync(2): the data and the metadata needed to read it back; the size never changes.
      sqe.fsync_flags = IORING_FSYNC_DATASYNC;
      sqe.offset = 0;
      sqe.length = 0;
      break;
    case RequestType::kDiscard:
      sqe.opcode = UringOpcode::kFallocate;
      // fallocate(2): deallocate the range, reads return zeros, the file size stays. On a block
      // device this zeroes the range (blkdev_fallocate) where the device can do so without writing.
      sqe.fallocate_mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE;
      break;
  }
  return sqe;
}

void RawFileQueue::IssuePending() {
  while (!pending_.empty() && kernel_in_flight_ < ring_->entries()) {
    if (!ring_->Prep(MakeSqe(pending_.front()))) break;  // SQ full: the rest wait, in order
    pending_.pop_front();
    ++kernel_in_flight_;
    ++prepared_;
  }
}

void RawFileQueue::SubmitPrepared() {
  if (prepared_ == 0) return;
  const int result = ring_->Submit();
  if (result >= 0) {
    // SQEs the kernel did not consume stay in the ring for the next call.
    prepared_ -= std::min<size_t>(result, prepared_);
    return;
  }
  // Like QEMU's ioq_submit(): the SQEs stay queued and go with the next submission. -EAGAIN (no
  // memory for requests), -EBUSY (completions must be reaped first) and -EINTR pass: come back
  // soon.
  if (result == -EAGAIN || result == -EBUSY || result == -EINTR) Kick();
}

void RawFileQueue::HandleCqe(const CqeResult& cqe) {
  if (kernel_in_flight_ > 0) --kernel_in_flight_;
  if (cqe.user_data >= ops_.size() || !ops_[cqe.user_data]->busy) return;  // cannot happen
  const uint32_t index = static_cast<uint32_t>(cqe.user_data);
  Op& op = *ops_[index];
  if (op.read_ahead) {
    // A hint: whatever came of it, the reads are as correct, only sooner or later served.
    ReleaseOp(index);
    return;
  }
  if (cqe.res < 0) {
    const int error = -cqe.res;
    if (error == EAGAIN || error == EINTR) {
      // QEMU's block/io_uring.c resubmits these too: the request was not done, only refused.
      if (++op.retries <= kMaxRetries) {
        pending_.push_front(index);
      } else {
        Finish(index, EIO);
      }
      return;
    }
    // A discard is a hint (request.h: reads return zeros or the old data): a file or device that
    // cannot punch holes has done nothing wrong. QEMU's bdrv_co_pdiscard() ignores -ENOTSUP alike.
    if (op.type == RequestType::kDiscard && error == EOPNOTSUPP) {
      Finish(index, 0);
      return;
    }
    // A failed fdatasync, or a failed RWF_DSYNC write (EIO: its writeback; ENOSPC or EDQUOT
    // before it would have dirtied nothing), may have lost other writes' data too.
    if (op.type == RequestType::kFlush ||
        (op.type == RequestType::kWrite && op.fua && info_.native_fua && error == EIO)) {
      backend_->NoteFailedWriteback(error);
    }
    Finish(index, error);
    return;
  }
  op.retries = 0;
  if (op.type == RequestType::kFlush || op.type == RequestType::kDiscard) {
    Finish(index, 0);
    return;
  }
  const uint64_t done = static_cast<uint64_t>(cqe.res);
  if (done > op.remaining) {
    Finish(index, EIO);  // more than was asked: the kernel or the seam is broken
    return;
  }
  auto zero_rest = [&op] {
    for (size_t i = op.first; i < op.iovecs.size(); ++i) {
      std::memset(op.iovecs[i].iov_base, 0, op.iovecs[i].iov_len);
    }
    op.remaining = 0;
  };
  if (done == 0 && op.remaining > 0) {
    if (op.type == RequestType::kRead) {
      // End of file inside the size seen at Open(): the file was truncated behind our back. Read
      // what is not there as zeros, as QEMU's raw driver does (block/io_uring.c
      // luring_resubmit_short_read, block/file-posix.c handle_aiocb_rw), rather than fail.
      zero_rest();
      Finish(index, 0);
    } else {
      // A write that makes no progress will not make any on retry; QEMU's linux-aio.c reports
      // short writes as -ENOSPC.
      Finish(index, ENOSPC);
    }
    return;
  }
  // Advance our own iovec copy past what was transferred.
  op.offset += done;
  op.remaining -= done;
  for (uint64_t left = done; left > 0;) {
    iovec& segment = op.iovecs[op.first];
    if (left >= segment.iov_len) {
      left -= segment.iov_len;
      ++op.first;
    } else {
      segment.iov_base = static_cast<char*>(segment.iov_base) + left;
      segment.iov_len -= left;
      left = 0;
    }
  }
  while (op.first < op.iovecs.size() && op.iovecs[op.first].iov_len == 0) ++op.first;
  if (op.remaining == 0) {
    Finish(index, 0);
    return;
  }
  if (direct_io_ && op.offset % info_.logical_block_size != 0) {
    // O_DIRECT cannot continue from a misaligned offset. A short read there is end of file in the
    // middle of a block (QEMU's handle_aiocb_rw_linear assumes the same); a short write is out of
    // space, as above.
    if (op.type == RequestType::kRead) {
      zero_rest();
      Finish(index, 0);
    } else {
      Finish(index, ENOSPC);
    }
    return;
  }
  // Short transfer: resubmit the remainder ahead of requests that have not started.
  pending_.push_front(index);
}

void RawFileQueue::Finish(uint32_t index, int error) {
  Op& op = *ops_[index];
  if (error == 0 && op.bounce_bytes != 0) {
    if (op.type == RequestType::kRead) {
      CopyIovecs(op.caller, op.caller_done, bounce_arena_.at(op.bounce_offset), op.chunk_length,
                 CopyDirection::kToIovecs);
    }
    op.caller_done += op.chunk_length;
    if (op.caller_done < op.bounce_total) {
      StartChunk(index);  // the next chunk, through the same piece of the arena
      return;
    }
  }
  const uint64_t cookie = op.cookie;
  // Free the slot first: the handler may enqueue (and submit) the next request at once.
  ReleaseOp(index);
  --in_flight_;
  handler_(cookie, Completion{error});
}

void RawFileQueue::ProcessCompletions() {
  // Clear readiness before reaping, so a completion posted after the reap signals again.
  DrainEventFd();
  std::array<CqeResult, kReapBatch> batch;
  for (;;) {
    const size_t count = ring_->Reap(batch);
    for (size_t i = 0; i < count; ++i) HandleCqe(batch[i]);
    if (count < batch.size()) break;
  }
  while (!ready_.empty()) {
    const Done done = ready_.front();
    ready_.pop_front();
    --in_flight_;
    handler_(done.cookie, Completion{done.error});
  }
  // Room may have freed up: bounced requests that waited for the budget, resubmissions and
  // requests that waited for the ring go out now.
  AdmitBounced();
  IssuePending();
  SubmitPrepared();
  if (!ready_.empty()) Kick();  // an admission that failed to allocate completes next round
}

}  // namespace

std::unique_ptr<BlockQueue> MakeRawFileQueue(std::shared_ptr<const RawFileBackend> backend,
                                             std::unique_ptr<UringOps> ring,
                                             CompletionHandler handler) {
  return std::make_unique<RawFileQueue>(std::move(backend), std::move(ring), std::move(handler));
}

}  // namespace block::raw

#ifndef BLOCK_RAW_RAW_FILE_BACKEND_H_
#define BLOCK_RAW_RAW_FILE_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "block/backend.h"
#include "block/cache_mode.h"
#include "block/raw/uring_ops.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block::raw {

struct RawFileOptions {
  // Only decides whether the file is opened with O_DIRECT (UsesDirectIo()). The rest of the cache
  // policy (WCE, ignoring flushes in "unsafe", FUA on every write in "writethrough") is the drive
  // layer's: this backend does what each request asks.
  CacheMode cache_mode = CacheMode::kWriteback;
  // Open O_RDONLY; writes and discards then fail with EROFS.
  bool read_only = false;
  // A medium mostly read front to back (a CD: an installer's packages, a copy, a player). Through
  // the page cache (no O_DIRECT) the kernel is told so (POSIX_FADV_SEQUENTIAL), which doubles its
  // read-ahead window for this open file, and each queue reads ahead of a stream of reads that
  // follow on from each other: it asks the kernel (POSIX_FADV_WILLNEED, through the ring, so the
  // iothread never waits) for what lies up to 1 MiB beyond the stream, so the data of a guest's
  // next requests is already being read while the guest handles this one. Measured on a slow
  // host drive (docs/host-cdrom.md).
  bool sequential = false;
  // kNative and kAuto: a write with Request::fua is one pwritev2(2)-style write with RWF_DSYNC (the
  // drive layer decides per write under kAuto). kEmulate: info().native_fua is false, the drive
  // layer emulates FUA (write, then flush) and the backend ignores Request::fua.
  FuaMode fua_mode = FuaMode::kAuto;
  // Submission queue entries per io_uring (one ring per queue, that is per iothread). Requests
  // beyond what the ring holds wait in a FIFO inside the queue.
  unsigned ring_entries = 128;
  // Rings made by Open() itself, on the thread that opens the file, for the queues to come: one
  // per thread that will serve the drive. An iothread's filter refuses io_uring_setup and
  // io_uring_register (vmm/sandbox/thread_policy.cc), so the rings its queues use must exist
  // before; a queue's ring goes back to the backend when the queue is destroyed (a device reset
  // and the next activation use the same rings).
  unsigned prepared_rings = 1;
  // Where the rings come from: taken from this pool and given back to it when the backend goes
  // (the product's way: no thread may call io_uring_setup once the sandbox is in force). Unset:
  // made here with CreateLockedDownRing, on a thread that may still make rings (tests, tools).
  std::shared_ptr<RingPool> ring_pool;
};

// A raw image (regular file or block device) served through io_uring. Thread-safe as BlockBackend
// requires: after Open() it is immutable, and each queue owns its own ring.
class RawFileBackend final : public BlockBackend,
                             public std::enable_shared_from_this<RawFileBackend> {
 public:
  // Opens `path` with O_CLOEXEC, O_RDWR (or O_RDONLY when options.read_only) and O_DIRECT when
  // UsesDirectIo(options.cache_mode). Errors: NotFound (no such file), FailedPrecondition (a
  // read-only file or file system opened read-write, a directory, not a regular file or block
  // device, a file system without O_DIRECT), InvalidArgument (bad options), others from errno.
  // Gives its idle rings back to the pool they came from (RawFileOptions::ring_pool).
  ~RawFileBackend() override;

  static absl::StatusOr<std::shared_ptr<RawFileBackend>> Open(const std::string& path,
                                                              const RawFileOptions& options);
  // The same for `relative_path` resolved strictly beneath the directory `dir_fd` (openat2(2)
  // RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: no "..", absolute path or symlink may lead out, and
  // no /proc magic link may lead anywhere). A path that would leave is PermissionDenied, whether or
  // not what it names exists: the answer says nothing about files outside. Errors name
  // `shown_path`.
  static absl::StatusOr<std::shared_ptr<RawFileBackend>> OpenBeneath(
      int dir_fd, const std::string& relative_path, const std::string& shown_path,
      const RawFileOptions& options);

  const BackendInfo& info() const override { return info_; }
  uint64_t size_bytes() const override { return size_bytes_.load(std::memory_order_acquire); }
  // A regular file is truncated or extended (ftruncate; growing adds a hole). Shrinking is refused
  // (FailedPrecondition) while the file holds data past the new end (SEEK_DATA), so nothing
  // written is cut off; a block device takes no size (the host decides it: resize the volume,
  // then call with none). Queues check ranges against the new size from their next request.
  absl::StatusOr<uint64_t> Resize(std::optional<uint64_t> new_size) override;
  // Uses one of the prepared rings (RawFileOptions::prepared_rings) or, if none is left, takes one
  // from the pool (ResourceExhausted when it is empty) or, without a pool, makes one (which fails
  // on a thread whose filter refuses io_uring_setup).
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) override;

  // Test seam: a queue driving `ring` (for example a RecordingRing round CreateLockedDownRing()).
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueueWithRing(CompletionHandler handler,
                                                                  std::unique_ptr<UringOps> ring);

  // How the file was opened and what O_DIRECT demands of it (for diagnostics and tests).
  const std::string& path() const { return path_; }
  bool direct_io() const { return direct_io_; }
  // RawFileOptions::sequential, through the page cache: the queues read ahead of a stream.
  bool reads_ahead() const { return reads_ahead_; }
  // Alignment O_DIRECT needs of buffer addresses and lengths (1 without O_DIRECT); a request whose
  // buffers miss it goes through a bounce buffer.
  uint32_t memory_alignment() const { return memory_alignment_; }
  int fd() const { return fd_.get(); }
  // Rings ready for new queues.
  size_t idle_rings() const;
  // Where a destroyed queue's ring goes (an empty ring, nothing in flight or prepared).
  void ReturnRing(std::unique_ptr<UringOps> ring) const;
  // A flush, or a FUA write, that failed on a file opened without O_DIRECT: the errno, else 0.
  // Once set it stays, for every queue of the file (they share its descriptor), and every later
  // flush and FUA write fails with it without reaching the kernel. Linux reports a failed
  // writeback once per open file and leaves the page clean (fsync(2), "ERRORS"; the
  // fsync-gate discussion of 2018), so a later fdatasync would succeed over data already lost and
  // the guest would be told its writes are durable when they are not. QEMU's file-posix does the
  // same (`page_cache_inconsistent`). With O_DIRECT nothing waits in the page cache: a failed
  // flush is that flush's error alone.
  int lost_writeback_error() const { return lost_writeback_error_.load(std::memory_order_acquire); }
  void NoteFailedWriteback(int error) const;

  // Use Open(). (Public for std::make_shared; Token keeps it out of reach.)
  struct Token {
   private:
    explicit Token() = default;
    friend class RawFileBackend;
  };
  RawFileBackend(Token, std::string path, sys_util::ScopedFd fd, BackendInfo info, bool direct_io,
                 bool reads_ahead, uint32_t memory_alignment, unsigned ring_entries,
                 std::shared_ptr<RingPool> ring_pool);

 private:
  // Open's and OpenBeneath's common part: `fd` as open returned it (invalid: `open_error`).
  static absl::StatusOr<std::shared_ptr<RawFileBackend>> FromOpenedFile(
      sys_util::ScopedFd fd, int open_error, const std::string& path,
      const RawFileOptions& options);
  absl::Status PrepareRings(unsigned count);
  // One ring for this file: from the pool, or made here without one.
  absl::StatusOr<std::unique_ptr<UringOps>> NewRing() const;

  std::string path_;
  sys_util::ScopedFd fd_;
  BackendInfo info_;
  std::atomic<uint64_t> size_bytes_;
  absl::Mutex resize_mutex_;  // one Resize() at a time
  bool direct_io_;
  bool reads_ahead_;
  uint32_t memory_alignment_;
  unsigned ring_entries_;
  std::shared_ptr<RingPool> ring_pool_;
  // Locked-down rings for queues to come; the queues run on other threads.
  mutable absl::Mutex rings_mutex_;
  mutable std::vector<std::unique_ptr<UringOps>> idle_rings_ ABSL_GUARDED_BY(rings_mutex_);
  mutable std::atomic<int> lost_writeback_error_{0};
};

}  // namespace block::raw

#endif  // BLOCK_RAW_RAW_FILE_BACKEND_H_

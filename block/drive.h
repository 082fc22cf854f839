#ifndef BLOCK_DRIVE_H_
#define BLOCK_DRIVE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "block/backend.h"
#include "block/cache_mode.h"
#include "block/media.h"
#include "block/stats.h"
#include "block/throttle.h"

namespace block {

struct DriveOptions {
  CacheMode cache_mode = CacheMode::kWriteback;
  FuaMode fua_mode = FuaMode::kAuto;
  // Refuse writes and discards even if the backend could do them.
  bool read_only = false;
  // For status reports and stats ("disk0", "cd0").
  std::string name;
  // The clock of the drive's own I/O limits (its Throttle); a group's throttle has its own.
  Clock* limits_clock = Clock::Real();
};

// What a device tells its guest about the drive.
struct DriveInfo {
  // Of the medium; 0 for a removable drive without one.
  uint64_t size_bytes = 0;
  // Offsets and lengths of reads, writes and discards must be multiples of this (else EINVAL).
  uint32_t logical_block_size = 512;
  // The drive or the backend (medium) is read-only.
  bool read_only = false;
  // The volatile write cache the device reports (SCSI caching mode page WCE, ATA IDENTIFY word 85,
  // virtio-blk VIRTIO_BLK_F_CONFIG_WCE): WriteCacheEnabled(cache_mode).
  bool write_cache_enabled = true;
  bool removable = false;
  // The backend deallocates discarded ranges. Without it the drive still accepts discards and
  // completes them as no-ops (see DriveQueue), so a device may advertise discard either way.
  bool discard = false;
};

// The policy layer between a device and its storage: read-only and range checks, cache modes, FUA
// (native or emulated), removable media and stats. Every block device (virtio-blk, SCSI disk and
// CD-ROM, IDE/ATAPI) does its I/O through a Drive's queues.
//
// A Drive is either fixed (a disk: one backend for its lifetime) or removable (a CD-ROM: the medium
// is whatever RemovableMedia holds when a request starts). Its methods are thread-safe; its queues
// are not (one per iothread, like the backend's). Queues share the drive's state by reference
// count, so the Drive may be destroyed before its queues.
class Drive {
 public:
  // A disk. InvalidArgument for a null backend or a logical block size that is not a power of two.
  static absl::StatusOr<std::unique_ptr<Drive>> CreateFixed(DriveOptions options,
                                                            std::shared_ptr<BlockBackend> backend);
  // A removable-media drive.
  static absl::StatusOr<std::unique_ptr<Drive>> CreateRemovable(
      DriveOptions options, std::shared_ptr<RemovableMedia> media);

  ~Drive();
  Drive(const Drive&) = delete;
  Drive& operator=(const Drive&) = delete;

  const DriveOptions& options() const;
  const std::string& name() const { return options().name; }
  bool removable() const;

  // For a removable drive, from the current media snapshot (one atomic load; no host access).
  DriveInfo info() const;
  // As info(), for a given media snapshot (e.g. the state carried by a MediaEvent), so a device
  // reports the capacity of the medium it is signalling about.
  DriveInfo InfoFor(const MediaState& state) const;

  // A disk's online resize (BlockBackend::Resize: to `new_size`, or to the size the host gives its
  // image now); requests are checked against the new size from then on, and info() reports it.
  // FailedPrecondition for a removable drive, or a size given to a read-only one.
  absl::StatusOr<uint64_t> Resize(std::optional<uint64_t> new_size);

  // Null for a fixed drive.
  RemovableMedia* media() const;
  const Stats& stats() const;

  // I/O limits (block/throttle.h): the drive's own, and the group whose budget it shares (null:
  // none). Both may change at any time, from any thread, and apply at once to every request not
  // yet admitted. A limited request waits in the drive's queue, not in the iothread, whose other
  // drives go on; reads and writes take one operation and their bytes, discards one operation,
  // flushes nothing (a flush waits only behind requests queued before it, in order).
  absl::Status SetLimits(const IoLimits& limits);
  IoLimits limits() const;
  void SetGroup(std::shared_ptr<Throttle> group);
  std::shared_ptr<Throttle> group() const;

  // A queue for the calling iothread. For a fixed drive it creates the backend's queue at once (and
  // fails if that fails); a removable drive creates one per medium on first use, on this thread.
  //
  // What the queue does with each request, before any I/O (errors complete through the handler at
  // the next ProcessCompletions(), never inside Enqueue()):
  //   - removable drive without a ready medium (none, or the tray open): ENOMEDIUM;
  //   - a write or discard on a read-only drive or medium: EROFS;
  //   - a range past the end of the medium (overflow-safe; a zero-length request may start at the
  //     end): ERANGE; an offset or length not a multiple of the logical block size: EINVAL;
  //   - zero-length reads, writes and discards: success, no I/O;
  //   - a discard the backend cannot do: success, no I/O (a discard is advisory);
  //   - a flush on a read-only drive: success, no I/O (nothing was written through it).
  // Cache modes: writethrough and directsync send every write with FUA; unsafe completes flushes at
  // once and drops FUA, without host I/O. FUA is native (one write with fua=true) when fua_mode is
  // kNative and the backend has native_fua, or kAuto, the backend has native_fua and no other
  // durable write of this queue's medium is in flight; otherwise write, then flush once the write
  // succeeded, then complete (a failed write completes with its error, unflushed; a failed flush
  // fails every request it covered). Flushes are shared: one at a time per queue and medium, and
  // the writes done and the guest flushes that arrive while one runs wait for the next. A removable drive's request runs on the medium of the snapshot it saw at Enqueue(),
  // even if the medium changes before it completes.
  //
  // The queue's completion_fd() is an epoll fd: it is readable when the drive has completions of
  // its own (rejections, ignored flushes) or any backend queue beneath it has. A device adds that
  // one fd to its own epoll set (nested epoll) and calls ProcessCompletions() when it is readable;
  // it never sees the backend's fds. A removable drive's fd also wakes on a medium change, so the
  // queue can release the old medium when idle: a ProcessCompletions() with nothing to deliver is
  // normal. The handler may Enqueue() and Submit(). Destroying a queue with requests in flight drops
  // their completions (drain first); do not destroy it from inside its handler or from a media
  // listener.
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler);

  struct Shared;  // state shared with the queues (drive.cc)

  // Only CreateFixed() and CreateRemovable() can make the key.
  class Key {
    friend class Drive;
    Key() = default;
  };
  Drive(Key, std::shared_ptr<Shared> shared);

 private:
  const std::shared_ptr<Shared> shared_;
};

}  // namespace block

#endif  // BLOCK_DRIVE_H_

#include "block/raw/raw_file_backend.h"

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
#include "block/raw/raw_file_queue.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"

namespace block::raw {
namespace {

// What O_DIRECT requires of requests on an open file.
struct DirectIoAlignment {
  uint32_t memory = 0;  // buffer addresses
  uint32_t offset = 0;  // file offsets and lengths (also each iovec's length)
};

// statx(2) STATX_DIOALIGN (Linux 6.1; block devices since 6.11) reports both alignments. Without it
// we fall back to the logical block size for offsets and the page size for memory: a too-large
// memory alignment only costs bounce copies, while the offset alignment is what guests see as their
// sector size, and 512 (or the device's BLKSSZGET) is what every file system here accepts. On this
// project's machines (kernel 6.18, ext4 on virtio-blk) statx reports 512 and 512.
absl::StatusOr<DirectIoAlignment> FindDirectIoAlignment(int fd, const std::string& path,
                                                        uint32_t logical_block_size) {
  struct statx stx {};
  if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 && (stx.stx_mask & STATX_DIOALIGN)) {
    // statx(2): "If direct I/O is not supported on the file, both fields will be 0."
    if (stx.stx_dio_offset_align == 0 || stx.stx_dio_mem_align == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": direct I/O (O_DIRECT) is not supported on this file"));
    }
    return DirectIoAlignment{stx.stx_dio_mem_align, stx.stx_dio_offset_align};
  }
  const long page = sysconf(_SC_PAGESIZE);
  return DirectIoAlignment{static_cast<uint32_t>(std::max<long>(page, logical_block_size)),
                           logical_block_size};
}

// Two writers on one image corrupt it, and a reader beside a writer reads torn data. Images are
// locked the way QEMU locks them (block/file-posix.c), so that it and we, in either order, refuse
// each other exactly as two QEMUs would: one byte per permission, open file description locks
// (fcntl(2), F_OFD_SETLK: they belong to this open file, not to the process, so a second open in
// the same VMM conflicts too, and they go when the last descriptor of this open file closes).
//   - byte 100 + i, shared lock: this user holds permission i;
//   - byte 200 + i, shared lock: this user does not let others hold permission i;
// and a user may open only if nobody locked 200 + i for a permission i it wants, nor 100 + i for
// a permission i it does not share (both tested with F_OFD_GETLK for an exclusive lock, which
// our own locks never block). The permissions (QEMU's include/block/block-common.h, bits 0-3):
constexpr uint32_t kPermConsistentRead = 1u << 0;  // the data read is what was written
constexpr uint32_t kPermWrite = 1u << 1;
constexpr uint32_t kPermWriteUnchanged = 1u << 2;  // writes that leave the data as it is
constexpr uint32_t kPermResize = 1u << 3;
constexpr int kPermissionCount = 4;
constexpr off_t kPermissionByteBase = 100;
constexpr off_t kUnsharedByteBase = 200;

const char* PermissionName(int bit) {
  switch (bit) {
    case 0:
      return "consistent read";
    case 1:
      return "write";
    case 2:
      return "write unchanged";
    default:
      return "resize";
  }
}

// What QEMU's scsi-hd/virtio-blk take for a writable drive, and scsi-cd for a read-only one
// (blkconf_apply_backend_options without share-rw): read (and write), letting others read and make
// unchanged writes but neither write nor resize.
struct ImagePermissions {
  uint32_t held;
  uint32_t shared;
};
ImagePermissions PermissionsFor(bool read_only) {
  return {kPermConsistentRead | (read_only ? 0 : kPermWrite),
          kPermConsistentRead | kPermWriteUnchanged};
}
static_assert((kPermConsistentRead | kPermWrite | kPermWriteUnchanged | kPermResize) == 0xf);

// A lock of `type` on the one byte `byte`.
struct flock OneByte(short type, off_t byte) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  return lock;
}
// Both return 0, or the errno of F_OFD_SETLK/F_OFD_GETLK; TestByte sets `*conflict` when another
// open file holds a lock on the byte.
int LockByte(int fd, off_t byte) {
  struct flock lock = OneByte(F_RDLCK, byte);
  return fcntl(fd, F_OFD_SETLK, &lock) == 0 ? 0 : errno;
}
int TestByte(int fd, off_t byte, bool* conflict) {
  struct flock lock = OneByte(F_WRLCK, byte);
  if (fcntl(fd, F_OFD_GETLK, &lock) != 0) return errno;
  *conflict = lock.l_type != F_UNLCK;
  return 0;
}

absl::Status LockImage(int fd, const std::string& path, bool read_only) {
  const ImagePermissions wanted = PermissionsFor(read_only);
  auto in_use = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " is in use: another user of it (another VMM, QEMU, or another drive of this one) ",
        why, ", which conflicts with opening it ", read_only ? "read-only" : "for writing",
        read_only ? "" : " (a writable image has one writer, and no other reader)"));
  };
  // As QEMU does it (raw_handle_perm_lock): take our bytes first, then look for conflicts, so that
  // of two users opening at once at least one sees the other.
  int error = 0;
  for (int bit = 0; bit < kPermissionCount && error == 0; ++bit) {
    if (wanted.held & (1u << bit)) error = LockByte(fd, kPermissionByteBase + bit);
    if (error == 0 && !(wanted.shared & (1u << bit))) error = LockByte(fd, kUnsharedByteBase + bit);
  }
  // What another holds first (the plainer message when both apply: "holds write").
  for (int bit = 0; bit < kPermissionCount && error == 0; ++bit) {
    bool conflict = false;
    if (!(wanted.shared & (1u << bit))) error = TestByte(fd, kPermissionByteBase + bit, &conflict);
    if (error == 0 && conflict) {
      return in_use(absl::StrCat("holds the \"", PermissionName(bit), "\" permission"));
    }
  }
  for (int bit = 0; bit < kPermissionCount && error == 0; ++bit) {
    bool conflict = false;
    if (wanted.held & (1u << bit)) error = TestByte(fd, kUnsharedByteBase + bit, &conflict);
    if (error == 0 && conflict) {
      return in_use(absl::StrCat("does not share the \"", PermissionName(bit), "\" permission"));
    }
  }
  if (error == 0) return absl::OkStatus();
  // A lock of ours refused: someone holds an exclusive lock on that byte (an older VMM of ours
  // locked whole files that way).
  if (error == EAGAIN || error == EACCES) return in_use("holds a lock on it");
  // File systems without byte-range locks (ENOLCK from some network ones, EINVAL): run unlocked,
  // as QEMU does when its locking is off.
  if (error == ENOLCK || error == EINVAL || error == EOPNOTSUPP) return absl::OkStatus();
  return absl::ErrnoToStatus(error, absl::StrCat("lock ", path));
}

}  // namespace

RawFileBackend::RawFileBackend(Token, std::string path, sys_util::ScopedFd fd, BackendInfo info,
                               bool direct_io, bool reads_ahead, uint32_t memory_alignment,
                               unsigned ring_entries, std::shared_ptr<RingPool> ring_pool)
    : path_(std::move(path)),
      fd_(std::move(fd)),
      info_(info),
      size_bytes_(info.size_bytes),
      direct_io_(direct_io),
      reads_ahead_(reads_ahead),
      memory_alignment_(memory_alignment),
      ring_entries_(ring_entries),
      ring_pool_(std::move(ring_pool)) {}

RawFileBackend::~RawFileBackend() {
  if (ring_pool_ == nullptr) return;
  absl::MutexLock lock(&rings_mutex_);
  for (std::unique_ptr<UringOps>& ring : idle_rings_) ring_pool_->Recycle(std::move(ring));
  idle_rings_.clear();
}

absl::StatusOr<uint64_t> RawFileBackend::Resize(std::optional<uint64_t> new_size) {
  absl::MutexLock lock(&resize_mutex_);
  const uint64_t block = info_.logical_block_size;
  struct stat st {};
  if (fstat(fd_.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path_));
  uint64_t size = 0;
  if (!new_size.has_value()) {
    // The host's size now.
    if (S_ISBLK(st.st_mode)) {
      if (ioctl(fd_.get(), BLKGETSIZE64, &size) != 0) {
        return absl::ErrnoToStatus(errno, absl::StrCat("BLKGETSIZE64 ", path_));
      }
    } else {
      size = static_cast<uint64_t>(st.st_size);
    }
    size -= size % block;
  } else {
    size = *new_size;
    if (size == 0 || size % block != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": a size of ", size,
                                                     " bytes is not a positive multiple of the ",
                                                     block, "-byte logical block"));
    }
    if (info_.read_only) {
      return absl::FailedPreconditionError(absl::StrCat(path_, " is open read-only"));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          path_,
          " is a block device, whose size the host decides: resize it there, then resize "
          "the disk without a size to take the new one"));
    }
    if (size < static_cast<uint64_t>(st.st_size)) {
      // Nothing written may be cut off: only a tail with no data (a hole) goes.
      const off_t data = lseek(fd_.get(), static_cast<off_t>(size), SEEK_DATA);
      if (data >= 0) {
        return absl::FailedPreconditionError(absl::StrCat(path_, " holds data at byte ", data,
                                                          ", past the new end at ", size,
                                                          ": shrinking would cut it off"));
      }
      if (errno != ENXIO) return absl::ErrnoToStatus(errno, absl::StrCat("lseek ", path_));
    }
    if (ftruncate(fd_.get(), static_cast<off_t>(size)) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("ftruncate ", path_));
    }
  }
  if (size == 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is empty"));
  size_bytes_.store(size, std::memory_order_release);
  return size;
}

absl::StatusOr<std::unique_ptr<UringOps>> RawFileBackend::NewRing() const {
  if (ring_pool_ != nullptr) return ring_pool_->Take(fd_.get());
  return CreateLockedDownRing(ring_entries_, fd_.get());
}

absl::Status RawFileBackend::PrepareRings(unsigned count) {
  for (unsigned i = 0; i < count; ++i) {
    absl::StatusOr<std::unique_ptr<UringOps>> ring = NewRing();
    if (!ring.ok()) {
      return absl::Status(ring.status().code(), absl::StrCat(path_, ": ", ring.status().message()));
    }
    ReturnRing(*std::move(ring));
  }
  return absl::OkStatus();
}

void RawFileBackend::NoteFailedWriteback(int error) const {
  if (direct_io_ || error == 0) return;
  int none = 0;
  // The first error is the one reported from then on.
  lost_writeback_error_.compare_exchange_strong(none, error, std::memory_order_acq_rel);
}

void RawFileBackend::ReturnRing(std::unique_ptr<UringOps> ring) const {
  absl::MutexLock lock(&rings_mutex_);
  idle_rings_.push_back(std::move(ring));
}

size_t RawFileBackend::idle_rings() const {
  absl::MutexLock lock(&rings_mutex_);
  return idle_rings_.size();
}

namespace {

// O_NONBLOCK: opening a FIFO (or a device that waits for a peer) must not block; whatever was
// opened is checked with fstat afterwards, and the flag is cleared again for the I/O (io_uring
// would otherwise fail reads that miss the page cache with EAGAIN instead of waiting for them).
// O_NOCTTY: a terminal named as an image never becomes our controlling terminal.
int ImageOpenFlags(const RawFileOptions& options) {
  return O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (options.read_only ? O_RDONLY : O_RDWR) |
         (UsesDirectIo(options.cache_mode) ? O_DIRECT : 0);
}

}  // namespace

absl::StatusOr<std::shared_ptr<RawFileBackend>> RawFileBackend::Open(
    const std::string& path, const RawFileOptions& options) {
  sys_util::ScopedFd fd(open(path.c_str(), ImageOpenFlags(options)));
  const int error = fd.valid() ? 0 : errno;
  return FromOpenedFile(std::move(fd), error, path, options);
}

absl::StatusOr<std::shared_ptr<RawFileBackend>> RawFileBackend::OpenBeneath(
    int dir_fd, const std::string& relative_path, const std::string& shown_path,
    const RawFileOptions& options) {
  open_how how{};
  how.flags = static_cast<uint64_t>(ImageOpenFlags(options));
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  sys_util::ScopedFd fd(
      static_cast<int>(syscall(SYS_openat2, dir_fd, relative_path.c_str(), &how, sizeof(how))));
  const int error = fd.valid() ? 0 : errno;
  // EXDEV: the path leads out of the directory (RESOLVE_BENEATH); ELOOP: through a magic link.
  if (error == EXDEV || error == ELOOP) {
    return absl::PermissionDeniedError(
        absl::StrCat(shown_path, ": outside the directory media may come from"));
  }
  return FromOpenedFile(std::move(fd), error, shown_path, options);
}

absl::StatusOr<std::shared_ptr<RawFileBackend>> RawFileBackend::FromOpenedFile(
    sys_util::ScopedFd fd, int open_error, const std::string& path, const RawFileOptions& options) {
  if (options.ring_entries == 0) {
    return absl::InvalidArgumentError("ring_entries must be at least 1");
  }
  const bool direct_io = UsesDirectIo(options.cache_mode);
  if (!fd.valid()) {
    const int error = open_error;
    switch (error) {
      case ENOENT:
        return absl::NotFoundError(absl::StrCat(path, ": no such file or directory"));
      case EISDIR:
        return absl::FailedPreconditionError(absl::StrCat(path, " is a directory"));
      case EROFS:
      case EACCES:
      case EPERM:
        if (!options.read_only) {
          return absl::FailedPreconditionError(
              absl::StrCat("cannot open ", path, " for writing (", std::strerror(error),
                           "); open it read-only if that is intended"));
        }
        break;
      case EINVAL:
        if (direct_io) {
          return absl::FailedPreconditionError(absl::StrCat(
              path, ": the file system does not support O_DIRECT, which cache=",
              CacheModeName(options.cache_mode), " needs; use cache=writeback or writethrough"));
        }
        break;
      default:
        break;
    }
    return absl::ErrnoToStatus(error, absl::StrCat("open ", path));
  }

  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  BackendInfo info;
  info.read_only = options.read_only;
  info.native_fua = options.fua_mode != FuaMode::kEmulate;
  // Punching holes works on regular files of the usual file systems and, as zeroing, on block
  // devices (fallocate(2)); where it does not, the discard still succeeds as a no-op.
  info.discard = true;
  if (S_ISREG(st.st_mode)) {
    info.size_bytes = static_cast<uint64_t>(st.st_size);
    info.logical_block_size = 512;
  } else if (S_ISBLK(st.st_mode)) {
    uint64_t size = 0;
    if (ioctl(fd.get(), BLKGETSIZE64, &size) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("BLKGETSIZE64 ", path));
    }
    int sector_size = 0;
    if (ioctl(fd.get(), BLKSSZGET, &sector_size) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("BLKSSZGET ", path));
    }
    info.size_bytes = size;
    info.logical_block_size = static_cast<uint32_t>(std::max(sector_size, 512));
  } else if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is a directory"));
  } else {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is neither a regular file nor a block device"));
  }

  const int status_flags = fcntl(fd.get(), F_GETFL);
  if (status_flags < 0 || fcntl(fd.get(), F_SETFL, status_flags & ~O_NONBLOCK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fcntl ", path));
  }
  RETURN_IF_ERROR(LockImage(fd.get(), path, options.read_only));
  if (options.sequential && !direct_io) {
    // Only a hint: the kernel takes it for any regular file or block device (mm/fadvise.c), and
    // without it reads are as correct, only sooner waited for.
    (void)posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  }

  uint32_t memory_alignment = 1;
  if (direct_io) {
    ASSIGN_OR_RETURN(DirectIoAlignment alignment,
                     FindDirectIoAlignment(fd.get(), path, info.logical_block_size));
    memory_alignment = alignment.memory;
    info.logical_block_size = std::max(info.logical_block_size, alignment.offset);
  }
  auto backend = std::make_shared<RawFileBackend>(
      Token(), path, std::move(fd), info, direct_io, options.sequential && !direct_io,
      memory_alignment, options.ring_entries, options.ring_pool);
  RETURN_IF_ERROR(backend->PrepareRings(options.prepared_rings));
  return backend;
}

absl::StatusOr<std::unique_ptr<BlockQueue>> RawFileBackend::CreateQueue(CompletionHandler handler) {
  std::unique_ptr<UringOps> ring;
  {
    absl::MutexLock lock(&rings_mutex_);
    if (!idle_rings_.empty()) {
      ring = std::move(idle_rings_.back());
      idle_rings_.pop_back();
    }
  }
  if (ring == nullptr) {
    // None prepared: one from the pool, or made here (which a thread whose filter refuses
    // io_uring_setup cannot do: EPERM).
    absl::StatusOr<std::unique_ptr<UringOps>> created = NewRing();
    if (!created.ok()) {
      return absl::Status(created.status().code(),
                          absl::StrCat(path_,
                                       ": no prepared ring left for a new queue, and no new "
                                       "one: ",
                                       created.status().message()));
    }
    ring = *std::move(created);
  }
  return CreateQueueWithRing(std::move(handler), std::move(ring));
}

absl::StatusOr<std::unique_ptr<BlockQueue>> RawFileBackend::CreateQueueWithRing(
    CompletionHandler handler, std::unique_ptr<UringOps> ring) {
  return MakeRawFileQueue(shared_from_this(), std::move(ring), std::move(handler));
}

}  // namespace block::raw

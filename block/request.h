#ifndef BLOCK_REQUEST_H_
#define BLOCK_REQUEST_H_

#include <sys/uio.h>

#include <cstdint>
#include <span>

namespace block {

enum class RequestType : uint8_t {
  kRead,
  kWrite,
  kFlush,    // everything completed before it is on stable storage when it completes
  kDiscard,  // the range may be deallocated; reads of it return zeros or the old data
};

// One block I/O. `buffers` point at host memory (for a guest, memory the device has already
// translated and bounds-checked); they and their iovec array must stay valid until the request
// completes. Offsets and lengths are in bytes.
struct Request {
  RequestType type = RequestType::kRead;
  uint64_t offset = 0;
  // For reads and writes: the data. For flushes: empty.
  std::span<const iovec> buffers;
  // For discards (reads and writes take their length from `buffers`).
  uint64_t discard_length = 0;
  // Force Unit Access (SBC-3 5.x "FUA bit"): a write completes only once it is on stable storage.
  // Meaningless on reads, flushes and discards.
  bool fua = false;

  uint64_t length() const {
    if (type == RequestType::kDiscard) return discard_length;
    uint64_t total = 0;
    for (const iovec& buffer : buffers) total += buffer.iov_len;
    return total;
  }
};

// How a request ended: `error` is 0 or a positive errno. The transport maps it to its own vocabulary
// (SCSI sense, ATA error bits, virtio status):
//   EIO, ENOSPC, EDQUOT ... what the host said;
//   EROFS      a write to a read-only drive;
//   ERANGE     a range outside the medium (rejected before any I/O);
//   ENOMEDIUM  no medium in a removable drive;
//   EINVAL     a malformed request (misaligned, unsupported type).
// A request completes whole or fails: short transfers are finished or failed by the layer that saw
// them.
struct Completion {
  int error = 0;
  bool ok() const { return error == 0; }
};

}  // namespace block

#endif  // BLOCK_REQUEST_H_

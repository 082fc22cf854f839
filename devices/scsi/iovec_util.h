#ifndef DEVICES_SCSI_IOVEC_UTIL_H_
#define DEVICES_SCSI_IOVEC_UTIL_H_

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

// Copies between flat buffers and a transport's scatter-gather list. The iovecs point at host
// memory the transport has validated; nothing here looks past their lengths.

namespace devices::scsi {

uint64_t TotalLength(std::span<const iovec> buffers);

// Copies `data` to the start of `buffers`; returns the bytes copied (at most the buffers' total).
size_t ScatterTo(std::span<const iovec> buffers, std::span<const uint8_t> data);

// Copies the first out.size() bytes of `buffers` into `out`; returns the bytes copied (fewer if the
// buffers are shorter).
size_t GatherFrom(std::span<const iovec> buffers, std::span<uint8_t> out);

// The first `length` bytes of `buffers` are all zero (the buffers hold at least `length`).
bool IsZero(std::span<const iovec> buffers, uint64_t length);

// Replaces `out` with the shortest prefix of `buffers` that covers `length` bytes, the last entry
// shortened to fit. Requires TotalLength(buffers) >= length. Reuses out's capacity.
void TrimInto(std::span<const iovec> buffers, uint64_t length, std::vector<iovec>* out);

// Streams response data into data-in buffers, up to a limit (the smaller of the allocation length
// and the buffers), while counting everything the command produced: SPC-4 (allocation length): a response is
// built whole and truncated at the allocation length, with its length fields describing the whole.
class DataInWriter {
 public:
  DataInWriter(std::span<const iovec> buffers, uint64_t limit);

  void Append(std::span<const uint8_t> data);
  // Bytes appended (the untruncated response length).
  uint64_t produced() const { return produced_; }
  // Bytes copied into the buffers.
  uint64_t transferred() const { return transferred_; }

 private:
  std::span<const iovec> buffers_;
  uint64_t limit_;
  size_t index_ = 0;     // current iovec
  size_t in_entry_ = 0;  // offset within it
  uint64_t produced_ = 0;
  uint64_t transferred_ = 0;
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_IOVEC_UTIL_H_

#include "devices/scsi/iovec_util.h"

#include <algorithm>
#include <cstring>

namespace devices::scsi {

uint64_t TotalLength(std::span<const iovec> buffers) {
  uint64_t total = 0;
  for (const iovec& buffer : buffers) total += buffer.iov_len;
  return total;
}

size_t ScatterTo(std::span<const iovec> buffers, std::span<const uint8_t> data) {
  size_t done = 0;
  for (const iovec& buffer : buffers) {
    if (done == data.size()) break;
    const size_t n = std::min(buffer.iov_len, data.size() - done);
    if (n > 0) std::memcpy(buffer.iov_base, data.data() + done, n);
    done += n;
  }
  return done;
}

size_t GatherFrom(std::span<const iovec> buffers, std::span<uint8_t> out) {
  size_t done = 0;
  for (const iovec& buffer : buffers) {
    if (done == out.size()) break;
    const size_t n = std::min(buffer.iov_len, out.size() - done);
    if (n > 0) std::memcpy(out.data() + done, buffer.iov_base, n);
    done += n;
  }
  return done;
}

bool IsZero(std::span<const iovec> buffers, uint64_t length) {
  for (const iovec& buffer : buffers) {
    if (length == 0) break;
    const uint64_t n = std::min<uint64_t>(buffer.iov_len, length);
    const auto* p = static_cast<const uint8_t*>(buffer.iov_base);
    for (uint64_t i = 0; i < n; ++i) {
      if (p[i] != 0) return false;
    }
    length -= n;
  }
  return true;
}

void TrimInto(std::span<const iovec> buffers, uint64_t length, std::vector<iovec>* out) {
  out->clear();
  for (const iovec& buffer : buffers) {
    if (length == 0) break;
    iovec piece = buffer;
    if (piece.iov_len > length) piece.iov_len = length;
    if (piece.iov_len == 0) continue;
    out->push_back(piece);
    length -= piece.iov_len;
  }
}

DataInWriter::DataInWriter(std::span<const iovec> buffers, uint64_t limit)
    : buffers_(buffers), limit_(std::min(limit, TotalLength(buffers))) {}

void DataInWriter::Append(std::span<const uint8_t> data) {
  size_t consumed = 0;
  while (consumed < data.size() && transferred_ < limit_ && index_ < buffers_.size()) {
    const iovec& buffer = buffers_[index_];
    const uint64_t room = std::min<uint64_t>(buffer.iov_len - in_entry_, limit_ - transferred_);
    const size_t n = static_cast<size_t>(std::min<uint64_t>(room, data.size() - consumed));
    if (n > 0) {
      std::memcpy(static_cast<uint8_t*>(buffer.iov_base) + in_entry_, data.data() + consumed, n);
    }
    consumed += n;
    in_entry_ += n;
    transferred_ += n;
    if (in_entry_ == buffer.iov_len) {
      ++index_;
      in_entry_ = 0;
    }
  }
  produced_ += data.size();
}

}  // namespace devices::scsi

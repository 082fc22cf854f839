#ifndef BLOCK_RAW_ALIGNED_BUFFER_H_
#define BLOCK_RAW_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>

namespace block::raw {

// A heap buffer whose address is a multiple of `alignment` (a power of two), freed on destruction.
// Used as the bounce buffer for O_DIRECT requests whose guest buffers the kernel would reject
// (open(2), "O_DIRECT": user buffer addresses and lengths must be suitably aligned). Move-only.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;

  // An empty buffer when the allocation fails (or `size` is 0); check with data() != nullptr.
  static AlignedBuffer Allocate(size_t size, size_t alignment) {
    AlignedBuffer buffer;
    if (size == 0) return buffer;
    // aligned_alloc(3) needs a size that is a multiple of the alignment.
    const size_t rounded = (size + alignment - 1) / alignment * alignment;
    buffer.data_.reset(static_cast<char*>(std::aligned_alloc(alignment, rounded)));
    if (buffer.data_ != nullptr) buffer.size_ = size;
    return buffer;
  }

  char* data() const { return data_.get(); }
  size_t size() const { return size_; }
  explicit operator bool() const { return data_ != nullptr; }
  void Reset() {
    data_.reset();
    size_ = 0;
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  std::unique_ptr<char, Free> data_;
  size_t size_ = 0;
};

}  // namespace block::raw

#endif  // BLOCK_RAW_ALIGNED_BUFFER_H_

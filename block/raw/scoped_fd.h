#ifndef BLOCK_RAW_SCOPED_FD_H_
#define BLOCK_RAW_SCOPED_FD_H_

#include <unistd.h>

#include <utility>

namespace block::raw {

// Owns a file descriptor and closes it on destruction. Move-only. (A copy of vmm::ScopedFd, kept
// here so that block/ does not depend on vmm/.)
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() { Reset(); }

  ScopedFd(ScopedFd&& other) noexcept : fd_(other.Release()) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() { return std::exchange(fd_, -1); }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace block::raw

#endif  // BLOCK_RAW_SCOPED_FD_H_

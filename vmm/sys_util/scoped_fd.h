#ifndef VMM_SYS_UTIL_SCOPED_FD_H_
#define VMM_SYS_UTIL_SCOPED_FD_H_

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sys_util {

// Owns a file descriptor and closes it on destruction. Move-only.
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

// An absl::Status for a failed system call: the errno's canonical code and "what: strerror".
inline absl::Status ErrnoStatus(int error, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error),
                      absl::StrCat(what, ": ", std::strerror(error)));
}

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_SCOPED_FD_H_

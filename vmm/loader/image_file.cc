#include "vmm/loader/image_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"

namespace vmm::loader {

absl::StatusOr<ImageFile> ImageFile::Open(const std::string& path) {
  sys_util::ScopedFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    switch (error) {
      case ENOENT:
      case ENOTDIR:
        return absl::NotFoundError(absl::StrFormat("%s: no such file", path));
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(
            absl::StrFormat("%s: cannot open for reading: %s", path, strerror(error)));
      default:
        return absl::ErrnoToStatus(error, absl::StrFormat("%s: cannot open", path));
    }
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("%s: cannot stat", path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file", path));
  }
  return ImageFile(std::move(fd), static_cast<uint64_t>(st.st_size), path);
}

namespace {

// pread() until `length` bytes arrived; a read of 0 bytes means the file ended early.
absl::Status PreadFully(int fd, const std::string& path, uint64_t offset, uint8_t* out,
                        uint64_t length) {
  uint64_t done = 0;
  while (done < length) {
    const ssize_t n = ::pread(fd, out + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(
          errno, absl::StrFormat("%s: read of %u bytes at offset %u failed", path, length, offset));
    }
    if (n == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: truncated: ended at offset %u while reading %u bytes at offset %u",
                          path, offset + done, length, offset));
    }
    done += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ImageFile::ReadAt(uint64_t offset, std::span<uint8_t> out) const {
  if (offset > size_ || out.size() > size_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: needs bytes [%u, %u) but the file is %u bytes", path_,
                        offset, offset + out.size(), size_));
  }
  return PreadFully(fd_.get(), path_, offset, out.data(), out.size());
}

absl::Status ImageFile::ReadIntoGuest(const GuestMemory& memory, uint64_t offset, uint64_t length,
                                      GuestAddress address) const {
  if (offset > size_ || length > size_ - offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: needs bytes [%u, %u) but the file is %u bytes", path_,
                        offset, offset + length, size_));
  }
  absl::StatusOr<std::span<uint8_t>> host = memory.GetHostSpan(address, length);
  if (!host.ok()) {
    return absl::OutOfRangeError(absl::StrFormat("%s: %s", path_, host.status().message()));
  }
  return PreadFully(fd_.get(), path_, offset, host->data(), length);
}

}  // namespace vmm::loader

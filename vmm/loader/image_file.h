#ifndef VMM_LOADER_IMAGE_FILE_H_
#define VMM_LOADER_IMAGE_FILE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm::loader {

// A read-only regular file (kernel image, initrd) whose every read is bounds-checked against the size
// it had when opened. Errors name the path, so a user sees which of several files is at fault.
// Internal to //vmm/loader.
class ImageFile {
 public:
  // NotFound if `path` does not exist, PermissionDenied if it cannot be opened for reading,
  // InvalidArgument if it is not a regular file (a directory, a pipe: we need its size up front).
  static absl::StatusOr<ImageFile> Open(const std::string& path);

  ImageFile(ImageFile&&) = default;
  ImageFile& operator=(ImageFile&&) = default;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Reads exactly out.size() bytes at `offset`. InvalidArgument ("truncated") if the file is too
  // short, which is also what a file that shrinks while we read it gets.
  absl::Status ReadAt(uint64_t offset, std::span<uint8_t> out) const;

  // Reads [offset, offset + length) of the file straight into guest RAM at `address` (no host
  // copy of a possibly large image). OutOfRange if the guest range is not wholly inside one region.
  absl::Status ReadIntoGuest(const GuestMemory& memory, uint64_t offset, uint64_t length,
                             GuestAddress address) const;

 private:
  ImageFile(sys_util::ScopedFd fd, uint64_t size, std::string path)
      : fd_(std::move(fd)), size_(size), path_(std::move(path)) {}

  sys_util::ScopedFd fd_;
  uint64_t size_;
  std::string path_;
};

}  // namespace vmm::loader

#endif  // VMM_LOADER_IMAGE_FILE_H_

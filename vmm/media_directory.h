#ifndef VMM_MEDIA_DIRECTORY_H_
#define VMM_MEDIA_DIRECTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "block/backend.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm {

// The one directory the control API may take CD/DVD media from (--media-dir). An API caller names
// a file in it (relative, or absolute under the directory); the file is opened once, strictly
// beneath the directory (openat2 RESOLVE_BENEATH, no magic links), checked with fstat and handed
// to the drive as that open file: no second open by path, and any path that leads out ("..", an
// absolute path elsewhere, a symlink) is PermissionDenied whether or not its target exists, so
// the API reveals nothing about files outside. F1 of the hardening issue: without it, a caller
// could attach /etc/shadow as the guest's CD.
class MediaDirectory {
 public:
  // Opens `path` (O_PATH | O_DIRECTORY). Errors name it.
  static absl::StatusOr<std::unique_ptr<MediaDirectory>> Open(const std::string& path);

  // A read-only medium from the file `path` names in the directory, for a drive that up to
  // `queue_threads` iothreads serve (Storage::medium_queue_threads()).
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(const std::string& path,
                                                                  unsigned queue_threads) const;

  const std::string& path() const { return path_; }

 private:
  MediaDirectory(std::string path, sys_util::ScopedFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}

  std::string path_;  // as given, without trailing slashes
  sys_util::ScopedFd fd_;
};

}  // namespace vmm

#endif  // VMM_MEDIA_DIRECTORY_H_

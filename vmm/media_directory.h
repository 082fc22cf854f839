#ifndef VMM_MEDIA_DIRECTORY_H_
#define VMM_MEDIA_DIRECTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "block/backend.h"
#include "block/raw/raw_file_backend.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm {

// The one directory the control API may take CD/DVD media and disk images from (--media-dir). An API caller names
// a file in it (relative, or absolute under the directory); the file is opened once, strictly
// beneath the directory (openat2 RESOLVE_BENEATH, no magic links), checked with fstat and handed
// to the drive as that open file: no second open by path, and any path that leads out ("..", an
// absolute path elsewhere, a symlink) is PermissionDenied whether or not its target exists, so
// the API reveals nothing about files outside. H1 of docs/security.md: without it, a caller
// could attach /etc/shadow as the guest's CD.
class MediaDirectory {
 public:
  // Opens `path` (O_PATH | O_DIRECTORY). Errors name it.
  static absl::StatusOr<std::unique_ptr<MediaDirectory>> Open(const std::string& path);
  // The jail without --media-dir: its root holds no file, so every medium is refused, with a
  // message that says why (FailedPrecondition).
  static std::unique_ptr<MediaDirectory> NoneInTheJail();

  // Opens the directory again at its resolved path, in place of the descriptor held so far: once
  // the jail is entered, where it is bind-mounted at that path (vmm/sandbox/jail.h). A descriptor
  // from outside the jail would lead out of it ("..": H17 of docs/security.md). The
  // descriptor's number stays, so a concurrent OpenMedium uses the old or the new one.
  absl::Status ReopenInTheJail();

  // A read-only medium from the file `path` names in the directory, opened with `options`
  // (Storage::MediumFileOptions()).
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(
      const std::string& path, const block::raw::RawFileOptions& options) const;

  // A disk image from the directory, opened as `options` say (a disk attached through the API:
  // Storage::DiskFileOptions), with the same confinement.
  absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> OpenFile(
      const std::string& path, const block::raw::RawFileOptions& options) const;

  // Absolute, as given (made absolute against the working directory at Open, "." and ".."
  // removed, symbolic links kept): what media paths are checked and reported against.
  const std::string& path() const { return path_; }
  // Resolved (realpath) when opened: where the jail shares it. Empty for NoneInTheJail().
  const std::string& resolved_path() const { return resolved_path_; }

 private:
  MediaDirectory(std::string path, std::string resolved_path, sys_util::ScopedFd fd)
      : path_(std::move(path)), resolved_path_(std::move(resolved_path)), fd_(std::move(fd)) {}

  std::string path_;  // absolute as given, without trailing slashes
  std::string resolved_path_;
  sys_util::ScopedFd fd_;
};

}  // namespace vmm

#endif  // VMM_MEDIA_DIRECTORY_H_

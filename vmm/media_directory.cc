#include "vmm/media_directory.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "block/raw/raw_file_backend.h"
#include "vmm/cd_medium.h"

namespace vmm {

absl::StatusOr<std::unique_ptr<MediaDirectory>> MediaDirectory::Open(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  if (trimmed.empty()) return absl::InvalidArgumentError("--media-dir=: needs a directory");
  sys_util::ScopedFd fd(open(trimmed.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--media-dir=", path, ": ", std::strerror(errno)));
  }
  char* resolved = realpath(trimmed.c_str(), nullptr);
  if (resolved == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--media-dir=", path, ": ", std::strerror(errno)));
  }
  std::string resolved_path = resolved;
  std::free(resolved);
  // Absolute as given: an insert names media by absolute paths under it, or relative ones.
  std::error_code error;
  std::string absolute = std::filesystem::absolute(trimmed, error).lexically_normal().string();
  if (error) absolute = resolved_path;
  while (absolute.size() > 1 && absolute.back() == '/') absolute.pop_back();
  return std::unique_ptr<MediaDirectory>(
      new MediaDirectory(std::move(absolute), std::move(resolved_path), std::move(fd)));
}

std::unique_ptr<MediaDirectory> MediaDirectory::NoneInTheJail() {
  return std::unique_ptr<MediaDirectory>(new MediaDirectory("", "", sys_util::ScopedFd()));
}

absl::Status MediaDirectory::ReopenInTheJail() {
  if (!fd_.valid()) return absl::OkStatus();
  sys_util::ScopedFd fresh(open(resolved_path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fresh.valid() || dup3(fresh.get(), fd_.get(), O_CLOEXEC) < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("--media-dir=", path_, ": opening it again in the jail"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<block::raw::RawFileBackend>> MediaDirectory::OpenFile(
    const std::string& path, const block::raw::RawFileOptions& options) const {
  if (!fd_.valid()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        ": the VMM runs in its jail, where only --media-dir is reachable, and none was "
        "given (docs/security.md)"));
  }
  std::string relative = path;
  if (absl::StartsWith(path, "/")) {
    // An absolute path is accepted where it names a file under the directory, as given or
    // resolved; what follows is opened beneath the directory either way.
    relative.clear();
    for (const std::string* directory : {&path_, &resolved_path_}) {
      const std::string prefix = *directory == "/" ? "/" : *directory + "/";
      if (absl::StartsWith(path, prefix) && path.size() > prefix.size()) {
        relative = path.substr(prefix.size());
        break;
      }
    }
    if (relative.empty()) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": outside the directory media and disks may come from"));
    }
  }
  return block::raw::RawFileBackend::OpenBeneath(fd_.get(), relative, path, options);
}

absl::StatusOr<std::shared_ptr<block::BlockBackend>> MediaDirectory::OpenMedium(
    const std::string& path, const block::raw::RawFileOptions& options) const {
  return AsCdMedium(OpenFile(path, options), path);
}

}  // namespace vmm

#include "vmm/media_directory.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>

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
  return std::unique_ptr<MediaDirectory>(new MediaDirectory(trimmed, std::move(fd)));
}

absl::StatusOr<std::shared_ptr<block::BlockBackend>> MediaDirectory::OpenMedium(
    const std::string& path, unsigned queue_threads) const {
  std::string relative = path;
  if (absl::StartsWith(path, "/")) {
    // An absolute path is accepted where it names a file under the directory as given.
    const std::string prefix = path_ == "/" ? "/" : path_ + "/";
    if (!absl::StartsWith(path, prefix) || path.size() == prefix.size()) {
      return absl::PermissionDeniedError(
          absl::StrCat(path, ": outside the directory media may come from"));
    }
    relative = path.substr(prefix.size());
  }
  return AsCdMedium(
      block::raw::RawFileBackend::OpenBeneath(fd_.get(), relative, path,
                                              CdMediumFileOptions(queue_threads)),
      path);
}

}  // namespace vmm

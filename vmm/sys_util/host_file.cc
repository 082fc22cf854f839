#include "vmm/sys_util/host_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "vmm/sys_util/scoped_fd.h"

namespace sys_util {

absl::Status WriteHostFile(const std::string& path, std::span<const uint8_t> bytes,
                           const std::string& what) {
  sys_util::ScopedFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid())
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", what, " ", path));
  size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = write(fd.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", what, " ", path));
    }
    written += static_cast<size_t>(n);
  }
  if (close(fd.Release()) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", what, " ", path));
  }
  return absl::OkStatus();
}

}  // namespace sys_util

#ifndef VMM_SYS_UTIL_HOST_FILE_H_
#define VMM_SYS_UTIL_HOST_FILE_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"

namespace sys_util {

// Creates (or truncates) the host file `path`, mode 0644, and writes all of `bytes` to it, retrying
// short writes and EINTR. A deferred write error that only close() reports (NFS, a full disk) is
// an error too. The status names the file and `what` it is ("cannot create device tree file
// PATH: ...").
absl::Status WriteHostFile(const std::string& path, std::span<const uint8_t> bytes,
                           const std::string& what);

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_HOST_FILE_H_

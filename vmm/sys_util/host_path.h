#ifndef VMM_SYS_UTIL_HOST_PATH_H_
#define VMM_SYS_UTIL_HOST_PATH_H_

#include <string>

namespace sys_util {

// `path` made absolute against the working directory (no symlink is resolved and nothing needs
// to exist: "." components and repeated slashes go, ".." stays, as the kernel would walk it).
// Absolute paths come back as given, minus "." components; so does any path when the working
// directory is unknown. The launchers and the control API record and report absolute paths, so
// they name the same file whoever reads them.
std::string AbsolutePath(const std::string& path);

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_HOST_PATH_H_

#ifndef API_HOST_PATH_H_
#define API_HOST_PATH_H_

#include <string>

namespace api {

// `path` made absolute against the working directory (no symlink is resolved and nothing needs
// to exist: "." components and repeated slashes go, ".." stays, as the kernel would walk it).
// Absolute paths come back as given, minus "." components; so does any path when the working
// directory is unknown. The launchers and the control API record and report absolute paths, so
// they name the same file whoever reads them.
std::string AbsolutePath(const std::string& path);

}  // namespace api

#endif  // API_HOST_PATH_H_

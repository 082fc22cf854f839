#include "vmm/sys_util/host_path.h"

#include <limits.h>
#include <unistd.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace sys_util {

std::string AbsolutePath(const std::string& path) {
  if (path.empty()) return path;
  std::string joined = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;  // no working directory: as given
    joined = absl::StrCat(cwd, "/", path);
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view part : absl::StrSplit(joined, '/', absl::SkipEmpty())) {
    if (part != ".") parts.push_back(part);
  }
  return absl::StrCat("/", absl::StrJoin(parts, "/"));
}

}  // namespace sys_util

#include "tests/integration/test_util.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/support/skip.h"

namespace tests {

std::string TempPath(const std::string& name) {
  const char* dir = getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

std::string FindPython() {
  const char* path = getenv("PATH");
  std::vector<std::string> dirs;
  if (path != nullptr) dirs = absl::StrSplit(path, ':', absl::SkipEmpty());
  dirs.push_back("/usr/bin");
  dirs.push_back("/usr/local/bin");
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/python3";
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string GuestSkipReason(std::string* python) {
  if (std::string why = NoKvmReason(); !why.empty()) return why;
  if (python != nullptr) {
    if (python->empty()) *python = FindPython();
    if (python->empty()) return "python3 is missing (tools/make-pattern-image needs it)";
  }
  return "";
}

}  // namespace tests

#include "tests/integration/test_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/support/skip.h"

namespace tests {

std::string SocketPath(const std::string& name) {
  static const std::string dir = [] {
    const char* base = getenv("MICROVM_SOCKET_DIR");
    std::string pattern =
        std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/api-test-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) return std::string("/tmp");
    atexit([] { std::filesystem::remove_all(dir); });
    return pattern;
  }();
  return dir + "/" + name;
}

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

bool CopyFile(const std::string& from, const std::string& to) {
  const int in = open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return false;
  const int out = open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    close(in);
    return false;
  }
  bool ok = true;
  for (;;) {
    const ssize_t copied = copy_file_range(in, nullptr, out, nullptr, 1 << 30, 0);
    if (copied == 0) break;
    if (copied < 0) {
      if (errno == EINTR) continue;
      ok = false;
      break;
    }
  }
  const int saved = errno;
  close(in);
  if (close(out) != 0) ok = false;
  errno = saved;
  return ok;
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

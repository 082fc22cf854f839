#ifndef TESTS_INTEGRATION_TEST_UTIL_H_
#define TESTS_INTEGRATION_TEST_UTIL_H_

#include <string>

namespace tests {

// A path in the test's private directory (TEST_TMPDIR, else /tmp).
std::string TempPath(const std::string& name);
// A unix socket path that fits sun_path (108 bytes; Bazel's TEST_TMPDIR is deeper than that): in a
// private directory under /tmp (in L1: under MICROVM_SOCKET_DIR, a tmpfs of L1's own,
// tests/l1/run_in_l1.sh), removed at exit.
std::string SocketPath(const std::string& name);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);
// execv() does not search PATH: the python3 to run tools/make-pattern-image with, or "".
std::string FindPython();

// Copies `from` to `to` (replacing it) with copy_file_range(2), which a file system may do without
// moving the data through this process: in L1 the test's files are on virtiofs, where the host
// copies a 64 MiB image in a fraction of a second instead of 14 s through L1's page cache
// (std::filesystem::copy_file uses sendfile). False, with errno set, on failure.
bool CopyFile(const std::string& from, const std::string& to);

// Why a test that boots the test guest cannot run here, or "" when it can: /dev/kvm missing or not
// accessible, or (with `python`, which receives its path) no python3 for tools/make-pattern-image.
std::string GuestSkipReason(std::string* python = nullptr);

}  // namespace tests

#endif  // TESTS_INTEGRATION_TEST_UTIL_H_

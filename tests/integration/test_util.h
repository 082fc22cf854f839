#ifndef TESTS_INTEGRATION_TEST_UTIL_H_
#define TESTS_INTEGRATION_TEST_UTIL_H_

#include <string>

namespace tests {

// A path in the test's private directory (TEST_TMPDIR, else /tmp).
std::string TempPath(const std::string& name);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& contents);
// execv() does not search PATH: the python3 to run tools/make-pattern-image with, or "".
std::string FindPython();

// Why a test that boots the test guest cannot run here, or "" when it can: /dev/kvm missing or not
// accessible, or (with `python`, which receives its path) no python3 for tools/make-pattern-image.
std::string GuestSkipReason(std::string* python = nullptr);

}  // namespace tests

#endif  // TESTS_INTEGRATION_TEST_UTIL_H_

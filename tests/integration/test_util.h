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

}  // namespace tests

#endif  // TESTS_INTEGRATION_TEST_UTIL_H_

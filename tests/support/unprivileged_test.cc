#include "tests/support/unprivileged.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tests {
namespace {

TEST(UnprivilegedTest, TheChildIsAnOrdinaryCaller) {
  absl::StatusOr<std::string> ids = RunUnprivileged(
      [] { return absl::StrCat(geteuid(), " ", getegid(), " ", getgroups(0, nullptr)); });
  ASSERT_TRUE(ids.ok()) << ids.status();
  if (geteuid() == 0) {
    const uid_t id = UnusedId();
    EXPECT_EQ(getpwuid(id), nullptr);
    EXPECT_EQ(*ids, absl::StrCat(id, " ", id, " 0"));
  } else {
    EXPECT_EQ(*ids, absl::StrCat(geteuid(), " ", getegid(), " ", getgroups(0, nullptr)));
  }
}

TEST(UnprivilegedTest, AFileOnlyItsOwnerMayReadIsRefused) {
  const char* dir = getenv("TEST_TMPDIR");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/owner-only";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  // The parent's own directory must be reachable by the child: the file itself is what refuses.
  absl::StatusOr<std::string> seen = RunUnprivileged([&] {
    const int opened = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (opened >= 0) {
      close(opened);
      return std::string("opened");
    }
    return std::string(errno == EACCES ? "EACCES" : strerror(errno));
  });
  ASSERT_TRUE(seen.ok()) << seen.status();
  if (geteuid() == 0) {
    EXPECT_EQ(*seen, "EACCES");
  } else {
    EXPECT_EQ(*seen, "opened");  // its own file
  }
}

TEST(UnprivilegedTest, AFailedCheckIsReported) {
  absl::StatusOr<std::string> result = RunUnprivileged([]() -> std::string { _exit(3); });
  EXPECT_FALSE(result.ok());
}

}  // namespace
}  // namespace tests

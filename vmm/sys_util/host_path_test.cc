#include "vmm/sys_util/host_path.h"

#include <limits.h>
#include <unistd.h>

#include <string>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

std::string Cwd() {
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) == nullptr ? std::string() : std::string(cwd);
}

TEST(HostPathTest, JoinsTheWorkingDirectory) {
  const std::string cwd = Cwd();
  ASSERT_FALSE(cwd.empty());
  EXPECT_EQ(AbsolutePath("/srv/./isos//a.iso"), "/srv/isos/a.iso");
  EXPECT_EQ(AbsolutePath("a.iso"), cwd + "/a.iso");
  EXPECT_EQ(AbsolutePath("./sub/../a.iso"), cwd + "/sub/../a.iso");  // ".." is the kernel's to walk
  EXPECT_EQ(AbsolutePath("/"), "/");
  EXPECT_EQ(AbsolutePath(""), "");
}

}  // namespace
}  // namespace sys_util

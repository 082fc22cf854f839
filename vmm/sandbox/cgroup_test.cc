#include "vmm/sandbox/cgroup.h"

#include "gtest/gtest.h"

namespace vmm::sandbox {
namespace {

// Creating, joining and removing a cgroup needs a cgroup2 hierarchy with the controllers, which
// only some hosts give a test: the nested tier's jail scenario does it in L1 (tests/nested).

TEST(CgroupLimitsTest, ParsesControllerFilesAndTheirValues) {
  CgroupLimits limits;
  ASSERT_TRUE(ParseCgroupLimits("memory.max=512M,pids.max=64,cpu.max=50000 100000", limits).ok());
  ASSERT_EQ(limits.settings.size(), 3u);
  EXPECT_EQ(limits.settings[0], (std::pair<std::string, std::string>{"memory.max", "512M"}));
  EXPECT_EQ(limits.settings[1], (std::pair<std::string, std::string>{"pids.max", "64"}));
  EXPECT_EQ(limits.settings[2], (std::pair<std::string, std::string>{"cpu.max", "50000 100000"}));
  EXPECT_EQ(limits.parent, "microvm");
}

TEST(CgroupLimitsTest, RefusesWhatIsNotAControllersFile) {
  CgroupLimits limits;
  for (const char* text :
       {"", "memory.max", "memory.max=", "cgroup.procs=1", "cgroup.subtree_control=+memory",
        "../memory.max=1", "memory/../cgroup.procs=1", "Memory.max=1", "memory.max=1\n2",
        "hugetlb.1GB.max=0", "memory=1"}) {
    EXPECT_EQ(ParseCgroupLimits(text, limits).code(), absl::StatusCode::kInvalidArgument) << text;
  }
}

TEST(CgroupTest, RefusesAParentOutsideTheHierarchy) {
  for (const char* parent : {"", "/", "..", "microvm/../..", "./microvm"}) {
    CgroupLimits limits{.settings = {{"pids.max", "8"}}, .parent = parent};
    EXPECT_EQ(Cgroup::Create(limits, "vm").status().code(), absl::StatusCode::kInvalidArgument)
        << parent;
  }
}

}  // namespace
}  // namespace vmm::sandbox

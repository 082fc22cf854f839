#include "vmm/sandbox/sandbox_flags.h"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

ABSL_DECLARE_FLAG(std::string, jail);
ABSL_DECLARE_FLAG(std::string, jail_user);

namespace vmm::sandbox {
namespace {

using ::sys_util::ExitNow;

// docs/errors.md: --jail=on where the jail cannot work. In a new user namespace (as in a container
// or Bazel's sandbox) the process may be uid 0, but not the initial namespace's root.
TEST(SandboxFlagsDeathTest, JailOnNeedsRootOutsideAUserNamespace) {
  auto child = [&] {
    if (unshare(CLONE_NEWUSER) != 0) ExitNow(4);
    absl::SetFlag(&FLAGS_jail, "on");
    auto sandbox = EnableSandboxFromFlags(SeccompSetting{}, JailNeeds{});
    if (!sandbox.ok()) fprintf(stderr, "%s\n", std::string(sandbox.status().message()).c_str());
    ExitNow(!sandbox.ok() && absl::StartsWith(sandbox.status().message(),
                                              "--jail=on: the jail needs root in the initial user "
                                              "namespace")
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

TEST(SandboxFlagsTest, TheUserIsCheckedWhateverTheJail) {
  absl::SetFlag(&FLAGS_jail, "off");
  absl::SetFlag(&FLAGS_jail_user, "root");
  auto sandbox = EnableSandboxFromFlags(SeccompSetting{}, JailNeeds{});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().message(),
            "--jail-user=root: expected UID:GID (numbers, e.g. 65534:65534)");
  absl::SetFlag(&FLAGS_jail_user, "7:7");
  sandbox = EnableSandboxFromFlags(SeccompSetting{}, JailNeeds{});
  ASSERT_FALSE(sandbox.ok());
  EXPECT_EQ(sandbox.status().message(),
            "--jail-user applies to the jail, which is off (--jail=off)");
  absl::SetFlag(&FLAGS_jail_user, "");
  absl::SetFlag(&FLAGS_jail, "somewhere");
  EXPECT_EQ(EnableSandboxFromFlags(SeccompSetting{}, JailNeeds{}).status().message(),
            "--jail=somewhere: expected auto, on or off");
  absl::SetFlag(&FLAGS_jail, "auto");
}

}  // namespace
}  // namespace vmm::sandbox

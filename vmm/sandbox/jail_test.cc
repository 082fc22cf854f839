#include "vmm/sandbox/jail.h"

#include <linux/capability.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/skip.h"

namespace vmm::sandbox {
namespace {

// Ends a death-test child with the system call itself: a sanitizer runtime intercepts _exit and
// would run its leak check there, under the child's filter (or in its jail).
[[noreturn]] void ExitNow(int status) {
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

TEST(JailTest, ParsesNumericUsersOnly) {
  JailOptions options;
  ASSERT_TRUE(ParseJailUser("65534:65533", options).ok());
  EXPECT_EQ(*options.uid, 65534u);
  EXPECT_EQ(*options.gid, 65533u);
  EXPECT_EQ(ParseJailUser("nobody:nogroup", options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJailUser("65534", options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJailUser("0:0", options).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JailTest, RefusesHalfAUserAndAMissingRootWithoutChangingAnything) {
  JailOptions half;
  half.root = "/";
  half.uid = 65534;
  EXPECT_EQ(EnterJail(half).code(), absl::StatusCode::kInvalidArgument);
  JailOptions missing;
  missing.root = "/nonexistent/jail";
  EXPECT_EQ(EnterJail(missing).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JailDeathTest, ConfinesTheProcessToItsRootAsAnUnprivilegedUser) {
  if (geteuid() != 0) MICROVM_SKIP("entering a jail needs root (chroot, setuid)");
  if (FILE* setgroups = fopen("/proc/self/setgroups", "r")) {
    char policy[8] = {};
    const bool denied = fgets(policy, sizeof(policy), setgroups) != nullptr &&
                        std::string(policy).starts_with("deny");
    fclose(setgroups);
    ASSERT_FALSE(denied) << "in a user namespace that denies setgroups(2) (the target is no-sandbox)";
  }
  char root_template[] = "/tmp/jail_test.XXXXXX";
  ASSERT_NE(mkdtemp(root_template), nullptr);
  const std::string root = root_template;
  auto child = [&] {
        JailOptions options;
        options.root = root;
        options.uid = 65534;
        options.gid = 65534;
        options.max_open_files = 64;
        if (absl::Status entered = EnterJail(options); !entered.ok()) {
          fprintf(stderr, "%s\n", std::string(entered.message()).c_str());
          ExitNow(2);
        }
        __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
        __user_cap_data_struct caps[2] = {};
        syscall(SYS_capget, &header, caps);
        rlimit core{};
        getrlimit(RLIMIT_CORE, &core);
        rlimit files{};
        getrlimit(RLIMIT_NOFILE, &files);
        char cwd[16] = {};
        const bool ids = getuid() == 65534 && geteuid() == 65534 && getgid() == 65534;
        const bool rooted = access("/etc/passwd", F_OK) != 0 &&
                            getcwd(cwd, sizeof(cwd)) != nullptr && std::string(cwd) == "/";
        const bool no_caps = caps[0].permitted == 0 && caps[0].effective == 0;
        const bool flags = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 &&
                           prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
        const bool limits = core.rlim_max == 0 && files.rlim_cur == 64;
        const bool stays = setuid(0) != 0;
        fprintf(stderr, "ids %d rooted %d no_caps %d flags %d limits %d stays %d\n", ids, rooted,
                no_caps, flags, limits, stays);
        const bool checks = ids && rooted && no_caps && flags && limits && stays;
        ExitNow(checks ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  rmdir(root.c_str());
}

}  // namespace
}  // namespace vmm::sandbox

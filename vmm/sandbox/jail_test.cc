#include "vmm/sandbox/jail.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

using ::sys_util::ExitNow;

TEST(JailTest, ParsesNumericUsersOnly) {
  JailOptions options;
  ASSERT_TRUE(ParseJailUser("65534:65533", options).ok());
  EXPECT_EQ(options.uid, 65534u);
  EXPECT_EQ(options.gid, 65533u);
  EXPECT_EQ(ParseJailUser("nobody:nogroup", options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJailUser("65534", options).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseJailUser("0:0", options).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JailTest, RefusesRootAndUnclearPathsBeforeMountingAnything) {
  JailOptions as_root;
  as_root.uid = 0;
  EXPECT_EQ(BuildJailRoot(as_root).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EnterJail(as_root, sys_util::ScopedFd()).code(), absl::StatusCode::kInvalidArgument);
  for (const char* path : {"media", "/srv/../etc", "/srv/./media", ""}) {
    JailOptions unclear;
    unclear.shared_directories = {path};
    EXPECT_EQ(BuildJailRoot(unclear).status().code(), absl::StatusCode::kInvalidArgument) << path;
  }
  JailOptions unclear_node;
  unclear_node.device_nodes = {"dev/null"};
  EXPECT_EQ(BuildJailRoot(unclear_node).status().code(), absl::StatusCode::kInvalidArgument);
}

// Reads the one line of a small file, or "" when it cannot be opened.
std::string FirstLine(const std::string& path) {
  std::string line;
  if (FILE* file = fopen(path.c_str(), "r")) {
    char buffer[256] = {};
    if (fgets(buffer, sizeof(buffer), file) != nullptr) line = buffer;
    fclose(file);
  }
  return line;
}

TEST(JailDeathTest, ConfinesTheProcessToAnEmptyRootAsAnUnprivilegedUser) {
  if (geteuid() != 0) MICROVM_SKIP("entering a jail needs root (namespaces, pivot_root, setuid)");
  if (FILE* setgroups = fopen("/proc/self/setgroups", "r")) {
    char policy[8] = {};
    const bool denied = fgets(policy, sizeof(policy), setgroups) != nullptr &&
                        std::string(policy).starts_with("deny");
    fclose(setgroups);
    ASSERT_FALSE(denied)
        << "in a user namespace that denies setgroups(2) (the target is no-sandbox)";
  }
  // A shared directory with a file in it (world-readable, as media for the jail's user must be),
  // beside a file that stays outside.
  char host_template[] = "/tmp/jail_test.XXXXXX";
  ASSERT_NE(mkdtemp(host_template), nullptr);
  const std::string host = host_template;
  ASSERT_EQ(chmod(host.c_str(), 0755), 0);
  const std::string media = host + "/media";
  ASSERT_EQ(mkdir(media.c_str(), 0755), 0);
  for (const std::string& file : {media + "/disc.iso", host + "/outside"}) {
    FILE* out = fopen(file.c_str(), "w");
    ASSERT_NE(out, nullptr);
    fputs("contents\n", out);
    fclose(out);
    ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  }
  auto child = [&] {
    // From here on this process is the supervisor; what follows runs in its child, PID 1 of
    // the new PID namespace, and the supervisor exits with its status.
    auto namespaces = EnterNamespaces({.new_network = true});
    if (!namespaces.ok()) {
      fprintf(stderr, "%s\n", std::string(namespaces.status().message()).c_str());
      ExitNow(2);
    }
    const bool first = getpid() == 1 && namespaces->host_pid > 1;
    // Opened before the jail, as the VMM opens its disks: it keeps working.
    const int kept = open((host + "/outside").c_str(), O_RDONLY | O_CLOEXEC);
    JailOptions options;
    options.uid = 65534;
    options.gid = 65534;
    options.max_open_files = 64;
    options.shared_directories = {media};
    options.device_nodes = {"/dev/null"};
    options.supervisor_alive = namespaces->supervisor_alive.get();
    // As the launchers run it: the root built under their umask, which the jail's directories
    // must not take (0600 would shut its user out of the media directory's path).
    umask(0177);
    auto root = BuildJailRoot(options);
    if (!root.ok()) {
      fprintf(stderr, "%s\n", std::string(root.status().message()).c_str());
      ExitNow(2);
    }
    if (absl::Status entered = EnterJail(options, *std::move(root)); !entered.ok()) {
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
    char kept_byte = 0;
    struct stat null_node {};
    const bool ids = getuid() == 65534 && geteuid() == 65534 && getgid() == 65534;
    // The host's files are gone, ".." leads nowhere, the shared directory is at its own path.
    const bool rooted = access("/etc/passwd", F_OK) != 0 && access("/proc", F_OK) != 0 &&
                        access((host + "/outside").c_str(), F_OK) != 0 &&
                        access("/../../etc/passwd", F_OK) != 0 &&
                        getcwd(cwd, sizeof(cwd)) != nullptr && std::string(cwd) == "/";
    const bool shared = FirstLine(media + "/disc.iso") == "contents\n" &&
                        open((media + "/new").c_str(), O_CREAT | O_WRONLY, 0644) < 0 &&
                        read(kept, &kept_byte, 1) == 1;
    const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    const bool node = stat("/dev/null", &null_node) == 0 && S_ISCHR(null_node.st_mode) &&
                      null_node.st_uid == 65534 && (null_node.st_mode & 0777) == 0600 &&
                      null_fd >= 0 && write(null_fd, "x", 1) == 1;
    // Nothing is writable by the jail's user, and no mount can change that.
    const bool read_only =
        mkdir("/tmp", 0755) != 0 && mount("none", "/", "tmpfs", 0, nullptr) != 0 && errno == EPERM;
    const bool no_caps = caps[0].permitted == 0 && caps[0].effective == 0;
    const bool flags =
        prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0 && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
    const bool limits = core.rlim_max == 0 && files.rlim_cur == 64;
    const bool stays = setuid(0) != 0;
    int death_signal = 0;
    prctl(PR_GET_PDEATHSIG, &death_signal, 0, 0, 0);
    const bool supervised = !SupervisorGone(options.supervisor_alive) && death_signal == SIGKILL;
    fprintf(stderr,
            "ids %d rooted %d shared %d node %d read_only %d no_caps %d flags %d "
            "limits %d stays %d first %d supervised %d\n",
            ids, rooted, shared, node, read_only, no_caps, flags, limits, stays, first, supervised);
    const bool checks = ids && rooted && shared && node && read_only && no_caps && flags &&
                        limits && stays && first && supervised;
    ExitNow(checks ? 0 : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
  // Nothing of the jail reached the host: no mount on the shared directory.
  std::string mounts;
  if (FILE* file = fopen("/proc/self/mountinfo", "r")) {
    char buffer[4096];
    size_t got = 0;
    while ((got = fread(buffer, 1, sizeof(buffer), file)) > 0) mounts.append(buffer, got);
    fclose(file);
  }
  EXPECT_EQ(mounts.find(media), std::string::npos);
  unlink((media + "/disc.iso").c_str());
  unlink((host + "/outside").c_str());
  rmdir(media.c_str());
  rmdir(host.c_str());
}

TEST(JailDeathTest, NamespacesNeedASingleThread) {
  if (geteuid() != 0) MICROVM_SKIP("new namespaces need root");
  auto child = [&] {
    std::thread sleeper([] { usleep(200000); });
    const absl::Status status = EnterNamespaces({}).status();
    sleeper.join();
    ExitNow(status.code() == absl::StatusCode::kFailedPrecondition &&
                    absl::StrContains(status.message(), "already runs 2 threads")
                ? 0
                : 3);
  };
  EXPECT_EXIT(child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace vmm::sandbox

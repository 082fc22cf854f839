#include "vmm/sandbox/socket_janitor.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/exit_now.h"

namespace vmm::sandbox {
namespace {

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class SocketJanitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Short: sockaddr_un holds 108 bytes, and TEST_TMPDIR is long.
    char dir[] = "/tmp/janitor.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    for (int fd : sockets_) close(fd);
    std::filesystem::remove_all(dir_);
  }

  // Binds a listening socket at dir_/name; its lstat in `st`.
  std::string Bind(const std::string& name, struct stat* st) {
    const std::string path = dir_ + "/" + name;
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_GE(fd, 0);
    sockets_.push_back(fd);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
        << strerror(errno);
    EXPECT_EQ(lstat(path.c_str(), st), 0);
    return path;
  }

  std::string dir_;
  std::vector<int> sockets_;
};

TEST_F(SocketJanitorTest, RemovesTheRegisteredSocketsWhenFinished) {
  auto janitor = SocketJanitor::Start({dir_ + "/api.sock"});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  struct stat api {};
  struct stat other {};
  const std::string api_path = Bind("api.sock", &api);
  const std::string other_path = Bind("other.sock", &other);
  ASSERT_TRUE(janitor->Register(api_path, api).ok());
  ASSERT_TRUE(janitor->Seal().ok());
  EXPECT_TRUE(Exists(api_path)) << "removed before the launcher finished";
  janitor->Finish();
  EXPECT_FALSE(Exists(api_path)) << "the registered socket outlived the launcher";
  EXPECT_TRUE(Exists(other_path)) << "a socket nobody registered was removed";
}

// The janitor is its own process, not the launcher's child: a jailed launcher's supervisor has
// exactly one child, the VMM, and nothing is left for anyone to reap.
TEST_F(SocketJanitorTest, IsNobodysChild) {
  auto janitor = SocketJanitor::Start({});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

// A socket replaced since it was registered (another VMM's, a file someone put there) stays.
TEST_F(SocketJanitorTest, LeavesWhatTookTheSocketsPlace) {
  auto janitor = SocketJanitor::Start({dir_ + "/replaced.sock", dir_ + "/regular.sock"});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  struct stat first {};
  struct stat file {};
  const std::string replaced = Bind("replaced.sock", &first);
  const std::string regular = Bind("regular.sock", &file);
  ASSERT_TRUE(janitor->Register(replaced, first).ok());
  ASSERT_TRUE(janitor->Register(regular, file).ok());
  ASSERT_EQ(unlink(replaced.c_str()), 0);
  struct stat second {};
  Bind("replaced.sock", &second);
  ASSERT_NE(second.st_ino, first.st_ino);
  ASSERT_EQ(unlink(regular.c_str()), 0);
  std::ofstream(regular) << "not a socket";
  janitor->Finish();
  EXPECT_TRUE(Exists(replaced)) << "another process's socket was removed";
  EXPECT_TRUE(Exists(regular)) << "a regular file was removed";
}

// The unix sockets among this process's descriptors: what a thread of it would find.
std::vector<int> Sockets() {
  std::vector<int> found;
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) return found;
  while (dirent* entry = readdir(fds)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd) || fd == dirfd(fds)) continue;
    char target[64] = {};
    const std::string link = absl::StrCat("/proc/self/fd/", fd);
    if (readlink(link.c_str(), target, sizeof(target) - 1) <= 0) continue;
    if (std::string(target).rfind("socket:", 0) == 0) found.push_back(fd);
  }
  closedir(fds);
  return found;
}

// A registration as the janitor's channel carries it (kind 1, the path's length, device, inode,
// change time, the path), written straight into the channel as a compromised thread could.
struct ForgedMessage {
  uint32_t kind = 1;
  uint32_t path_length = 0;
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t changed_seconds = 0;
  int64_t changed_nanoseconds = 0;
  char path[sizeof(sockaddr_un::sun_path)] = {};
};
const ForgedMessage& Forged(const std::string& path, const struct stat& st) {
  static thread_local ForgedMessage message;
  message = ForgedMessage{};
  message.path_length = static_cast<uint32_t>(path.size());
  message.device = st.st_dev;
  message.inode = st.st_ino;
  message.changed_seconds = st.st_ctim.tv_sec;
  message.changed_nanoseconds = st.st_ctim.tv_nsec;
  std::memcpy(message.path, path.data(), path.size());
  return message;
}

// A thread compromised after the launch finds the janitor's channel and asks it to remove a
// file: the janitor reads the request and ignores it. The launcher's own Register says why it
// fails.
TEST_F(SocketJanitorTest, TakesNothingAfterTheSeal) {
  const std::vector<int> before = Sockets();
  auto janitor = SocketJanitor::Start({dir_ + "/victim.sock"});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  ASSERT_TRUE(janitor->Seal().ok());
  struct stat target {};
  const std::string victim = Bind("victim.sock", &target);
  const absl::Status late = janitor->Register(victim, target);
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  // The same registration written straight into the channel, as the janitor's messages are laid out
  // (kind 1, the path's length, device, inode, the path).
  std::vector<int> channels = Sockets();
  std::erase_if(channels, [&](int fd) {
    return std::find(before.begin(), before.end(), fd) != before.end() ||
           std::find(sockets_.begin(), sockets_.end(), fd) != sockets_.end();
  });
  ASSERT_EQ(channels.size(), 1u);
  ASSERT_EQ(write(channels[0], &Forged(victim, target), sizeof(ForgedMessage)),
            static_cast<ssize_t>(sizeof(ForgedMessage)));
  janitor->Finish();
  EXPECT_TRUE(Exists(victim)) << "the janitor acted on a request written after the seal";
}

// A thread compromised before the seal (the API serves a moment before it) finds the channel and
// names a file the janitor was not started for: ignored, as is a second registration of a path.
TEST_F(SocketJanitorTest, RemovesOnlyThePathsItWasStartedFor) {
  const std::vector<int> before = Sockets();
  auto janitor = SocketJanitor::Start({dir_ + "/api.sock"});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  struct stat api {};
  struct stat other {};
  const std::string api_path = Bind("api.sock", &api);
  const std::string victim = Bind("someone-elses.sock", &other);
  EXPECT_EQ(janitor->Register(victim, other).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int> channels = Sockets();
  std::erase_if(channels, [&](int fd) {
    return std::find(before.begin(), before.end(), fd) != before.end() ||
           std::find(sockets_.begin(), sockets_.end(), fd) != sockets_.end();
  });
  ASSERT_EQ(channels.size(), 1u);
  ASSERT_EQ(write(channels[0], &Forged(victim, other), sizeof(ForgedMessage)),
            static_cast<ssize_t>(sizeof(ForgedMessage)));
  // The allowed path with another file's identity first, then the real one: the first counts,
  // so the socket stays (a registration cannot be replaced).
  ASSERT_EQ(write(channels[0], &Forged(api_path, other), sizeof(ForgedMessage)),
            static_cast<ssize_t>(sizeof(ForgedMessage)));
  EXPECT_TRUE(janitor->Register(api_path, api).ok());
  EXPECT_EQ(janitor->Register(api_path, api).code(), absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(janitor->Seal().ok());
  janitor->Finish();
  EXPECT_TRUE(Exists(victim)) << "a path the janitor was not started for was removed";
  EXPECT_TRUE(Exists(api_path)) << "a second registration replaced the first";
}

// The next VMM on the same path unlinks a stale socket and binds its own, which may get the same
// inode number once the old one is freed: the change time tells them apart.
TEST_F(SocketJanitorTest, LeavesANewSocketWithTheOldOnesInodeNumber) {
  auto janitor = SocketJanitor::Start({dir_ + "/reused.sock"});
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  struct stat first {};
  const std::string path = Bind("reused.sock", &first);
  ASSERT_TRUE(janitor->Register(path, first).ok());
  ASSERT_TRUE(janitor->Seal().ok());
  // The same device and inode number, another change time: what a reused inode looks like.
  struct stat forged_stat = first;
  forged_stat.st_ctim.tv_nsec = (first.st_ctim.tv_nsec + 1) % 1000000000;
  auto other = SocketJanitor::Start({path});
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_TRUE(other->Register(path, forged_stat).ok());
  ASSERT_TRUE(other->Seal().ok());
  other->Finish();
  EXPECT_TRUE(Exists(path)) << "removed a socket whose change time differs";
  janitor->Finish();
  EXPECT_FALSE(Exists(path)) << "the registered socket outlived the launcher";
}

// The launcher killed (no Finish, no destructor): the channel's end-of-file is the janitor's cue.
TEST_F(SocketJanitorTest, RemovesTheSocketWhenTheLauncherIsKilled) {
  struct stat st {};
  std::string path;
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    auto janitor = SocketJanitor::Start({dir_ + "/killed.sock"});
    if (!janitor.ok()) ::sys_util::ExitNow(3);
    path = Bind("killed.sock", &st);
    if (!janitor->Register(path, st).ok() || !janitor->Seal().ok()) {
      ::sys_util::ExitNow(4);
    }
    kill(getpid(), SIGKILL);
  }
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  path = dir_ + "/killed.sock";
  // The janitor works on its own time after the launcher's death; a behaviour, not a timing: wait
  // as long as a loaded machine may need.
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (Exists(path) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  EXPECT_FALSE(Exists(path)) << "the socket outlived the killed launcher";
}

// A launcher started with stdin, stdout and stderr closed: the janitor's descriptors must not take
// those numbers (it closes them), and its death must not be the launcher's SIGPIPE.
TEST_F(SocketJanitorTest, WorksForALauncherWithoutStdio) {
  struct stat st {};
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    for (int fd = 0; fd < 3; ++fd) close(fd);
    auto janitor = SocketJanitor::Start({dir_ + "/no-stdio.sock"});
    if (!janitor.ok()) ::sys_util::ExitNow(3);
    const std::string path = Bind("no-stdio.sock", &st);
    if (!janitor->Register(path, st).ok() || !janitor->Seal().ok()) {
      ::sys_util::ExitNow(4);
    }
    janitor->Finish();
    ::sys_util::ExitNow(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  EXPECT_FALSE(Exists(dir_ + "/no-stdio.sock")) << "the socket outlived the launcher";
}

// A janitor that is gone (one that could not install its filter exits) is an error for the
// launcher, not a SIGPIPE: the channel shut for writing stands in for the janitor's end closed.
TEST_F(SocketJanitorTest, AJanitorThatIsGoneIsAnErrorNotASignal) {
  // In a child with SIGPIPE's default action (a test runner may ignore it, which would hide one).
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    signal(SIGPIPE, SIG_DFL);
    const std::vector<int> before = Sockets();
    auto janitor = SocketJanitor::Start({dir_ + "/late.sock", dir_ + "/later.sock"});
    if (!janitor.ok()) ::sys_util::ExitNow(3);
    std::vector<int> channels = Sockets();
    std::erase_if(channels, [&](int fd) {
      return std::find(before.begin(), before.end(), fd) != before.end();
    });
    if (channels.size() != 1 || shutdown(channels[0], SHUT_WR) != 0) ::sys_util::ExitNow(4);
    struct stat none {};
    if (janitor->Register(dir_ + "/late.sock", none).code() != absl::StatusCode::kUnavailable) {
      ::sys_util::ExitNow(5);
    }
    janitor->Finish();
    if (janitor->Register(dir_ + "/later.sock", none).code() !=
        absl::StatusCode::kFailedPrecondition) {
      ::sys_util::ExitNow(6);
    }
    ::sys_util::ExitNow(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(launcher, &status, 0), launcher);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

TEST_F(SocketJanitorTest, RefusesWhatIsNotASocketPath) {
  EXPECT_EQ(SocketJanitor::Start({""}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SocketJanitor::Start({std::string(200, 'x')}).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::string> paths;
  for (int i = 0; i <= SocketJanitor::kMaxSockets; ++i) paths.push_back(absl::StrCat(dir_, "/", i));
  EXPECT_EQ(SocketJanitor::Start(paths).status().code(), absl::StatusCode::kInvalidArgument);
  paths.pop_back();
  auto janitor = SocketJanitor::Start(paths);
  ASSERT_TRUE(janitor.ok()) << janitor.status();
  struct stat none {};
  for (const std::string& path : paths) EXPECT_TRUE(janitor->Register(path, none).ok());
  EXPECT_EQ(janitor->Register(dir_ + "/not-given", none).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vmm::sandbox

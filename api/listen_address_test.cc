#include "api/listen_address.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace api {
namespace {

// A fresh directory under /tmp (the sandbox's TEST_TMPDIR is too long for a socket path).
class ListenAddressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/listen_test.XXXXXX";
    ASSERT_NE(mkdtemp(name), nullptr);
    dir_ = name;
  }
  void TearDown() override { std::system(("rm -rf " + dir_).c_str()); }

  // A socket bound at `path`; listening or not. Returns the fd (the caller closes it).
  int BindSocket(const std::string& path, bool listening) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0)
        << strerror(errno);
    if (listening) {
      EXPECT_EQ(listen(fd, 4), 0);
    }
    return fd;
  }

  static bool Exists(const std::string& path) {
    struct stat st {};
    return lstat(path.c_str(), &st) == 0;
  }

  // The names in the test's directory.
  std::set<std::string> Listing() const {
    std::set<std::string> names;
    DIR* dir = opendir(dir_.c_str());
    if (dir == nullptr) return names;
    while (const dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.insert(name);
    }
    closedir(dir);
    return names;
  }

  // A listening socket bound at `staged`'s bind path (the caller closes the fd).
  int BindStaged(const StagedUnixSocket& staged) {
    return BindSocket(staged.bind_path(), /*listening=*/true);
  }

  std::string dir_;
};

TEST_F(ListenAddressTest, AFreePathIsFine) {
  EXPECT_TRUE(PrepareUnixSocketPath(dir_ + "/api.sock").ok());
  EXPECT_FALSE(Exists(dir_ + "/api.sock"));
}

TEST_F(ListenAddressTest, BadPaths) {
  EXPECT_EQ(PrepareUnixSocketPath("").code(), absl::StatusCode::kInvalidArgument);
  const std::string long_path = dir_ + "/" + std::string(120, 'x');
  absl::Status status = PrepareUnixSocketPath(long_path);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("at most 107"), std::string::npos) << status;
  status = PrepareUnixSocketPath(dir_ + "/missing/api.sock");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find(dir_ + "/missing"), std::string::npos) << status;
}

TEST_F(ListenAddressTest, RefusesARegularFileADirectoryAndASymlink) {
  const std::string file = dir_ + "/file";
  std::ofstream(file) << "precious";
  absl::Status status = PrepareUnixSocketPath(file);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(status.message().find(file), std::string::npos) << status;
  EXPECT_NE(status.message().find("regular file"), std::string::npos) << status;
  EXPECT_TRUE(Exists(file));

  EXPECT_EQ(PrepareUnixSocketPath(dir_).code(), absl::StatusCode::kAlreadyExists);

  // Even a symlink to a stale socket: never follow links into someone else's directory.
  const std::string socket_path = dir_ + "/stale.sock";
  close(BindSocket(socket_path, /*listening=*/false));
  ASSERT_EQ(symlink(socket_path.c_str(), (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(PrepareUnixSocketPath(dir_ + "/link").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(Exists(socket_path));
}

TEST_F(ListenAddressTest, RefusesALiveSocket) {
  const std::string path = dir_ + "/live.sock";
  const int fd = BindSocket(path, /*listening=*/true);
  absl::Status status = PrepareUnixSocketPath(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(status.message().find("listening"), std::string::npos) << status;
  EXPECT_NE(status.message().find(path), std::string::npos) << status;
  EXPECT_TRUE(Exists(path));
  close(fd);
}

TEST_F(ListenAddressTest, RemovesAStaleSocket) {
  const std::string path = dir_ + "/stale.sock";
  close(BindSocket(path, /*listening=*/true));  // the listener died; the file stayed
  ASSERT_TRUE(Exists(path));
  EXPECT_TRUE(PrepareUnixSocketPath(path).ok());
  EXPECT_FALSE(Exists(path));
}

// The process's umask stays as it is while the socket is staged and published; whatever it is,
// the socket ends up mode 0600, and nobody but the owner could reach it before.
TEST_F(ListenAddressTest, StagedSocketIsPublishedMode0600WithoutTouchingTheUmask) {
  const mode_t saved = umask(0);  // the most permissive: a socket bound by the caller is 0777
  const std::string path = dir_ + "/api.sock";
  auto staged = StagedUnixSocket::Create(path);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(staged->path(), path);
  EXPECT_FALSE(Exists(path));
  // A private directory beside the path, open to its owner only.
  const std::string bind_path = staged->bind_path();
  const std::string private_dir = bind_path.substr(0, bind_path.rfind('/'));
  EXPECT_EQ(private_dir.rfind(dir_ + "/.api.sock.", 0), 0u) << private_dir;
  struct stat st {};
  ASSERT_EQ(lstat(private_dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  const int fd = BindStaged(*staged);
  struct stat staged_st {};
  ASSERT_EQ(lstat(bind_path.c_str(), &staged_st), 0);
  struct stat published {};
  ASSERT_TRUE(staged->Publish(&published).ok());
  EXPECT_EQ(umask(saved), 0u) << "the umask changed";
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_ino, staged_st.st_ino);  // the socket bound above, moved
  EXPECT_EQ(published.st_ino, st.st_ino);
  EXPECT_EQ(published.st_dev, st.st_dev);
  EXPECT_EQ(Listing(), std::set<std::string>{"api.sock"}) << "the private directory stayed";
  // And it works where it is now.
  const int client = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(client);
  close(fd);
  EXPECT_FALSE(staged->Publish().ok());  // once
}

// A path that fits sockaddr_un while the private directory's does not: bound through
// /proc/self/fd.
TEST_F(ListenAddressTest, StagedSocketWithALongPath) {
  sockaddr_un address{};
  const std::string path =
      dir_ + "/" + std::string(sizeof(address.sun_path) - 1 - dir_.size() - 1, 'l');
  ASSERT_EQ(path.size(), sizeof(address.sun_path) - 1);
  auto staged = StagedUnixSocket::Create(path);
  ASSERT_TRUE(staged.ok()) << staged.status();
  EXPECT_EQ(staged->bind_path().rfind("/proc/self/fd/", 0), 0u) << staged->bind_path();
  const int fd = BindStaged(*staged);
  ASSERT_TRUE(staged->Publish().ok());
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(Listing().size(), 1u);
  close(fd);
}

// Something put at the path after it was checked is never replaced.
TEST_F(ListenAddressTest, StagedSocketNeverReplacesWhatAppeared) {
  const std::string path = dir_ + "/api.sock";
  std::optional<StagedUnixSocket> staged;
  {
    auto created = StagedUnixSocket::Create(path);
    ASSERT_TRUE(created.ok()) << created.status();
    staged.emplace(*std::move(created));
  }
  const int fd = BindStaged(*staged);
  std::ofstream(path) << "precious";
  const absl::Status published = staged->Publish();
  EXPECT_EQ(published.code(), absl::StatusCode::kAlreadyExists) << published;
  EXPECT_NE(published.message().find(path), std::string::npos) << published;
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "precious");
  staged.reset();  // removes the staged socket and its directory
  EXPECT_EQ(Listing(), std::set<std::string>{"api.sock"});
  close(fd);
}

TEST_F(ListenAddressTest, StagedSocketCleansUpWhenNotPublished) {
  {
    auto staged = StagedUnixSocket::Create(dir_ + "/api.sock");
    ASSERT_TRUE(staged.ok()) << staged.status();
    close(BindStaged(*staged));
    EXPECT_EQ(Listing().size(), 1u);  // the private directory
  }
  EXPECT_TRUE(Listing().empty());
  // Create applies PrepareUnixSocketPath's rules, and leaves nothing behind when they refuse.
  std::ofstream(dir_ + "/file") << "precious";
  auto refused = StagedUnixSocket::Create(dir_ + "/file");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(Listing(), std::set<std::string>{"file"});
  EXPECT_FALSE(StagedUnixSocket::Create(dir_ + "/missing/api.sock").ok());
}

TEST(TcpListenAddressTest, LoopbackOnlyUnlessAsked) {
  EXPECT_EQ(*ParseTcpListenAddress("127.0.0.1:7000", false), "127.0.0.1:7000");
  EXPECT_EQ(*ParseTcpListenAddress("127.1.2.3:0", false), "127.1.2.3:0");
  EXPECT_EQ(*ParseTcpListenAddress("[::1]:7000", false), "[::1]:7000");
  EXPECT_EQ(*ParseTcpListenAddress("localhost:7000", false), "localhost:7000");
  for (const char* outside : {"0.0.0.0:7000", "10.0.0.1:7000", "[::]:7000", "[2001:db8::1]:80"}) {
    auto parsed = ParseTcpListenAddress(outside, false);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << outside;
    EXPECT_NE(parsed.status().message().find("--api-listen-any"), std::string::npos) << outside;
    EXPECT_TRUE(ParseTcpListenAddress(outside, true).ok()) << outside;
  }
}

TEST(TcpListenAddressTest, Malformed) {
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:x",
                          "::1:7000", "[::1]7000", "[::1", "example.com:80", "127.0.0.1:-1"}) {
    EXPECT_EQ(ParseTcpListenAddress(bad, true).status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

}  // namespace
}  // namespace api

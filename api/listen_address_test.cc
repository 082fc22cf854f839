#include "api/listen_address.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
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

#include "absl/strings/str_cat.h"
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

// The launchers' umask (0177): the socket is bound at its path, mode 0600 from its first instant,
// and serves there.
TEST_F(ListenAddressTest, ListensMode0600UnderAnOwnerOnlyUmask) {
  const mode_t saved = umask(0177);
  const std::string path = dir_ + "/api.sock";
  struct stat identity {};
  auto listener = ListenOnUnixSocket(path, "--api-socket", 4, &identity);
  umask(saved);
  ASSERT_TRUE(listener.ok()) << listener.status();
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(identity.st_ino, st.st_ino);
  EXPECT_EQ(identity.st_dev, st.st_dev);
  EXPECT_EQ(Listing(), std::set<std::string>{"api.sock"});
  const int client = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(client);
}

// Any umask that lets group or others in is refused before anything is bound.
TEST_F(ListenAddressTest, RefusesAUmaskThatLetsOthersIn) {
  for (mode_t permissive : {0000, 0022, 0007, 0070}) {
    const mode_t saved = umask(permissive);
    const absl::Status checked = CheckOwnerOnlyUmask(dir_ + "/api.sock", "--api-socket");
    auto listener = ListenOnUnixSocket(dir_ + "/api.sock", "--api-socket", 4);
    umask(saved);
    EXPECT_EQ(checked.code(), absl::StatusCode::kFailedPrecondition) << permissive;
    EXPECT_NE(checked.message().find("umask"), std::string::npos) << checked;
    EXPECT_NE(checked.message().find("--api-socket"), std::string::npos) << checked;
    EXPECT_EQ(listener.status().code(), absl::StatusCode::kFailedPrecondition) << permissive;
    EXPECT_TRUE(Listing().empty()) << permissive;
  }
  for (mode_t strict : {0077, 0177, 0777}) {
    const mode_t saved = umask(strict);
    EXPECT_TRUE(CheckOwnerOnlyUmask(dir_ + "/api.sock", "--api-socket").ok()) << strict;
    umask(saved);
  }
}

// Something put at the path after it was checked is never replaced: bind(2) refuses.
TEST_F(ListenAddressTest, NeverReplacesWhatAppeared) {
  const std::string path = dir_ + "/api.sock";
  std::ofstream(path) << "precious";
  const mode_t saved = umask(0177);
  auto listener = ListenOnUnixSocket(path, "--api-socket", 4);
  umask(saved);
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kAlreadyExists) << listener.status();
  EXPECT_NE(listener.status().message().find(path), std::string::npos) << listener.status();
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "precious");
}

TEST_F(ListenAddressTest, ChecksWhatSomeoneElseBound) {
  const std::string path = dir_ + "/grpc.sock";
  const mode_t saved = umask(0022);  // 0755: not the owner's alone
  const int fd = BindSocket(path, /*listening=*/true);
  umask(saved);
  struct stat identity {};
  EXPECT_EQ(CheckBoundSocket(path, "--api-socket", &identity).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(CheckBoundSocket(dir_ + "/missing", "--api-socket", &identity).code(),
            absl::StatusCode::kInternal);
  ASSERT_EQ(chmod(path.c_str(), 0600), 0);
  EXPECT_TRUE(CheckBoundSocket(path, "--api-socket", &identity).ok());
  close(fd);
}

TEST(TcpListenAddressTest, LoopbackOnlyUnlessAsked) {
  auto parsed_as = [](const char* text) {
    auto parsed = ParseTcpListenAddress(text, false);
    return parsed.ok() ? absl::StrCat(parsed->host, " ", parsed->port) : parsed.status().ToString();
  };
  EXPECT_EQ(parsed_as("127.0.0.1:7000"), "127.0.0.1 7000");
  EXPECT_EQ(parsed_as("127.1.2.3:0"), "127.1.2.3 0");
  EXPECT_EQ(parsed_as("[::1]:7000"), "::1 7000");
  EXPECT_EQ(parsed_as("localhost:7000"), "localhost 7000");
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

// The API's TCP listeners are ours (bound before the sandbox): port 0 picks one, "localhost" is
// both loopbacks on one port where the host has IPv6, and without SO_REUSEPORT a second VMM
// cannot share the port (it would take half of the connections).
TEST(TcpListenersTest, BindsThePortAndRefusesASecondBinder) {
  auto first = ListenOnTcp({.host = "127.0.0.1", .port = 0}, "127.0.0.1:0", 4);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->sockets.size(), 1u);
  ASSERT_GT(first->port, 0);
  int reuse_port = -1;
  socklen_t length = sizeof(reuse_port);
  ASSERT_EQ(getsockopt(first->sockets[0].get(), SOL_SOCKET, SO_REUSEPORT, &reuse_port, &length), 0);
  EXPECT_EQ(reuse_port, 0);
  const std::string taken = "127.0.0.1:" + std::to_string(first->port);
  auto second = ListenOnTcp({.host = "127.0.0.1", .port = first->port}, taken, 4);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("127.0.0.1:"), std::string::npos) << second.status();

  auto local = ListenOnTcp({.host = "localhost", .port = 0}, "localhost:0", 4);
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_GE(local->sockets.size(), 1u);
  for (const auto& socket : local->sockets) {
    sockaddr_storage bound{};
    socklen_t bound_length = sizeof(bound);
    ASSERT_EQ(getsockname(socket.get(), reinterpret_cast<sockaddr*>(&bound), &bound_length), 0);
    const int port = bound.ss_family == AF_INET6
                         ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                         : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    EXPECT_EQ(port, local->port);
  }
}

TEST_F(ListenAddressTest, BindApiListenersChecksFirstAndLeavesNothingOnFailure) {
  umask(0177);
  ApiServerOptions none;
  EXPECT_EQ(BindApiListeners(none).status().code(), absl::StatusCode::kInvalidArgument);
  // TCP without a token or --api-tcp-insecure: nothing is bound.
  ApiServerOptions open_tcp{.unix_socket_path = dir_ + "/api.sock", .tcp_address = "127.0.0.1:0"};
  EXPECT_EQ(BindApiListeners(open_tcp).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(access((dir_ + "/api.sock").c_str(), F_OK), -1);
  // The TCP port taken: the unix socket bound first is removed again.
  auto taken = ListenOnTcp({.host = "127.0.0.1", .port = 0}, "127.0.0.1:0", 4);
  ASSERT_TRUE(taken.ok());
  ApiServerOptions busy{.unix_socket_path = dir_ + "/api.sock",
                        .tcp_address = "127.0.0.1:" + std::to_string(taken->port),
                        .tcp_insecure = true};
  EXPECT_EQ(BindApiListeners(busy).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(access((dir_ + "/api.sock").c_str(), F_OK), -1);
  // Both, non-blocking, the unix socket's identity kept.
  ApiServerOptions both{
      .unix_socket_path = dir_ + "/api.sock", .tcp_address = "127.0.0.1:0", .tcp_insecure = true};
  auto listeners = BindApiListeners(both);
  ASSERT_TRUE(listeners.ok()) << listeners.status();
  ASSERT_TRUE(listeners->unix_socket.valid());
  ASSERT_TRUE(listeners->unix_identity.has_value());
  struct stat st {};
  ASSERT_EQ(lstat((dir_ + "/api.sock").c_str(), &st), 0);
  EXPECT_EQ(listeners->unix_identity->inode, st.st_ino);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(listeners->tcp.size(), 1u);
  EXPECT_GT(listeners->tcp_port, 0);
  EXPECT_NE(fcntl(listeners->unix_socket.get(), F_GETFL) & O_NONBLOCK, 0);
  EXPECT_NE(fcntl(listeners->tcp[0].get(), F_GETFL) & O_NONBLOCK, 0);
}

}  // namespace
}  // namespace api

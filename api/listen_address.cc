#include "api/listen_address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

namespace api {
namespace {

std::string Errno(int error) { return std::string(strerror(error)); }

// The directory part of `path` ("." for a bare name).
std::string Directory(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// The last component of `path`.
std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// `directory` + "/" + `name` (no doubled slash after "/").
std::string Join(const std::string& directory, const std::string& name) {
  return directory.back() == '/' ? directory + name : directory + "/" + name;
}

// The socket's name inside the private directory (short: the bind path must fit sockaddr_un).
constexpr char kStagedName[] = "s";

}  // namespace

absl::Status PrepareUnixSocketPath(const std::string& path, const std::string& label) {
  if (path.empty())
    return absl::InvalidArgumentError(absl::StrFormat("the %s path is empty", label));
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s path %s is %d bytes; a unix socket path holds at most %d", label, path,
                        path.size(), sizeof(address.sun_path) - 1));
  }
  if (path.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat("the %s path contains a NUL byte", label));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error != ENOENT) {
      return absl::ErrnoToStatus(error, absl::StrFormat("%s %s", label, path));
    }
    const std::string directory = Directory(path);
    struct stat dir {};
    if (stat(directory.c_str(), &dir) != 0 || !S_ISDIR(dir.st_mode)) {
      return absl::NotFoundError(
          absl::StrFormat("%s %s: the directory %s does not exist", label, path, directory));
    }
    return absl::OkStatus();
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s %s: the path exists and is not a socket (%s); refusing to replace it", label, path,
        S_ISREG(st.st_mode)   ? "a regular file"
        : S_ISDIR(st.st_mode) ? "a directory"
        : S_ISLNK(st.st_mode) ? "a symbolic link"
                              : "a special file"));
  }
  // A socket: live (someone accepts connections) or stale (left by a process that died).
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  address.sun_family = AF_UNIX;
  memcpy(address.sun_path, path.data(), path.size());
  int result;
  do {
    result = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (result != 0 && errno == EINTR);
  const int error = result == 0 ? 0 : errno;
  close(fd);
  if (result == 0 || error == EAGAIN) {
    // EAGAIN: a listener whose backlog is full, alive all the same.
    return absl::AlreadyExistsError(absl::StrFormat(
        "%s %s: another process is listening on it (another VMM?); refusing to take it over", label,
        path));
  }
  if (error != ECONNREFUSED) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s exists, and connect() to it failed (%s), so whether a process still listens on "
        "it cannot be told; refusing to replace it",
        label, path, Errno(error)));
  }
  if (unlink(path.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("removing the stale %s %s", label, path));
  }
  return absl::OkStatus();
}

absl::StatusOr<StagedUnixSocket> StagedUnixSocket::Create(const std::string& path,
                                                          const std::string& label) {
  RETURN_IF_ERROR(PrepareUnixSocketPath(path, label));
  StagedUnixSocket staged;
  staged.path_ = path;
  staged.label_ = label;
  // Hidden, and named after the socket, should a crash ever leave it behind.
  std::string name = Join(Directory(path), "." + BaseName(path) + ".XXXXXX");
  if (mkdtemp(name.data()) == nullptr) {  // mode 0700
    return absl::ErrnoToStatus(
        errno, absl::StrFormat("%s %s: cannot create a private directory beside it", label, path));
  }
  staged.directory_ = name;
  staged.staged_path_ = Join(name, kStagedName);
  sockaddr_un address{};
  if (staged.staged_path_.size() < sizeof(address.sun_path)) {
    staged.bind_path_ = staged.staged_path_;
    return staged;
  }
  // The socket's own path fits (PrepareUnixSocketPath checked) but not the private directory's:
  // name the directory through a descriptor.
  staged.directory_fd_ = open(name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (staged.directory_fd_ < 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrFormat("%s %s: opening its private directory %s", label, path, name));
  }
  staged.bind_path_ = absl::StrFormat("/proc/self/fd/%d/%s", staged.directory_fd_, kStagedName);
  return staged;
}

StagedUnixSocket::StagedUnixSocket(StagedUnixSocket&& other) noexcept { *this = std::move(other); }

StagedUnixSocket& StagedUnixSocket::operator=(StagedUnixSocket&& other) noexcept {
  if (this != &other) {
    Clear();
    path_ = std::move(other.path_);
    label_ = std::move(other.label_);
    directory_ = std::move(other.directory_);
    staged_path_ = std::move(other.staged_path_);
    bind_path_ = std::move(other.bind_path_);
    directory_fd_ = other.directory_fd_;
    other.directory_.clear();
    other.directory_fd_ = -1;
  }
  return *this;
}

StagedUnixSocket::~StagedUnixSocket() { Clear(); }

void StagedUnixSocket::Clear() {
  if (!directory_.empty()) {
    unlink(staged_path_.c_str());  // a socket that was bound but never published
    rmdir(directory_.c_str());
    directory_.clear();
  }
  if (directory_fd_ >= 0) {
    close(directory_fd_);
    directory_fd_ = -1;
  }
}

absl::Status StagedUnixSocket::Publish(struct stat* published) {
  if (directory_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s %s: published already", label_, path_));
  }
  // Inside the private directory nobody else can reach or swap the socket: the path-based chmod
  // and lstat act on the socket just bound.
  struct stat st {};
  if (lstat(staged_path_.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::InternalError(
        absl::StrFormat("%s %s: no socket was bound in %s", label_, path_, directory_));
  }
  if (chmod(staged_path_.c_str(), 0600) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrFormat("%s %s: cannot make it mode 0600", label_, path_));
  }
  if (lstat(staged_path_.c_str(), &st) != 0 || (st.st_mode & 07777) != 0600) {
    return absl::InternalError(
        absl::StrFormat("%s %s: the socket is not mode 0600", label_, path_));
  }
  // Atomic, and never over something that appeared at the path since it was checked (another
  // process's socket, a file an attacker put there).
  int moved = renameat2(AT_FDCWD, staged_path_.c_str(), AT_FDCWD, path_.c_str(), RENAME_NOREPLACE);
  if (moved != 0 && errno == EINVAL) {
    // A file system without RENAME_NOREPLACE: link(2) refuses an existing target just as well.
    moved = link(staged_path_.c_str(), path_.c_str());
    if (moved == 0) unlink(staged_path_.c_str());
  }
  if (moved != 0) {
    const int error = errno;
    if (error == EEXIST) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s %s: something appeared at the path while the server started; refusing to replace "
          "it",
          label_, path_));
    }
    return absl::ErrnoToStatus(
        error, absl::StrFormat("%s %s: moving the socket into place", label_, path_));
  }
  rmdir(directory_.c_str());
  directory_.clear();
  if (directory_fd_ >= 0) {
    close(directory_fd_);
    directory_fd_ = -1;
  }
  if (published != nullptr) *published = st;
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParseTcpListenAddress(const std::string& text, bool listen_any) {
  std::string host;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(
          absl::StrFormat("--api-tcp=%s: expected [IPv6]:PORT", text));
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos || text.find(':') != colon) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--api-tcp=%s: expected HOST:PORT (IPv6 as [ADDRESS]:PORT)", text));
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  uint32_t port = 0;
  if (port_text.empty() || !absl::SimpleAtoi(port_text, &port) || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--api-tcp=%s: bad port '%s' (0 to 65535)", text, port_text));
  }
  bool loopback = false;
  std::string grpc_address;
  in_addr v4{};
  in6_addr v6{};
  if (host == "localhost") {
    loopback = true;
    grpc_address = absl::StrFormat("localhost:%d", port);
  } else if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    loopback = (ntohl(v4.s_addr) >> 24) == 127;
    grpc_address = absl::StrFormat("%s:%d", host, port);
  } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    loopback = IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
    grpc_address = absl::StrFormat("[%s]:%d", host, port);
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--api-tcp=%s: '%s' is not an IP address (or localhost)", text, host));
  }
  if (!loopback && !listen_any) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--api-tcp=%s: not a loopback address; the API's traffic (its token included) is not "
        "encrypted, so it listens beyond this host only with --api-listen-any",
        text));
  }
  return grpc_address;
}

}  // namespace api

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
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/api_token.h"
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
  if (error == ENOENT) {
    // Removed between the lstat and the connect (the socket janitor of a VMM that was killed
    // removes its socket a moment later): the path is free.
    return absl::OkStatus();
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

absl::Status CheckOwnerOnlyUmask(const std::string& path, const std::string& label) {
  // umask(2) can only be read by setting it, which would race with other threads creating files;
  // /proc/self/status shows it (Linux 4.7).
  FILE* status = fopen("/proc/self/status", "re");
  if (status == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("%s %s: reading the umask", label, path));
  }
  char line[256];
  unsigned umask_bits = 0;
  bool found = false;
  while (!found && fgets(line, sizeof(line), status) != nullptr) {
    found = sscanf(line, "Umask: %o", &umask_bits) == 1;
  }
  fclose(status);
  if (!found) {
    return absl::InternalError(
        absl::StrFormat("%s %s: no Umask line in /proc/self/status", label, path));
  }
  if ((umask_bits & 077) != 077) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s: the process's umask is %04o, so the socket would be reachable by other users "
        "from the moment it is bound; start with a umask that keeps group and others out (the "
        "launchers set 0177)",
        label, path, umask_bits));
  }
  return absl::OkStatus();
}

absl::Status CheckBoundSocket(const std::string& path, const std::string& label,
                              struct stat* identity) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return absl::InternalError(absl::StrFormat("%s %s: no socket was bound there", label, path));
  }
  if ((st.st_mode & 07777) != 0600) {
    return absl::InternalError(absl::StrFormat("%s %s: the socket is mode %04o, not 0600", label,
                                               path, st.st_mode & 07777));
  }
  // Mode 0600 keeps everyone else out only if the socket's owner is this process's user.
  if (st.st_uid != geteuid()) {
    return absl::InternalError(absl::StrFormat("%s %s: the socket belongs to uid %d, not to %d",
                                               label, path, st.st_uid, geteuid()));
  }
  if (identity != nullptr) *identity = st;
  return absl::OkStatus();
}

absl::StatusOr<sys_util::ScopedFd> ListenOnUnixSocket(const std::string& path,
                                                      const std::string& label, int backlog,
                                                      struct stat* identity) {
  RETURN_IF_ERROR(CheckOwnerOnlyUmask(path, label));
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s path %s: a unix socket path holds 1 to %d bytes", label, path,
                        sizeof(address.sun_path) - 1));
  }
  sys_util::ScopedFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!listener.valid()) return absl::ErrnoToStatus(errno, "socket(AF_UNIX)");
  address.sun_family = AF_UNIX;
  memcpy(address.sun_path, path.data(), path.size());
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    if (error == EADDRINUSE) {
      return absl::AlreadyExistsError(absl::StrFormat(
          "%s %s: something appeared at the path since it was checked; refusing to replace it",
          label, path));
    }
    return absl::ErrnoToStatus(error, absl::StrFormat("%s %s: bind", label, path));
  }
  if (listen(listener.get(), backlog) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("%s %s: listen", label, path));
  }
  RETURN_IF_ERROR(CheckBoundSocket(path, label, identity));
  return listener;
}

namespace {

// One listening TCP socket on `address` (sockaddr_in or sockaddr_in6), its port in `port`.
absl::StatusOr<sys_util::ScopedFd> ListenOnOneTcpAddress(const sockaddr_storage& address,
                                                         socklen_t length, int backlog,
                                                         const std::string& label, int* port) {
  sys_util::ScopedFd listener(
      socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return absl::ErrnoToStatus(errno, absl::StrCat(label, ": socket"));
  const int on = 1;
  if (setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(label, ": SO_REUSEADDR"));
  }
  if (bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    return absl::UnavailableError(absl::StrFormat("%s: bind: %s", label, Errno(errno)));
  }
  if (listen(listener.get(), backlog) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(label, ": listen"));
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (getsockname(listener.get(), reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(label, ": getsockname"));
  }
  *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return listener;
}

}  // namespace

absl::StatusOr<TcpListeners> ListenOnTcp(const TcpListenAddress& address, const std::string& label,
                                         int backlog) {
  const bool localhost = address.host == "localhost";
  const std::string host = localhost ? "127.0.0.1" : address.host;
  auto socket_address = [](const std::string& ip, int port, sockaddr_storage* out) -> socklen_t {
    *out = {};
    auto* v4 = reinterpret_cast<sockaddr_in*>(out);
    if (inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons(static_cast<uint16_t>(port));
      return sizeof(sockaddr_in);
    }
    auto* v6 = reinterpret_cast<sockaddr_in6*>(out);
    if (inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons(static_cast<uint16_t>(port));
      return sizeof(sockaddr_in6);
    }
    return 0;
  };
  sockaddr_storage first{};
  const socklen_t first_length = socket_address(host, address.port, &first);
  if (first_length == 0) {
    return absl::InvalidArgumentError(absl::StrCat(label, ": not an IP address"));
  }
  TcpListeners listeners;
  ASSIGN_OR_RETURN(auto listener,
                   ListenOnOneTcpAddress(first, first_length, backlog, label, &listeners.port));
  listeners.sockets.push_back(std::move(listener));
  if (localhost) {
    // The IPv6 loopback on the same port, as gRPC binds "localhost": a host without IPv6 (or
    // with the port taken there) serves IPv4 alone.
    sockaddr_storage second{};
    const socklen_t second_length = socket_address("::1", listeners.port, &second);
    int ignored_port = 0;
    auto v6 = ListenOnOneTcpAddress(second, second_length, backlog, label, &ignored_port);
    if (v6.ok()) listeners.sockets.push_back(*std::move(v6));
  }
  return listeners;
}

absl::StatusOr<ApiListeners> BindApiListeners(const ApiServerOptions& options) {
  if (options.unix_socket_path.empty() && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("the API server needs a unix socket path or a TCP address");
  }
  if (!options.auth_token.empty()) {
    RETURN_IF_ERROR(CheckApiToken(options.auth_token, "the API token"));
  }
  std::optional<TcpListenAddress> tcp_address;
  if (!options.tcp_address.empty()) {
    if (options.auth_token.empty() && !options.tcp_insecure) {
      // H1 of docs/security.md: any local user could insert media and shut the VM down.
      return absl::FailedPreconditionError(absl::StrFormat(
          "--api-tcp %s without authentication: every local user could control the VM. Give "
          "--api-token-file=FILE (a secret only the VMM's user can read; clients send it, e.g. "
          "vmmctl --api-token-file=FILE), or accept the risk with --api-tcp-insecure",
          options.tcp_address));
    }
    ASSIGN_OR_RETURN(tcp_address,
                     ParseTcpListenAddress(options.tcp_address, options.tcp_listen_any));
  }
  ApiListeners listeners;
  // Labelled with its flag: errors read "--api-socket PATH: ..." (both binaries call it that).
  if (!options.unix_socket_path.empty()) {
    RETURN_IF_ERROR(PrepareUnixSocketPath(options.unix_socket_path, "--api-socket"));
    struct stat st {};
    ASSIGN_OR_RETURN(
        listeners.unix_socket,
        ListenOnUnixSocket(options.unix_socket_path, "--api-socket", kApiListenBacklog, &st));
    // The accept loop must never block in accept() on a connection that went away after poll()
    // (the TCP listeners are made non-blocking).
    const int flags = fcntl(listeners.unix_socket.get(), F_GETFL);
    if (flags < 0 || fcntl(listeners.unix_socket.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
      const int error = errno;
      unlink(options.unix_socket_path.c_str());
      return absl::ErrnoToStatus(error, "--api-socket: O_NONBLOCK");
    }
    listeners.unix_identity =
        SocketIdentity{.device = st.st_dev, .inode = st.st_ino, .changed = st.st_ctim};
  }
  if (tcp_address.has_value()) {
    auto tcp = ListenOnTcp(*tcp_address, options.tcp_address, kApiListenBacklog);
    if (!tcp.ok()) {
      if (listeners.unix_socket.valid()) unlink(options.unix_socket_path.c_str());
      return tcp.status();  // "ADDRESS: bind: Address already in use"
    }
    listeners.tcp = std::move(tcp->sockets);
    listeners.tcp_port = tcp->port;
  }
  return listeners;
}

absl::StatusOr<TcpListenAddress> ParseTcpListenAddress(const std::string& text, bool listen_any) {
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
  in_addr v4{};
  in6_addr v6{};
  if (host == "localhost") {
    loopback = true;
  } else if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    loopback = (ntohl(v4.s_addr) >> 24) == 127;
  } else if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    loopback = IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
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
  return TcpListenAddress{.host = host, .port = static_cast<int>(port)};
}

}  // namespace api

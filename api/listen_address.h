#ifndef API_LISTEN_ADDRESS_H_
#define API_LISTEN_ADDRESS_H_

#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "api/control_server.h"
#include "vmm/sys_util/scoped_fd.h"

namespace api {

// Makes `path` ready for a new listening unix socket. It must not exist, or be a stale socket: a
// socket nobody listens on (connect() is refused), which is removed. Anything else is refused with
// an error naming the path: a live socket (AlreadyExists), a regular file, directory, symlink or
// other file (AlreadyExists), a path too long for sockaddr_un or empty (InvalidArgument), a parent
// directory that does not exist (NotFound). Errors call the socket `label`.
absl::Status PrepareUnixSocketPath(const std::string& path,
                                   const std::string& label = "API socket");

// Whether the process's umask keeps group and others out of what it creates (all of 077 set).
// A unix socket gets its mode from the umask when bound, and connecting needs write permission on
// it, so under such a umask a socket bound at its final path is its owner's alone from the first
// instant: no private directory, chmod or rename needed. The launchers set 0177 first thing, for
// their whole life (vmm/command_line.h, StartLauncher), and their filter allows no chmod
// (docs/security.md). FailedPrecondition naming `label` and `path` otherwise.
absl::Status CheckOwnerOnlyUmask(const std::string& path, const std::string& label);

// A listening unix socket at `path` (PrepareUnixSocketPath has made room), after
// CheckOwnerOnlyUmask: mode 0600, checked. bind(2) never replaces what may have appeared at the
// path since (AlreadyExists). listen(2) with `backlog`. `identity` (optional) gets its lstat, so
// that exactly this socket can be removed later. Errors name `label` and the path.
absl::StatusOr<sys_util::ScopedFd> ListenOnUnixSocket(const std::string& path,
                                                      const std::string& label, int backlog,
                                                      struct stat* identity = nullptr);

// Checks what was bound at `path` by someone else's bind (gRPC's): a socket of mode 0600.
// `identity` gets its lstat. InternalError naming `label` otherwise.
absl::Status CheckBoundSocket(const std::string& path, const std::string& label,
                              struct stat* identity);

// A TCP address to listen on: an IP literal (IPv6 without its brackets) or "localhost", and a
// port (0: a free one).
struct TcpListenAddress {
  std::string host;
  int port = 0;
};

// Parses a TCP listen address "HOST:PORT" ("127.0.0.1:7000", "[::1]:7000", "localhost:7000";
// port 0 picks a free one). HOST must be an IP literal or "localhost" (no name resolution). Only
// loopback addresses (127.0.0.0/8, ::1, localhost) are accepted unless `listen_any` is set: the
// API's traffic, its token included, is not encrypted. InvalidArgument for anything else.
absl::StatusOr<TcpListenAddress> ParseTcpListenAddress(const std::string& text, bool listen_any);

// The listening sockets for `address`, bound as gRPC would bind them: SO_REUSEADDR, never
// SO_REUSEPORT (a second VMM could then take half of the connections), close-on-exec,
// non-blocking. "localhost" is 127.0.0.1 and, where the host has IPv6, ::1 on the same port.
// Port 0 picks a free one, in `port`. Unavailable (address in use, no permission) otherwise,
// the message starting with `label` (the address as the user wrote it).
struct TcpListeners {
  std::vector<sys_util::ScopedFd> sockets;
  int port = 0;
};
absl::StatusOr<TcpListeners> ListenOnTcp(const TcpListenAddress& address, const std::string& label,
                                         int backlog);

// Connections a listener holds before the server accepts them (the launchers bind before the
// jail and accept only inside it).
inline constexpr int kApiListenBacklog = 64;

// Every listening socket `options` asks for, non-blocking, after its checks: at least one of
// unix_socket_path and tcp_address (InvalidArgument), a well-formed token, TCP only with a token
// or tcp_insecure (FailedPrecondition, H1 of docs/security.md), the TCP address as
// ParseTcpListenAddress takes it, the socket path as PrepareUnixSocketPath and ListenOnUnixSocket
// take it ("--api-socket PATH: ..."). A unix socket bound and then a TCP failure: the unix socket
// is removed again.
absl::StatusOr<ApiListeners> BindApiListeners(const ApiServerOptions& options);

}  // namespace api

#endif  // API_LISTEN_ADDRESS_H_

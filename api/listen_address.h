#ifndef API_LISTEN_ADDRESS_H_
#define API_LISTEN_ADDRESS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace api {

// Makes `path` ready for a new listening unix socket. It must not exist, or be a stale socket: a
// socket nobody listens on (connect() is refused), which is removed. Anything else is refused with
// an error naming the path: a live socket (AlreadyExists), a regular file, directory, symlink or
// other file (AlreadyExists), a path too long for sockaddr_un or empty (InvalidArgument), a parent
// directory that does not exist (NotFound). Errors call the socket `label`.
absl::Status PrepareUnixSocketPath(const std::string& path,
                                   const std::string& label = "API socket");

// Parses a TCP listen address "HOST:PORT" ("127.0.0.1:7000", "[::1]:7000", "localhost:7000";
// port 0 picks a free one) into gRPC's address form. HOST must be an IP literal or "localhost" (no
// name resolution). Only loopback addresses (127.0.0.0/8, ::1, localhost) are accepted unless
// `listen_any` is set: the API has no authentication. InvalidArgument for anything else.
absl::StatusOr<std::string> ParseTcpListenAddress(const std::string& text, bool listen_any);

}  // namespace api

#endif  // API_LISTEN_ADDRESS_H_

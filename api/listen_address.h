#ifndef API_LISTEN_ADDRESS_H_
#define API_LISTEN_ADDRESS_H_

#include <sys/stat.h>

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

// A unix socket set up where nobody but its owner can reach it before it is ready, without
// touching the process's umask (umask is per process, and other threads, vCPUs and iothreads,
// may be creating files at the time). The socket is bound inside a fresh directory of mode 0700
// beside the path (mkdtemp), made mode 0600 there, then moved to the path with rename(2), which is
// atomic: at the path there is nothing, then a socket of mode 0600. Usage: Create(), bind (or let
// gRPC bind) at bind_path(), Publish().
class StagedUnixSocket {
 public:
  // Checks `path` with PrepareUnixSocketPath (which removes a stale socket there; its errors, with
  // `label`) and creates the private directory beside it.
  static absl::StatusOr<StagedUnixSocket> Create(const std::string& path,
                                                 const std::string& label = "API socket");
  StagedUnixSocket(StagedUnixSocket&& other) noexcept;
  StagedUnixSocket& operator=(StagedUnixSocket&& other) noexcept;
  StagedUnixSocket(const StagedUnixSocket&) = delete;
  StagedUnixSocket& operator=(const StagedUnixSocket&) = delete;
  // Removes the private directory and a socket still in it (one never published).
  ~StagedUnixSocket();

  // Where to bind: inside the private directory; when that path would not fit in sockaddr_un, the
  // same place through /proc/self/fd/N (a descriptor of the directory, open until Publish()).
  const std::string& bind_path() const { return bind_path_; }
  // The final path.
  const std::string& path() const { return path_; }

  // Makes the socket bound at bind_path() mode 0600 and moves it to path(), never replacing
  // anything that appeared there in the meantime (RENAME_NOREPLACE: AlreadyExists), then removes
  // the private directory. `published` (optional) receives the socket's lstat, taken where only
  // the owner could reach it (to remove only this socket later). Errors name the path and label.
  absl::Status Publish(struct stat* published = nullptr);

 private:
  StagedUnixSocket() = default;
  void Clear();

  std::string path_;
  std::string label_;
  std::string directory_;    // the private directory; empty once published or moved from
  std::string staged_path_;  // the socket's path inside it
  std::string bind_path_;
  int directory_fd_ = -1;  // O_PATH, for the /proc/self/fd/N form of bind_path_
};

// Parses a TCP listen address "HOST:PORT" ("127.0.0.1:7000", "[::1]:7000", "localhost:7000";
// port 0 picks a free one) into gRPC's address form. HOST must be an IP literal or "localhost" (no
// name resolution). Only loopback addresses (127.0.0.0/8, ::1, localhost) are accepted unless
// `listen_any` is set: the API's traffic, its token included, is not encrypted. InvalidArgument
// for anything else.
absl::StatusOr<std::string> ParseTcpListenAddress(const std::string& text, bool listen_any);

}  // namespace api

#endif  // API_LISTEN_ADDRESS_H_

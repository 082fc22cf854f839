#ifndef API_API_SERVER_H_
#define API_API_SERVER_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/vm_control.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace api {

struct ApiServerOptions {
  // A unix socket to listen on (created with mode 0600; see PrepareUnixSocketPath). Empty: none.
  std::string unix_socket_path;
  // "HOST:PORT" to listen on over TCP (loopback only unless tcp_listen_any). Empty: none.
  std::string tcp_address;
  bool tcp_listen_any = false;
  // Events a Watch stream may have queued for a client that does not keep up; beyond that the
  // stream ends with RESOURCE_EXHAUSTED (the devices never wait for a watcher).
  size_t watch_queue_limit = 1024;
  // Watch streams open at once; more are refused with RESOURCE_EXHAUSTED (each holds a thread).
  int max_watchers = 32;
  // How long Stop() lets calls in progress finish before cancelling them.
  absl::Duration stop_grace = absl::Seconds(1);
  // The API's threads run this much nicer than the thread that starts the server (Linux nice,
  // 0..19), so a client querying in a tight loop takes CPU time from the vCPUs and iothreads only
  // when they leave it idle: the guest's I/O comes first, control calls just get slower. 0 keeps
  // the VMM's priority.
  int thread_nice = 10;
};

class ApiCore;

// The control API's gRPC server: vmm.v1.MediaService and vmm.v1.VmService (proto/vmm/v1/vmm.proto)
// over a VmControl, with server reflection. Requests run on gRPC's own threads. See docs/api.md.
class ApiServer {
 public:
  // Listens and starts serving. At least one of unix_socket_path and tcp_address must be set.
  // Errors name the path or address. `control` must outlive the server.
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options,
                                                          VmControl& control);
  ~ApiServer();  // Stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Ends the Watch streams (status OK), lets calls in progress finish (cancelling them after
  // stop_grace), stops listening and removes the unix socket. Idempotent.
  void Stop();

  // Where it listens: the socket path, and the TCP port actually bound (0 without TCP).
  const std::string& unix_socket_path() const { return unix_socket_path_; }
  int tcp_port() const { return tcp_port_; }
  // Watch streams open now (diagnostics, tests).
  size_t watcher_count() const;

 private:
  ApiServer() = default;

  std::unique_ptr<ApiCore> core_;
  std::unique_ptr<grpc::Server> server_;
  std::string unix_socket_path_;
  dev_t socket_device_ = 0;  // to remove only the socket this server created
  ino_t socket_inode_ = 0;
  int tcp_port_ = 0;
  bool stopped_ = false;
};

}  // namespace api

#endif  // API_API_SERVER_H_

#ifndef API_API_SERVER_H_
#define API_API_SERVER_H_

#include <sys/types.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/control_server.h"
#include "api/vm_control.h"
#include "vmm/sys_util/scoped_fd.h"

namespace grpc {
class Server;
namespace experimental {
class ExternalConnectionAcceptor;
}  // namespace experimental
}  // namespace grpc

namespace api {

class ApiCore;

// The control API's gRPC server: vmm.v1.MediaService and vmm.v1.VmService (proto/vmm/v1/vmm.proto)
// over a VmControl, with server reflection. Requests run on gRPC's own threads. See docs/api.md.
class ApiServer final : public ControlServer {
 public:
  // Listens and starts serving: Listen(), then Serve().
  static absl::StatusOr<std::unique_ptr<ApiServer>> Start(const ApiServerOptions& options,
                                                          VmControl& control);
  // Binds the listening sockets (BindApiListeners: ours, not gRPC's; the unix socket at its path,
  // mode 0600 from the umask; TCP without SO_REUSEPORT) and builds gRPC's server, fed by our own accept loop through
  // gRPC's external connection acceptor; accepts nothing until Serve(). At least one of
  // unix_socket_path and tcp_address must be set. Errors name the path or address. `control`
  // must outlive the server.
  static absl::StatusOr<std::unique_ptr<ApiServer>> Listen(const ApiServerOptions& options,
                                                           VmControl& control);
  // The same on listeners bound already (BindApiListeners, api/listen_address.h), which it takes
  // over; options.unix_socket_path names the unix one.
  static absl::StatusOr<std::unique_ptr<ApiServer>> Listen(const ApiServerOptions& options,
                                                           ApiListeners&& listeners,
                                                           VmControl& control);
  ~ApiServer() override;  // Stop()
  ApiServer(const ApiServer&) = delete;
  ApiServer& operator=(const ApiServer&) = delete;

  // Ends the Watch streams (status OK), lets calls in progress finish (cancelling them after
  // stop_grace), stops listening and, with remove_socket_on_stop, removes the unix socket (only the
  // one it bound: same device and inode). Idempotent.
  void Stop() override;

  // Where it listens: the socket path, and the TCP port actually bound (0 without TCP).
  const std::string& unix_socket_path() const override { return unix_socket_path_; }
  int tcp_port() const override { return tcp_port_; }
  std::optional<SocketIdentity> unix_socket_identity() const override { return socket_identity_; }
  // Starts the accept loop (the thread "api-accept"). See ControlServer::Serve.
  absl::Status Serve() override;
  // Watch streams open now (diagnostics, tests).
  size_t watcher_count() const;
  // Stop() gave up waiting for calls stuck on clients that do not read, and left them running.
  bool abandoned() const { return abandoned_; }

 private:
  ApiServer() = default;
  // Hands every connection of the listeners to gRPC until stop_accepting_ is signalled.
  void AcceptLoop();
  // Removes the unix socket it bound, with remove_socket_on_stop and only if it is still there.
  void RemoveUnixSocket();

  std::unique_ptr<ApiCore> core_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor_;
  std::vector<sys_util::ScopedFd> listeners_;  // non-blocking
  sys_util::ScopedFd stop_accepting_;          // an eventfd: the accept loop ends
  std::thread accept_thread_;
  int thread_nice_ = 0;
  std::string unix_socket_path_;
  std::optional<SocketIdentity> socket_identity_;  // the socket this server bound
  bool remove_socket_on_stop_ = true;
  int tcp_port_ = 0;
  bool stopped_ = false;
  bool abandoned_ = false;
};

}  // namespace api

#endif  // API_API_SERVER_H_

#ifndef API_CONTROL_SERVER_H_
#define API_CONTROL_SERVER_H_

#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "api/vm_control.h"
#include "vmm/sys_util/scoped_fd.h"

namespace api {

struct ApiServerOptions {
  // A unix socket to listen on (created with mode 0600; see PrepareUnixSocketPath). Empty: none.
  std::string unix_socket_path;
  // "HOST:PORT" to listen on over TCP (loopback only unless tcp_listen_any). Empty: none.
  std::string tcp_address;
  bool tcp_listen_any = false;
  // The bearer token every call must carry, as the gRPC metadata "authorization: Bearer <token>"
  // (api/api_token.h), on every listener, the unix socket included; calls without it, or with
  // another, fail with UNAUTHENTICATED before they do anything. Empty: no authentication. The VMM
  // reads it from --api-token-file.
  std::string auth_token;
  // Serve tcp_address without a token (--api-tcp-insecure): then any local user (any host, with
  // tcp_listen_any) controls the VM. Without it, Start() refuses TCP without auth_token.
  bool tcp_insecure = false;
  // Events a Watch stream may have queued for a client that does not keep up; beyond that the
  // stream ends with RESOURCE_EXHAUSTED (the devices never wait for a watcher).
  size_t watch_queue_limit = 1024;
  // Watch streams open at once; more are refused with RESOURCE_EXHAUSTED (each holds a thread).
  int max_watchers = 32;
  // Threads and memory gRPC may use for the server (its resource quota): every call in flight
  // holds a thread of the synchronous server, and without a cap unauthenticated callers drove the
  // VMM from 10 threads to 215 (H9 of docs/security.md). Calls beyond the cap wait
  // for a thread (or their deadline) before any of our code runs. Room for every watcher and then
  // some.
  int max_threads = 64;
  size_t max_memory_bytes = size_t{64} << 20;
  // Stop() removes the unix socket (the one it bound). The launchers say false: their filter
  // allows no unlink, and their socket janitor removes it once the VMM has exited
  // (vmm/sandbox/socket_janitor.h).
  bool remove_socket_on_stop = true;
  // How long Stop() lets calls in progress finish before cancelling them.
  absl::Duration stop_grace = absl::Seconds(1);
  // The API's threads run this much nicer than the thread that starts the server (Linux nice,
  // 0..19), so a client querying in a tight loop takes CPU time from the vCPUs and iothreads only
  // when they leave it idle: the guest's I/O comes first, control calls just get slower. 0 keeps
  // the VMM's priority.
  int thread_nice = 10;
};

// A unix socket as lstat saw it right after the bind: what may be removed later, and nothing that
// took its place.
struct SocketIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  timespec changed{};  // st_ctim: with the two above, this socket even after inode reuse
};

// The sockets a server listens on, bound before it is built (api/listen_address.h,
// BindApiListeners). The launchers bind them before the sandbox: the jail then has a network
// namespace of its own and the filters allow no internet socket, --api-tcp or not
// (docs/security.md).
struct ApiListeners {
  sys_util::ScopedFd unix_socket;  // invalid: none
  std::optional<SocketIdentity> unix_identity;
  std::vector<sys_util::ScopedFd> tcp;  // empty: none ("localhost" may be two: IPv4 and IPv6)
  int tcp_port = 0;
};

// A running control-API server as the VMM sees it, without gRPC or protobuf: the VMM loads the
// server (api/api_plugin.cc, built as libmicrovm_api.so) only when it is asked to serve the API,
// so a VMM without --api-socket maps none of those libraries (docs/bench-linux.md, RSS).
class ControlServer {
 public:
  virtual ~ControlServer() = default;
  // Ends the Watch streams, lets calls in progress finish, stops listening, removes the socket
  // (ApiServerOptions::remove_socket_on_stop). Idempotent.
  virtual void Stop() = 0;
  virtual const std::string& unix_socket_path() const = 0;
  virtual int tcp_port() const = 0;  // 0 without TCP
  // The unix socket it bound (nullopt without one).
  virtual std::optional<SocketIdentity> unix_socket_identity() const = 0;
  // Starts accepting connections. Until then the server listens (its sockets exist, and a
  // client's connection waits in the listen backlog) but reads no byte from anyone: the
  // launchers bind before the jail and serve only inside it, so no caller's input reaches gRPC
  // while the process is still root with the jail's mount calls allowed (docs/security.md).
  // Idempotent; FailedPrecondition after Stop().
  virtual absl::Status Serve() = 0;
};

// The plugin's one entry point, looked up by this name (C linkage: no mangling to agree on).
// Both sides are built together from this tree with the same compiler and the same shared
// libstdc++ and abseil; `version` guards against a stale plugin beside a newer VMM (2: the token
// and tcp_insecure in ApiServerOptions; 3: the resource quota; 4: remove_socket_on_stop and
// ControlServer::unix_socket_identity; 5: the listeners bound by the VMM, and Serve()).
inline constexpr char kStartControlServerSymbol[] = "microvm_start_control_server";
inline constexpr int kControlServerPluginVersion = 5;
using StartControlServerFn = absl::Status (*)(int version, const ApiServerOptions& options,
                                              ApiListeners&& listeners, VmControl& control,
                                              std::unique_ptr<ControlServer>* server);

}  // namespace api

#endif  // API_CONTROL_SERVER_H_

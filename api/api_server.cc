#include "api/api_server.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/server_interceptor.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "api/api_core.h"
#include "api/api_token.h"
#include "api/listen_address.h"
#include "block/stats.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"
#include "vmm/sys_util/host_path.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

namespace api {
namespace {

// How long Stop() leaves the last replies to reach their clients before closing connections.
constexpr absl::Duration kReplySettle = absl::Milliseconds(20);
// How long past its deadline a server shutdown may take before the server is abandoned.
constexpr absl::Duration kAbandonAfter = absl::Seconds(1);

// Services that are not ours (server reflection) are guarded here: each vmm.v1 handler checks
// its caller itself (ApiCore::Admit), which answers UNAUTHENTICATED; a server interceptor cannot
// answer a call, only cancel it, so an unauthenticated reflection call is cancelled (the client
// sees CANCELLED) before its handler reads a request or writes a reply.
class ForeignServiceGuard final : public grpc::experimental::Interceptor {
 public:
  ForeignServiceGuard(grpc::experimental::ServerRpcInfo* info, const std::string& token)
      : info_(info), token_(token) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      const auto* metadata = methods->GetRecvInitialMetadata();
      if (metadata == nullptr || !Authenticate(*metadata, token_).ok()) {
        // Before Proceed(): the handler starts only after it.
        info_->server_context()->TryCancel();
      }
    }
    methods->Proceed();
  }

 private:
  grpc::experimental::ServerRpcInfo* const info_;
  const std::string& token_;  // the ApiCore's options, which outlive the server
};

class ForeignServiceGuardFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit ForeignServiceGuardFactory(const std::string& token) : token_(token) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    if (absl::StartsWith(info->method(), "/vmm.v1.")) return nullptr;
    // gRPC takes ownership of the interceptor (deleted with the call).
    return std::make_unique<ForeignServiceGuard>(info, token_).release();
  }

 private:
  const std::string& token_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                            VmControl& control) {
  if (options.unix_socket_path.empty() && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("the API server needs a unix socket path or a TCP address");
  }
  if (!options.auth_token.empty()) {
    RETURN_IF_ERROR(CheckApiToken(options.auth_token, "the API token"));
  }
  std::string tcp_address;
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
  // gRPC binds the unix socket at its path, where the process's umask makes it mode 0600 from
  // its first instant (CheckOwnerOnlyUmask: the launchers set 0177; the VMM's filter allows no
  // chmod). Labelled with its flag: errors read "--api-socket PATH: ..." (both binaries call it
  // that).
  if (!options.unix_socket_path.empty()) {
    RETURN_IF_ERROR(PrepareUnixSocketPath(options.unix_socket_path, "--api-socket"));
    RETURN_IF_ERROR(CheckOwnerOnlyUmask(options.unix_socket_path, "--api-socket"));
  }
  static std::once_flag reflection_once;
  std::call_once(reflection_once,
                 [] { grpc::reflection::InitProtoReflectionServerBuilderPlugin(); });

  std::unique_ptr<ApiServer> server(new ApiServer());
  server->core_ = std::make_unique<ApiCore>(control, options);
  std::vector<std::string> where;
  // Linux nice values are per thread and inherited by the threads a thread creates. gRPC starts
  // its threads (timers, executors, the sync server's pollers and workers) from the thread that
  // first initializes it and from its own threads: build everything on a thread that lowered
  // its own priority, and all of them run at that priority. (Nothing else in the VMM uses gRPC.)
  auto lower_priority = [&]() -> absl::Status {
    if (options.thread_nice > 0) {
      const int tid = static_cast<int>(syscall(SYS_gettid));
      errno = 0;
      const int current = getpriority(PRIO_PROCESS, tid);
      if (errno == 0) {
        setpriority(PRIO_PROCESS, tid, std::min(current + options.thread_nice, 19));
      }
    }
    return absl::OkStatus();
  };
  auto starter = sys_util::StartThread({.name = "api", .on_start = lower_priority}, [&] {
    grpc::ServerBuilder builder;
    if (!options.unix_socket_path.empty()) {
      builder.AddListeningPort("unix:" + options.unix_socket_path,
                               grpc::InsecureServerCredentials());
      where.push_back("unix:" + options.unix_socket_path);
    }
    if (!tcp_address.empty()) {
      builder.AddListeningPort(tcp_address, grpc::InsecureServerCredentials(), &server->tcp_port_);
      where.push_back(tcp_address);
    }
    // gRPC sets SO_REUSEPORT on TCP listeners by default: a second VMM could then bind the same
    // port and take half of the connections. One port, one VMM.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // See ApiServerOptions::max_threads.
    grpc::ResourceQuota quota("microvm-api");
    quota.SetMaxThreads(options.max_threads);
    quota.Resize(options.max_memory_bytes);
    builder.SetResourceQuota(quota);
    builder.RegisterService(server->core_->media_service());
    builder.RegisterService(server->core_->vm_service());
    if (!server->core_->options().auth_token.empty()) {
      std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> guards;
      guards.push_back(
          std::make_unique<ForeignServiceGuardFactory>(server->core_->options().auth_token));
      builder.experimental().SetInterceptorCreators(std::move(guards));
    }
    server->server_ = builder.BuildAndStart();
  });
  if (!starter.ok()) return starter.status();
  starter->join();
  if (server->server_ == nullptr || (!tcp_address.empty() && server->tcp_port_ == 0)) {
    if (server->server_ != nullptr) server->server_->Shutdown();
    server->stopped_ = true;
    return absl::UnavailableError(
        absl::StrFormat("cannot start the API server on %s (address in use, or no permission?)",
                        absl::StrJoin(where, " and ")));
  }
  if (!options.unix_socket_path.empty()) {
    server->unix_socket_path_ = options.unix_socket_path;
    server->remove_socket_on_stop_ = options.remove_socket_on_stop;
    struct stat st {};
    if (absl::Status bound = CheckBoundSocket(options.unix_socket_path, "--api-socket", &st);
        !bound.ok()) {
      server->Stop();
      return bound;
    }
    server->socket_identity_ =
        SocketIdentity{.device = st.st_dev, .inode = st.st_ino, .changed = st.st_ctim};
  }
  return server;
}

size_t ApiServer::watcher_count() const { return core_ != nullptr ? core_->watcher_count() : 0; }

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  const absl::Time deadline = absl::Now() + core_->options().stop_grace;
  core_->BeginStop();
  // Let the calls in progress finish and their replies (a Watch's final status, a Shutdown's
  // reply) reach the clients while the connections are still up: once gRPC has sent GOAWAY it
  // closes a connection as soon as its last stream is done, and a client that writes to it then
  // (a window update, a ping) fails its streams with UNAVAILABLE before reading their status.
  core_->WaitForCalls(core_->options().stop_grace);
  absl::SleepFor(kReplySettle);
  // A Watch whose client stopped reading stays blocked in Write() for as long as that client
  // lives: its bytes wait for room in the socket, and neither cancelling the call nor the
  // shutdown deadline completes the write (measured with gRPC 1.51: Shutdown() waited for ever,
  // H13 of docs/security.md). So the shutdown runs on a thread of its own, and if it has not
  // finished shortly after the deadline the server is abandoned: its threads, the core and the
  // drives they use stay allocated (and the plugin loaded) until the process exits, which the
  // VMM does next. Nothing else waits for them.
  auto finished = std::make_shared<absl::Notification>();
  grpc::Server* server = server_.get();
  const absl::Time shutdown_deadline = std::max(deadline, absl::Now());
  auto shutdown =
      sys_util::StartThread({.name = "api-stop"}, [server, shutdown_deadline, finished] {
        server->Shutdown(absl::ToChronoTime(shutdown_deadline));
        server->Wait();
        finished->Notify();
      });
  // Without a thread to wait on (none could start), the server is abandoned as a stuck one is.
  if (shutdown.ok() &&
      finished->WaitForNotificationWithDeadline(shutdown_deadline + kAbandonAfter)) {
    shutdown->join();
  } else {
    if (shutdown.ok()) shutdown->detach();
    abandoned_ = true;
    [[maybe_unused]] grpc::Server* leaked_server = server_.release();
    [[maybe_unused]] ApiCore* leaked_core = core_.release();
#if defined(__SANITIZE_ADDRESS__)
    // Left on purpose (above): tell LeakSanitizer, which otherwise reports them once the stuck
    // shutdown thread has finished and nothing points at them any more.
    __lsan_ignore_object(leaked_server);
    __lsan_ignore_object(leaked_core);
#endif
  }
  if (socket_identity_.has_value() && remove_socket_on_stop_) {
    struct stat st {};
    if (lstat(unix_socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == socket_identity_->device && st.st_ino == socket_identity_->inode) {
      unlink(unix_socket_path_.c_str());
    }
  }
}

}  // namespace api

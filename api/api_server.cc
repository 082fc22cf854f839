#include "api/api_server.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <fcntl.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/support/server_interceptor.h>
#include <limits.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
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
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/host_path.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

namespace api {
namespace {

// How long the accept loop waits before trying again when accept() ran out of descriptors.
constexpr int kAcceptBackoffMs = 100;
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

// Linux nice values are per thread and inherited by the threads a thread creates. gRPC starts its
// threads (timers, executors, the sync server's pollers and workers) from the thread that first
// initializes it and from its own threads: everything is built on a thread that lowered its own
// priority, so all of them run at that priority, and so does the accept loop. (Nothing else in
// the VMM uses gRPC.)
absl::Status LowerThisThreadsPriority(int nice) {
  if (nice > 0) {
    const int tid = static_cast<int>(syscall(SYS_gettid));
    errno = 0;
    const int current = getpriority(PRIO_PROCESS, tid);
    if (errno == 0) setpriority(PRIO_PROCESS, tid, std::min(current + nice, 19));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options,
                                                            VmControl& control) {
  ASSIGN_OR_RETURN(auto server, Listen(options, control));
  RETURN_IF_ERROR(server->Serve());
  return server;
}

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Listen(const ApiServerOptions& options,
                                                             VmControl& control) {
  ASSIGN_OR_RETURN(ApiListeners listeners, BindApiListeners(options));
  return Listen(options, std::move(listeners), control);
}

absl::StatusOr<std::unique_ptr<ApiServer>> ApiServer::Listen(const ApiServerOptions& options,
                                                             ApiListeners&& listeners,
                                                             VmControl& control) {
  // The options were checked when the listeners were bound (BindApiListeners).
  if (!listeners.unix_socket.valid() && listeners.tcp.empty()) {
    return absl::InvalidArgumentError("the API server needs a listening socket");
  }
  static std::once_flag reflection_once;
  std::call_once(reflection_once,
                 [] { grpc::reflection::InitProtoReflectionServerBuilderPlugin(); });

  std::unique_ptr<ApiServer> server(new ApiServer());
  server->core_ = std::make_unique<ApiCore>(control, options);
  server->thread_nice_ = options.thread_nice;
  if (listeners.unix_socket.valid()) {
    server->unix_socket_path_ = options.unix_socket_path;
    server->remove_socket_on_stop_ = options.remove_socket_on_stop;
    server->socket_identity_ = listeners.unix_identity;
    server->listeners_.push_back(std::move(listeners.unix_socket));
  }
  server->tcp_port_ = listeners.tcp_port;
  for (auto& socket : listeners.tcp) server->listeners_.push_back(std::move(socket));
  ASSIGN_OR_RETURN(server->stop_accepting_, sys_util::MakeEventFd());
  auto starter = sys_util::StartThread(
      {.name = "api",
       .on_start = [nice = options.thread_nice] { return LowerThisThreadsPriority(nice); }},
      [&] {
        grpc::ServerBuilder builder;
        // No listening port of gRPC's own: every connection comes from the accept loop.
        server->acceptor_ = builder.experimental().AddExternalConnectionAcceptor(
            grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
            grpc::InsecureServerCredentials());
        // See ApiServerOptions::max_threads.
        grpc::ResourceQuota quota("microvm-api");
        quota.SetMaxThreads(options.max_threads);
        quota.Resize(options.max_memory_bytes);
        builder.SetResourceQuota(quota);
        builder.RegisterService(server->core_->media_service());
        builder.RegisterService(server->core_->vm_service());
        if (!server->core_->options().auth_token.empty()) {
          std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
              guards;
          guards.push_back(
              std::make_unique<ForeignServiceGuardFactory>(server->core_->options().auth_token));
          builder.experimental().SetInterceptorCreators(std::move(guards));
        }
        server->server_ = builder.BuildAndStart();
      });
  if (!starter.ok()) return starter.status();
  starter->join();
  if (server->server_ == nullptr || server->acceptor_ == nullptr) {
    return absl::UnavailableError("cannot start the API's gRPC server");
  }
  return server;
}

absl::Status ApiServer::Serve() {
  if (stopped_) return absl::FailedPreconditionError("the API server has stopped");
  if (accept_thread_.joinable()) return absl::OkStatus();
  ASSIGN_OR_RETURN(
      accept_thread_,
      sys_util::StartThread(
          {.name = "api-accept",
           .on_start = [nice = thread_nice_] { return LowerThisThreadsPriority(nice); }},
          [this] { AcceptLoop(); }));
  return absl::OkStatus();
}

void ApiServer::AcceptLoop() {
  std::vector<pollfd> polled;
  for (const auto& listener : listeners_) polled.push_back({listener.get(), POLLIN, 0});
  polled.push_back({stop_accepting_.get(), POLLIN, 0});
  int backoff_ms = -1;
  while (true) {
    if (poll(polled.data(), polled.size(), backoff_ms) < 0) {
      // EINTR, or the kernel short of memory for a moment (ENOMEM): again, never give up serving.
      if (errno != EINTR) absl::SleepFor(absl::Milliseconds(kAcceptBackoffMs));
      continue;
    }
    if (polled.back().revents != 0) return;
    backoff_ms = -1;
    for (size_t i = 0; i + 1 < polled.size(); ++i) {
      if (polled[i].revents == 0) continue;
      const int fd = accept4(polled[i].fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        // Out of descriptors or memory (callers holding many connections): the connection waits
        // in the backlog, and the loop waits a little instead of spinning on it. EAGAIN and
        // ECONNABORTED (the caller gave up) need nothing.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          backoff_ms = kAcceptBackoffMs;
        }
        continue;
      }
      grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters connection;
      connection.listener_fd = polled[i].fd;
      connection.fd = fd;  // gRPC's from here on
      acceptor_->HandleNewConnection(&connection);
    }
  }
}

size_t ApiServer::watcher_count() const { return core_ != nullptr ? core_->watcher_count() : 0; }

ApiServer::~ApiServer() { Stop(); }

void ApiServer::Stop() {
  if (stopped_) return;
  stopped_ = true;
  // No new connection from here on: the loop ends and the listeners close (a caller connecting
  // now is refused; connections already handed to gRPC carry on below).
  if (accept_thread_.joinable()) {
    sys_util::SignalEventFd(stop_accepting_.get());
    accept_thread_.join();
  }
  listeners_.clear();
  if (server_ == nullptr) {  // Listen() failed part of the way
    RemoveUnixSocket();
    return;
  }
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
  RemoveUnixSocket();
}

void ApiServer::RemoveUnixSocket() {
  if (socket_identity_.has_value() && remove_socket_on_stop_) {
    struct stat st {};
    if (lstat(unix_socket_path_.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) &&
        st.st_dev == socket_identity_->device && st.st_ino == socket_identity_->inode) {
      unlink(unix_socket_path_.c_str());
    }
  }
}

}  // namespace api

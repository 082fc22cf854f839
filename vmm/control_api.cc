#include "vmm/control_api.h"

#include <dlfcn.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/listen_address.h"
#include "vmm/drive_spec.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {
namespace {

// dlclose() on destruction (RAII for the library handle).
struct LibraryCloser {
  void operator()(void* handle) const { dlclose(handle); }
};
using LibraryHandle = std::unique_ptr<void, LibraryCloser>;

// The plugin's server, with the library kept loaded for as long as the server's code may run.
class PluginControlServer final : public api::ControlServer {
 public:
  PluginControlServer(LibraryHandle library, std::unique_ptr<api::ControlServer> server)
      : library_(std::move(library)), server_(std::move(server)) {}
  ~PluginControlServer() override { server_.reset(); }  // before library_ is closed

  void Stop() override { server_->Stop(); }
  const std::string& unix_socket_path() const override { return server_->unix_socket_path(); }
  int tcp_port() const override { return server_->tcp_port(); }
  std::optional<api::SocketIdentity> unix_socket_identity() const override {
    return server_->unix_socket_identity();
  }
  absl::Status Serve() override { return server_->Serve(); }

 private:
  LibraryHandle library_;  // declared first: destroyed last
  std::unique_ptr<api::ControlServer> server_;
};

absl::StatusOr<std::string> ExecutablePath() {
  char path[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length < 0) {
    return absl::InternalError(absl::StrCat("readlink /proc/self/exe: ", strerror(errno)));
  }
  return std::string(path, static_cast<size_t>(length));
}

// An error starting the API server, naming the listener's flag where it is about one.
absl::Status NameTheApiFlag(const api::ApiServerOptions& options, const absl::Status& status) {
  absl::Status named =
      NameTheFlag("--api-socket", options.unix_socket_path, options.unix_socket_path, status);
  if (named.message() != status.message()) return named;
  return NameTheFlag("--api-tcp", options.tcp_address, options.tcp_address, status);
}

// The error as the launchers print it: "--api-socket PATH: ..." or "control API: ...".
absl::Status NamedApiError(const api::ApiServerOptions& options, const absl::Status& status) {
  const absl::Status named = NameTheApiFlag(options, status);
  if (absl::StartsWith(named.message(), "--")) return named;
  return absl::Status(named.code(), absl::StrCat("control API: ", named.message()));
}

}  // namespace

absl::StatusOr<std::unique_ptr<api::ControlServer>> StartControlApi(
    const api::ApiServerOptions& options, api::ApiListeners&& listeners, api::VmControl& control,
    std::string executable) {
  if (executable.empty()) {
    ASSIGN_OR_RETURN(executable, ExecutablePath());
  }
  const size_t slash = executable.rfind('/');
  const std::string plugin_path = absl::StrCat(
      slash == std::string::npos ? "." : executable.substr(0, slash), "/", kControlApiPluginName);
  // RTLD_LOCAL: the plugin's gRPC and protobuf symbols stay its own. RTLD_NOW: a missing symbol
  // is an error here, not a crash on the first API call. RTLD_NODELETE: a server that had to
  // abandon calls stuck on clients that do not read (api::ApiServer::Stop) leaves threads in the
  // plugin's code; it must stay mapped until the process exits.
  LibraryHandle library(dlopen(plugin_path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE));
  if (library == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load the control-API plugin ", plugin_path, ": ", dlerror()));
  }
  auto start = reinterpret_cast<api::StartControlServerFn>(
      dlsym(library.get(), api::kStartControlServerSymbol));
  if (start == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        plugin_path, " has no ", api::kStartControlServerSymbol, " (not the control-API plugin?)"));
  }
  std::unique_ptr<api::ControlServer> server;
  RETURN_IF_ERROR(
      start(api::kControlServerPluginVersion, options, std::move(listeners), control, &server));
  return std::make_unique<PluginControlServer>(std::move(library), std::move(server));
}

absl::StatusOr<api::ApiListeners> BindLauncherApi(const api::ApiServerOptions& options) {
  if (options.unix_socket_path.empty() && options.tcp_address.empty()) return api::ApiListeners{};
  auto listeners = api::BindApiListeners(options);
  if (!listeners.ok()) return NamedApiError(options, listeners.status());
  return listeners;
}

absl::StatusOr<std::unique_ptr<api::ControlServer>> StartLauncherApi(
    absl::string_view program, const api::ApiServerOptions& options, api::ApiListeners&& listeners,
    api::VmControl& control) {
  if (!listeners.unix_socket.valid() && listeners.tcp.empty()) return nullptr;
  auto server = StartControlApi(options, std::move(listeners), control);
  if (!server.ok()) return NamedApiError(options, server.status());
  if (!(*server)->unix_socket_path().empty()) {
    absl::FPrintF(stderr, "%s: control API on unix:%s\n", program, (*server)->unix_socket_path());
  }
  if ((*server)->tcp_port() != 0) {
    absl::FPrintF(stderr, "%s: control API on %s (port %d)\n", program, options.tcp_address,
                  (*server)->tcp_port());
  }
  return server;
}

}  // namespace vmm

// The control-API server as a plugin (libmicrovm_api.so, see api/control_server.h): the VMM
// dlopen()s it for --api-socket / --api-tcp, so gRPC, protobuf and OpenSSL are loaded only then.

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "api/api_server.h"
#include "api/control_server.h"
#include "vmm/sys_util/status_macros.h"

extern "C" __attribute__((visibility("default"))) absl::Status microvm_start_control_server(
    int version, const api::ApiServerOptions& options, api::ApiListeners&& listeners,
    api::VmControl& control, std::unique_ptr<api::ControlServer>* server) {
  if (version != api::kControlServerPluginVersion) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the control-API plugin speaks version %d, the VMM version %d "
                        "(a stale libmicrovm_api.so beside the VMM?)",
                        api::kControlServerPluginVersion, version));
  }
  // On the VMM's listeners, not serving: the VMM calls Serve() once it is in its jail.
  ASSIGN_OR_RETURN(*server, api::ApiServer::Listen(options, std::move(listeners), control));
  return absl::OkStatus();
}

// The symbol's name and type are what the VMM looks up (api::kStartControlServerSymbol).
static_assert(std::is_same_v<decltype(&microvm_start_control_server), api::StartControlServerFn>);

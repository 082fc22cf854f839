#ifndef VMM_CONTROL_API_H_
#define VMM_CONTROL_API_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/control_server.h"
#include "api/vm_control.h"

namespace vmm {

// The file name of the control-API plugin (api/api_plugin.cc): it sits beside the VMM's
// executable (Bazel builds both into bazel-bin/vmm/; installs copy both into one directory).
inline constexpr char kControlApiPluginName[] = "libmicrovm_api.so";

// Loads the plugin from the directory of `executable` (the real path of /proc/self/exe when
// empty) and builds the control-API server over `control`, which must outlive the result, on
// `listeners` (api::BindApiListeners), which it takes over. The server listens but serves only
// from its Serve() on. Once loaded, the plugin stays mapped for the life of the process
// (RTLD_NODELETE: a server that abandoned stuck calls leaves threads in its code). Errors say
// which file failed and why.
absl::StatusOr<std::unique_ptr<api::ControlServer>> StartControlApi(
    const api::ApiServerOptions& options, api::ApiListeners&& listeners, api::VmControl& control,
    std::string executable = "");

// The control API's sockets as both launchers (microvm, vhost-user-scsi) bind them, before the
// sandbox (vmm/launch_sequence.h): none when `options` names no listener. An error names the
// listener's flag (--api-socket, --api-tcp) where it is about one, and otherwise says it is the
// API's own ("control API: ...").
absl::StatusOr<api::ApiListeners> BindLauncherApi(const api::ApiServerOptions& options);

// The control API as both launchers start it on what BindLauncherApi bound: nullptr when there
// is no listener; else StartControlApi from the launcher's own directory, errors named as
// BindLauncherApi's. Each address it listens on goes to stderr as "PROGRAM: control API on ...".
absl::StatusOr<std::unique_ptr<api::ControlServer>> StartLauncherApi(
    absl::string_view program, const api::ApiServerOptions& options, api::ApiListeners&& listeners,
    api::VmControl& control);

}  // namespace vmm

#endif  // VMM_CONTROL_API_H_

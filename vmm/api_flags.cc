#include "vmm/api_flags.h"

#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "api/api_token.h"
#include "api/listen_address.h"
#include "vmm/drive_spec.h"
#include "vmm/sys_util/status_macros.h"

ABSL_FLAG(std::string, api_socket, "",
          "Serve the gRPC control API (docs/api.md) on this unix socket, created with mode 0600. "
          "Refused if the path exists and is not a stale socket. Default: no API.");
ABSL_FLAG(std::string, api_tcp, "",
          "Serve the control API over TCP on HOST:PORT (127.0.0.1:7000, [::1]:7000; port 0 picks "
          "one). Needs --api-token-file (or --api-tcp-insecure). Loopback only unless "
          "--api-listen-any: the traffic is not encrypted.");
ABSL_FLAG(bool, api_listen_any, false,
          "Allow --api-tcp on a non-loopback address (anyone who can connect controls the VMM).");
ABSL_FLAG(std::string, api_token_file, "",
          "Every control-API call must carry the secret in this file (gRPC metadata "
          "\"authorization: Bearer <token>\"; vmmctl --api-token-file), on every listener. The "
          "file must belong to the VMM's user and be readable by it alone (mode 0600).");
ABSL_FLAG(bool, api_tcp_insecure, false,
          "DANGEROUS: allow --api-tcp without --api-token-file; every local user (with "
          "--api-listen-any, anyone who can connect) then controls the VMM.");
ABSL_FLAG(std::string, media_dir, "",
          "The control API takes CD/DVD media from this directory only: paths relative to it, or "
          "absolute under it; anything else is refused. Without it, any file the VMM can read "
          "(a relative path is relative to the VMM's working directory).");

namespace vmm {

absl::StatusOr<ApiFlags> ApiFlagsFromCommandLine() {
  ApiFlags api;
  api::ApiServerOptions& options = api.options;
  options.unix_socket_path = absl::GetFlag(FLAGS_api_socket);
  options.tcp_address = absl::GetFlag(FLAGS_api_tcp);
  options.tcp_listen_any = absl::GetFlag(FLAGS_api_listen_any);
  if (options.tcp_listen_any && options.tcp_address.empty()) {
    return absl::InvalidArgumentError("--api-listen-any applies to --api-tcp, which is not given");
  }
  options.tcp_insecure = absl::GetFlag(FLAGS_api_tcp_insecure);
  if (options.tcp_insecure && options.tcp_address.empty()) {
    return absl::InvalidArgumentError(
        "--api-tcp-insecure applies to --api-tcp, which is not given");
  }
  if (const std::string token_file = absl::GetFlag(FLAGS_api_token_file); !token_file.empty()) {
    if (!api.enabled()) {
      return absl::InvalidArgumentError(
          "--api-token-file applies to --api-socket and --api-tcp; neither is given");
    }
    auto token =
        api::ReadApiTokenFile(token_file, "--api-token-file", api::TokenFileCheck::kOwnerOnly);
    if (!token.ok()) return NameTheFlag("--api-token-file", token_file, token_file, token.status());
    options.auth_token = *std::move(token);
  }
  // A stale socket left by a VMM that was killed is replaced; a live one is refused. Told apart
  // with connect(), which the seccomp filter refuses later: so here, before the sandbox.
  if (!options.unix_socket_path.empty()) {
    absl::Status ready = api::PrepareUnixSocketPath(options.unix_socket_path, "--api-socket");
    if (!ready.ok()) {
      return NameTheFlag("--api-socket", options.unix_socket_path, options.unix_socket_path, ready);
    }
  }
  if (const std::string media_dir = absl::GetFlag(FLAGS_media_dir); !media_dir.empty()) {
    if (!api.enabled()) {
      return absl::InvalidArgumentError(
          "--media-dir applies to the control API (--api-socket or --api-tcp); neither is given");
    }
    ASSIGN_OR_RETURN(api.media_dir, MediaDirectory::Open(media_dir));
  }
  return api;
}

}  // namespace vmm

#ifndef VMM_API_FLAGS_H_
#define VMM_API_FLAGS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "api/control_server.h"
#include "vmm/media_directory.h"

namespace vmm {

// The control API's flags, defined once for microvm and vhost-user-scsi (docs/api.md):
//   --api-socket=PATH, --api-tcp=HOST:PORT, --api-listen-any, --api-token-file=FILE,
//   --api-tcp-insecure, --media-dir=DIR
struct ApiFlags {
  api::ApiServerOptions options;              // the token read from its file
  std::unique_ptr<MediaDirectory> media_dir;  // --media-dir, opened; null without it
  bool enabled() const { return !options.unix_socket_path.empty() || !options.tcp_address.empty(); }
};

// Validates the flags (a flag that applies to another one not given is an error), reads the token
// file (owner-only), opens the media directory and readies the --api-socket path (a stale socket
// there is removed, a live one refused: api::PrepareUnixSocketPath). Call it before the sandbox:
// telling a stale socket from a live one takes connect(), which the filters refuse. Errors name
// the flag and the value.
absl::StatusOr<ApiFlags> ApiFlagsFromCommandLine();

}  // namespace vmm

#endif  // VMM_API_FLAGS_H_

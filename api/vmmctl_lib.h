// vmmctl, the command-line client of the control API (proto/vmm/v1/vmm.proto), as a library: the
// argument parser, the connection, the human and JSON output, and Run(), which executes one
// command line. api/vmmctl.cc is its main(); api/vmmctl_lib_test.cc runs it against a fake server.
// See docs/api.md ("vmmctl").
#ifndef API_VMMCTL_LIB_H_
#define API_VMMCTL_LIB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"

namespace vmmctl {

// Exit statuses (distinct, so scripts can tell a refusal from a dead VMM).
enum ExitCode : int {
  kExitOk = 0,
  kExitRpcFailed = 1,      // the server answered with an error (or the stream broke)
  kExitUsage = 2,          // bad command line
  kExitCannotConnect = 3,  // no server at --api (missing socket, refused, timed out)
};

// "INVALID_ARGUMENT" for grpc::StatusCode::INVALID_ARGUMENT, and so on ("CODE_<n>" if unknown).
std::string StatusCodeName(grpc::StatusCode code);

// The gRPC target for an --api value: "unix:PATH" / "unix://PATH" / "unix:///PATH" and a path
// ("/run/vm.sock", "./vm.sock", "vm.sock", "run/vm.sock": anything with a slash or without a
// colon) are unix sockets; "HOST:PORT" (IPv6 as "[::1]:PORT") is TCP.
struct ApiAddress {
  bool is_unix = false;
  std::string path;    // unix: the socket path as given (relative paths stay relative)
  std::string target;  // for grpc::CreateChannel
};
absl::StatusOr<ApiAddress> ParseApiAddress(absl::string_view api);

// Connects within `timeout`. A unix socket is checked first with a plain connect(2) so that a missing
// socket, a path that is not a socket, a stale socket (ECONNREFUSED) or a permission problem is
// reported at once with errno's words instead of after the timeout. UNAVAILABLE on failure.
absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ApiAddress& address,
                                                       absl::Duration timeout);

// A parsed command line.
struct CommandLine {
  std::string api;                             // --api (else $VMMCTL_API)
  std::string token_file;                      // --api-token-file (else $MICROVM_API_TOKEN_FILE)
  bool json = false;                           // --json
  absl::Duration timeout = absl::Seconds(10);  // --timeout SECONDS: deadline of every unary call
  absl::Duration connect_timeout = absl::Seconds(5);  // --connect-timeout SECONDS
  bool help = false;
  bool version = false;            // --version: print sys_util::VersionText and exit 0
  std::vector<std::string> words;  // "media", "eject", "cd0"
  std::map<std::string, std::string>
      options;  // command options: "force" -> "", "grace-ms" -> "500"
};

// Parses argv[1..]. Options may come anywhere ("--opt VALUE" or "--opt=VALUE"); "--" ends them.
// InvalidArgument with a message for unknown options or missing values (the command's own
// arguments are checked by Run()).
absl::StatusOr<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

std::string UsageText();

// Runs one command line (argv without the program name); writes results to `out`, errors to `err`.
// Returns an ExitCode. `media watch` streams until the server ends it, --count events arrived, or
// CancelWatch() is called (vmmctl's main calls it on SIGINT/SIGTERM).
int Run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Ends a running (or the next) `media watch` as if interrupted: it exits 0. Thread-safe; callable
// from a signal-waiting thread.
void CancelWatch();
// Forgets an earlier CancelWatch() (tests run several watches in one process).
void ResetWatchCancellationForTesting();

// ---- Output ----

// "4.0 MiB", "2.0 GiB", "512 B".
std::string HumanSize(uint64_t bytes);
// One line: "cd0 cdrom virtio-scsi 0:1: medium /x.iso (8.0 MiB, read-only), tray closed, unlocked,
// generation 2".
std::string DriveLine(const vmm::v1::DriveStatus& drive);
// Key: value lines for `media status`.
std::string DriveDetails(const vmm::v1::DriveStatus& drive);
// A table with a header for `media list` and `vm info`.
std::string DriveTable(const google::protobuf::RepeatedPtrField<vmm::v1::DriveStatus>& drives);
// One line per event: "2026-11-30T15:52:01.123+00:00 cd0 MEDIUM_REMOVED by api: <DriveLine>".
std::string EventLine(const vmm::v1::MediaEvent& event);
std::string VmInfoText(const vmm::v1::VmInfo& info);
std::string StatsTable(const vmm::v1::GetStatsResponse& stats);
// Protobuf JSON (lowerCamelCase field names, zero values printed; 64-bit integers as strings, as the
// proto3 JSON mapping says). `pretty`: indented over several lines; else one line.
std::string ToJson(const google::protobuf::Message& message, bool pretty);

}  // namespace vmmctl

#endif  // API_VMMCTL_LIB_H_

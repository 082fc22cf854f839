#ifndef API_VMMCTL_RUNNER_H_
#define API_VMMCTL_RUNNER_H_

// vmmctl's commands, shared by its parts (vmmctl_lib.cc: parsing, dispatch, media and VM
// commands; vmmctl_drives.cc: statistics, limits and disks). Not for use outside //api:vmmctl_lib.

#include <chrono>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "api/api_token.h"
#include "api/vmmctl_lib.h"
#include "proto/vmm/v1/vmm.grpc.pb.h"

namespace vmmctl::internal {

using vmm::v1::DriveStatus;

inline std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

struct CommandSpec {
  std::vector<std::string> words;  // e.g. {"media", "eject"}
  size_t min_args, max_args;       // positional arguments after the words
  std::set<std::string> options;   // allowed command options
  const char* synopsis;
};

inline bool AskedTheGuestToEject(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::FAILED_PRECONDITION &&
         absl::StrContains(status.error_message(), "asked to eject");
}

class Runner {
 public:
  Runner(const CommandLine& cl, std::ostream& out, std::ostream& err)
      : cl_(cl), out_(out), err_(err) {}

  int Execute(const CommandSpec& spec, const std::vector<std::string>& args);

 private:
  // Fails with the gRPC status: "vmmctl: media eject cd0: FAILED_PRECONDITION: ...".
  int RpcError(const grpc::Status& status) {
    err_ << "vmmctl: " << what_ << ": " << StatusCodeName(status.error_code());
    if (!status.error_message().empty()) err_ << ": " << Hinted(status);
    err_ << "\n";
    return kExitRpcFailed;
  }
  // The server's message, with what to do in vmmctl's terms where it refused for a reason the
  // user can act on: a disk has no medium; a lock that --force overrides.
  std::string Hinted(const grpc::Status& status) const {
    std::string message = status.error_message();
    if (status.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return message;
    if (absl::StrContains(message, " is a disk")) {
      return message + " (only CD/DVD drives have media: vmmctl media list shows which)";
    }
    if (absl::StrContains(message, "locked") && force_allowed_ && !Has("force")) {
      // The server speaks of the request's force field: "(use force to eject)".
      if (const size_t field = message.find(" (use force"); field != std::string::npos) {
        message.erase(field);
      }
      if (AskedTheGuestToEject(status) && what_.rfind("media eject", 0) == 0) {
        return message + " (--wait waits for that, --force ejects now)";
      }
      return message + " (--force overrides the lock)";
    }
    return message;
  }
  int UsageError(const std::string& message) {
    err_ << "vmmctl: " << message << "\n(vmmctl --help for usage)\n";
    return kExitUsage;
  }
  void Context(grpc::ClientContext& context, absl::Duration extra = absl::ZeroDuration()) {
    context.set_deadline(DeadlineAfter(cl_.timeout + extra));
    Authorize(context);
  }
  // One unary call with the deadline and the token: `(stub.*method)(request, response)`.
  template <typename Stub, typename Request, typename Response>
  grpc::Status Call(Stub& stub,
                    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*),
                    const Request& request, Response* response) {
    grpc::ClientContext context;
    Context(context);
    return (stub.*method)(&context, request, response);
  }
  // The token, when one was given, goes with every call (docs/api.md, "Authentication").
  void Authorize(grpc::ClientContext& context) {
    if (!token_.empty())
      context.AddMetadata(api::kAuthorizationMetadataKey, api::BearerAuthorization(token_));
  }
  // Prints `message` as JSON, or `human` (already formatted) otherwise.
  int Print(const google::protobuf::Message& message, const std::string& human) {
    if (cl_.json) {
      out_ << ToJson(message, /*pretty=*/true) << "\n";
    } else {
      out_ << human;
    }
    out_.flush();
    return kExitOk;
  }

  int MediaList();
  int MediaStatus(const std::string& drive);
  int MediaInsert(const std::string& drive, const std::string& path);
  int MediaEject(const std::string& drive);
  int MediaTray(const std::string& drive, const std::string& position);
  int MediaWatch(const std::string& drive);
  int VmInfo();
  int VmPauseResume(bool pause);
  int VmReset();
  int VmBootOrder(const std::vector<std::string>& drives);
  int VmShutdown();
  int VmStats(const std::string& drive);
  int DriveLimit(const std::string& name);
  int DiskAdd(const std::string& path);
  int DiskRemove(const std::string& drive);
  int DiskResize(const std::string& drive, const std::string& size);
  // `path` as the VMM should open it: absolute, unless the VMM takes images from its --media-dir
  // only, where a relative path is relative to that directory (as the user meant it).
  int ServerPath(const std::string& path, std::string* out);

  bool Has(const std::string& option) const { return cl_.options.count(option) != 0; }

  const CommandLine& cl_;
  std::ostream& out_;
  std::ostream& err_;
  std::string what_;            // the command, for error messages
  bool force_allowed_ = false;  // the command takes --force
  std::string token_;           // from --api-token-file; empty: none
  std::unique_ptr<vmm::v1::MediaService::Stub> media_;
  std::unique_ptr<vmm::v1::VmService::Stub> vm_;
};

}  // namespace vmmctl::internal

#endif  // API_VMMCTL_RUNNER_H_

// vmmctl's way to the VMM: the API address, the connection, the names of gRPC's codes.
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "api/vmmctl_lib.h"

namespace vmmctl {
namespace {

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int value = static_cast<int>(code);
  if (value >= 0 && value < static_cast<int>(sizeof(kNames) / sizeof(kNames[0])))
    return kNames[value];
  return absl::StrCat("CODE_", value);
}

absl::StatusOr<ApiAddress> ParseApiAddress(absl::string_view api) {
  ApiAddress address;
  if (api.empty())
    return absl::InvalidArgumentError("--api=: needs an address (unix:PATH or HOST:PORT)");
  absl::string_view rest = api;
  if (absl::ConsumePrefix(&rest, "unix:")) {
    absl::ConsumePrefix(&rest, "//");  // unix:///abs/path -> /abs/path
    if (rest.empty())
      return absl::InvalidArgumentError(absl::StrCat("--api=", api, ": needs a socket path"));
    address.is_unix = true;
    address.path = std::string(rest);
  } else if (absl::StartsWith(rest, "dns:") || absl::StartsWith(rest, "ipv4:") ||
             absl::StartsWith(rest, "ipv6:")) {
    address.target = std::string(rest);
    return address;
  } else if (absl::StartsWith(rest, ".") || absl::StrContains(rest, '/') ||
             !absl::StrContains(rest, ':')) {
    // A path: absolute, relative ("vm.sock", "run/vm.sock"), anything a HOST:PORT cannot be (it has
    // a colon and no slash).
    address.is_unix = true;
    address.path = std::string(rest);
  } else {
    const size_t colon = rest.rfind(':');
    int port = 0;
    if (colon == 0 || !absl::SimpleAtoi(rest.substr(colon + 1), &port) || port <= 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--api=", api,
          ": expected a unix socket (unix:PATH, or a path such as vm.sock) or HOST:PORT (TCP, port "
          "1-65535)"));
    }
    address.target = std::string(rest);
    return address;
  }
  if (address.path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--api=%s: a unix socket path has at most %d bytes", api,
                        sizeof(sockaddr_un{}.sun_path) - 1));
  }
  address.target = "unix:" + address.path;
  return address;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> Connect(const ApiAddress& address,
                                                       absl::Duration timeout) {
  const std::string shown = address.is_unix ? "unix:" + address.path : address.target;
  if (address.is_unix) {
    struct stat st;
    if (stat(address.path.c_str(), &st) != 0) {
      const int error = errno;
      // "--api localhost" (TCP without its port) reads as a file name: say what it was taken for.
      const bool bare_name = address.path.find('/') == std::string::npos;
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to ", shown, ": ", strerror(error),
          bare_name && error == ENOENT ? " (taken as a unix socket path; TCP is HOST:PORT)" : ""));
    }
    if (!S_ISSOCK(st.st_mode)) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", shown, ": not a socket"));
    }
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
      sockaddr_un sun{};
      sun.sun_family = AF_UNIX;
      std::memcpy(sun.sun_path, address.path.data(), address.path.size());
      const int rc = connect(fd, reinterpret_cast<sockaddr*>(&sun), sizeof(sun));
      const int error = errno;
      close(fd);
      if (rc != 0) {
        return absl::UnavailableError(
            absl::StrCat("cannot connect to ", shown, ": ", strerror(error),
                         error == ECONNREFUSED ? " (a stale socket: is the VMM running?)" : ""));
      }
    }
  }
  grpc::ChannelArguments args;
  // Fail fast instead of backing off for seconds when the server is not there.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  auto channel =
      grpc::CreateCustomChannel(address.target, grpc::InsecureChannelCredentials(), args);
  if (!channel->WaitForConnected(DeadlineAfter(timeout))) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", shown, " within ", absl::FormatDuration(timeout)));
  }
  return channel;
}

}  // namespace vmmctl

// The control API's bearer token (docs/api.md, "Authentication"): the secret in --api-token-file,
// and the check of the gRPC metadata `authorization: Bearer <token>` a caller sends with every
// call. No gRPC here: the VMM reads the file itself (it does not load the API plugin for that),
// and vmmctl reads it on the client side.
#ifndef API_API_TOKEN_H_
#define API_API_TOKEN_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace api {

// The metadata key (gRPC keys are lower case) and the scheme of its value (RFC 6750 §2.1).
inline constexpr char kAuthorizationMetadataKey[] = "authorization";
inline constexpr char kBearerPrefix[] = "Bearer ";

// A token file holds at most this much (gRPC's metadata budget is 8 KiB per call).
inline constexpr size_t kMaxTokenBytes = 4096;

// What a token may be: 1 to kMaxTokenBytes visible ASCII characters (0x21-0x7e), what an HTTP/2
// header value carries as is (no spaces, which proxies may fold, no control characters).
// InvalidArgument naming `source` otherwise.
absl::Status CheckApiToken(absl::string_view token, absl::string_view source);

// How strictly a token file's owner and mode are checked.
enum class TokenFileCheck {
  // The server's (--api-token-file of microvm and vhost-user-scsi): a regular file owned by the
  // process's effective uid that no group or other user can read or write (mode & 077 == 0),
  // like ssh's private keys: a secret anyone else can read protects nothing.
  kOwnerOnly,
  // A client's (vmmctl): any regular file it can read (an operators' group may share one).
  kReadable,
};

// Reads the token from the file at `path`: its contents without trailing whitespace (a newline
// from `echo`), checked by CheckApiToken. Errors name `flag` and the path: a file that cannot be
// opened, is not a regular file, is empty, too long or (kOwnerOnly) owned by another user or
// readable or writable by group or others (with the chmod/chown that fixes it).
absl::StatusOr<std::string> ReadApiTokenFile(const std::string& path, absl::string_view flag,
                                             TokenFileCheck check);

// The metadata value a client sends: "Bearer <token>".
std::string BearerAuthorization(absl::string_view token);

// Checks a call's `authorization` metadata values against `token` (non-empty). OK for exactly one
// value "Bearer <token>" (the scheme's case ignored, RFC 7235 §2.1); Unauthenticated otherwise,
// with a message that says what was wrong (missing, repeated, not a bearer token, wrong token)
// and never echoes what was sent. The comparison takes time that depends on the lengths only,
// never on where the first difference lies.
absl::Status CheckAuthorization(absl::Span<const absl::string_view> values,
                                absl::string_view token);

// Compares two secrets in time that depends on their lengths only.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b);

}  // namespace api

#endif  // API_API_TOKEN_H_

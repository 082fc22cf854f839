#include "api/api_token.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "vmm/sys_util/status_macros.h"

namespace api {
namespace {

// A token file larger than this is not a token file (trailing whitespace included).
constexpr off_t kMaxTokenFileBytes = 64 * 1024;

// Closes on destruction (RAII for the file's descriptor).
class FileCloser {
 public:
  explicit FileCloser(int fd) : fd_(fd) {}
  ~FileCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

}  // namespace

absl::Status CheckApiToken(absl::string_view token, absl::string_view source) {
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": the token is empty"));
  }
  if (token.size() > kMaxTokenBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: the token is %d bytes long; at most %d",
                                                      source, token.size(), kMaxTokenBytes));
  }
  for (const char c : token) {
    const unsigned char byte = static_cast<unsigned char>(c);
    if (byte < 0x21 || byte > 0x7e) {
      return absl::InvalidArgumentError(absl::StrCat(
          source,
          ": the token may hold visible ASCII characters only (no spaces, control characters or "
          "UTF-8), e.g. the output of `head -c 32 /dev/urandom | base64`"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadApiTokenFile(const std::string& path, absl::string_view flag,
                                             TokenFileCheck check) {
  const std::string what = absl::StrCat(flag, " ", path);
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": no file given"));
  // O_NONBLOCK: a FIFO at the path must not hang the start (it is refused just below).
  const FileCloser file(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (file.get() < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(what, ": cannot open the token file"));
  }
  struct stat st {};
  if (fstat(file.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(what, ": cannot stat the token file"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not a regular file"));
  }
  if (check == TokenFileCheck::kOwnerOnly) {
    if (st.st_uid != geteuid()) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s: the token file belongs to uid %d, not to this process's uid %d (chown it): a "
          "secret another user controls protects nothing",
          what, st.st_uid, geteuid()));
    }
    if ((st.st_mode & 077) != 0) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s: the token file is mode %04o, open to its group or to others; make it readable by "
          "its owner only (chmod 600 %s)",
          what, st.st_mode & 07777, path));
    }
  }
  if (st.st_size > kMaxTokenFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d bytes is no token file (a token has at most %d bytes)", what,
                        st.st_size, kMaxTokenBytes));
  }
  std::string contents(static_cast<size_t>(kMaxTokenFileBytes) + 1, '\0');
  size_t filled = 0;
  while (filled < contents.size()) {
    const ssize_t got = read(file.get(), contents.data() + filled, contents.size() - filled);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return absl::ErrnoToStatus(errno, absl::StrCat(what, ": reading the token"));
    if (got == 0) break;
    filled += static_cast<size_t>(got);
  }
  contents.resize(filled);
  if (filled > static_cast<size_t>(kMaxTokenFileBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the file grew past any token size"));
  }
  std::string token(absl::StripTrailingAsciiWhitespace(contents));
  // The whole file held the secret: wipe the copy before it is freed.
  std::fill(contents.begin(), contents.end(), '\0');
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what,
                     ": the token file is empty (put a secret in it, e.g. "
                     "`head -c 32 /dev/urandom | base64 > FILE`)"));
  }
  RETURN_IF_ERROR(CheckApiToken(token, what));
  return token;
}

std::string BearerAuthorization(absl::string_view token) {
  return absl::StrCat(kBearerPrefix, token);
}

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of `b` is looked at whatever `a` holds: the time depends on the lengths only.
  volatile unsigned char difference = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char mine = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    difference = difference | (mine ^ static_cast<unsigned char>(b[i]));
  }
  return difference == 0;
}

absl::Status CheckAuthorization(absl::Span<const absl::string_view> values,
                                absl::string_view token) {
  if (values.empty()) {
    return absl::UnauthenticatedError(
        "this API requires a token: send the gRPC metadata \"authorization: Bearer <token>\" "
        "(vmmctl --api-token-file=FILE; grpcurl -H 'authorization: Bearer ...')");
  }
  if (values.size() > 1) {
    return absl::UnauthenticatedError("more than one \"authorization\" metadata entry");
  }
  const absl::string_view value = values[0];
  const absl::string_view prefix = kBearerPrefix;
  if (value.size() < prefix.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, prefix.size()), prefix)) {
    return absl::UnauthenticatedError(
        "the \"authorization\" metadata is not a bearer token (expected \"Bearer <token>\")");
  }
  if (!ConstantTimeEquals(value.substr(prefix.size()), token)) {
    return absl::UnauthenticatedError("wrong API token");
  }
  return absl::OkStatus();
}

}  // namespace api

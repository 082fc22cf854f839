#include "tests/support/raw_http2.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace tests {
namespace {

// RFC 9113, 3.4: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", then a SETTINGS frame: length 0 (3 bytes),
// type 4, flags 0, stream 0 (4 bytes).
constexpr char kPrefaceAndEmptySettings[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";
constexpr uint8_t kFrameTypeSettings = 0x04;
constexpr size_t kFrameHeaderSize = 9;

}  // namespace

absl::Status SendHttp2Preface(int fd) {
  const size_t length = sizeof(kPrefaceAndEmptySettings) - 1;
  if (write(fd, kPrefaceAndEmptySettings, length) != static_cast<ssize_t>(length)) {
    return absl::ErrnoToStatus(errno, "write the HTTP/2 preface");
  }
  return absl::OkStatus();
}

bool ServerAnswered(int fd, absl::Duration wait) {
  pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
  return poll(&readable, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) == 1;
}

bool FirstFrameIsSettings(int fd) {
  uint8_t header[kFrameHeaderSize] = {};
  return read(fd, header, sizeof(header)) == static_cast<ssize_t>(sizeof(header)) &&
         header[3] == kFrameTypeSettings;
}

}  // namespace tests

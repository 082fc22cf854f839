#ifndef DEVICES_VIRTIO_VHOST_USER_MESSAGE_H_
#define DEVICES_VIRTIO_VHOST_USER_MESSAGE_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "devices/virtio/vhost_user/protocol.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices::virtio::vhost_user {

// One front-end message as read from the socket: its header, payload and the file descriptors
// that came with it (owned; closed with the message unless taken).
struct Message {
  Header header;
  std::vector<uint8_t> payload;
  std::vector<sys_util::ScopedFd> fds;

  Request request() const { return static_cast<Request>(header.request); }
  bool need_reply() const { return (header.flags & kFlagNeedReply) != 0; }

  // The payload as one T: InvalidArgument unless it is exactly sizeof(T) bytes.
  template <typename T>
  absl::StatusOr<T> PayloadAs() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (payload.size() != sizeof(T)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("vhost-user request %u: payload of %u bytes, expected %u", header.request,
                          payload.size(), sizeof(T)));
    }
    T value;
    std::memcpy(&value, payload.data(), sizeof(T));
    return value;
  }
};

// Bounds on reading one message: the whole message (header, descriptors, payload) must arrive
// before `deadline`, and a readable `stop_fd` (an eventfd, -1 for none) ends the read at once.
// Per-recv timeouts alone let a front end that sends a byte every few seconds hold the reader, and
// SIGTERM with it, for ever (H11 of docs/security.md).
struct ReadLimits {
  absl::Time deadline = absl::InfiniteFuture();
  int stop_fd = -1;
};

// Reads one message from the connected socket, waiting for its first byte within `limits` too.
// nullopt when the front end closed the connection between messages. Errors (the connection is
// then unusable): Cancelled (stop_fd), DeadlineExceeded, a short header or payload, a version
// other than 1, a reply flag, a payload over kMaxPayload, more than kMaxFds descriptors or
// truncated control data (every descriptor received is closed).
absl::StatusOr<std::optional<Message>> ReadMessage(int socket, const ReadLimits& limits = {});

// Sends the reply to `request`: the same request code, version 1 with the REPLY flag.
absl::Status SendReply(int socket, const Header& request, std::span<const uint8_t> payload);

// Builds a message's bytes and sends them with `fds` (for tests that play the front end).
absl::Status SendMessage(int socket, Request request, uint32_t flags,
                         std::span<const uint8_t> payload, std::span<const int> fds = {});

// Reads a reply (for tests that play the front end): header and payload, no descriptors.
absl::StatusOr<Message> ReadReply(int socket);

template <typename T>
std::span<const uint8_t> AsBytes(const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), sizeof(T));
}

}  // namespace devices::virtio::vhost_user

#endif  // DEVICES_VIRTIO_VHOST_USER_MESSAGE_H_

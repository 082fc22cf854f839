#include "devices/virtio/vhost_user/message.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "vmm/sys_util/status_macros.h"

namespace devices::virtio::vhost_user {
namespace {

// Waits until `socket` is readable, `limits.stop_fd` is readable (Cancelled) or the deadline
// passes (DeadlineExceeded).
absl::Status AwaitReadable(int socket, const ReadLimits& limits) {
  while (true) {
    int timeout_ms = -1;
    if (limits.deadline != absl::InfiniteFuture()) {
      const absl::Duration left = limits.deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return absl::DeadlineExceededError(
            "vhost-user: the front end did not finish its message in time");
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000));
    }
    pollfd fds[2] = {{socket, POLLIN, 0}, {limits.stop_fd, POLLIN, 0}};
    const int ready = poll(fds, limits.stop_fd >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return sys_util::ErrnoStatus(errno, "vhost-user: poll");
    if (limits.stop_fd >= 0 && fds[1].revents != 0) {
      return absl::CancelledError("vhost-user: stopping inside a message");
    }
    if (fds[0].revents != 0) return absl::OkStatus();
  }
}

// Reads exactly `length` bytes (after the header: descriptors only ever come with the header),
// within the message's limits: a front end trickling a byte at a time cannot hold us.
absl::Status ReadFull(int socket, uint8_t* data, size_t length, const ReadLimits& limits) {
  size_t done = 0;
  while (done < length) {
    RETURN_IF_ERROR(AwaitReadable(socket, limits));
    const ssize_t got = recv(socket, data + done, length - done, MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return sys_util::ErrnoStatus(errno, "vhost-user: reading the socket");
    if (got == 0) {
      return absl::DataLossError(absl::StrFormat(
          "vhost-user: the front end closed the connection inside a message (%u of %u bytes)", done,
          length));
    }
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status WriteFull(int socket, const uint8_t* data, size_t length, std::span<const int> fds) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  size_t done = 0;
  bool fds_sent = fds.empty();
  while (done < length) {
    iovec io{const_cast<uint8_t*>(data + done), length - done};
    msghdr header{};
    header.msg_iov = &io;
    header.msg_iovlen = 1;
    if (!fds_sent) {
      if (fds.size() > static_cast<size_t>(kMaxFds)) {
        return absl::InvalidArgumentError("vhost-user: too many descriptors for one message");
      }
      header.msg_control = control;
      header.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* message = CMSG_FIRSTHDR(&header);
      message->cmsg_level = SOL_SOCKET;
      message->cmsg_type = SCM_RIGHTS;
      message->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(message), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t sent = sendmsg(socket, &header, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0) return sys_util::ErrnoStatus(errno, "vhost-user: writing the socket");
    fds_sent = true;
    done += static_cast<size_t>(sent);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<Message>> ReadMessage(int socket, const ReadLimits& limits) {
  RETURN_IF_ERROR(AwaitReadable(socket, limits));
  Message message;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec io{&message.header, sizeof(Header)};
  msghdr header{};
  header.msg_iov = &io;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = sizeof(control);
  ssize_t got;
  do {
    got = recvmsg(socket, &header, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0) return sys_util::ErrnoStatus(errno, "vhost-user: reading the socket");
  if (got == 0) return std::nullopt;

  // Take ownership of every descriptor before any check can fail, so none leaks.
  for (cmsghdr* item = CMSG_FIRSTHDR(&header); item != nullptr; item = CMSG_NXTHDR(&header, item)) {
    if (item->cmsg_level != SOL_SOCKET || item->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (item->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(item) + i * sizeof(int), sizeof(int));
      message.fds.emplace_back(fd);
    }
  }
  const bool too_many = message.fds.size() > static_cast<size_t>(kMaxFds);
  if ((header.msg_flags & MSG_CTRUNC) != 0 || too_many) {
    return absl::InvalidArgumentError("vhost-user: more file descriptors than a message may carry");
  }
  if (static_cast<size_t>(got) < sizeof(Header)) {
    RETURN_IF_ERROR(ReadFull(socket, reinterpret_cast<uint8_t*>(&message.header) + got,
                             sizeof(Header) - static_cast<size_t>(got), limits));
  }
  if ((message.header.flags & kVersionMask) != kVersion) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vhost-user: request %u has protocol version %u (only 1 is spoken)",
                        message.header.request, message.header.flags & kVersionMask));
  }
  if ((message.header.flags & kFlagReply) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vhost-user: request %u is flagged as a reply", message.header.request));
  }
  if (message.header.size > kMaxPayload) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vhost-user: request %u has a %u-byte payload (at most %u)",
                        message.header.request, message.header.size, kMaxPayload));
  }
  message.payload.resize(message.header.size);
  if (message.header.size > 0) {
    RETURN_IF_ERROR(ReadFull(socket, message.payload.data(), message.payload.size(), limits));
  }
  return message;
}

namespace {

// Header and payload in one write, the descriptors (if any) with its first byte.
absl::Status SendFrame(int socket, const Header& header, std::span<const uint8_t> payload,
                       std::span<const int> fds) {
  std::vector<uint8_t> bytes(sizeof(Header) + payload.size());
  std::memcpy(bytes.data(), &header, sizeof(Header));
  if (!payload.empty()) std::memcpy(bytes.data() + sizeof(Header), payload.data(), payload.size());
  return WriteFull(socket, bytes.data(), bytes.size(), fds);
}

}  // namespace

absl::Status SendReply(int socket, const Header& request, std::span<const uint8_t> payload) {
  return SendFrame(
      socket, Header{request.request, kVersion | kFlagReply, static_cast<uint32_t>(payload.size())},
      payload, {});
}

absl::Status SendMessage(int socket, Request request, uint32_t flags,
                         std::span<const uint8_t> payload, std::span<const int> fds) {
  return SendFrame(socket,
                   Header{static_cast<uint32_t>(request), kVersion | flags,
                          static_cast<uint32_t>(payload.size())},
                   payload, fds);
}

absl::StatusOr<Message> ReadReply(int socket) {
  Message message;
  RETURN_IF_ERROR(
      ReadFull(socket, reinterpret_cast<uint8_t*>(&message.header), sizeof(Header), ReadLimits{}));
  if ((message.header.flags & kFlagReply) == 0 || message.header.size > kMaxPayload) {
    return absl::InvalidArgumentError("vhost-user: not a reply");
  }
  message.payload.resize(message.header.size);
  if (message.header.size > 0) {
    RETURN_IF_ERROR(ReadFull(socket, message.payload.data(), message.payload.size(), ReadLimits{}));
  }
  return message;
}

}  // namespace devices::virtio::vhost_user

#include "devices/virtio/vhost_user/server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "vmm/sys_util/eventfd.h"

namespace devices::virtio::vhost_user {
namespace {

// How long a front end may take to send one whole message once it started it.
constexpr absl::Duration kMessageTimeout = absl::Seconds(10);

}  // namespace

VhostUserServer::VhostUserServer(sys_util::ScopedFd listener, VirtioDevice& device)
    : listener_(std::move(listener)),
      stop_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      backend_(device) {}

VhostUserServer::~VhostUserServer() = default;

void VhostUserServer::Stop() { sys_util::SignalEventFd(stop_.get()); }

absl::Status VhostUserServer::Run() {
  if (!stop_.valid()) return absl::InternalError("vhost-user: no eventfd for stopping");
  while (true) {
    pollfd fds[2] = {{listener_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return sys_util::ErrnoStatus(errno, "vhost-user: poll");
    }
    if (fds[1].revents != 0) return absl::OkStatus();
    if (fds[0].revents == 0) continue;
    sys_util::ScopedFd connection(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!connection.valid()) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN) continue;
      return sys_util::ErrnoStatus(errno, "vhost-user: accept");
    }
    ++connections_;
    // A front end that stalls inside a message or stops reading replies is dropped rather than
    // left holding this thread (and SIGTERM) for ever.
    const timeval timeout{10, 0};
    setsockopt(connection.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(connection.get(), SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Serve(connection.get());
    backend_.Disconnect();
  }
}

void VhostUserServer::Serve(int connection) {
  log_.Info("front end connected");
  while (true) {
    pollfd fds[2] = {{connection, POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log_.Error("poll: %s", strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    // The whole message within 10 s of its first byte, and SIGTERM (Stop) ends even a read in
    // the middle of one.
    auto message = ReadMessage(connection, ReadLimits{absl::Now() + kMessageTimeout, stop_.get()});
    if (!message.ok()) {
      log_.Error("dropping the front end: %s", message.status().message());
      return;
    }
    if (!message->has_value()) {
      log_.Info("front end disconnected");
      return;
    }
    const Header header = (*message)->header;
    VhostUserBackend::Result result = backend_.Handle(*std::move(*message));
    if (!result.status.ok()) {
      log_.Error("%s", result.status.message());
      // Failures the front end cannot be told about leave it and us out of step: drop it.
      if (!result.reply.has_value()) return;
    }
    // Start or stop the device once the front end has said everything it had queued (QEMU sends
    // a ring's set-up as a burst), so a ring set-up costs one device start, not one per message.
    pollfd pending{connection, POLLIN, 0};
    if (poll(&pending, 1, 0) <= 0) {
      if (absl::Status synced = backend_.Synchronize(); !synced.ok()) {
        log_.Error("starting the device: %s", synced.message());
        // The front end asked whether this worked: it did not (e.g. a memory table the rings
        // cannot be found in).
        if (result.ack) result.reply = std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0, 0};
      }
    }
    if (result.reply.has_value()) {
      if (absl::Status sent = SendReply(connection, header, *result.reply); !sent.ok()) {
        log_.Error("%s", sent.message());
        return;
      }
    }
  }
}

}  // namespace devices::virtio::vhost_user

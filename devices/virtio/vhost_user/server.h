#ifndef DEVICES_VIRTIO_VHOST_USER_SERVER_H_
#define DEVICES_VIRTIO_VHOST_USER_SERVER_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "devices/virtio/vhost_user/backend.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/sys_util/rate_limited_log.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices::virtio::vhost_user {

// Serves vhost-user front ends on a listening unix stream socket, one connection at a time (a
// vhost-user device has one front end). When the front end disconnects or breaks the protocol,
// the device is stopped and reset, the connection dropped, and the next one accepted: a VMM that
// restarts (or reconnects) finds the device as new.
class VhostUserServer {
 public:
  // `listener` is a bound, listening AF_UNIX SOCK_STREAM socket; `device` outlives the server.
  VhostUserServer(sys_util::ScopedFd listener, VirtioDevice& device);
  ~VhostUserServer();

  // Accepts and serves until Stop(). Returns an error only when the listening socket fails.
  absl::Status Run();
  // Makes Run() return (from any thread, e.g. a signal handler's thread). The connection being
  // served is dropped and the device reset first.
  void Stop();

  uint64_t connections() const { return connections_.load(); }

 private:
  // Serves one connection until it ends or Stop(); logs why it ended.
  void Serve(int connection);

  sys_util::ScopedFd listener_;
  sys_util::ScopedFd stop_;  // eventfd
  VhostUserBackend backend_;
  // Connections, disconnections and dropped front ends: a front end that reconnects in a loop
  // cannot flood stderr (lines read "vhost-user: LEVEL: ...").
  sys_util::RateLimitedLog log_{"vhost-user"};
  std::atomic<uint64_t> connections_{0};
};

}  // namespace devices::virtio::vhost_user

#endif  // DEVICES_VIRTIO_VHOST_USER_SERVER_H_

#ifndef DEVICES_VIRTIO_VHOST_USER_BACKEND_H_
#define DEVICES_VIRTIO_VHOST_USER_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "devices/virtio/vhost_user/message.h"
#include "devices/virtio/vhost_user/protocol.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/sys_util/rate_limited_log.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices::virtio::vhost_user {

// The back-end side of the vhost-user protocol for one VirtioDevice: a transport, like
// VirtioPciTransport, except that the front end (QEMU or another VMM) owns the guest, the PCI
// function and the device configuration, and hands over guest RAM (memfd regions), each ring's
// addresses and position, and an eventfd pair per ring (kick in, call out).
//
// The device sees what it sees behind PCI: Activate() with the rings that are running, Stop()
// when the set of running rings, their file descriptors or the memory table change (then
// Activate() again, resuming at the ring positions), Reset() on RESET_DEVICE / RESET_OWNER and on
// disconnect. A ring runs once it has a size, addresses and a kick eventfd (SET_VRING_KICK starts
// it), and is enabled (SET_VRING_ENABLE, or at once when protocol features were not negotiated);
// GET_VRING_BASE stops it and answers the next index to consume.
//
// Every message is checked: payload sizes, ring indices, descriptor counts, memory regions
// (page-aligned, backed by a file long enough, not overlapping) and ring addresses (inside one
// region, translated from the front end's address space to guest physical). Not thread-safe:
// one thread (the connection's) calls Handle() and Disconnect().
class VhostUserBackend {
 public:
  // `device` must outlive the backend and is used by it alone.
  explicit VhostUserBackend(VirtioDevice& device);
  ~VhostUserBackend();  // stops the device
  VhostUserBackend(const VhostUserBackend&) = delete;
  VhostUserBackend& operator=(const VhostUserBackend&) = delete;

  struct Result {
    absl::Status status;
    // The reply's payload, when the request has one (GET_*), or the REPLY_ACK word when the front
    // end asked for one (NEED_REPLY with REPLY_ACK negotiated): 0 for success, 1 for failure.
    std::optional<std::vector<uint8_t>> reply;
    bool ack = false;  // `reply` is a REPLY_ACK word (a failed device start may still turn it to 1)
  };
  // Handles one message. A failed status with no reply means the front end cannot be told: the
  // caller should drop the connection.
  Result Handle(Message message);

  // Call when no further message is queued on the socket: starts and stops the device to match
  // the rings' state. (Handle() does it itself when a reply depends on it, e.g. GET_VRING_BASE.)
  absl::Status Synchronize();

  // The front end went away: stops the device, resets it, and forgets memory, rings and
  // negotiated features, ready for the next connection.
  void Disconnect();

  // What the back end offers in GET_FEATURES / GET_PROTOCOL_FEATURES.
  uint64_t offered_features() const;
  static uint64_t offered_protocol_features();

  bool device_active() const { return active_; }
  // Rings the device is serving now, by index (for tests and logs).
  std::set<uint32_t> active_rings() const { return active_rings_; }

 private:
  class Notifier;  // a ring's call/err eventfd, swappable while the device runs
  class Events;    // VirtioDeviceEvents for the device

  struct Ring {
    uint16_t size = 0;
    std::optional<VringAddress> address;
    uint16_t base = 0;        // next index to consume when (re)started
    sys_util::ScopedFd kick;  // started while valid
    bool enabled = false;
    std::shared_ptr<Notifier> call;
    std::shared_ptr<Notifier> err;
  };

  // A region of the memory table: where the front end has it mapped, for ring addresses.
  struct RegionMapping {
    uint64_t userspace_addr = 0;
    uint64_t size = 0;
    uint64_t guest_phys_addr = 0;
  };

  absl::StatusOr<std::vector<uint8_t>> HandleWithReply(const Message& message);
  absl::Status HandleNoReply(Message& message);

  absl::Status SetVringNum(Message& message);
  absl::Status SetFeatures(uint64_t features);
  absl::Status SetMemTable(Message& message);
  absl::StatusOr<Ring*> RingFor(uint32_t index);
  // A ring request's payload (a T with an `index`) and its ring: no descriptors, exact size,
  // an existing ring.
  template <typename T>
  absl::StatusOr<std::pair<T, Ring*>> RingRequest(const Message& message);
  // Forgets every ring's size, addresses, position and kick fd (call/err fds stay).
  void ResetRings(bool enabled);
  absl::Status SetRingFd(Message& message);
  absl::StatusOr<uint32_t> GetVringBase(uint32_t index);

  // Translates a front-end address range to guest physical: it must lie wholly in one region.
  absl::StatusOr<vmm::GuestAddress> Translate(uint64_t userspace_addr, uint64_t bytes) const;
  // The rings that should be running now.
  std::set<uint32_t> WantedRings() const;
  // Stops the device if it runs, recording each running ring's position (its used index: every
  // chain taken has been made used).
  void StopDevice();
  void RecordPositions(const std::set<uint32_t>& rings);
  absl::Status StartDevice(const std::set<uint32_t>& rings);

  VirtioDevice& device_;
  // What the front end does that is rare and worth seeing (a memory table replaced, a stop).
  sys_util::RateLimitedLog log_{"vhost-user"};
  const std::vector<uint16_t> max_sizes_;
  std::unique_ptr<Events> events_;

  uint64_t features_ = 0;              // accepted by SET_FEATURES (without the protocol bit)
  bool protocol_features_on_ = false;  // VHOST_USER_F_PROTOCOL_FEATURES negotiated
  uint64_t protocol_features_ = 0;
  std::unique_ptr<vmm::GuestMemory> memory_;
  std::vector<RegionMapping> mappings_;
  std::vector<Ring> rings_;

  bool active_ = false;
  std::set<uint32_t> active_rings_;
  // Negotiated features changed while the device ran: restart it with the new ring flags.
  bool restart_needed_ = false;
  // The last start failed; not retried until the front end sends another message.
  bool start_failed_ = false;
};

}  // namespace devices::virtio::vhost_user

#endif  // DEVICES_VIRTIO_VHOST_USER_BACKEND_H_

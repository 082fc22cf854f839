#include "devices/virtio/vhost_user/backend.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/rate_limited_log.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::virtio::vhost_user {
namespace {

// Virtio reserved feature bits 24..49 belong to the transport; the device offers 0..23 and 50+.
constexpr uint64_t kTransportFeatureMask = ((1ull << 50) - 1) & ~((1ull << 24) - 1);
constexpr uint32_t kMaxQueueSize = 32768;
constexpr uint32_t kVringFlagLog = 1;  // VHOST_VRING_F_LOG

std::vector<uint8_t> U64Bytes(uint64_t value) {
  std::vector<uint8_t> bytes(sizeof(value));
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

const char* RequestName(Request request) {
  switch (request) {
    case Request::kGetFeatures:
      return "GET_FEATURES";
    case Request::kSetFeatures:
      return "SET_FEATURES";
    case Request::kSetOwner:
      return "SET_OWNER";
    case Request::kResetOwner:
      return "RESET_OWNER";
    case Request::kSetMemTable:
      return "SET_MEM_TABLE";
    case Request::kSetLogBase:
      return "SET_LOG_BASE";
    case Request::kSetLogFd:
      return "SET_LOG_FD";
    case Request::kSetVringNum:
      return "SET_VRING_NUM";
    case Request::kSetVringAddr:
      return "SET_VRING_ADDR";
    case Request::kSetVringBase:
      return "SET_VRING_BASE";
    case Request::kGetVringBase:
      return "GET_VRING_BASE";
    case Request::kSetVringKick:
      return "SET_VRING_KICK";
    case Request::kSetVringCall:
      return "SET_VRING_CALL";
    case Request::kSetVringErr:
      return "SET_VRING_ERR";
    case Request::kGetProtocolFeatures:
      return "GET_PROTOCOL_FEATURES";
    case Request::kSetProtocolFeatures:
      return "SET_PROTOCOL_FEATURES";
    case Request::kGetQueueNum:
      return "GET_QUEUE_NUM";
    case Request::kSetVringEnable:
      return "SET_VRING_ENABLE";
    case Request::kGetConfig:
      return "GET_CONFIG";
    case Request::kSetConfig:
      return "SET_CONFIG";
    case Request::kResetDevice:
      return "RESET_DEVICE";
    default:
      return "request";
  }
}

absl::Status NoDescriptors(const Message& message) {
  if (!message.fds.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("vhost-user %s: %u unexpected file descriptors",
                        RequestName(message.request()), message.fds.size()));
  }
  return absl::OkStatus();
}

// Kick, call and err descriptors must be eventfds: the device reads and writes them as such, and
// anything else (a pipe whose reader is gone, a regular file) could kill, hang or spin an
// iothread.
//
// Their flags are left alone. The descriptor came over SCM_RIGHTS: it shares its open file
// description, and so its O_NONBLOCK, with the front end, and F_SETFL would change the front end's
// own descriptor under it (a front end reading its call eventfd in a blocking read would get
// EAGAIN). Nor is there a private description to be had: open("/proc/self/fd/N") of an eventfd
// fails (ENXIO, an anonymous inode), and setting the flag would not bind a hostile front end,
// which can clear it again at any time. So the back end keeps to I/O that does not block on a
// blocking eventfd: the kick is read only after epoll reported it readable, and the front end
// does not read its own kicks (eventfd(2): then a read finds the counter non-zero); the back end's
// writes (call, err, the kick injected at a ring's start) can block only at a counter of 2^64-2,
// and where the description is blocking they are made only when poll() reports room (see
// AddToEventFd). What remains (a front end that empties or fills its own counter between the
// back end's poll and read or write) needs a front end that races against itself to stall its
// own device.
absl::Status CheckEventFd(int fd, const char* what, uint32_t index) {
  if (!sys_util::IsEventFd(fd)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ring %u: the descriptor is not an eventfd", what, index));
  }
  return absl::OkStatus();
}

// Whether `fd`'s open file description is blocking now (the front end may change it later).
bool IsBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL);
  return flags < 0 || (flags & O_NONBLOCK) == 0;
}

// Adds 1 to an eventfd shared with the front end without ever waiting for it. A write to an
// eventfd blocks (without O_NONBLOCK) only when the counter would pass 2^64-2; then the reader has
// a wakeup pending anyway and nothing is lost by not writing. `check_room`: ask poll() first
// (POLLOUT: the counter is below 2^64-2), for descriptors that may be blocking.
void AddToEventFd(int fd, bool check_room) {
  if (check_room) {
    pollfd room{fd, POLLOUT, 0};
    if (poll(&room, 1, 0) != 1 || (room.revents & POLLOUT) == 0) return;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t written = write(fd, &one, sizeof(one));
}

// Transport feature bits (24..49) a front end may pass on from its own offer to the guest that
// change nothing for the device: NOTIFY_ON_EMPTY (24, legacy) and ANY_LAYOUT (27, implied by
// VERSION_1: the device already accepts any descriptor layout). QEMU's vhost-user-scsi passes the
// guest's features through, so refusing them would end the front end (SET_FEATURES has no reply).
constexpr uint64_t kHarmlessTransportFeatures = (1ull << 24) | (1ull << 27);

}  // namespace

// A ring's call or err eventfd. The device's threads Signal() while the front end may replace the
// descriptor (QEMU swaps call fds when the guest masks MSI-X vectors): readers hold a reference to
// the descriptor they write, so a replaced one closes only after its last write.
class VhostUserBackend::Notifier : public VirtioInterrupt {
 public:
  void Signal() override {
    std::shared_ptr<const Target> target = target_.load(std::memory_order_acquire);
    if (target == nullptr) return;
    // A non-blocking eventfd write fails only when the counter would overflow: the front end is
    // then signalled already. A blocking one is written only when there is room (the interrupt
    // path of QEMU's non-blocking eventfds stays one write).
    AddToEventFd(target->fd.get(), /*check_room=*/target->blocking);
  }
  void Set(sys_util::ScopedFd fd) {
    if (!fd.valid()) {
      target_.store(nullptr, std::memory_order_release);
      return;
    }
    const bool blocking = IsBlocking(fd.get());
    target_.store(std::make_shared<const Target>(Target{std::move(fd), blocking}),
                  std::memory_order_release);
  }

 private:
  struct Target {
    sys_util::ScopedFd fd;
    bool blocking;  // the description's O_NONBLOCK was clear when the front end sent it
  };
  std::atomic<std::shared_ptr<const Target>> target_;
};

// The device's events. There is no back-end-to-front-end channel (BACKEND_REQ is not offered), so
// a configuration change cannot be announced (the front end owns virtio-scsi's configuration
// anyway); a device that needs a reset tells the front end on every ring's err eventfd.
class VhostUserBackend::Events : public VirtioDeviceEvents {
 public:
  explicit Events(std::vector<std::shared_ptr<Notifier>> errs) : errs_(std::move(errs)) {}
  void ConfigChanged() override {}
  void NeedsReset() override {
    log_.Warning("the device needs a reset (the guest broke a ring rule)");
    for (const auto& err : errs_) err->Signal();
  }

 private:
  const std::vector<std::shared_ptr<Notifier>> errs_;
  // A guest that breaks its rings after every reset must not flood the host's log.
  sys_util::RateLimitedLog log_{"vhost-user"};
};

VhostUserBackend::VhostUserBackend(VirtioDevice& device)
    : device_(device), max_sizes_(device.queue_max_sizes()), rings_(max_sizes_.size()) {
  std::vector<std::shared_ptr<Notifier>> errs;
  for (Ring& ring : rings_) {
    ring.call = std::make_shared<Notifier>();
    ring.err = std::make_shared<Notifier>();
    errs.push_back(ring.err);
  }
  events_ = std::make_unique<Events>(std::move(errs));
}

VhostUserBackend::~VhostUserBackend() { Disconnect(); }

uint64_t VhostUserBackend::offered_features() const {
  return (device_.device_features() & ~kTransportFeatureMask) | kFeatureVersion1 |
         kFeatureEventIdx | kFeatureIndirectDesc | kFeatureProtocolFeatures;
}

uint64_t VhostUserBackend::offered_protocol_features() {
  return kProtocolMq | kProtocolReplyAck | kProtocolResetDevice;
}

VhostUserBackend::Result VhostUserBackend::Handle(Message message) {
  Result result;
  switch (message.request()) {
    case Request::kGetFeatures:
    case Request::kGetProtocolFeatures:
    case Request::kGetQueueNum:
    case Request::kGetVringBase: {
      auto reply = HandleWithReply(message);
      if (reply.ok()) {
        result.reply = *std::move(reply);
      } else {
        result.status = reply.status();
      }
      return result;
    }
    default:
      break;
  }
  const bool need_reply = message.need_reply();
  // The front end changed something: a start that failed may work now.
  start_failed_ = false;
  result.status = HandleNoReply(message);
  // REPLY_ACK ("Communication"): with the feature negotiated, a request flagged NEED_REPLY gets a
  // u64, zero for success.
  if (need_reply && (protocol_features_ & kProtocolReplyAck) != 0) {
    result.reply = U64Bytes(result.status.ok() ? 0 : 1);
    result.ack = true;
  }
  return result;
}

absl::StatusOr<std::vector<uint8_t>> VhostUserBackend::HandleWithReply(const Message& message) {
  RETURN_IF_ERROR(NoDescriptors(message));
  switch (message.request()) {
    case Request::kGetFeatures:
      if (!message.payload.empty()) return absl::InvalidArgumentError("GET_FEATURES: payload");
      return U64Bytes(offered_features());
    case Request::kGetProtocolFeatures:
      if (!message.payload.empty()) {
        return absl::InvalidArgumentError("GET_PROTOCOL_FEATURES: payload");
      }
      return U64Bytes(offered_protocol_features());
    case Request::kGetQueueNum:
      if (!message.payload.empty()) return absl::InvalidArgumentError("GET_QUEUE_NUM: payload");
      return U64Bytes(max_sizes_.size());
    case Request::kGetVringBase: {
      ASSIGN_OR_RETURN(const VringState state, message.PayloadAs<VringState>());
      ASSIGN_OR_RETURN(const uint32_t base, GetVringBase(state.index));
      VringState reply{state.index, base};
      return std::vector<uint8_t>(AsBytes(reply).begin(), AsBytes(reply).end());
    }
    default:
      return absl::InternalError("not a request with a reply");
  }
}

absl::Status VhostUserBackend::HandleNoReply(Message& message) {
  switch (message.request()) {
    case Request::kSetOwner:
      return NoDescriptors(message);
    case Request::kResetOwner:
    case Request::kResetDevice: {
      RETURN_IF_ERROR(NoDescriptors(message));
      StopDevice();
      device_.Reset();
      // Without protocol features a ring is enabled as soon as it exists (see SetFeatures()).
      ResetRings(/*enabled=*/!protocol_features_on_);
      return absl::OkStatus();
    }
    case Request::kSetFeatures: {
      RETURN_IF_ERROR(NoDescriptors(message));
      ASSIGN_OR_RETURN(const uint64_t features, message.PayloadAs<uint64_t>());
      return SetFeatures(features);
    }
    case Request::kSetProtocolFeatures: {
      RETURN_IF_ERROR(NoDescriptors(message));
      ASSIGN_OR_RETURN(const uint64_t features, message.PayloadAs<uint64_t>());
      if ((features & ~offered_protocol_features()) != 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SET_PROTOCOL_FEATURES: 0x%x were not offered (0x%x)", features,
                            offered_protocol_features()));
      }
      protocol_features_ = features;
      return absl::OkStatus();
    }
    case Request::kSetMemTable:
      return SetMemTable(message);
    case Request::kSetVringNum:
      return SetVringNum(message);
    case Request::kSetVringAddr: {
      ASSIGN_OR_RETURN(auto request, RingRequest<VringAddress>(message));
      auto& [address, ring] = request;
      if ((address.flags & kVringFlagLog) != 0) {
        return absl::InvalidArgumentError("SET_VRING_ADDR: dirty logging was not negotiated");
      }
      // A running ring moves: stop the device first, so its position is read where the device
      // left it (Synchronize() restarts it at the new address).
      if (active_rings_.contains(address.index)) StopDevice();
      ring->address = address;
      return absl::OkStatus();
    }
    case Request::kSetVringBase: {
      ASSIGN_OR_RETURN(auto request, RingRequest<VringState>(message));
      auto& [state, ring] = request;
      if (state.num > 0xffff) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SET_VRING_BASE: ring %u base 0x%x (split rings have 16-bit indices)",
                            state.index, state.num));
      }
      if (active_rings_.contains(state.index)) {
        return absl::FailedPreconditionError(
            absl::StrFormat("SET_VRING_BASE: ring %u is running", state.index));
      }
      ring->base = static_cast<uint16_t>(state.num);
      return absl::OkStatus();
    }
    case Request::kSetVringKick:
    case Request::kSetVringCall:
    case Request::kSetVringErr:
      return SetRingFd(message);
    case Request::kSetVringEnable: {
      ASSIGN_OR_RETURN(auto request, RingRequest<VringState>(message));
      auto& [state, ring] = request;
      if (!protocol_features_on_) {
        return absl::FailedPreconditionError(
            "SET_VRING_ENABLE without VHOST_USER_F_PROTOCOL_FEATURES");
      }
      if (state.num > 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SET_VRING_ENABLE: %u is neither 0 nor 1", state.num));
      }
      ring->enabled = state.num == 1;
      return absl::OkStatus();
    }
    default:
      // Logging (migration), IOTLB, in-flight tracking, memory slots, the back-end channel,
      // device configuration (the front end owns virtio-scsi's) and the net/crypto/GPU requests
      // were never offered.
      return absl::UnimplementedError(
          absl::StrFormat("vhost-user request %u is not supported", message.header.request));
  }
}

// SET_VRING_NUM: a power of two up to the device's size for that ring, on a ring not running.
absl::Status VhostUserBackend::SetVringNum(Message& message) {
  ASSIGN_OR_RETURN(auto request, RingRequest<VringState>(message));
  auto& [state, ring] = request;
  if (state.num == 0 || state.num > kMaxQueueSize || !std::has_single_bit(state.num)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_VRING_NUM: ring %u size %u is not a power of two up to %u",
                        state.index, state.num, kMaxQueueSize));
  }
  if (state.num > max_sizes_[state.index]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_VRING_NUM: ring %u size %u is above the device's %u", state.index,
                        state.num, max_sizes_[state.index]));
  }
  if (active_rings_.contains(state.index)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("SET_VRING_NUM: ring %u is running", state.index));
  }
  ring->size = static_cast<uint16_t>(state.num);
  return absl::OkStatus();
}

absl::Status VhostUserBackend::SetFeatures(uint64_t features) {
  // Transport bits change what the rings look like: one that was not offered cannot be served.
  const uint64_t unoffered = features & ~offered_features() & ~kHarmlessTransportFeatures;
  if ((unoffered & (kTransportFeatureMask | kFeatureProtocolFeatures)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_FEATURES: transport features 0x%x were not offered (0x%x)", unoffered,
                        offered_features()));
  }
  // Device bits the front end implements itself come along (QEMU's vhost-user-scsi passes on
  // the guest's VIRTIO_SCSI_F_CHANGE, which QEMU offers whatever the back end says); the device
  // is told only of the ones it offered.
  protocol_features_on_ = (features & kFeatureProtocolFeatures) != 0;
  const uint64_t device_features = features & offered_features() & ~kFeatureProtocolFeatures;
  if (active_ && device_features != features_) restart_needed_ = true;
  features_ = device_features;
  // "If VHOST_USER_F_PROTOCOL_FEATURES has not been negotiated, the ring starts directly in the
  // enabled state"; with it, rings wait for SET_VRING_ENABLE. Rings start disabled, and
  // SET_FEATURES never disables one (it also toggles dirty logging during migration).
  if (!protocol_features_on_) {
    for (Ring& ring : rings_) ring.enabled = true;
  }
  return absl::OkStatus();
}

absl::Status VhostUserBackend::SetMemTable(Message& message) {
  if (message.payload.size() < sizeof(MemoryTableHeader)) {
    return absl::InvalidArgumentError("SET_MEM_TABLE: short payload");
  }
  MemoryTableHeader header;
  std::memcpy(&header, message.payload.data(), sizeof(header));
  if (header.num_regions == 0 || header.num_regions > kMaxMemoryRegions) {
    return absl::InvalidArgumentError(absl::StrFormat("SET_MEM_TABLE: %u regions (1 to %u)",
                                                      header.num_regions, kMaxMemoryRegions));
  }
  if (message.payload.size() != sizeof(header) + header.num_regions * sizeof(MemoryRegion)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_MEM_TABLE: %u-byte payload for %u regions", message.payload.size(),
                        header.num_regions));
  }
  if (message.fds.size() != header.num_regions) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_MEM_TABLE: %u regions but %u file descriptors", header.num_regions,
                        message.fds.size()));
  }
  std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
  std::vector<RegionMapping> mappings;
  for (uint32_t i = 0; i < header.num_regions; ++i) {
    MemoryRegion region;
    std::memcpy(&region, message.payload.data() + sizeof(header) + i * sizeof(MemoryRegion),
                sizeof(region));
    if (region.userspace_addr + region.memory_size < region.userspace_addr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SET_MEM_TABLE: region %u wraps the front end's address space", i));
    }
    for (const RegionMapping& other : mappings) {
      if (region.userspace_addr < other.userspace_addr + other.size &&
          other.userspace_addr < region.userspace_addr + region.memory_size) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SET_MEM_TABLE: region %u overlaps another in the front end's "
                            "address space",
                            i));
      }
    }
    auto mapped = vmm::GuestMemoryRegion::CreateFromFile(vmm::GuestAddress(region.guest_phys_addr),
                                                         region.memory_size, message.fds[i].get(),
                                                         region.mmap_offset);
    if (!mapped.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("SET_MEM_TABLE: region %u: %s", i, mapped.status().message()));
    }
    regions.push_back(*std::move(mapped));
    mappings.push_back({region.userspace_addr, region.memory_size, region.guest_phys_addr});
  }
  auto memory = vmm::GuestMemory::Create(std::move(regions));
  if (!memory.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SET_MEM_TABLE: %s", memory.status().message()));
  }
  // The device may be using the old table: stop it before unmapping (Synchronize() restarts it
  // on the new one, at the same ring positions).
  const bool was_active = active_;
  StopDevice();
  memory_ = std::make_unique<vmm::GuestMemory>(*std::move(memory));
  mappings_ = std::move(mappings);
  // Rare (start-up, memory hot-plug) and worth seeing in the log.
  log_.Info("memory table: %u region(s), %u MiB%s", header.num_regions,
            static_cast<unsigned>(memory_->total_size() >> 20),
            was_active ? " (replaced while running: device stopped and restarted)" : "");
  return absl::OkStatus();
}

void VhostUserBackend::ResetRings(bool enabled) {
  for (Ring& ring : rings_) {
    ring.size = 0;
    ring.address.reset();
    ring.base = 0;
    ring.kick.Reset();
    ring.enabled = enabled;
  }
}

template <typename T>
absl::StatusOr<std::pair<T, VhostUserBackend::Ring*>> VhostUserBackend::RingRequest(
    const Message& message) {
  RETURN_IF_ERROR(NoDescriptors(message));
  ASSIGN_OR_RETURN(const T payload, message.PayloadAs<T>());
  ASSIGN_OR_RETURN(Ring* const ring, RingFor(payload.index));
  return std::pair<T, Ring*>(payload, ring);
}

absl::StatusOr<VhostUserBackend::Ring*> VhostUserBackend::RingFor(uint32_t index) {
  if (index >= rings_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vhost-user: ring %u does not exist (the device has %u)", index, rings_.size()));
  }
  return &rings_[index];
}

absl::Status VhostUserBackend::SetRingFd(Message& message) {
  const char* name = RequestName(message.request());
  ASSIGN_OR_RETURN(const uint64_t value, message.PayloadAs<uint64_t>());
  if ((value & ~(kVringIndexMask | kVringNoFd)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: reserved bits set (0x%x)", name, value));
  }
  const uint32_t index = static_cast<uint32_t>(value & kVringIndexMask);
  ASSIGN_OR_RETURN(Ring* const ring, RingFor(index));
  const bool no_fd = (value & kVringNoFd) != 0;
  if (message.fds.size() != (no_fd ? 0u : 1u)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: ring %u came with %u file descriptors",
                                                      name, index, message.fds.size()));
  }
  sys_util::ScopedFd fd = no_fd ? sys_util::ScopedFd() : std::move(message.fds[0]);
  if (fd.valid()) {
    RETURN_IF_ERROR(CheckEventFd(fd.get(), name, index));
  }
  switch (message.request()) {
    case Request::kSetVringKick:
      // A ring without a kick eventfd would have to be polled for ever: not supported.
      if (no_fd) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SET_VRING_KICK: ring %u without an eventfd (polling mode)", index));
      }
      // The device polls the old eventfd until it stops: stop it before that fd is closed.
      if (active_rings_.contains(index)) StopDevice();
      ring->kick = std::move(fd);
      return absl::OkStatus();
    case Request::kSetVringCall:
      ring->call->Set(std::move(fd));
      // Completions signalled on the old descriptor may not have reached the front end (QEMU
      // swaps call fds while a guest masks vectors): one spurious interrupt is harmless
      // (virtio 1.2 §2.7.10: the driver checks the used ring), a lost one hangs the driver.
      if (active_rings_.contains(index)) ring->call->Signal();
      return absl::OkStatus();
    default:
      ring->err->Set(std::move(fd));
      return absl::OkStatus();
  }
}

absl::StatusOr<uint32_t> VhostUserBackend::GetVringBase(uint32_t index) {
  ASSIGN_OR_RETURN(Ring* const ring, RingFor(index));
  // "Stops the vring and returns the current descriptor index": the whole device stops (the
  // other rings restart in Synchronize()), with every chain it took made used.
  if (active_rings_.contains(index)) {
    const std::set<uint32_t> stopped = active_rings_;
    StopDevice();
    // Rare (the front end pauses, resets or shuts down the device) and worth seeing in the log.
    std::string positions;
    for (uint32_t stopped_index : stopped) {
      absl::StrAppendFormat(&positions, " ring %u at %u", stopped_index,
                            rings_[stopped_index].base);
    }
    log_.Info("device stopped by the front end:%s", positions);
  }
  ring->kick.Reset();
  return ring->base;
}

absl::StatusOr<vmm::GuestAddress> VhostUserBackend::Translate(uint64_t userspace_addr,
                                                              uint64_t bytes) const {
  for (const RegionMapping& mapping : mappings_) {
    if (userspace_addr < mapping.userspace_addr) continue;
    const uint64_t offset = userspace_addr - mapping.userspace_addr;
    if (offset > mapping.size || bytes > mapping.size - offset) continue;
    return vmm::GuestAddress(mapping.guest_phys_addr + offset);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("vhost-user: [0x%x, +0x%x) is not inside one region of the memory table",
                      userspace_addr, bytes));
}

std::set<uint32_t> VhostUserBackend::WantedRings() const {
  std::set<uint32_t> wanted;
  if (memory_ == nullptr) return wanted;
  for (uint32_t i = 0; i < rings_.size(); ++i) {
    const Ring& ring = rings_[i];
    if (ring.kick.valid() && ring.enabled && ring.size != 0 && ring.address.has_value()) {
      wanted.insert(i);
    }
  }
  return wanted;
}

absl::Status VhostUserBackend::Synchronize() {
  const std::set<uint32_t> wanted = WantedRings();
  if (active_ && (wanted != active_rings_ || restart_needed_)) StopDevice();
  if (active_ || wanted.empty()) return absl::OkStatus();
  // Retrying the same failed start would only fail again (and a partly started device may have
  // moved the rings): wait until the front end changes something.
  if (start_failed_) {
    return absl::FailedPreconditionError(
        "the device did not start; waiting for the front end to change the rings");
  }
  absl::Status started = StartDevice(wanted);
  if (!started.ok()) start_failed_ = true;
  return started;
}

void VhostUserBackend::RecordPositions(const std::set<uint32_t>& rings) {
  for (uint32_t index : rings) {
    Ring& ring = rings_[index];
    // Every chain the device took is used now, so the used index is where to resume. (It lives
    // in guest memory: a guest that scribbles on it only confuses its own ring.)
    auto used = Translate(ring.address->used, 4);
    if (!used.ok()) continue;
    auto used_index = memory_->ReadObject<uint16_t>(*used + 2);
    if (used_index.ok()) ring.base = *used_index;
  }
}

void VhostUserBackend::StopDevice() {
  if (!active_) return;
  device_.Stop();
  RecordPositions(active_rings_);
  active_ = false;
  active_rings_.clear();
  restart_needed_ = false;
}

absl::Status VhostUserBackend::StartDevice(const std::set<uint32_t>& rings) {
  VirtioActivation activation;
  activation.memory = memory_.get();
  activation.features = features_;
  activation.events = events_.get();
  for (uint32_t index : rings) {
    const Ring& ring = rings_[index];
    if (ring.size > max_sizes_[index]) {
      return absl::InvalidArgumentError(
          absl::StrFormat("vhost-user: ring %u has %u entries, the device allows %u", index,
                          ring.size, max_sizes_[index]));
    }
    const uint64_t size = ring.size;
    auto descriptors = Translate(ring.address->descriptor, 16 * size);
    auto available = Translate(ring.address->available, 6 + 2 * size);
    auto used = Translate(ring.address->used, 6 + 8 * size);
    for (const auto* area : {&descriptors, &available, &used}) {
      if (!area->ok()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("vhost-user: ring %u: %s", index, area->status().message()));
      }
    }
    // Checked here as well as by SplitQueue::Create, so that no ring starts (and consumes
    // buffers) when a later one would fail (virtio 1.2 §2.7: alignments 16, 2 and 4).
    if (descriptors->value() % 16 != 0 || available->value() % 2 != 0 || used->value() % 4 != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("vhost-user: ring %u: misaligned ring areas", index));
    }
    VirtioQueue queue;
    queue.index = static_cast<uint16_t>(index);
    queue.config.size = ring.size;
    queue.config.descriptor_table = *descriptors;
    queue.config.available_ring = *available;
    queue.config.used_ring = *used;
    queue.config.event_idx = (features_ & kFeatureEventIdx) != 0;
    queue.config.indirect = (features_ & kFeatureIndirectDesc) != 0;
    queue.config.start_index = ring.base;
    queue.notify_fd = ring.kick.get();
    queue.interrupt = ring.call.get();
    activation.queues.push_back(queue);
  }
  absl::Status status = device_.Activate(std::move(activation));
  if (!status.ok()) {
    // Rings set up before the failure may have consumed (and completed) buffers: keep their
    // positions, or a later start would replay those requests.
    device_.Reset();
    RecordPositions(rings);
    events_->NeedsReset();
    return status;
  }
  active_ = true;
  active_rings_ = rings;
  // Chains made available while the ring was stopped came with no kick the device saw.
  for (uint32_t index : rings) AddToEventFd(rings_[index].kick.get(), /*check_room=*/true);
  return absl::OkStatus();
}

void VhostUserBackend::Disconnect() {
  StopDevice();
  device_.Reset();
  memory_.reset();
  mappings_.clear();
  protocol_features_on_ = false;
  ResetRings(/*enabled=*/false);  // until the next front end's SET_FEATURES says otherwise
  for (Ring& ring : rings_) {
    ring.call->Set(sys_util::ScopedFd());
    ring.err->Set(sys_util::ScopedFd());
  }
  features_ = 0;
  protocol_features_ = 0;
  restart_needed_ = false;
  start_failed_ = false;
}

}  // namespace devices::virtio::vhost_user

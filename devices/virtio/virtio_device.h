#ifndef DEVICES_VIRTIO_VIRTIO_DEVICE_H_
#define DEVICES_VIRTIO_VIRTIO_DEVICE_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "devices/virtio/split_queue.h"
#include "vmm/machine/guest_memory.h"

namespace devices::virtio {

// Device types (virtio 1.2 §5).
inline constexpr uint32_t kDeviceTypeNet = 1;
inline constexpr uint32_t kDeviceTypeBlock = 2;
inline constexpr uint32_t kDeviceTypeScsi = 8;

// Reserved feature bits (virtio 1.2 §6).
inline constexpr uint64_t kFeatureIndirectDesc = 1ull << 28;
inline constexpr uint64_t kFeatureEventIdx = 1ull << 29;
inline constexpr uint64_t kFeatureVersion1 = 1ull << 32;
inline constexpr uint64_t kFeatureAccessPlatform = 1ull << 33;
inline constexpr uint64_t kFeatureRingPacked = 1ull << 34;
inline constexpr uint64_t kFeatureRingReset = 1ull << 40;

// A queue's used-buffer notification to the driver (§2.3): on PCI, the queue's MSI-X vector
// (§4.1.5.3). Signal() honours MSI-X masking (a masked vector becomes pending and fires on unmask)
// and the vector the driver currently maps to the queue. Lock-free; call from any thread.
class VirtioInterrupt {
 public:
  virtual ~VirtioInterrupt() = default;
  virtual void Signal() = 0;
};

// What a device can tell its transport at any time, from any thread. Lock-free on the transport
// side, so a device may call these from an iothread that the transport's Reset() is waiting for.
class VirtioDeviceEvents {
 public:
  virtual ~VirtioDeviceEvents() = default;
  // The device-specific configuration changed (§2.5.1): bumps config_generation and sends a
  // configuration change notification (§4.1.5.4) once the driver is running.
  virtual void ConfigChanged() = 0;
  // The device hit an error it cannot recover from without a reset, typically a guest that broke
  // the rules (a bad ring, §2.7): sets DEVICE_NEEDS_RESET (§2.1.2) and, after DRIVER_OK, sends a
  // configuration change notification. The device keeps its queues quiet until reset.
  virtual void NeedsReset() = 0;
};

// One queue the driver enabled, as handed to Activate().
struct VirtioQueue {
  uint16_t index = 0;
  // Size and the three areas (already checked by SplitQueue::Create against guest memory), and
  // whether EVENT_IDX / INDIRECT_DESC were negotiated.
  QueueConfig config;
  // An eventfd (non-blocking) signalled on every driver notification for this queue (§4.1.5.2),
  // by KVM (ioeventfd) or by the transport's MMIO handler. The device's iothread polls it and
  // reads it to clear it. Owned by the transport; stays open until the transport is destroyed.
  int notify_fd = -1;
  // Owned by the transport; valid until the transport is destroyed.
  VirtioInterrupt* interrupt = nullptr;
};

// Everything a device needs to run, given on DRIVER_OK.
struct VirtioActivation {
  const vmm::GuestMemory* memory = nullptr;
  uint64_t features = 0;                 // negotiated (driver-accepted) features
  std::vector<VirtioQueue> queues;       // the enabled queues, by ascending index
  VirtioDeviceEvents* events = nullptr;  // owned by the transport; valid while it lives
};

// A virtio device behind a transport (VirtioPciTransport). The transport owns the device, does
// feature negotiation, the status state machine and queue set-up, and calls:
//
//   * the accessors at any time (they describe fixed properties);
//   * ReadConfig/WriteConfig on vCPU threads, possibly concurrently (the device locks);
//   * Activate() once the driver sets DRIVER_OK, then Reset() on device reset (status 0), on a
//     failed activation and when the transport shuts down. Reset() is also called when the device
//     was never activated (a reset before DRIVER_OK): it must then restore driver-writable
//     configuration to its defaults.
//
// Activate and Reset are called with the transport's lock held: the device's threads must not call
// into the transport except through VirtioInterrupt and VirtioDeviceEvents (which never lock).
class VirtioDevice {
 public:
  virtual ~VirtioDevice() = default;

  virtual uint32_t device_type() const = 0;
  // Device-specific feature bits (0-23 and 50+); the transport adds VERSION_1, EVENT_IDX and
  // INDIRECT_DESC and masks the other reserved bits (24-49), which it does not implement.
  virtual uint64_t device_features() const = 0;
  // One entry per virtqueue: its maximum size, a power of two in 1..32768. The transport presents
  // it in queue_size (§4.1.4.3) and refuses larger sizes. At most 2047 queues.
  virtual std::vector<uint16_t> queue_max_sizes() const = 0;

  // The device-specific configuration structure (§4.1.4.6), at most 4096 bytes. Accesses stay
  // inside [0, config_size()); the transport reads zero / drops bytes beyond it.
  virtual uint32_t config_size() const = 0;
  virtual void ReadConfig(uint32_t offset, std::span<uint8_t> data) = 0;
  virtual void WriteConfig(uint32_t offset, std::span<const uint8_t> data) = 0;

  // DRIVER_OK: start serving the queues (typically one iothread per request queue polling its
  // notify_fd). An error sets DEVICE_NEEDS_RESET; the transport then calls Reset().
  virtual absl::Status Activate(VirtioActivation activation) = 0;
  // Stop: when this returns, no thread of the device touches guest memory, a queue, a notify fd,
  // an interrupt or the events object from the last activation, and the device is back in its
  // initial state.
  virtual void Reset() = 0;
  // Stops serving the queues but keeps the device's state, so that Activate() can carry on where
  // it stopped (a vhost-user front end stops and restarts rings to swap the memory table or to
  // pause): when this returns, no thread of the device touches guest memory, a queue, a notify
  // fd, an interrupt or the events object from the last activation, and every chain the device
  // took from a ring has been made used. Devices without state worth keeping just reset.
  virtual void Stop() { Reset(); }
};

}  // namespace devices::virtio

#endif  // DEVICES_VIRTIO_VIRTIO_DEVICE_H_

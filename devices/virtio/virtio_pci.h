#ifndef DEVICES_VIRTIO_VIRTIO_PCI_H_
#define DEVICES_VIRTIO_VIRTIO_PCI_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/pci/pci_device.h"
#include "devices/virtio/virtio_device.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/ioevent_registrar.h"
#include "vmm/machine/msi.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices::virtio {

// Identity options of a VirtioPciTransport (outside the class so it can be a default argument).
struct VirtioPciOptions {
  uint16_t subsystem_vendor_id = 0x1af4;
  uint16_t subsystem_id = 0x1100;
  std::optional<uint32_t> class_code;  // default: by device type
};

// The virtio PCI transport, modern (non-transitional) interface only (virtio 1.2 §4.1).
//
// Identity (§4.1.2): vendor 0x1AF4, device 0x1040 + device type, revision 1, subsystem
// 0x1AF4:0x1100 by default (QEMU's; §4.1.2.1 wants a subsystem device ID >= 0x40), class code by
// device type (SCSI and block: mass storage/SCSI, as QEMU; net: Ethernet; else "other").
//
// BARs:
//   BAR 0+1 (64-bit memory, non-prefetchable: the ISR is read-to-clear, a side effect prefetchable
//   memory must not have; QEMU marks its modern BAR prefetchable, which works only because guests
//   map it uncached anyway). Placed below 4 GiB by BarAllocator while there is room.
//     0x0000 common configuration (§4.1.4.3), 0x3C bytes: through queue_reset
//     0x1000 ISR status (§4.1.4.5), 4 bytes (byte 0 is the ISR; read clears it)
//     0x2000 device-specific configuration (§4.1.4.6), VirtioDevice::config_size() bytes
//     0x3000 notifications (§4.1.4.4): queue i's doorbell at 0x3000 + 4 * i (queue_notify_off =
//            i, notify_off_multiplier = 4), a 2-byte write of anything
//   BAR 2 (32-bit memory): the MSI-X table at 0 and PBA at the next 4 KiB boundary, with
//   num_queues + 1 vectors (one per queue plus the configuration vector), as QEMU's exclusive
//   MSI-X BAR.
// Capabilities: MSI-X, then vendor-specific COMMON, NOTIFY, ISR, DEVICE (when the device has
// configuration) and PCI_CFG (§4.1.4.9, the configuration-space window into the BARs).
//
// Interrupts: MSI-X only. There is no INTx (Interrupt Pin 0), so a driver must enable MSI-X to get
// interrupts; the ISR bits are still set as §4.1.4.5 describes (bit 0 for queue interrupts while
// MSI-X is disabled, bit 1 for configuration changes), for drivers that poll.
//
// Notifications: each queue's doorbell is registered with `ioevents` (KVM_IOEVENTFD, 2-byte MMIO
// writes, no datamatch) whenever BAR 0 is mapped, and moved with it. Writes that still reach the
// MMIO handler (no registrar, registration failed, other access sizes, the PCI_CFG window) signal
// the same eventfd.
//
// Device status (§2.1, §3.1.1): writing 0 resets (the device's Reset() quiesces its threads; all
// queue state, feature selection and MSI-X vector mappings are cleared). FEATURES_OK does not stick
// when the driver accepted features that were not offered or omitted VERSION_1. The transport
// sets DEVICE_NEEDS_RESET (and sends a configuration interrupt after DRIVER_OK) when the driver
// breaks the rules: clearing status bits other than by reset, DRIVER_OK without FEATURES_OK,
// enabling a queue before FEATURES_OK or after DRIVER_OK, a queue size that is zero, not a power
// of two or above the maximum, ring addresses SplitQueue::Create refuses, or a failed Activate().
// Without VIRTIO_F_RING_RESET (not offered) queue_enable cannot be cleared and the queue fields of
// an enabled queue are read-only.
//
// Threading: vCPU threads reach the transport through configuration space and the BARs; the
// device's threads only through VirtioInterrupt/VirtioDeviceEvents, which are lock-free (atomics
// for the ISR, status bits, generation and vector numbers; MsixCapability::Trigger).
//
// Teardown: Shutdown() (or PciRootBus::Shutdown()) resets the device and unregisters the
// ioeventfds; it must run while the IoEventRegistrar is alive. The destructor resets the device
// but never touches the registrar or the buses.
class VirtioPciTransport : public pci::PciDevice {
 public:
  static constexpr int kConfigBar = 0;
  static constexpr int kMsixBar = 2;
  static constexpr uint64_t kCommonConfigOffset = 0x0000;
  static constexpr uint32_t kCommonConfigLength = 0x3c;
  static constexpr uint64_t kIsrOffset = 0x1000;
  static constexpr uint32_t kIsrLength = 4;
  static constexpr uint64_t kDeviceConfigOffset = 0x2000;
  static constexpr uint32_t kMaxDeviceConfigSize = 0x1000;
  static constexpr uint64_t kNotifyOffset = 0x3000;
  static constexpr uint32_t kNotifyOffMultiplier = 4;
  static constexpr uint16_t kPciDeviceIdBase = 0x1040;
  static constexpr uint16_t kNoVector = 0xffff;  // VIRTIO_MSI_NO_VECTOR
  static constexpr uint32_t kMaxQueues = 2047;   // + 1 configuration vector = 2048 MSI-X entries

  // Device status bits (§2.1).
  static constexpr uint8_t kStatusAcknowledge = 1;
  static constexpr uint8_t kStatusDriver = 2;
  static constexpr uint8_t kStatusDriverOk = 4;
  static constexpr uint8_t kStatusFeaturesOk = 8;
  static constexpr uint8_t kStatusNeedsReset = 64;
  static constexpr uint8_t kStatusFailed = 128;
  // ISR bits (§4.1.4.5).
  static constexpr uint8_t kIsrQueue = 1;
  static constexpr uint8_t kIsrConfig = 2;

  // Features the transport offers on top of the device's (the split queue implements them).
  static constexpr uint64_t kTransportFeatures =
      kFeatureVersion1 | kFeatureEventIdx | kFeatureIndirectDesc;

  using Options = VirtioPciOptions;

  // `memory` and `msi` must outlive the transport; `ioevents` (may be null: notifications then
  // always exit to the VMM) must outlive Shutdown(). Allocates num_queues + 1 MSI vectors.
  static absl::StatusOr<std::shared_ptr<VirtioPciTransport>> Create(
      std::unique_ptr<VirtioDevice> device, const vmm::GuestMemory& memory, vmm::MsiController& msi,
      vmm::IoEventRegistrar* ioevents, Options options = {});
  ~VirtioPciTransport() override;

  VirtioDevice& virtio_device() { return *device_; }
  uint16_t num_queues() const { return static_cast<uint16_t>(queues_.size()); }
  uint64_t offered_features() const { return offered_features_; }
  // Inspection (tests, debugging).
  uint8_t device_status() const;
  uint64_t driver_features() const;
  bool activated() const;
  int notify_fd(uint16_t queue) const;
  bool notify_registered(uint16_t queue) const;

 protected:
  void ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) override;
  void WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) override;
  void OnBarMapped(int bar, uint64_t address) override;
  void OnBarUnmapped(int bar, uint64_t address) override;
  void BeforeConfigRead(uint32_t offset, size_t size) override;
  void AfterConfigWrite(uint32_t offset, size_t size) override;
  void OnShutdown() override;

 private:
  class QueueInterrupt;
  class Events;

  struct Queue {
    uint16_t max_size = 0;
    sys_util::ScopedFd notify;  // eventfd, fixed for the transport's life
    std::unique_ptr<QueueInterrupt> interrupt;
    std::atomic<uint16_t> vector{kNoVector};  // MSI-X vector for the queue; written under mutex_
    // Guarded by the transport's mutex_ (not expressible on a nested struct).
    uint16_t size = 0;
    bool enabled = false;
    uint64_t descriptor_table = 0;
    uint64_t available_ring = 0;
    uint64_t used_ring = 0;
    std::optional<vmm::IoEventRegistrar::Spec> ioevent;  // registered doorbell, if any
  };

  VirtioPciTransport(const pci::PciIdentity& identity, std::unique_ptr<VirtioDevice> device,
                     const vmm::GuestMemory& memory, vmm::IoEventRegistrar* ioevents);
  absl::Status Initialize(vmm::MsiController& msi);

  // Common configuration (§4.1.4.3).
  void ReadCommonConfig(uint64_t offset, std::span<uint8_t> data);
  void WriteCommonConfig(uint64_t offset, std::span<const uint8_t> data);
  void WriteStatusLocked(uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void EnableQueueLocked(Queue& queue) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  bool ActivateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ResetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  Queue* SelectedQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint16_t ValidVector(uint16_t vector) const;

  // Lock-free paths shared with the device's threads.
  void SetNeedsReset();
  void SendConfigInterrupt();
  void SignalQueue(uint16_t index);
  void Notify(uint16_t index) const;

  void RegisterDoorbellsLocked(uint64_t bar_address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UnregisterDoorbellsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // The PCI_CFG window (§4.1.4.9): the bar/offset/length it selects, if valid.
  struct Window {
    int bar;
    uint32_t offset;
    uint32_t length;
  };
  std::optional<Window> PciCfgWindow() const;

  const std::unique_ptr<VirtioDevice> device_;
  const vmm::GuestMemory& memory_;
  vmm::IoEventRegistrar* const ioevents_;
  const uint64_t offered_features_;
  const uint32_t config_size_;
  std::vector<std::unique_ptr<Queue>> queues_;  // fixed after Initialize()
  std::unique_ptr<Events> events_;
  uint32_t pci_cfg_capability_ = 0;  // offset of the PCI_CFG capability

  mutable absl::Mutex mutex_;
  uint32_t device_feature_select_ ABSL_GUARDED_BY(mutex_) = 0;
  uint32_t driver_feature_select_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t driver_features_ ABSL_GUARDED_BY(mutex_) = 0;
  uint8_t status_ ABSL_GUARDED_BY(mutex_) = 0;  // without NEEDS_RESET (needs_reset_)
  uint16_t queue_select_ ABSL_GUARDED_BY(mutex_) = 0;
  bool activated_ ABSL_GUARDED_BY(mutex_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;

  std::atomic<uint16_t> config_vector_{kNoVector};
  std::atomic<uint8_t> isr_{0};
  std::atomic<uint8_t> config_generation_{0};
  std::atomic<bool> needs_reset_{false};
  std::atomic<bool> driver_ok_{false};
};

}  // namespace devices::virtio

#endif  // DEVICES_VIRTIO_VIRTIO_PCI_H_

#include "devices/virtio/virtio_pci.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <utility>

#include "absl/strings/str_format.h"
#include "devices/pci/msix.h"
#include "devices/pci/pci_regs.h"
#include "vmm/sys_util/byte_order.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::virtio {
namespace {

using pci::BarKind;

// Vendor-specific capability cfg_type values (§4.1.4).
constexpr uint8_t kCapCommonCfg = 1;
constexpr uint8_t kCapNotifyCfg = 2;
constexpr uint8_t kCapIsrCfg = 3;
constexpr uint8_t kCapDeviceCfg = 4;
constexpr uint8_t kCapPciCfg = 5;
// struct virtio_pci_cap is 16 bytes; the notify and PCI_CFG capabilities append 4 more.
constexpr uint8_t kVirtioCapLength = 16;
// Offsets inside struct virtio_pci_cap (from the capability's start).
constexpr uint32_t kCapBar = 4;
constexpr uint32_t kCapOffset = 8;
constexpr uint32_t kCapLengthField = 12;
constexpr uint32_t kPciCfgData = 16;

// Fields of struct virtio_pci_common_cfg (§4.1.4.3).
constexpr uint64_t kDeviceFeatureSelect = 0x00;
constexpr uint64_t kDeviceFeature = 0x04;
constexpr uint64_t kDriverFeatureSelect = 0x08;
constexpr uint64_t kDriverFeature = 0x0c;
constexpr uint64_t kConfigMsixVector = 0x10;
constexpr uint64_t kNumQueues = 0x12;
constexpr uint64_t kDeviceStatus = 0x14;
constexpr uint64_t kConfigGeneration = 0x15;
constexpr uint64_t kQueueSelect = 0x16;
constexpr uint64_t kQueueSize = 0x18;
constexpr uint64_t kQueueMsixVector = 0x1a;
constexpr uint64_t kQueueEnable = 0x1c;
constexpr uint64_t kQueueNotifyOff = 0x1e;
constexpr uint64_t kQueueDesc = 0x20;
constexpr uint64_t kQueueDriver = 0x28;
constexpr uint64_t kQueueDevice = 0x30;
constexpr uint64_t kQueueNotifyData = 0x38;
constexpr uint64_t kQueueReset = 0x3a;

// Feature bits 24..49 are reserved for the transport and queue mechanisms (§6, and 1.3's
// extension to 49); a device cannot offer them through us.
constexpr uint64_t kReservedFeatureMask = ((1ull << 50) - 1) & ~((1ull << 24) - 1);

constexpr uint64_t kPageSize = 0x1000;

uint64_t RoundUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

uint64_t NextPowerOfTwo(uint64_t value) {
  uint64_t result = 1;
  while (result < value) result <<= 1;
  return result;
}

template <size_t N>
void Put(std::array<uint8_t, N>& image, uint64_t offset, uint64_t value, size_t size) {
  sys_util::StoreLittleEndian(value, std::span<uint8_t>(image).subspan(offset, size));
}

uint32_t DefaultClassCode(uint32_t device_type) {
  switch (device_type) {
    case kDeviceTypeNet:
      return 0x020000;  // network controller / Ethernet
    case kDeviceTypeBlock:
    case kDeviceTypeScsi:
      return 0x010000;  // mass storage / SCSI
    default:
      return 0xff0000;  // unassigned class
  }
}

// The body (after ID and next pointer) of a struct virtio_pci_cap plus `extra` trailing bytes.
std::vector<uint8_t> VirtioCapability(uint8_t cfg_type, uint8_t bar, uint32_t offset,
                                      uint32_t length, std::span<const uint8_t> extra = {}) {
  std::vector<uint8_t> body(kVirtioCapLength - 2 + extra.size(), 0);
  body[0] = static_cast<uint8_t>(kVirtioCapLength + extra.size());  // cap_len
  body[1] = cfg_type;
  body[2] = bar;
  body[3] = 0;  // id
  sys_util::StoreLittleEndian(offset, std::span<uint8_t>(body).subspan(6, 4));
  sys_util::StoreLittleEndian(length, std::span<uint8_t>(body).subspan(10, 4));
  std::copy(extra.begin(), extra.end(), body.begin() + 14);
  return body;
}

}  // namespace

// The per-queue interrupt handed to the device.
class VirtioPciTransport::QueueInterrupt : public VirtioInterrupt {
 public:
  QueueInterrupt(VirtioPciTransport& transport, uint16_t index)
      : transport_(transport), index_(index) {}
  void Signal() override { transport_.SignalQueue(index_); }

 private:
  VirtioPciTransport& transport_;
  const uint16_t index_;
};

class VirtioPciTransport::Events : public VirtioDeviceEvents {
 public:
  explicit Events(VirtioPciTransport& transport) : transport_(transport) {}
  void ConfigChanged() override {
    transport_.config_generation_.fetch_add(1);
    if (transport_.driver_ok_.load()) transport_.SendConfigInterrupt();
  }
  void NeedsReset() override { transport_.SetNeedsReset(); }

 private:
  VirtioPciTransport& transport_;
};

absl::StatusOr<std::shared_ptr<VirtioPciTransport>> VirtioPciTransport::Create(
    std::unique_ptr<VirtioDevice> device, const vmm::GuestMemory& memory, vmm::MsiController& msi,
    vmm::IoEventRegistrar* ioevents, Options options) {
  if (device == nullptr) return absl::InvalidArgumentError("virtio-pci: no device");
  const uint32_t type = device->device_type();
  if (type == 0 || type > 0xffff - kPciDeviceIdBase) {
    return absl::InvalidArgumentError(absl::StrFormat("virtio-pci: bad device type %u", type));
  }
  const pci::PciIdentity identity{
      .vendor_id = 0x1af4,
      .device_id = static_cast<uint16_t>(kPciDeviceIdBase + type),
      .class_code = options.class_code.value_or(DefaultClassCode(type)),
      .revision = 1,  // §4.1.2.1: non-transitional devices have revision >= 1
      .subsystem_vendor_id = options.subsystem_vendor_id,
      .subsystem_id = options.subsystem_id,
  };
  auto transport = std::shared_ptr<VirtioPciTransport>(
      new VirtioPciTransport(identity, std::move(device), memory, ioevents));
  RETURN_IF_ERROR(transport->Initialize(msi));
  return transport;
}

VirtioPciTransport::VirtioPciTransport(const pci::PciIdentity& identity,
                                       std::unique_ptr<VirtioDevice> device,
                                       const vmm::GuestMemory& memory,
                                       vmm::IoEventRegistrar* ioevents)
    : PciDevice(identity),
      device_(std::move(device)),
      memory_(memory),
      ioevents_(ioevents),
      offered_features_((device_->device_features() & ~kReservedFeatureMask) | kTransportFeatures),
      config_size_(device_->config_size()),
      events_(std::make_unique<Events>(*this)) {}

VirtioPciTransport::~VirtioPciTransport() {
  absl::MutexLock lock(&mutex_);
  if (!shut_down_) device_->Reset();
}

absl::Status VirtioPciTransport::Initialize(vmm::MsiController& msi) {
  const std::vector<uint16_t> max_sizes = device_->queue_max_sizes();
  if (max_sizes.size() > kMaxQueues) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "virtio-pci: %u queues; at most %u are supported", max_sizes.size(), kMaxQueues));
  }
  if (config_size_ > kMaxDeviceConfigSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("virtio-pci: device configuration of %u bytes exceeds %u", config_size_,
                        kMaxDeviceConfigSize));
  }
  for (size_t i = 0; i < max_sizes.size(); ++i) {
    if (!std::has_single_bit(max_sizes[i]) || max_sizes[i] > 32768) {
      return absl::InvalidArgumentError(
          absl::StrFormat("virtio-pci: queue %u maximum size %u is not a power of two in 1..32768",
                          i, max_sizes[i]));
    }
    auto queue = std::make_unique<Queue>();
    queue->max_size = max_sizes[i];
    queue->size = max_sizes[i];
    queue->notify.Reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!queue->notify.valid()) return absl::InternalError("virtio-pci: eventfd failed");
    queue->interrupt = std::make_unique<QueueInterrupt>(*this, static_cast<uint16_t>(i));
    queues_.push_back(std::move(queue));
  }

  // BAR 0: the virtio structures. The notify area has one 4-byte slot per queue.
  const uint64_t notify_length =
      std::max<uint64_t>(4, uint64_t{kNotifyOffMultiplier} * queues_.size());
  const uint64_t bar0_size = NextPowerOfTwo(kNotifyOffset + RoundUp(notify_length, kPageSize));
  RETURN_IF_ERROR(
      DeclareBar(kConfigBar, pci::BarSpec{BarKind::kMmio64, bar0_size, /*prefetchable=*/false}));

  // BAR 2: MSI-X table and PBA.
  const uint32_t vectors = static_cast<uint32_t>(queues_.size()) + 1;
  ASSIGN_OR_RETURN(auto msix, pci::MsixCapability::Create(msi, vectors));
  const uint64_t pba_offset = RoundUp(msix->table_bytes(), kPageSize);
  const uint64_t bar2_size = NextPowerOfTwo(pba_offset + RoundUp(msix->pba_bytes(), kPageSize));
  RETURN_IF_ERROR(DeclareBar(kMsixBar, pci::BarSpec{BarKind::kMmio32, bar2_size, false}));
  RETURN_IF_ERROR(AddMsixCapability(std::move(msix), kMsixBar, 0, pba_offset));

  // The vendor-specific capabilities (§4.1.4).
  auto add = [this](std::vector<uint8_t> body, std::span<const uint8_t> mask = {}) {
    return AddCapability(pci::kCapabilityIdVendorSpecific, body, mask);
  };
  RETURN_IF_ERROR(
      add(VirtioCapability(kCapCommonCfg, kConfigBar, kCommonConfigOffset, kCommonConfigLength))
          .status());
  std::array<uint8_t, 4> multiplier{};
  sys_util::StoreLittleEndian(kNotifyOffMultiplier, multiplier);
  RETURN_IF_ERROR(add(VirtioCapability(kCapNotifyCfg, kConfigBar, kNotifyOffset,
                                       static_cast<uint32_t>(notify_length), multiplier))
                      .status());
  RETURN_IF_ERROR(add(VirtioCapability(kCapIsrCfg, kConfigBar, kIsrOffset, kIsrLength)).status());
  if (config_size_ > 0) {
    RETURN_IF_ERROR(
        add(VirtioCapability(kCapDeviceCfg, kConfigBar, kDeviceConfigOffset, config_size_))
            .status());
  }
  // §4.1.4.9: cap.bar, cap.offset, cap.length and pci_cfg_data are writable by the driver.
  const std::array<uint8_t, 4> zero{};
  std::vector<uint8_t> pci_cfg_body = VirtioCapability(kCapPciCfg, 0, 0, 0, zero);
  std::vector<uint8_t> pci_cfg_mask(pci_cfg_body.size(), 0);
  pci_cfg_mask[kCapBar - 2] = 0xff;
  for (uint32_t i = 0; i < 4; ++i) {
    pci_cfg_mask[kCapOffset - 2 + i] = 0xff;
    pci_cfg_mask[kCapLengthField - 2 + i] = 0xff;
    pci_cfg_mask[kPciCfgData - 2 + i] = 0xff;
  }
  ASSIGN_OR_RETURN(pci_cfg_capability_, add(pci_cfg_body, pci_cfg_mask));
  return absl::OkStatus();
}

uint8_t VirtioPciTransport::device_status() const {
  absl::MutexLock lock(&mutex_);
  return status_ | (needs_reset_.load() ? kStatusNeedsReset : 0);
}

uint64_t VirtioPciTransport::driver_features() const {
  absl::MutexLock lock(&mutex_);
  return driver_features_;
}

bool VirtioPciTransport::activated() const {
  absl::MutexLock lock(&mutex_);
  return activated_;
}

int VirtioPciTransport::notify_fd(uint16_t queue) const {
  return queue < queues_.size() ? queues_[queue]->notify.get() : -1;
}

bool VirtioPciTransport::notify_registered(uint16_t queue) const {
  absl::MutexLock lock(&mutex_);
  return queue < queues_.size() && queues_[queue]->ioevent.has_value();
}

uint16_t VirtioPciTransport::ValidVector(uint16_t vector) const {
  // §4.1.5.1.2: a mapping the device cannot satisfy reads back as NO_VECTOR.
  return vector < msix()->vector_count() ? vector : kNoVector;
}

// --- Lock-free paths -----------------------------------------------------------------------------

void VirtioPciTransport::SendConfigInterrupt() {
  // §4.1.4.5.1: the configuration bit is set before the notification.
  isr_.fetch_or(kIsrConfig);
  const uint16_t vector = config_vector_.load();
  if (vector != kNoVector) msix()->Trigger(vector);
}

void VirtioPciTransport::SetNeedsReset() {
  // §2.1.2: set DEVICE_NEEDS_RESET; after DRIVER_OK also notify the driver.
  if (needs_reset_.exchange(true)) return;
  if (driver_ok_.load()) SendConfigInterrupt();
}

void VirtioPciTransport::SignalQueue(uint16_t index) {
  if (index >= queues_.size()) return;
  // §4.1.5.3: with MSI-X disabled the ISR queue bit (and INTx, which we do not have) signal it.
  if (!msix()->enabled()) isr_.fetch_or(kIsrQueue);
  const uint16_t vector = queues_[index]->vector.load();
  if (vector != kNoVector) msix()->Trigger(vector);
}

void VirtioPciTransport::Notify(uint16_t index) const {
  if (index >= queues_.size()) return;
  sys_util::SignalEventFd(queues_[index]->notify.get());
}

// --- BAR 0 ---------------------------------------------------------------------------------------

void VirtioPciTransport::ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) {
  std::fill(data.begin(), data.end(), 0);
  if (bar != kConfigBar) return;
  if (offset < kIsrOffset) {
    ReadCommonConfig(offset - kCommonConfigOffset, data);
  } else if (offset < kDeviceConfigOffset) {
    // §4.1.4.5: reading the ISR clears it.
    if (offset == kIsrOffset) data[0] = isr_.exchange(0);
  } else if (offset < kNotifyOffset) {
    const uint64_t at = offset - kDeviceConfigOffset;
    if (at < config_size_) {
      const size_t length = std::min<uint64_t>(data.size(), config_size_ - at);
      device_->ReadConfig(static_cast<uint32_t>(at), data.first(length));
    }
  }
  // Notify area and beyond read as zero.
}

void VirtioPciTransport::WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) {
  if (bar != kConfigBar) return;
  if (offset < kIsrOffset) {
    WriteCommonConfig(offset - kCommonConfigOffset, data);
  } else if (offset < kDeviceConfigOffset) {
    // The ISR is read-only.
  } else if (offset < kNotifyOffset) {
    const uint64_t at = offset - kDeviceConfigOffset;
    if (at < config_size_) {
      const size_t length = std::min<uint64_t>(data.size(), config_size_ - at);
      device_->WriteConfig(static_cast<uint32_t>(at), data.first(length));
    }
  } else {
    // §4.1.5.2: the doorbell of queue (offset - notify offset) / multiplier; the value written
    // (the queue index, without VIRTIO_F_NOTIFICATION_DATA) is not needed.
    const uint64_t slot = (offset - kNotifyOffset) / kNotifyOffMultiplier;
    if (slot < queues_.size()) Notify(static_cast<uint16_t>(slot));
  }
}

// --- Common configuration ------------------------------------------------------------------------

VirtioPciTransport::Queue* VirtioPciTransport::SelectedQueueLocked() {
  return queue_select_ < queues_.size() ? queues_[queue_select_].get() : nullptr;
}

void VirtioPciTransport::ReadCommonConfig(uint64_t offset, std::span<uint8_t> data) {
  std::array<uint8_t, kCommonConfigLength> image{};
  {
    absl::MutexLock lock(&mutex_);
    Put(image, kDeviceFeatureSelect, device_feature_select_, 4);
    Put(image, kDeviceFeature,
        device_feature_select_ < 2 ? offered_features_ >> (32 * device_feature_select_) : 0, 4);
    Put(image, kDriverFeatureSelect, driver_feature_select_, 4);
    Put(image, kDriverFeature,
        driver_feature_select_ < 2 ? driver_features_ >> (32 * driver_feature_select_) : 0, 4);
    Put(image, kConfigMsixVector, config_vector_.load(), 2);
    Put(image, kNumQueues, queues_.size(), 2);
    Put(image, kDeviceStatus, status_ | (needs_reset_.load() ? kStatusNeedsReset : 0), 1);
    Put(image, kConfigGeneration, config_generation_.load(), 1);
    Put(image, kQueueSelect, queue_select_, 2);
    if (const Queue* queue = SelectedQueueLocked(); queue != nullptr) {
      Put(image, kQueueSize, queue->size, 2);
      Put(image, kQueueMsixVector, queue->vector.load(), 2);
      Put(image, kQueueEnable, queue->enabled ? 1 : 0, 2);
      Put(image, kQueueNotifyOff, queue_select_, 2);
      Put(image, kQueueDesc, queue->descriptor_table, 8);
      Put(image, kQueueDriver, queue->available_ring, 8);
      Put(image, kQueueDevice, queue->used_ring, 8);
    } else {
      // §4.1.4.3.1: an unavailable queue presents queue_size 0.
      Put(image, kQueueMsixVector, kNoVector, 2);
    }
    // queue_notify_data and queue_reset: their features are not offered; they read 0.
    static_assert(kQueueNotifyData + 2 == kQueueReset && kQueueReset + 2 == kCommonConfigLength);
  }
  // Lenient about widths on reads (any bytes of the structure); writes need the field's width.
  for (size_t i = 0; i < data.size(); ++i) {
    if (offset + i < image.size()) data[i] = image[offset + i];
  }
}

void VirtioPciTransport::WriteCommonConfig(uint64_t offset, std::span<const uint8_t> data) {
  const size_t size = data.size();
  const uint64_t value = sys_util::LoadLittleEndian(data);
  absl::MutexLock lock(&mutex_);
  if (shut_down_) return;
  // §4.1.3.1: drivers use the field's natural width; 64-bit fields may be written as two halves.
  switch (offset) {
    case kDeviceFeatureSelect:
      if (size == 4) device_feature_select_ = static_cast<uint32_t>(value);
      return;
    case kDriverFeatureSelect:
      if (size == 4) driver_feature_select_ = static_cast<uint32_t>(value);
      return;
    case kDriverFeature:
      // §3.1.1 / §2.2: features are fixed once FEATURES_OK is set. Only words 0 and 1 exist.
      if (size == 4 && (status_ & kStatusFeaturesOk) == 0 && driver_feature_select_ < 2) {
        const unsigned shift = 32 * driver_feature_select_;
        driver_features_ = (driver_features_ & ~(0xffffffffull << shift)) | (value << shift);
      }
      return;
    case kConfigMsixVector:
      if (size == 2) config_vector_.store(ValidVector(static_cast<uint16_t>(value)));
      return;
    case kDeviceStatus:
      if (size == 1) WriteStatusLocked(static_cast<uint8_t>(value));
      return;
    case kQueueSelect:
      if (size == 2) queue_select_ = static_cast<uint16_t>(value);
      return;
    default:
      break;
  }
  Queue* queue = SelectedQueueLocked();
  if (queue == nullptr) return;
  if (offset == kQueueMsixVector) {
    if (size == 2) queue->vector.store(ValidVector(static_cast<uint16_t>(value)));
    return;
  }
  if (offset == kQueueEnable) {
    // §4.1.4.3.2: the driver must not write 0; without RING_RESET a queue stays enabled.
    if (size == 2 && value == 1 && !queue->enabled) EnableQueueLocked(*queue);
    return;
  }
  if (queue->enabled) return;  // the configuration of an enabled queue is fixed
  if (offset == kQueueSize) {
    if (size == 2) queue->size = static_cast<uint16_t>(value);  // checked on enable
    return;
  }
  for (auto [field, target] : {std::pair{kQueueDesc, &queue->descriptor_table},
                               std::pair{kQueueDriver, &queue->available_ring},
                               std::pair{kQueueDevice, &queue->used_ring}}) {
    if (offset == field && size == 8) {
      *target = value;
    } else if (offset == field && size == 4) {
      *target = (*target & ~0xffffffffull) | value;
    } else if (offset == field + 4 && size == 4) {
      *target = (*target & 0xffffffffull) | (value << 32);
    }
  }
  // Read-only fields (device_feature, num_queues, config_generation, queue_notify_off,
  // queue_notify_data) and queue_reset (RING_RESET not offered) ignore writes.
}

void VirtioPciTransport::WriteStatusLocked(uint8_t value) {
  if (value == 0) {
    ResetLocked();
    return;
  }
  // DEVICE_NEEDS_RESET belongs to the device; a driver writing back what it read is harmless.
  uint8_t status = value & ~kStatusNeedsReset;
  const uint8_t old = status_;
  if ((old & ~status) != 0) {
    // §2.1.1: "The driver MUST NOT clear a device status bit." Only a reset does that.
    SetNeedsReset();
    return;
  }
  const uint8_t added = status & ~old;
  if ((added & kStatusFeaturesOk) != 0) {
    // §3.1.1 step 5-6 and §2.2.1: accept only offered features, and VERSION_1 is required of a
    // modern driver (§6.1). A refused FEATURES_OK simply does not stick.
    const bool subset = (driver_features_ & ~offered_features_) == 0;
    const bool version1 = (driver_features_ & kFeatureVersion1) != 0;
    if (!subset || !version1) status &= ~kStatusFeaturesOk;
  }
  if ((added & kStatusDriverOk) != 0) {
    if ((status & kStatusFeaturesOk) == 0 || shut_down_) {
      status &= ~kStatusDriverOk;
      status_ = status;
      SetNeedsReset();
      return;
    }
    status_ = status;
    driver_ok_.store(true);
    if (!ActivateLocked()) SetNeedsReset();
    return;
  }
  status_ = status;
}

bool VirtioPciTransport::ActivateLocked() {
  VirtioActivation activation;
  activation.memory = &memory_;
  activation.features = driver_features_;
  activation.events = events_.get();
  for (size_t i = 0; i < queues_.size(); ++i) {
    const Queue& queue = *queues_[i];
    if (!queue.enabled) continue;
    activation.queues.push_back(VirtioQueue{
        .index = static_cast<uint16_t>(i),
        .config = QueueConfig{.size = queue.size,
                              .descriptor_table = vmm::GuestAddress(queue.descriptor_table),
                              .available_ring = vmm::GuestAddress(queue.available_ring),
                              .used_ring = vmm::GuestAddress(queue.used_ring),
                              .event_idx = (driver_features_ & kFeatureEventIdx) != 0,
                              .indirect = (driver_features_ & kFeatureIndirectDesc) != 0},
        .notify_fd = queue.notify.get(),
        .interrupt = queue.interrupt.get(),
    });
  }
  absl::Status status = device_->Activate(std::move(activation));
  if (!status.ok()) {
    // Undo whatever the device started; the driver must reset (§2.1.2).
    device_->Reset();
    return false;
  }
  activated_ = true;
  return true;
}

void VirtioPciTransport::EnableQueueLocked(Queue& queue) {
  // §3.1.1 step 7: queues are set up after FEATURES_OK and before DRIVER_OK.
  if ((status_ & kStatusFeaturesOk) == 0 || (status_ & kStatusDriverOk) != 0) {
    SetNeedsReset();
    return;
  }
  // §2.7: a split queue's size is a power of two, and at most what the device presents.
  if (!std::has_single_bit(queue.size) || queue.size > queue.max_size) {
    SetNeedsReset();
    return;
  }
  const QueueConfig config{.size = queue.size,
                           .descriptor_table = vmm::GuestAddress(queue.descriptor_table),
                           .available_ring = vmm::GuestAddress(queue.available_ring),
                           .used_ring = vmm::GuestAddress(queue.used_ring),
                           .event_idx = (driver_features_ & kFeatureEventIdx) != 0,
                           .indirect = (driver_features_ & kFeatureIndirectDesc) != 0};
  // Alignment and placement of the three areas inside guest memory.
  if (!SplitQueue::Create(memory_, config).ok()) {
    SetNeedsReset();
    return;
  }
  queue.enabled = true;
}

void VirtioPciTransport::ResetLocked() {
  // The device stops its threads first, so nothing it does afterwards can set bits we clear below.
  device_->Reset();
  activated_ = false;
  driver_ok_.store(false);
  status_ = 0;
  device_feature_select_ = 0;
  driver_feature_select_ = 0;
  driver_features_ = 0;
  queue_select_ = 0;
  // §4.1.5.1.2: "The device MUST have all queue and configuration change events unmapped upon
  // reset."
  config_vector_.store(kNoVector);
  for (auto& queue : queues_) {
    queue->size = queue->max_size;
    queue->enabled = false;
    queue->descriptor_table = 0;
    queue->available_ring = 0;
    queue->used_ring = 0;
    queue->vector.store(kNoVector);
    // Drop notifications from before the reset so the next activation does not see stale kicks.
    sys_util::DrainEventFd(queue->notify.get());
  }
  isr_.store(0);
  needs_reset_.store(false);
}

// --- Doorbells (ioeventfd) -----------------------------------------------------------------------

void VirtioPciTransport::RegisterDoorbellsLocked(uint64_t bar_address) {
  if (ioevents_ == nullptr) return;
  for (size_t i = 0; i < queues_.size(); ++i) {
    Queue& queue = *queues_[i];
    const vmm::IoEventRegistrar::Spec spec{
        .address = bar_address + kNotifyOffset + i * kNotifyOffMultiplier,
        .length = 2,  // the 16-bit queue index write of §4.1.5.2
        .pio = false,
        .datamatch = std::nullopt,
    };
    // On failure the MMIO handler still serves the doorbell, just with an exit.
    if (ioevents_->Register(queue.notify.get(), spec).ok()) queue.ioevent = spec;
  }
}

void VirtioPciTransport::UnregisterDoorbellsLocked() {
  for (auto& queue : queues_) {
    if (!queue->ioevent) continue;
    (void)ioevents_->Unregister(queue->notify.get(), *queue->ioevent);
    queue->ioevent.reset();
  }
}

void VirtioPciTransport::OnBarMapped(int bar, uint64_t address) {
  if (bar != kConfigBar) return;
  absl::MutexLock lock(&mutex_);
  UnregisterDoorbellsLocked();
  RegisterDoorbellsLocked(address);
}

void VirtioPciTransport::OnBarUnmapped(int bar, uint64_t /*address*/) {
  if (bar != kConfigBar) return;
  absl::MutexLock lock(&mutex_);
  UnregisterDoorbellsLocked();
}

void VirtioPciTransport::OnShutdown() {
  absl::MutexLock lock(&mutex_);
  UnregisterDoorbellsLocked();  // normally already done by the BAR unmapping
  ResetLocked();
  shut_down_ = true;
}

// --- PCI configuration access capability (§4.1.4.9) ----------------------------------------------

std::optional<VirtioPciTransport::Window> VirtioPciTransport::PciCfgWindow() const {
  const uint32_t bar = ReadConfigRaw(pci_cfg_capability_ + kCapBar, 1);
  const uint32_t offset = ReadConfigRaw(pci_cfg_capability_ + kCapOffset, 4);
  const uint32_t length = ReadConfigRaw(pci_cfg_capability_ + kCapLengthField, 4);
  // The driver must use length 1, 2 or 4 at an offset aligned to it; anything else does nothing.
  if (bar >= pci::kNumBars || (length != 1 && length != 2 && length != 4) || offset % length != 0) {
    return std::nullopt;
  }
  return Window{static_cast<int>(bar), offset, length};
}

void VirtioPciTransport::BeforeConfigRead(uint32_t offset, size_t size) {
  const uint32_t data_offset = pci_cfg_capability_ + kPciCfgData;
  if (pci_cfg_capability_ == 0 || offset >= data_offset + 4 || offset + size <= data_offset) return;
  const std::optional<Window> window = PciCfgWindow();
  if (!window) return;
  // "Upon detecting driver read access to pci_cfg_data, the device MUST execute a read access of
  // length cap.length at offset cap.offset at BAR selected by cap.bar and store the first
  // cap.length bytes in pci_cfg_data."
  std::array<uint8_t, 4> bytes{};
  ReadBarRegion(window->bar, window->offset, std::span<uint8_t>(bytes.data(), window->length));
  WriteConfigRaw(data_offset, static_cast<uint32_t>(sys_util::LoadLittleEndian(bytes)), 4);
}

void VirtioPciTransport::AfterConfigWrite(uint32_t offset, size_t size) {
  const uint32_t data_offset = pci_cfg_capability_ + kPciCfgData;
  if (pci_cfg_capability_ == 0 || offset >= data_offset + 4 || offset + size <= data_offset) return;
  const std::optional<Window> window = PciCfgWindow();
  if (!window) return;
  // "...execute a write access at offset cap.offset at BAR selected by cap.bar using the first
  // cap.length bytes from pci_cfg_data."
  const uint32_t value = ReadConfigRaw(data_offset, 4);
  std::array<uint8_t, 4> bytes;
  sys_util::StoreLittleEndian(value, bytes);
  WriteBarRegion(window->bar, window->offset,
                 std::span<const uint8_t>(bytes.data(), window->length));
}

}  // namespace devices::virtio

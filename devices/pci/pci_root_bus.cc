#include "devices/pci/pci_root_bus.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::pci {
namespace {

// CONFIG_ADDRESS fields (PCI 3.0 §3.2.2.3.2, figure 3-2).
constexpr uint32_t kBusShift = 16;
constexpr uint32_t kDeviceShift = 11;
constexpr uint32_t kFunctionShift = 8;
constexpr uint32_t kRegisterMask = 0xfc;
constexpr uint32_t kExtendedRegisterMask = 0x0f000000;  // AMD: register bits 11:8

size_t SlotIndex(uint8_t device_number, uint8_t function) {
  return size_t{device_number} * kMaxFunctions + function;
}

uint32_t MakeAddress(uint8_t bus, uint8_t device_number, uint8_t function, uint32_t offset) {
  return PciRootBus::kConfigAddressEnable | uint32_t{bus} << kBusShift |
         uint32_t{device_number} << kDeviceShift | uint32_t{function} << kFunctionShift |
         (offset & kRegisterMask);
}

}  // namespace

PciHostBridge::PciHostBridge()
    : PciDevice(PciIdentity{.vendor_id = kVendorIntel,
                            .device_id = kDevice82441,
                            .class_code = kClassHostBridge,
                            .revision = 0x02,
                            // As QEMU's machines report (Red Hat / QEMU subsystem).
                            .subsystem_vendor_id = 0x1af4,
                            .subsystem_id = 0x1100}) {
  // PAM0 has only the F segment's nibble; PAM1-PAM6 two segments each (bit 2 of each nibble is
  // reserved on the 82441FX).
  SetConfigWriteMask(kPam0, 0x30, 1);
  for (uint32_t i = 1; i < kPamRegisters; ++i) SetConfigWriteMask(kPam0 + i, 0x33, 1);
  absl::MutexLock lock(&pam_mutex_);
  last_segments_ = PamSegments();
}

std::array<PciHostBridge::PamSegment, PciHostBridge::kPamSegments> PciHostBridge::PamSegments()
    const {
  std::array<PamSegment, kPamSegments> segments;
  constexpr uint32_t kPiece = 0x4000;
  for (uint32_t i = 0; i < kPamSegments - 1; ++i) {
    // PAM1 bits 1:0 for 0xc0000, bits 5:4 for 0xc4000, PAM2 for 0xc8000 and 0xcc000, ...
    const uint32_t value = ReadConfigRaw(kPam0 + 1 + i / 2, 1) >> (i % 2 == 0 ? 0 : 4);
    segments[i] = {0xc0000 + i * kPiece, kPiece, (value & 1) != 0, (value & 2) != 0};
  }
  const uint32_t f_segment = ReadConfigRaw(kPam0, 1) >> 4;
  segments[kPamSegments - 1] = {0xf0000, 0x10000, (f_segment & 1) != 0, (f_segment & 2) != 0};
  return segments;
}

void PciHostBridge::SetPamListener(PamListener listener) {
  absl::MutexLock lock(&pam_mutex_);
  pam_listener_ = std::move(listener);
}

void PciHostBridge::AfterConfigWrite(uint32_t offset, size_t size) {
  if (offset + size <= kPam0 || offset >= kPam0 + kPamRegisters) return;
  // The registers read, compared and reported under one lock: two vCPUs writing at once are heard
  // in the order their states were read, so the listener's last call is the registers' state.
  absl::MutexLock lock(&pam_mutex_);
  const std::array<PamSegment, kPamSegments> segments = PamSegments();
  if (segments == last_segments_) return;
  last_segments_ = segments;
  if (pam_listener_) pam_listener_(segments);
}

void PciHostBridge::ReadBar(int, uint64_t, std::span<uint8_t> data) {
  std::fill(data.begin(), data.end(), 0);
}

PciRootBus::PciRootBus(vmm::Bus& pio_bus, vmm::Bus& mmio_bus)
    : pio_bus_(pio_bus), mmio_bus_(mmio_bus), host_bridge_(std::make_shared<PciHostBridge>()) {
  host_bridge_->Attach(pio_bus_, mmio_bus_);
  absl::MutexLock lock(&mutex_);
  functions_[SlotIndex(0, 0)] = host_bridge_;
}

absl::StatusOr<std::shared_ptr<PciRootBus>> PciRootBus::Create(vmm::Bus& pio_bus,
                                                               vmm::Bus& mmio_bus) {
  auto root = std::make_shared<PciRootBus>(pio_bus, mmio_bus);
  RETURN_IF_ERROR(pio_bus.Register(kConfigAddressPort, kPortCount, root));
  return root;
}

absl::Status PciRootBus::AddDevice(uint8_t device_number, uint8_t function,
                                   std::shared_ptr<PciDevice> device) {
  if (device == nullptr) return absl::InvalidArgumentError("no device");
  if (device_number >= kMaxDevices || function >= kMaxFunctions) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PCI address 00:%02x.%x is out of range", device_number, function));
  }
  std::shared_ptr<PciDevice> function0;
  bool multi_function = false;
  {
    absl::MutexLock lock(&mutex_);
    std::shared_ptr<PciDevice>& slot = functions_[SlotIndex(device_number, function)];
    if (slot != nullptr) {
      return absl::AlreadyExistsError(
          absl::StrFormat("PCI address 00:%02x.%x is taken", device_number, function));
    }
    slot = device;
    int present = 0;
    for (uint8_t f = 0; f < kMaxFunctions; ++f) {
      if (functions_[SlotIndex(device_number, f)] != nullptr) ++present;
    }
    function0 = functions_[SlotIndex(device_number, 0)];
    multi_function = present > 1;
  }
  // §6.2.1: function 0's Header Type bit 7 tells software to scan functions 1..7.
  if (function0 != nullptr) function0->SetMultiFunction(multi_function);
  device->Attach(pio_bus_, mmio_bus_);
  return absl::OkStatus();
}

absl::StatusOr<uint8_t> PciRootBus::AddDevice(std::shared_ptr<PciDevice> device) {
  for (uint8_t number = 0; number < kMaxDevices; ++number) {
    bool free = true;
    {
      absl::MutexLock lock(&mutex_);
      for (uint8_t f = 0; f < kMaxFunctions; ++f) {
        if (functions_[SlotIndex(number, f)] != nullptr) free = false;
      }
    }
    if (!free) continue;
    absl::Status status = AddDevice(number, 0, device);
    if (status.ok()) return number;
    if (!absl::IsAlreadyExists(status)) return status;
  }
  return absl::ResourceExhaustedError("no free PCI device number on bus 0");
}

std::shared_ptr<PciDevice> PciRootBus::GetDevice(uint8_t device_number, uint8_t function) const {
  if (device_number >= kMaxDevices || function >= kMaxFunctions) return nullptr;
  absl::MutexLock lock(&mutex_);
  return functions_[SlotIndex(device_number, function)];
}

void PciRootBus::Shutdown() {
  std::vector<std::shared_ptr<PciDevice>> devices;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& device : functions_) {
      if (device != nullptr) devices.push_back(device);
    }
  }
  for (const auto& device : devices) device->Shutdown();
}

vmm::DeviceDescription PciRootBus::Describe() {
  return vmm::DeviceDescription{
      .node_name = "pci",
      .compatible = {"microvm,pci-conf1"},
      .space = vmm::DeviceDescription::AddressSpace::kPortIo,
      .ranges = {{kConfigAddressPort, kPortCount}},
  };
}

std::shared_ptr<PciDevice> PciRootBus::Select(uint32_t address, uint32_t* offset) const {
  if ((address & kConfigAddressEnable) == 0) return nullptr;
  if ((address & kExtendedRegisterMask) != 0) return nullptr;  // no extended configuration space
  const uint32_t bus = (address >> kBusShift) & 0xff;
  if (bus != 0) return nullptr;
  const uint32_t device_number = (address >> kDeviceShift) & 0x1f;
  const uint32_t function = (address >> kFunctionShift) & 0x7;
  *offset = address & kRegisterMask;
  absl::MutexLock lock(&mutex_);
  return functions_[SlotIndex(device_number, function)];
}

void PciRootBus::ReadConfig(uint8_t bus, uint8_t device_number, uint8_t function, uint32_t offset,
                            std::span<uint8_t> data) const {
  uint32_t dword = 0;
  std::shared_ptr<PciDevice> device =
      device_number < kMaxDevices && function < kMaxFunctions && offset < kConfigSpaceSize
          ? Select(MakeAddress(bus, device_number, function, offset), &dword)
          : nullptr;
  if (device == nullptr) {
    std::fill(data.begin(), data.end(), 0xff);
    return;
  }
  device->ReadConfig(dword + (offset & 3), data);
}

void PciRootBus::WriteConfig(uint8_t bus, uint8_t device_number, uint8_t function, uint32_t offset,
                             std::span<const uint8_t> data) {
  uint32_t dword = 0;
  std::shared_ptr<PciDevice> device =
      device_number < kMaxDevices && function < kMaxFunctions && offset < kConfigSpaceSize
          ? Select(MakeAddress(bus, device_number, function, offset), &dword)
          : nullptr;
  if (device != nullptr) device->WriteConfig(dword + (offset & 3), data);
}

void PciRootBus::Read(uint64_t offset, std::span<uint8_t> data) {
  uint32_t address;
  {
    absl::MutexLock lock(&mutex_);
    address = config_address_;
  }
  if (offset < 4) {
    // CONFIG_ADDRESS: return the latched bytes the access covers.
    if (offset + data.size() > 4) {
      std::fill(data.begin(), data.end(), 0xff);
      return;
    }
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<uint8_t>(address >> (8 * (offset + i)));
    }
    return;
  }
  // CONFIG_DATA: byte `offset - 4` of the selected dword.
  const uint64_t byte = offset - 4;
  uint32_t dword = 0;
  std::shared_ptr<PciDevice> device = byte + data.size() <= 4 ? Select(address, &dword) : nullptr;
  if (device == nullptr) {
    std::fill(data.begin(), data.end(), 0xff);
    return;
  }
  device->ReadConfig(dword + static_cast<uint32_t>(byte), data);
}

void PciRootBus::Write(uint64_t offset, std::span<const uint8_t> data) {
  if (offset < 4) {
    if (offset != 0 || data.size() != 4) return;  // only a dword write latches CONFIG_ADDRESS
    // Bits 1:0 are reserved (read as 0 on most chipsets); bits 30:24 are reserved or extended
    // register bits, kept so reads see what was written and Select() can refuse them.
    const uint32_t value = (uint32_t{data[0]} | uint32_t{data[1]} << 8 | uint32_t{data[2]} << 16 |
                            uint32_t{data[3]} << 24) &
                           ~0x3u;
    absl::MutexLock lock(&mutex_);
    config_address_ = value;
    return;
  }
  uint32_t address;
  {
    absl::MutexLock lock(&mutex_);
    address = config_address_;
  }
  const uint64_t byte = offset - 4;
  if (byte + data.size() > 4) return;
  uint32_t dword = 0;
  std::shared_ptr<PciDevice> device = Select(address, &dword);
  if (device != nullptr) device->WriteConfig(dword + static_cast<uint32_t>(byte), data);
}

}  // namespace devices::pci

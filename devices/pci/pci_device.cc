#include "devices/pci/pci_device.h"

#include <algorithm>
#include <bit>
#include <utility>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/byte_order.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::pci {
namespace {

bool Overlaps(uint64_t offset, uint64_t size, uint64_t start, uint64_t length) {
  return offset < start + length && start < offset + size;
}

// The largest I/O port address + 1 (x86 port space).
constexpr uint64_t kIoSpaceEnd = 0x10000;

}  // namespace

PciDevice::PciDevice(const PciIdentity& identity)
    : identity_(identity), regions_{BarRegion(this, 0), BarRegion(this, 1), BarRegion(this, 2),
                                    BarRegion(this, 3), BarRegion(this, 4), BarRegion(this, 5)} {
  absl::MutexLock lock(&mutex_);
  WriteLocked(kVendorId, identity.vendor_id, 2);
  WriteLocked(kDeviceId, identity.device_id, 2);
  WriteLocked(kRevisionId, identity.revision, 1);
  WriteLocked(kClassCode, identity.class_code & 0xffffff, 3);
  WriteLocked(kHeaderType, kHeaderTypeNormal, 1);
  WriteLocked(kSubsystemVendorId, identity.subsystem_vendor_id, 2);
  WriteLocked(kSubsystemId, identity.subsystem_id, 2);
  // No INTx (Interrupt Pin 0, §6.2.4); Interrupt Line is a scratch byte for the OS.
  WriteLocked(kInterruptPin, 0, 1);
  WriteLocked(kInterruptLine, 0xff, 1);

  SetWriteMask(kCommand, kCommandWritableMask, 2);
  w1c_mask_[kStatus] = kStatusWriteOneToClearMask & 0xff;
  w1c_mask_[kStatus + 1] = kStatusWriteOneToClearMask >> 8;
  SetWriteMask(kCacheLineSize, 0xff, 1);
  SetWriteMask(kInterruptLine, 0xff, 1);
  // Everything else in the header is read-only: latency timer, BIST, CardBus CIS, subsystem IDs,
  // the expansion ROM BAR (not implemented, so it sizes as 0), capabilities pointer, pin, MIN_GNT,
  // MAX_LAT. BAR masks come with DeclareBar().
}

PciDevice::~PciDevice() = default;

uint32_t PciDevice::ReadLocked(uint32_t offset, size_t size) const {
  if (offset >= kConfigSpaceSize) return 0;
  const size_t bytes = std::min<size_t>(size, kConfigSpaceSize - offset);
  return static_cast<uint32_t>(
      sys_util::LoadLittleEndian(std::span<const uint8_t>(config_).subspan(offset, bytes)));
}

void PciDevice::WriteLocked(uint32_t offset, uint32_t value, size_t size) {
  if (offset >= kConfigSpaceSize) return;
  sys_util::StoreLittleEndian(value,
                              std::span<uint8_t>(config_).subspan(
                                  offset, std::min<size_t>(size, kConfigSpaceSize - offset)));
}

void PciDevice::SetWriteMask(uint32_t offset, uint32_t mask, size_t size) {
  if (offset >= kConfigSpaceSize) return;
  sys_util::StoreLittleEndian(
      mask, std::span<uint8_t>(write_mask_)
                .subspan(offset, std::min<size_t>(size, kConfigSpaceSize - offset)));
}

void PciDevice::SetConfigWriteMask(uint32_t offset, uint32_t mask, size_t size) {
  absl::MutexLock lock(&mutex_);
  SetWriteMask(offset, mask, size);
}

uint32_t PciDevice::ReadConfigRaw(uint32_t offset, size_t size) const {
  if (size == 0 || size > 4 || offset >= kConfigSpaceSize || size > kConfigSpaceSize - offset) {
    return 0;
  }
  absl::ReaderMutexLock lock(&mutex_);
  return ReadLocked(offset, size);
}

void PciDevice::WriteConfigRaw(uint32_t offset, uint32_t value, size_t size) {
  if (size == 0 || size > 4 || offset >= kConfigSpaceSize || size > kConfigSpaceSize - offset) {
    return;
  }
  absl::MutexLock lock(&mutex_);
  WriteLocked(offset, value, size);
}

namespace {
// §6.1 / configuration mechanism #1: an access is 1, 2 or 4 bytes within one dword.
bool IsValidConfigAccess(uint32_t offset, size_t size) {
  return (size == 1 || size == 2 || size == 4) && offset < kConfigSpaceSize &&
         (offset % 4) + size <= 4;
}
}  // namespace

void PciDevice::ReadConfig(uint32_t offset, std::span<uint8_t> data) {
  if (!IsValidConfigAccess(offset, data.size())) {
    std::fill(data.begin(), data.end(), 0xff);
    return;
  }
  BeforeConfigRead(offset, data.size());
  absl::ReaderMutexLock lock(&mutex_);
  std::copy_n(config_.begin() + offset, data.size(), data.begin());
}

uint32_t PciDevice::ReadConfigDword(uint32_t offset) {
  std::array<uint8_t, 4> bytes{};
  ReadConfig(offset, bytes);
  return uint32_t{bytes[0]} | uint32_t{bytes[1]} << 8 | uint32_t{bytes[2]} << 16 |
         uint32_t{bytes[3]} << 24;
}

void PciDevice::WriteConfig(uint32_t offset, std::span<const uint8_t> data) {
  if (!IsValidConfigAccess(offset, data.size())) return;
  // A BAR move may drop the bus's references to this device; stay alive until done.
  const std::shared_ptr<PciDevice> keep_alive = weak_from_this().lock();
  {
    absl::MutexLock lock(&mutex_);
    for (size_t i = 0; i < data.size(); ++i) {
      const uint32_t at = offset + i;
      uint8_t value = (config_[at] & ~write_mask_[at]) | (data[i] & write_mask_[at]);
      value &= ~(data[i] & w1c_mask_[at]);
      config_[at] = value;
    }
    if (Overlaps(offset, data.size(), kCommand, 2) ||
        Overlaps(offset, data.size(), kBar0, 4 * kNumBars)) {
      UpdateMappingsLocked();
    }
    if (msix_ != nullptr &&
        Overlaps(offset, data.size(), msix_capability_ + kMsixMessageControl, 2)) {
      SyncMsixControlLocked();
    }
  }
  AfterConfigWrite(offset, data.size());
}

void PciDevice::SyncMsixControlLocked() {
  const uint32_t control = ReadLocked(msix_capability_ + kMsixMessageControl, 2);
  msix_->SetControl((control & kMsixControlEnable) != 0, (control & kMsixControlFunctionMask) != 0);
}

void PciDevice::SetMultiFunction(bool multi_function) {
  absl::MutexLock lock(&mutex_);
  WriteLocked(kHeaderType, multi_function ? kHeaderTypeMultiFunction : kHeaderTypeNormal, 1);
}

absl::Status PciDevice::DeclareBar(int bar, const BarSpec& spec) {
  absl::MutexLock lock(&mutex_);
  if (bar < 0 || bar >= kNumBars) {
    return absl::InvalidArgumentError(absl::StrFormat("BAR %d does not exist", bar));
  }
  const bool is64 = spec.kind == BarKind::kMmio64;
  if (is64 && bar == kNumBars - 1) {
    return absl::InvalidArgumentError("a 64-bit BAR needs two registers; BAR 5 is the last");
  }
  if (bars_[bar].spec || bars_[bar].upper_half ||
      (is64 && (bars_[bar + 1].spec || bars_[bar + 1].upper_half))) {
    return absl::AlreadyExistsError(absl::StrFormat("BAR %d is already declared", bar));
  }
  if (!std::has_single_bit(spec.size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BAR %d: size 0x%x is not a power of two", bar, spec.size));
  }
  const uint32_t reg = kBar0 + 4 * bar;
  const uint64_t address_mask = ~(spec.size - 1);
  switch (spec.kind) {
    case BarKind::kIo:
      if (spec.size < 4 || spec.size > 256 || spec.prefetchable) {
        return absl::InvalidArgumentError(
            absl::StrFormat("BAR %d: I/O BARs are 4..256 bytes, not prefetchable", bar));
      }
      WriteLocked(reg, kBarIoSpace, 4);
      SetWriteMask(reg, static_cast<uint32_t>(address_mask) & kBarIoAddressMask, 4);
      break;
    case BarKind::kMmio32:
      if (spec.size < 16 || spec.size > (1ull << 31)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("BAR %d: 32-bit memory BARs are 16 bytes..2 GiB", bar));
      }
      WriteLocked(reg, spec.prefetchable ? kBarPrefetchable : 0, 4);
      SetWriteMask(reg, static_cast<uint32_t>(address_mask) & kBarMemoryAddressMask, 4);
      break;
    case BarKind::kMmio64:
      if (spec.size < 16 || spec.size > (1ull << 62)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("BAR %d: 64-bit memory BARs are 16 bytes..4 EiB", bar));
      }
      WriteLocked(reg, kBarMemoryType64 | (spec.prefetchable ? kBarPrefetchable : 0), 4);
      SetWriteMask(reg, static_cast<uint32_t>(address_mask) & kBarMemoryAddressMask, 4);
      WriteLocked(reg + 4, 0, 4);
      SetWriteMask(reg + 4, static_cast<uint32_t>(address_mask >> 32), 4);
      bars_[bar + 1].upper_half = true;
      break;
  }
  bars_[bar].spec = spec;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> PciDevice::AddCapability(uint8_t id, std::span<const uint8_t> body,
                                                  std::span<const uint8_t> body_write_mask) {
  if (!body_write_mask.empty() && body_write_mask.size() != body.size()) {
    return absl::InvalidArgumentError("capability write mask and body differ in length");
  }
  absl::MutexLock lock(&mutex_);
  const uint32_t offset = next_capability_;
  const uint64_t length = 2 + body.size();
  if (length > kConfigSpaceSize - offset) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("capability 0x%02x (%u bytes) does not fit in configuration space at 0x%x",
                        id, length, offset));
  }
  config_[offset] = id;
  config_[offset + 1] = 0;  // end of the list until another capability follows
  std::copy(body.begin(), body.end(), config_.begin() + offset + 2);
  if (!body_write_mask.empty()) {
    std::copy(body_write_mask.begin(), body_write_mask.end(), write_mask_.begin() + offset + 2);
  }
  if (last_capability_ == 0) {
    // §6.7: the list starts at the Capabilities Pointer; Status bit 4 says there is one.
    config_[kCapabilitiesPointer] = static_cast<uint8_t>(offset);
    WriteLocked(kStatus, ReadLocked(kStatus, 2) | kStatusCapabilitiesList, 2);
  } else {
    config_[last_capability_ + 1] = static_cast<uint8_t>(offset);
  }
  last_capability_ = offset;
  // Capabilities are dword-aligned (§6.7: the bottom two bits of a pointer are reserved).
  next_capability_ = (offset + length + 3) & ~3u;
  return offset;
}

absl::Status PciDevice::AddMsixCapability(std::unique_ptr<MsixCapability> msix, int bar,
                                          uint64_t table_offset, uint64_t pba_offset) {
  if (msix == nullptr) return absl::InvalidArgumentError("no MSI-X state");
  if (msix_ != nullptr) return absl::AlreadyExistsError("the function already has MSI-X");
  std::optional<BarSpec> spec = bar_spec(bar);
  if (!spec || spec->kind == BarKind::kIo) {
    return absl::InvalidArgumentError(
        absl::StrFormat("MSI-X structures need a memory BAR; BAR %d is not one", bar));
  }
  // §6.8.2.4-5: offsets are QWORD-aligned (the low three bits hold the BIR) and 32 bits wide.
  const uint64_t table_end = table_offset + msix->table_bytes();
  const uint64_t pba_end = pba_offset + msix->pba_bytes();
  if (table_offset % 8 != 0 || pba_offset % 8 != 0 || table_end > spec->size ||
      pba_end > spec->size || pba_offset > UINT32_MAX || table_offset > UINT32_MAX ||
      (table_offset < pba_end && pba_offset < table_end)) {
    return absl::InvalidArgumentError("MSI-X table/PBA placement is invalid for the BAR");
  }
  const uint16_t control = static_cast<uint16_t>(msix->vector_count() - 1);
  const uint32_t table = static_cast<uint32_t>(table_offset) | static_cast<uint32_t>(bar);
  const uint32_t pba = static_cast<uint32_t>(pba_offset) | static_cast<uint32_t>(bar);
  std::array<uint8_t, kMsixCapabilityLength - 2> body{};
  body[0] = control & 0xff;
  body[1] = control >> 8;
  sys_util::StoreLittleEndian(table, std::span<uint8_t>(body).subspan(2, 4));
  sys_util::StoreLittleEndian(pba, std::span<uint8_t>(body).subspan(6, 4));
  std::array<uint8_t, kMsixCapabilityLength - 2> mask{};
  // Only Function Mask and MSI-X Enable are writable (§6.8.2.3).
  mask[1] = (kMsixControlFunctionMask | kMsixControlEnable) >> 8;
  ASSIGN_OR_RETURN(msix_capability_, AddCapability(kCapabilityIdMsix, body, mask));
  msix_bar_ = bar;
  msix_table_offset_ = table_offset;
  msix_pba_offset_ = pba_offset;
  msix_ = std::move(msix);
  return absl::OkStatus();
}

std::optional<BarSpec> PciDevice::bar_spec(int bar) const {
  if (bar < 0 || bar >= kNumBars) return std::nullopt;
  absl::ReaderMutexLock lock(&mutex_);
  return bars_[bar].spec;
}

uint64_t PciDevice::BarAddressLocked(int bar) const {
  const BarSpec& spec = *bars_[bar].spec;
  const uint32_t low = ReadLocked(kBar0 + 4 * bar, 4);
  if (spec.kind == BarKind::kIo) return low & kBarIoAddressMask;
  uint64_t address = low & kBarMemoryAddressMask;
  if (spec.kind == BarKind::kMmio64) {
    address |= uint64_t{ReadLocked(kBar0 + 4 * (bar + 1), 4)} << 32;
  }
  return address;
}

uint64_t PciDevice::bar_address(int bar) const {
  if (bar < 0 || bar >= kNumBars) return 0;
  absl::ReaderMutexLock lock(&mutex_);
  if (!bars_[bar].spec) return 0;
  return BarAddressLocked(bar);
}

std::optional<uint64_t> PciDevice::bar_mapping(int bar) const {
  if (bar < 0 || bar >= kNumBars) return std::nullopt;
  absl::ReaderMutexLock lock(&mutex_);
  return bars_[bar].mapped_at;
}

absl::Status PciDevice::AssignBars(BarAllocator& allocator) {
  absl::MutexLock lock(&mutex_);
  uint16_t enables = 0;
  for (int bar = 0; bar < kNumBars; ++bar) {
    if (!bars_[bar].spec) continue;
    const BarSpec spec = *bars_[bar].spec;
    ASSIGN_OR_RETURN(const uint64_t base, allocator.Allocate(spec));
    const uint32_t reg = kBar0 + 4 * bar;
    const uint32_t flags = ReadLocked(reg, 4) & (spec.kind == BarKind::kIo ? 0x3u : 0xfu);
    WriteLocked(reg, static_cast<uint32_t>(base) | flags, 4);
    if (spec.kind == BarKind::kMmio64) WriteLocked(reg + 4, static_cast<uint32_t>(base >> 32), 4);
    enables |= spec.kind == BarKind::kIo ? kCommandIoSpace : kCommandMemorySpace;
  }
  WriteLocked(kCommand, ReadLocked(kCommand, 2) | enables, 2);
  UpdateMappingsLocked();
  return absl::OkStatus();
}

void PciDevice::Attach(vmm::Bus& pio_bus, vmm::Bus& mmio_bus) {
  absl::MutexLock lock(&mutex_);
  pio_bus_ = &pio_bus;
  mmio_bus_ = &mmio_bus;
  UpdateMappingsLocked();
}

void PciDevice::Shutdown() {
  const std::shared_ptr<PciDevice> keep_alive = weak_from_this().lock();
  {
    absl::MutexLock lock(&mutex_);
    if (shut_down_) return;
    shut_down_ = true;
    for (int bar = 0; bar < kNumBars; ++bar) UnmapLocked(bar);
  }
  OnShutdown();
}

std::optional<uint64_t> PciDevice::DesiredMappingLocked(int bar) const {
  if (shut_down_ || !bars_[bar].spec) return std::nullopt;
  const BarSpec& spec = *bars_[bar].spec;
  const uint16_t command = static_cast<uint16_t>(ReadLocked(kCommand, 2));
  const bool io = spec.kind == BarKind::kIo;
  if ((command & (io ? kCommandIoSpace : kCommandMemorySpace)) == 0) return std::nullopt;
  const uint64_t address = BarAddressLocked(bar);
  // Address 0 means "not assigned" to firmware and OSes alike; a range running off the end of the
  // space (a half-sized 64-bit BAR, or all-ones left from sizing) cannot be decoded.
  if (address == 0 || address > UINT64_MAX - spec.size) return std::nullopt;
  if (io && address + spec.size > kIoSpaceEnd) return std::nullopt;
  return address;
}

void PciDevice::UnmapLocked(int bar) {
  Bar& state = bars_[bar];
  if (!state.mapped_at) return;
  const uint64_t address = *state.mapped_at;
  vmm::Bus* bus = state.spec->kind == BarKind::kIo ? pio_bus_ : mmio_bus_;
  // Cannot fail: the range was registered by us at exactly this base.
  (void)bus->Unregister(address);
  state.mapped_at.reset();
  OnBarUnmapped(bar, address);
}

void PciDevice::UpdateMappingsLocked() {
  if (pio_bus_ == nullptr || mmio_bus_ == nullptr) return;
  for (int bar = 0; bar < kNumBars; ++bar) {
    Bar& state = bars_[bar];
    if (!state.spec) continue;
    const std::optional<uint64_t> desired = DesiredMappingLocked(bar);
    if (desired == state.mapped_at) continue;
    UnmapLocked(bar);
    if (!desired) continue;
    const std::shared_ptr<PciDevice> self = weak_from_this().lock();
    if (self == nullptr) continue;  // not shared-owned: cannot be put on a bus safely
    vmm::Bus* bus = state.spec->kind == BarKind::kIo ? pio_bus_ : mmio_bus_;
    // The registration shares ownership of the device (aliasing constructor).
    absl::Status status = bus->Register(*desired, state.spec->size,
                                        std::shared_ptr<vmm::BusDevice>(self, &regions_[bar]));
    // A conflicting placement (another device's range) leaves the BAR unmapped; a later
    // configuration write retries.
    if (!status.ok()) continue;
    state.mapped_at = desired;
    OnBarMapped(bar, *desired);
  }
}

void PciDevice::ReadBarRegion(int bar, uint64_t offset, std::span<uint8_t> data) {
  std::optional<BarSpec> spec = bar_spec(bar);
  if (!spec || offset >= spec->size || data.size() > spec->size - offset) {
    std::fill(data.begin(), data.end(), 0);
    return;
  }
  if (bar == msix_bar_) {
    const uint64_t table_bytes = msix_->table_bytes();
    const uint64_t pba_bytes = msix_->pba_bytes();
    if (Overlaps(offset, data.size(), msix_table_offset_, table_bytes)) {
      if (offset >= msix_table_offset_ &&
          offset + data.size() <= msix_table_offset_ + table_bytes) {
        msix_->ReadTable(offset - msix_table_offset_, data);
      } else {
        std::fill(data.begin(), data.end(), 0);
      }
      return;
    }
    if (Overlaps(offset, data.size(), msix_pba_offset_, pba_bytes)) {
      if (offset >= msix_pba_offset_ && offset + data.size() <= msix_pba_offset_ + pba_bytes) {
        msix_->ReadPba(offset - msix_pba_offset_, data);
      } else {
        std::fill(data.begin(), data.end(), 0);
      }
      return;
    }
  }
  ReadBar(bar, offset, data);
}

void PciDevice::WriteBarRegion(int bar, uint64_t offset, std::span<const uint8_t> data) {
  std::optional<BarSpec> spec = bar_spec(bar);
  if (!spec || offset >= spec->size || data.size() > spec->size - offset) return;
  if (bar == msix_bar_) {
    const uint64_t table_bytes = msix_->table_bytes();
    if (Overlaps(offset, data.size(), msix_table_offset_, table_bytes)) {
      if (offset >= msix_table_offset_ &&
          offset + data.size() <= msix_table_offset_ + table_bytes) {
        msix_->WriteTable(offset - msix_table_offset_, data);
      }
      return;
    }
    // The PBA is read-only (§6.8.2.10: software writes are undefined; we drop them).
    if (Overlaps(offset, data.size(), msix_pba_offset_, msix_->pba_bytes())) return;
  }
  WriteBar(bar, offset, data);
}

}  // namespace devices::pci

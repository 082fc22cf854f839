#include "devices/pci/msix.h"

#include <cstring>
#include <span>
#include <utility>

#include "absl/strings/str_format.h"
#include "devices/pci/pci_regs.h"
#include "vmm/sys_util/byte_order.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::pci {
namespace {

// §6.8.2: aligned DWORD or QWORD accesses only.
bool IsValidAccess(uint64_t offset, size_t size) {
  return (size == 4 || size == 8) && offset % size == 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MsixCapability>> MsixCapability::Create(
    vmm::MsiController& controller, uint32_t vector_count) {
  if (vector_count == 0 || vector_count > kMsixMaxVectors) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "MSI-X: %u vectors requested, the table holds 1..%u", vector_count, kMsixMaxVectors));
  }
  auto vectors = std::make_unique<Vector[]>(vector_count);
  for (uint32_t i = 0; i < vector_count; ++i) {
    ASSIGN_OR_RETURN(vectors[i].msi, controller.AllocateVector());
  }
  return std::unique_ptr<MsixCapability>(new MsixCapability(vector_count, std::move(vectors)));
}

MsixCapability::MsixCapability(uint32_t vector_count, std::unique_ptr<Vector[]> vectors)
    : vector_count_(vector_count), vectors_(std::move(vectors)) {}

void MsixCapability::Trigger(uint32_t vector) {
  if (vector >= vector_count_) return;
  Vector& v = vectors_[vector];
  if (Deliverable(v)) {
    v.msi->Trigger();
    return;
  }
  v.pending.store(true);
  // An unmask may have happened between the check and the store; it may have missed the pending
  // bit, so look again (see the header).
  DeliverIfPending(v);
}

void MsixCapability::DeliverIfPending(Vector& vector) {
  if (Deliverable(vector) && vector.pending.exchange(false)) vector.msi->Trigger();
}

void MsixCapability::SyncMessageLocked(Vector& vector) {
  if (!vector.message_dirty) return;
  vector.message_dirty = false;
  const uint64_t address = (uint64_t{vector.address_high} << 32) | vector.address_low;
  // A routing failure (on KVM: KVM_SET_GSI_ROUTING refused) leaves the vector routed where it was;
  // the guest sees a lost interrupt, not a VMM failure. Mark the entry dirty to retry next time.
  if (!vector.msi->SetMessage(address, vector.data).ok()) vector.message_dirty = true;
}

void MsixCapability::SetControl(bool enable, bool function_mask) {
  absl::MutexLock lock(&mutex_);
  enable_ = enable;
  function_mask_ = function_mask;
  enabled_.store(enable);
  const bool blocked = !enable || function_mask;
  if (blocked) {
    blocked_.store(true);
    return;
  }
  if (!blocked_.load()) return;  // no change
  // Messages first, so nothing is sent to a stale address once the function is unblocked.
  for (uint32_t i = 0; i < vector_count_; ++i) {
    if (!vectors_[i].masked.load()) SyncMessageLocked(vectors_[i]);
  }
  blocked_.store(false);
  for (uint32_t i = 0; i < vector_count_; ++i) DeliverIfPending(vectors_[i]);
}

uint32_t MsixCapability::ReadTableDword(uint64_t offset) const {
  const Vector& v = vectors_[offset / kMsixEntrySize];
  switch (offset % kMsixEntrySize) {
    case kMsixEntryAddressLow:
      return v.address_low;
    case kMsixEntryAddressHigh:
      return v.address_high;
    case kMsixEntryData:
      return v.data;
    default:  // kMsixEntryVectorControl: only the mask bit is implemented (§6.8.2.9)
      return v.masked.load() ? kMsixVectorControlMask : 0;
  }
}

void MsixCapability::WriteTableDword(uint64_t offset, uint32_t value) {
  Vector& v = vectors_[offset / kMsixEntrySize];
  switch (offset % kMsixEntrySize) {
    case kMsixEntryAddressLow:
      // §6.8.2.6: bits 1:0 are zero for DWORD alignment.
      v.address_low = value & ~0x3u;
      v.message_dirty = true;
      break;
    case kMsixEntryAddressHigh:
      v.address_high = value;
      v.message_dirty = true;
      break;
    case kMsixEntryData:
      v.data = value;
      v.message_dirty = true;
      break;
    default: {  // kMsixEntryVectorControl; reserved bits read as zero
      const bool mask = (value & kMsixVectorControlMask) != 0;
      if (mask) {
        v.masked.store(true);
      } else if (v.masked.load()) {
        if (!blocked_.load()) SyncMessageLocked(v);
        v.masked.store(false);
        DeliverIfPending(v);
      }
      return;
    }
  }
  // The guest reprogrammed a live vector (undefined by §6.8.2.9 unless masked, but harmless):
  // follow it right away.
  if (Deliverable(v)) SyncMessageLocked(v);
}

void MsixCapability::ReadTable(uint64_t offset, std::span<uint8_t> data) {
  if (!IsValidAccess(offset, data.size()) || offset >= table_bytes() ||
      data.size() > table_bytes() - offset) {
    sys_util::StoreLittleEndian(0, data);
    return;
  }
  absl::MutexLock lock(&mutex_);
  uint64_t value = ReadTableDword(offset);
  if (data.size() == 8) value |= uint64_t{ReadTableDword(offset + 4)} << 32;
  sys_util::StoreLittleEndian(value, data);
}

void MsixCapability::WriteTable(uint64_t offset, std::span<const uint8_t> data) {
  if (!IsValidAccess(offset, data.size()) || offset >= table_bytes() ||
      data.size() > table_bytes() - offset) {
    return;
  }
  const uint64_t value = sys_util::LoadLittleEndian(data);
  absl::MutexLock lock(&mutex_);
  WriteTableDword(offset, static_cast<uint32_t>(value));
  if (data.size() == 8) WriteTableDword(offset + 4, static_cast<uint32_t>(value >> 32));
}

uint32_t MsixCapability::ReadPbaDword(uint64_t offset) const {
  uint32_t bits = 0;
  const uint64_t first = offset * 8;
  for (uint32_t bit = 0; bit < 32; ++bit) {
    const uint64_t vector = first + bit;
    if (vector >= vector_count_) break;
    if (vectors_[vector].pending.load()) bits |= 1u << bit;
  }
  return bits;
}

void MsixCapability::ReadPba(uint64_t offset, std::span<uint8_t> data) const {
  if (!IsValidAccess(offset, data.size()) || offset >= pba_bytes() ||
      data.size() > pba_bytes() - offset) {
    sys_util::StoreLittleEndian(0, data);
    return;
  }
  uint64_t value = ReadPbaDword(offset);
  if (data.size() == 8) value |= uint64_t{ReadPbaDword(offset + 4)} << 32;
  sys_util::StoreLittleEndian(value, data);
}

MsixCapability::Entry MsixCapability::entry(uint32_t vector) const {
  if (vector >= vector_count_) return {};
  absl::MutexLock lock(&mutex_);
  const Vector& v = vectors_[vector];
  return Entry{(uint64_t{v.address_high} << 32) | v.address_low, v.data, v.masked.load()};
}

bool MsixCapability::pending(uint32_t vector) const {
  return vector < vector_count_ && vectors_[vector].pending.load();
}

bool MsixCapability::function_masked() const {
  absl::MutexLock lock(&mutex_);
  return function_mask_;
}

}  // namespace devices::pci

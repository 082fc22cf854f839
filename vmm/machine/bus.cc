#include "vmm/machine/bus.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/str_format.h"

namespace vmm {

void BusDevice::ReadString(uint64_t offset, size_t item_size, std::span<uint8_t> data) {
  if (item_size == 0) return;
  for (size_t at = 0; at + item_size <= data.size(); at += item_size) {
    Read(offset, data.subspan(at, item_size));
  }
}

void BusDevice::WriteString(uint64_t offset, size_t item_size, std::span<const uint8_t> data) {
  if (item_size == 0) return;
  for (size_t at = 0; at + item_size <= data.size(); at += item_size) {
    Write(offset, data.subspan(at, item_size));
  }
}

absl::Status Bus::Register(uint64_t base, uint64_t size, std::shared_ptr<BusDevice> device) {
  if (size == 0 || base + size < base) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s bus: invalid range at 0x%x of size 0x%x", name_, base, size));
  }
  absl::MutexLock lock(&mutex_);
  auto next = ranges_.lower_bound(base);
  if (next != ranges_.end() && next->first < base + size) {
    return absl::AlreadyExistsError(
        absl::StrFormat("%s bus: range [0x%x, 0x%x) overlaps the device at 0x%x", name_, base,
                        base + size, next->first));
  }
  if (next != ranges_.begin()) {
    auto previous = std::prev(next);
    if (previous->first + previous->second.size > base) {
      return absl::AlreadyExistsError(
          absl::StrFormat("%s bus: range [0x%x, 0x%x) overlaps the device at 0x%x", name_, base,
                          base + size, previous->first));
    }
  }
  ranges_.emplace(base, Range{size, std::move(device)});
  return absl::OkStatus();
}

absl::Status Bus::Unregister(uint64_t base) {
  absl::MutexLock lock(&mutex_);
  if (ranges_.erase(base) == 0) {
    return absl::NotFoundError(absl::StrFormat("%s bus: nothing registered at 0x%x", name_, base));
  }
  return absl::OkStatus();
}

void Bus::Clear() {
  std::map<uint64_t, Range> ranges;
  {
    absl::MutexLock lock(&mutex_);
    ranges.swap(ranges_);
  }
  // Devices are destroyed here, outside the lock: a destructor may touch the bus.
}

std::shared_ptr<BusDevice> Bus::Find(uint64_t address, uint64_t length, uint64_t* offset) const {
  absl::ReaderMutexLock lock(&mutex_);
  auto after = ranges_.upper_bound(address);
  if (after == ranges_.begin()) return nullptr;
  const auto& [base, range] = *std::prev(after);
  const uint64_t relative = address - base;
  if (relative >= range.size || length > range.size - relative) return nullptr;
  *offset = relative;
  return range.device;
}

bool Bus::Read(uint64_t address, std::span<uint8_t> data) const {
  uint64_t offset = 0;
  std::shared_ptr<BusDevice> device = Find(address, data.size(), &offset);
  if (device == nullptr) {
    std::fill(data.begin(), data.end(), 0xff);
    return false;
  }
  device->Read(offset, data);
  return true;
}

bool Bus::Write(uint64_t address, std::span<const uint8_t> data) const {
  uint64_t offset = 0;
  std::shared_ptr<BusDevice> device = Find(address, data.size(), &offset);
  if (device == nullptr) return false;
  device->Write(offset, data);
  return true;
}

bool Bus::ReadString(uint64_t address, size_t item_size, std::span<uint8_t> data) const {
  uint64_t offset = 0;
  std::shared_ptr<BusDevice> device = Find(address, item_size, &offset);
  if (device == nullptr || item_size == 0) {
    std::fill(data.begin(), data.end(), 0xff);
    return false;
  }
  device->ReadString(offset, item_size, data);
  return true;
}

bool Bus::WriteString(uint64_t address, size_t item_size, std::span<const uint8_t> data) const {
  uint64_t offset = 0;
  std::shared_ptr<BusDevice> device = Find(address, item_size, &offset);
  if (device == nullptr || item_size == 0) return false;
  device->WriteString(offset, item_size, data);
  return true;
}

}  // namespace vmm

#include "devices/pci/bar_allocator.h"

#include <bit>

#include "absl/strings/str_format.h"

namespace devices::pci {

BarAllocator::BarAllocator(AddressWindow mmio32, AddressWindow io,
                           std::optional<AddressWindow> mmio64_high)
    : mmio32_{mmio32.base, mmio32.base + mmio32.size}, io_{io.base, io.base + io.size} {
  if (mmio64_high) mmio64_high_ = Window{mmio64_high->base, mmio64_high->base + mmio64_high->size};
}

std::optional<uint64_t> BarAllocator::Take(Window& window, uint64_t size) {
  // Round up to a multiple of `size` without overflowing.
  const uint64_t misalignment = window.next & (size - 1);
  uint64_t base = window.next;
  if (misalignment != 0) {
    if (base > UINT64_MAX - (size - misalignment)) return std::nullopt;
    base += size - misalignment;
  }
  if (base > window.end || size > window.end - base) return std::nullopt;
  window.next = base + size;
  return base;
}

absl::StatusOr<uint64_t> BarAllocator::Allocate(const BarSpec& spec) {
  if (!std::has_single_bit(spec.size)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("BAR size 0x%x is not a power of two", spec.size));
  }
  std::optional<uint64_t> base;
  switch (spec.kind) {
    case BarKind::kIo:
      if (spec.size < 4 || spec.size > 256) {
        return absl::InvalidArgumentError(
            absl::StrFormat("I/O BAR size 0x%x is outside 4..256 bytes", spec.size));
      }
      base = Take(io_, spec.size);
      break;
    case BarKind::kMmio32:
      if (spec.size < 16 || spec.size > (1ull << 31)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("32-bit BAR size 0x%x is outside 16 bytes..2 GiB", spec.size));
      }
      base = Take(mmio32_, spec.size);
      break;
    case BarKind::kMmio64:
      if (spec.size < 16) {
        return absl::InvalidArgumentError(
            absl::StrFormat("64-bit BAR size 0x%x is below 16 bytes", spec.size));
      }
      base = Take(mmio32_, spec.size);
      if (!base && mmio64_high_) base = Take(*mmio64_high_, spec.size);
      break;
  }
  if (!base) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("no room for a BAR of 0x%x bytes in its window", spec.size));
  }
  return *base;
}

}  // namespace devices::pci

#ifndef DEVICES_PCI_LITTLE_ENDIAN_H_
#define DEVICES_PCI_LITTLE_ENDIAN_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace devices::pci {

// PCI configuration space, BARs, the MSI-X table (PCI Local Bus 3.0 §6.1) and virtio's registers
// (virtio 1.2 §4.1.3) are little-endian, whatever the width of the access. These move one access
// (1 to 8 bytes) between its bytes and a value.

// The value of `data` (at most its first 8 bytes).
inline uint64_t LoadLittleEndian(std::span<const uint8_t> data) {
  uint64_t value = 0;
  for (size_t i = 0; i < data.size() && i < 8; ++i) value |= uint64_t{data[i]} << (8 * i);
  return value;
}

// `value` into `data`; bytes beyond the eighth are zero.
inline void StoreLittleEndian(uint64_t value, std::span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = i < 8 ? static_cast<uint8_t>(value >> (8 * i)) : 0;
  }
}

}  // namespace devices::pci

#endif  // DEVICES_PCI_LITTLE_ENDIAN_H_

#ifndef VMM_SYS_UTIL_BYTE_ORDER_H_
#define VMM_SYS_UTIL_BYTE_ORDER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

// The one place fields are moved between values and bytes in a given order. Little-endian: PCI
// configuration space, BARs and the MSI-X table (PCI Local Bus 3.0 6.1), virtio's registers
// (virtio 1.2 4.1.3), ACPI tables and AML (ACPI 6.x 5.2), x86 boot structures. Big-endian: SCSI
// CDBs and parameter data (SPC-4 3.5: multi-byte fields are big-endian). Callers index buffers
// whose length they checked.

namespace sys_util {

// The little-endian value of `data` (at most its first 8 bytes).
inline uint64_t LoadLittleEndian(std::span<const uint8_t> data) {
  uint64_t value = 0;
  for (size_t i = 0; i < data.size() && i < 8; ++i) value |= uint64_t{data[i]} << (8 * i);
  return value;
}

// `value` into `data`, little-endian; bytes beyond the eighth are zero.
inline void StoreLittleEndian(uint64_t value, std::span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    data[i] = i < 8 ? static_cast<uint8_t>(value >> (8 * i)) : 0;
  }
}

// The low `bytes` bytes of `value` (at most 8), little-endian, at the end of `out`.
inline void AppendLittleEndian(std::vector<uint8_t>& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i)
    out.push_back(i < 8 ? static_cast<uint8_t>(value >> (8 * i)) : 0);
}

inline uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t Be24(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 16 | static_cast<uint32_t>(p[1]) << 8 | p[2];
}
inline uint32_t Be32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}
inline uint64_t Be64(const uint8_t* p) {
  return static_cast<uint64_t>(Be32(p)) << 32 | Be32(p + 4);
}

inline void PutBe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void PutBe24(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
inline void PutBe32(uint8_t* p, uint32_t v) {
  p[0] = static_cast<uint8_t>(v >> 24);
  p[1] = static_cast<uint8_t>(v >> 16);
  p[2] = static_cast<uint8_t>(v >> 8);
  p[3] = static_cast<uint8_t>(v);
}
inline void PutBe64(uint8_t* p, uint64_t v) {
  PutBe32(p, static_cast<uint32_t>(v >> 32));
  PutBe32(p + 4, static_cast<uint32_t>(v));
}

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_BYTE_ORDER_H_

#include "devices/scsi/lun.h"

namespace devices::scsi {

std::optional<uint16_t> DecodeLun(uint64_t lun) {
  if ((lun & 0x0000ffffffffffffULL) != 0) return std::nullopt;  // levels 2-4 must be zero
  const uint16_t first = static_cast<uint16_t>(lun >> 48);
  switch (first >> 14) {
    case 0:  // peripheral device addressing: bus identifier in bits 13-8
      if ((first & 0x3f00) != 0) return std::nullopt;
      return static_cast<uint16_t>(first & 0xff);
    case 1:  // flat space addressing
      return static_cast<uint16_t>(first & 0x3fff);
    default:  // logical unit addressing, extended addressing: not used by this target
      return std::nullopt;
  }
}

uint64_t EncodeLun(uint16_t number) {
  if (number < 256) return static_cast<uint64_t>(number) << 48;
  return EncodeFlatLun(number);
}

uint64_t EncodeFlatLun(uint16_t number) {
  return static_cast<uint64_t>(0x4000 | (number & 0x3fff)) << 48;
}

}  // namespace devices::scsi

#include "devices/ide/task_file.h"

#include <algorithm>

#include "devices/ide/ata.h"

namespace devices::ide {

ChsGeometry DefaultGeometry(uint64_t sectors) {
  ChsGeometry geometry;
  geometry.heads = 16;
  geometry.sectors = 63;
  geometry.cylinders = static_cast<uint32_t>(std::clamp<uint64_t>(sectors / (16 * 63), 1, 16383));
  return geometry;
}

void TaskFile::Write(int reg, uint8_t value) {
  switch (reg) {
    case reg::kFeature:
      hob_feature = feature;
      feature = value;
      break;
    case reg::kCount:
      hob_count = count;
      count = value;
      break;
    case reg::kLbaLow:
      hob_lba_low = lba_low;
      lba_low = value;
      break;
    case reg::kLbaMid:
      hob_lba_mid = lba_mid;
      lba_mid = value;
      break;
    case reg::kLbaHigh:
      hob_lba_high = lba_high;
      lba_high = value;
      break;
    case reg::kDevice:
      device = value;
      break;
    default:
      break;
  }
}

uint8_t TaskFile::Read(int reg, bool hob) const {
  switch (reg) {
    case reg::kCount:
      return hob ? hob_count : count;
    case reg::kLbaLow:
      return hob ? hob_lba_low : lba_low;
    case reg::kLbaMid:
      return hob ? hob_lba_mid : lba_mid;
    case reg::kLbaHigh:
      return hob ? hob_lba_high : lba_high;
    case reg::kDevice:
      return device;
    default:
      return 0;
  }
}

uint64_t TaskFile::Lba28() const {
  return static_cast<uint64_t>(device & device::kHeadMask) << 24 | uint64_t{lba_high} << 16 |
         uint64_t{lba_mid} << 8 | lba_low;
}

uint64_t TaskFile::Lba48() const {
  return uint64_t{hob_lba_high} << 40 | uint64_t{hob_lba_mid} << 32 | uint64_t{hob_lba_low} << 24 |
         uint64_t{lba_high} << 16 | uint64_t{lba_mid} << 8 | lba_low;
}

uint32_t TaskFile::Count48() const {
  const uint32_t value = uint32_t{hob_count} << 8 | count;
  return value == 0 ? 65536 : value;
}

std::optional<uint64_t> TaskFile::ChsToLba(const ChsGeometry& geometry) const {
  const uint32_t cylinder = uint32_t{lba_high} << 8 | lba_mid;
  const uint32_t head = device & device::kHeadMask;
  const uint32_t sector = lba_low;
  if (sector == 0 || sector > geometry.sectors || head >= geometry.heads ||
      cylinder >= geometry.cylinders) {
    return std::nullopt;
  }
  return (uint64_t{cylinder} * geometry.heads + head) * geometry.sectors + (sector - 1);
}

void TaskFile::SetLba(uint64_t lba, bool lba48) {
  lba_low = static_cast<uint8_t>(lba);
  lba_mid = static_cast<uint8_t>(lba >> 8);
  lba_high = static_cast<uint8_t>(lba >> 16);
  if (lba48) {
    hob_lba_low = static_cast<uint8_t>(lba >> 24);
    hob_lba_mid = static_cast<uint8_t>(lba >> 32);
    hob_lba_high = static_cast<uint8_t>(lba >> 40);
  } else {
    device = static_cast<uint8_t>((device & ~device::kHeadMask) | ((lba >> 24) & 0x0f));
  }
}

void TaskFile::SetSignature(bool packet_device) {
  const uint8_t keep_device = device;
  *this = TaskFile{};
  device = keep_device;
  count = 0x01;
  lba_low = 0x01;
  if (packet_device) {
    lba_mid = 0x14;
    lba_high = 0xeb;
  }
}

}  // namespace devices::ide

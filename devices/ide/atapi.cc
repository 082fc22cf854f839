#include "devices/ide/atapi.h"

#include <algorithm>

#include "devices/scsi/bytes.h"
#include "devices/scsi/constants.h"

namespace devices::ide {
namespace {

namespace op = scsi::op;

// MMC-6: a CD/DVD user data block.
constexpr uint64_t kCdBlock = 2048;
// SPC-4: allocation lengths of 16 bits reach 65535 bytes.
constexpr uint64_t kMaxEmulatedData = 64 * 1024;

}  // namespace

PacketPlan PlanPacket(const Packet& cdb, uint64_t max_transfer_bytes) {
  PacketPlan plan;
  const uint8_t* p = cdb.data();
  switch (cdb[0]) {
    case op::kTestUnitReady:
    case op::kStartStopUnit:
    case op::kPreventAllowMediumRemoval:
    case op::kSeek10:
    case op::kSetCdSpeed:
      plan.direction = PacketDirection::kNone;
      return plan;
    case op::kModeSelect6:
      plan.direction = PacketDirection::kOut;
      plan.out_length = p[4];
      return plan;
    case op::kModeSelect10:
      plan.direction = PacketDirection::kOut;
      plan.out_length = scsi::Be16(p + 7);
      return plan;
    case op::kRead10:
      plan.in_buffer = std::min(scsi::Be16(p + 7) * kCdBlock, max_transfer_bytes);
      return plan;
    case op::kRead12:
      plan.in_buffer = std::min(scsi::Be32(p + 6) * kCdBlock, max_transfer_bytes);
      return plan;
    case op::kReadCd:
      plan.in_buffer = std::min(scsi::Be24(p + 6) * kCdBlock, max_transfer_bytes);
      return plan;
    default:
      plan.in_buffer = kMaxEmulatedData;
      return plan;
  }
}

uint32_t DrqBlockSize(uint64_t remaining, uint16_t byte_count_limit) {
  uint32_t limit = byte_count_limit;
  if (limit == 0 || limit == 0xffff) limit = 0xfffe;
  if (remaining <= limit) return static_cast<uint32_t>(remaining);
  limit &= ~uint32_t{1};
  return std::max<uint32_t>(limit, 2);
}

uint8_t PacketErrorRegister(const scsi::Sense& sense) {
  uint8_t value = static_cast<uint8_t>(static_cast<uint8_t>(sense.key) << error::kSenseKeyShift);
  if (sense.key == scsi::SenseKey::kIllegalRequest ||
      sense.key == scsi::SenseKey::kAbortedCommand) {
    value |= error::kAbrt;
  }
  return value;
}

}  // namespace devices::ide

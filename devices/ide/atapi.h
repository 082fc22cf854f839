#ifndef DEVICES_IDE_ATAPI_H_
#define DEVICES_IDE_ATAPI_H_

#include <array>
#include <cstdint>
#include <span>

#include "devices/ide/ata.h"
#include "devices/scsi/sense.h"

// The ATAPI packet layer (ATA8-APT 11.x "PACKET command protocol"): what the transport must know
// about a packet before the MMC-6 device server (devices::scsi::CdRom) runs it, how a PIO data
// phase is cut into DRQ blocks under the host's byte count limit, and how a CHECK CONDITION shows
// in the ATA registers. The commands themselves are devices/scsi's: one MMC implementation for
// virtio-scsi and IDE.

namespace devices::ide {

using Packet = std::array<uint8_t, kPacketSize>;

// The direction of a packet's data phase.
enum class PacketDirection : uint8_t { kNone, kIn, kOut };

struct PacketPlan {
  PacketDirection direction = PacketDirection::kIn;
  // PIO data-in: the bounce buffer for the device server (the data it returns is truncated to
  // it). READ(10)/(12) and READ CD: their transfer length in 2048-byte blocks, capped at
  // `max_transfer_bytes` (the unit refuses longer transfers itself); everything else: 64 KiB,
  // more than any allocation length of a 16-bit field asks.
  uint64_t in_buffer = 0;
  // Data-out: the parameter list the host sends (MODE SELECT, the only data-out command of the
  // MMC unit).
  uint64_t out_length = 0;
};

PacketPlan PlanPacket(const Packet& cdb, uint64_t max_transfer_bytes);

// The bytes of the next PIO DRQ block (ATA8-APT 11.x): all of `remaining` if it fits the byte
// count limit, else the limit rounded down to even ("if the byte count limit is odd ... the device
// shall use the limit minus one"). A limit of 0 (undefined) or FFFFh is taken as FFFEh, as QEMU
// does; the result is never 0 while something remains.
uint32_t DrqBlockSize(uint64_t remaining, uint16_t byte_count_limit);

// The Error register after a PACKET command ended in CHECK CONDITION (ATA8-APT, PACKET command
// normal/error outputs): the sense key in bits 7:4, and ABRT when the command was refused as
// invalid (ILLEGAL REQUEST) or aborted (ABORTED COMMAND). QEMU shows 0x20 for NOT READY and 0x60
// for UNIT ATTENTION, as here.
uint8_t PacketErrorRegister(const scsi::Sense& sense);

// The Error register when the transport itself aborted a packet (its DMA failed): ABORTED COMMAND.
inline constexpr uint8_t kPacketTransportError =
    (static_cast<uint8_t>(scsi::SenseKey::kAbortedCommand) << error::kSenseKeyShift) | error::kAbrt;

}  // namespace devices::ide

#endif  // DEVICES_IDE_ATAPI_H_

#include "devices/ide/bus_master.h"

#include "devices/ide/ata.h"

namespace devices::ide {

static_assert(bm::kCmdStart == 0x01 && bm::kCmdWriteMemory == 0x08);
static_assert(bm::kStatActive == 0x01 && bm::kStatError == 0x02 && bm::kStatInterrupt == 0x04);

uint8_t BusMasterRegisters::Read(int offset) const {
  switch (offset) {
    case bm::kCommand:
      return command_;
    case bm::kStatus:
      return status_;  // Simplex (bit 7) reads 0: both channels may run at once
    case bm::kPrdTable:
    case bm::kPrdTable + 1:
    case bm::kPrdTable + 2:
    case bm::kPrdTable + 3:
      return static_cast<uint8_t>(prd_table_ >> (8 * (offset - bm::kPrdTable)));
    default:
      return 0;  // device-specific bytes 1 and 3: nothing on PIIX3
  }
}

BusMasterRegisters::WriteEffect BusMasterRegisters::Write(int offset, uint8_t value) {
  WriteEffect effect;
  switch (offset) {
    case bm::kCommand: {
      // Only Start/Stop and Read/Write are implemented; the rest reads 0. SFF-8038i: Read/Write
      // "must not be changed when the bus master function is active", so a running engine keeps
      // its direction unless this write also stops it.
      const bool was_started = started();
      const bool start = (value & kStart) != 0;
      uint8_t direction = value & kWriteMemory;
      if (was_started && start) direction = command_ & kWriteMemory;
      command_ = static_cast<uint8_t>(direction | (start ? kStart : 0));
      if (!was_started && start) {
        // "Writing a 1 to this bit enables bus master operation"; Active follows Start.
        status_ |= kActive;
        effect.started = true;
      } else if (was_started && !start) {
        // "All state information is lost when a 0 is written; master mode operation cannot be
        // stopped and then resumed": Active clears with Start.
        status_ &= ~kActive;
        effect.stopped = true;
      }
      break;
    }
    case bm::kStatus:
      // Error and Interrupt are write-1-to-clear; the drive bits are read/write; Active and
      // Simplex are read-only.
      status_ =
          static_cast<uint8_t>((status_ & ~(kError | kInterrupt | kDriveBits)) |
                               (status_ & (kError | kInterrupt) & ~value) | (value & kDriveBits));
      break;
    case bm::kPrdTable:
    case bm::kPrdTable + 1:
    case bm::kPrdTable + 2:
    case bm::kPrdTable + 3: {
      const int shift = 8 * (offset - bm::kPrdTable);
      prd_table_ = (prd_table_ & ~(uint32_t{0xff} << shift)) | (uint32_t{value} << shift);
      prd_table_ &= ~uint32_t{3};  // dword-aligned: bits 1:0 are read-only 0
      break;
    }
    default:
      break;
  }
  return effect;
}

void BusMasterRegisters::SetActive(bool active) {
  status_ = active ? (status_ | kActive) : (status_ & ~kActive);
}

void BusMasterRegisters::SetDriveDmaCapable(int unit, bool capable) {
  const uint8_t bit = unit == 0 ? bm::kStatDrive0Dma : bm::kStatDrive1Dma;
  status_ = capable ? (status_ | bit) : (status_ & ~bit);
}

void BusMasterRegisters::Reset() {
  command_ = 0;
  status_ &= kDriveBits;
  prd_table_ = 0;
}

}  // namespace devices::ide

#ifndef DEVICES_IDE_ATA_COMMAND_SET_H_
#define DEVICES_IDE_ATA_COMMAND_SET_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "devices/ide/device_settings.h"
#include "devices/ide/task_file.h"

namespace devices::ide {

// A disk read or write as the command asked for it (ATA8-ACS 7.x READ/WRITE SECTORS, MULTIPLE,
// DMA, their EXT forms and WRITE ... FUA EXT), already checked against the medium.
struct DiskTransfer {
  bool write = false;
  bool dma = false;
  uint64_t lba = 0;
  uint32_t sectors = 0;
  // PIO: sectors per DRQ block (1, or the multiple count for READ/WRITE MULTIPLE).
  uint32_t block_sectors = 1;
  // Force Unit Access: the FUA EXT commands, and every write while the guest has the write cache
  // turned off (SET FEATURES 82h).
  bool fua = false;
  bool lba48 = false;
};

// What a command register write means for the channel (the protocol of ATA8-APT 10.x it runs).
struct AtaOutcome {
  enum class Kind {
    kComplete,     // non-data, done: DRDY, INTRQ
    kError,        // done with ERR and `error`: INTRQ
    kPioIn,        // PIO data-in of `data` (one DRQ block): DRQ, INTRQ (IDENTIFY)
    kTransfer,     // a disk read or write: `transfer`
    kFlush,        // FLUSH CACHE (EXT): through the block layer
    kPacket,       // PACKET: DRQ for the 12-byte packet, no INTRQ; `packet_dma`
    kDeviceReset,  // DEVICE RESET of a packet device: no INTRQ
    kDiagnostic,   // EXECUTE DEVICE DIAGNOSTIC: both devices
  };
  Kind kind = Kind::kComplete;
  uint8_t error = 0;
  // kError: load the device's signature into its registers first (ATA8-ACS 7.16.5: a packet
  // device aborts IDENTIFY DEVICE and "shall place the PACKET feature set signature" there).
  bool signature = false;
  // kComplete: a Count register output (CHECK POWER MODE).
  std::optional<uint8_t> count;
  std::vector<uint8_t> data;
  DiskTransfer transfer;
  bool packet_dma = false;
};

// Decodes command `command` for a device with `settings` and the registers `tf` (ATA8-ACS 7.x),
// applying the settings commands (SET FEATURES, SET MULTIPLE MODE, INITIALIZE DEVICE PARAMETERS)
// to `settings`. Commands the device does not implement, or with invalid parameters, end in
// ABRT; addresses outside the medium in IDNF. Never fails otherwise.
AtaOutcome ExecuteAtaCommand(uint8_t command, const TaskFile& tf, DeviceSettings& settings);

}  // namespace devices::ide

#endif  // DEVICES_IDE_ATA_COMMAND_SET_H_

#ifndef DEVICES_IDE_DEVICE_SETTINGS_H_
#define DEVICES_IDE_DEVICE_SETTINGS_H_

#include <cstdint>
#include <string>

#include "devices/ide/ata.h"
#include "devices/ide/task_file.h"

namespace devices::ide {

// What one ATA or ATAPI device reports and what the host has set on it: the inputs of IDENTIFY
// (DEVICE and PACKET DEVICE) and the state SET FEATURES, SET MULTIPLE MODE and INITIALIZE DEVICE
// PARAMETERS change. Owned by the channel, under its lock.
struct DeviceSettings {
  DeviceKind kind = DeviceKind::kNone;
  int unit = 0;  // 0 (master) or 1 (slave): IDENTIFY word 93

  // IDENTIFY strings (ATA8-ACS 7.16: model 40 characters, serial 20, firmware 8; space-padded).
  std::string model;
  std::string serial;
  std::string firmware;

  // A disk: capacity in 512-byte sectors, fixed for the drive's lifetime.
  uint64_t sectors = 0;
  bool read_only = false;
  // The volatile write cache as the guest sees it (IDENTIFY word 85 bit 5): the drive's cache mode
  // at start, then SET FEATURES 02h/82h. With it off, every write goes down with FUA.
  bool write_cache = true;
  // SET MULTIPLE MODE: sectors per DRQ block of READ/WRITE MULTIPLE; 0 = disabled.
  uint8_t multiple = kMaxMultiple;
  // SET FEATURES 03h: the selected transfer mode (xfer:: value); UDMA mode 5 until then, as QEMU.
  uint8_t transfer_mode = xfer::kUltraDma | xfer::kMaxUltraDma;
  // CHS translation: the default one, and the current one (INITIALIZE DEVICE PARAMETERS).
  ChsGeometry default_geometry;
  ChsGeometry geometry;

  // IDENTIFY word 47: the largest DRQ block of READ/WRITE MULTIPLE.
  static constexpr uint8_t kMaxMultiple = 16;
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_DEVICE_SETTINGS_H_

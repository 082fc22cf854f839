#ifndef DEVICES_IDE_IDENTIFY_H_
#define DEVICES_IDE_IDENTIFY_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "devices/ide/device_settings.h"

namespace devices::ide {

using IdentifyWords = std::array<uint16_t, 256>;

// IDENTIFY DEVICE data of an ATA disk (ATA8-ACS 7.16, table 22).
IdentifyWords BuildIdentifyDevice(const DeviceSettings& settings);
// IDENTIFY PACKET DEVICE data of an ATAPI CD/DVD device (ATA8-ACS 7.17, table 30).
IdentifyWords BuildIdentifyPacketDevice(const DeviceSettings& settings);

// The 512 bytes as they cross the data port: words little-endian (ATA8-APT: word n is bytes 2n
// and 2n+1, low byte first).
std::vector<uint8_t> IdentifyBytes(const IdentifyWords& words);

// Writes an ATA string (ATA8-ACS 3.x "ATA string convention": two characters per word, the first
// in bits 15:8, padded with spaces) of `word_count` words starting at `first_word`.
void PutAtaString(IdentifyWords& words, int first_word, int word_count, const std::string& text);
// Reads one back (tests and logs), trailing spaces removed.
std::string GetAtaString(const IdentifyWords& words, int first_word, int word_count);

}  // namespace devices::ide

#endif  // DEVICES_IDE_IDENTIFY_H_

#include "devices/ide/identify.h"

#include <algorithm>

namespace devices::ide {
namespace {

// The DMA mode bits of words 63 and 88: supported modes in bits 7:0, the selected one (at most
// one of the two words) in bits 15:8 (ATA8-ACS 7.16.7.x).
uint16_t MultiwordDmaWord(uint8_t transfer_mode) {
  uint16_t word = 0x0007;  // modes 0, 1 and 2 supported
  if ((transfer_mode & ~xfer::kModeMask) == xfer::kMultiwordDma) {
    word |= uint16_t{1} << (8 + (transfer_mode & xfer::kModeMask));
  }
  return word;
}

uint16_t UltraDmaWord(uint8_t transfer_mode) {
  uint16_t word = 0x003f;  // modes 0 to 5 supported
  if ((transfer_mode & ~xfer::kModeMask) == xfer::kUltraDma) {
    word |= uint16_t{1} << (8 + (transfer_mode & xfer::kModeMask));
  }
  return word;
}

// Word 93, hardware reset results (ATA8-ACS 7.16.7.44): bit 14 set and 15 clear (valid), bit 13
// CBLID- above V_iHB (an 80-conductor cable); for device 0 bit 0 set, bits 2:1 = 01b (device number
// by jumper), bit 3 diagnostics passed; for device 1 bit 8 set and bits 10:9 = 01b.
uint16_t ResetResultsWord(int unit) { return unit == 0 ? 0x600b : 0x6300; }

// Word 255 (ATA8-ACS 7.16.7.85): A5h signature in bits 7:0 and in bits 15:8 the two's complement
// of the sum of bytes 0 to 510, so that all 512 bytes sum to zero.
void PutIntegrityWord(IdentifyWords& words) {
  words[255] = 0x00a5;
  uint8_t sum = 0;
  for (int i = 0; i < 255; ++i) sum += static_cast<uint8_t>(words[i]) + (words[i] >> 8);
  sum += 0xa5;
  words[255] |= static_cast<uint16_t>(static_cast<uint8_t>(-sum)) << 8;
}

void PutIdentityStrings(IdentifyWords& words, const DeviceSettings& settings) {
  PutAtaString(words, 10, 10, settings.serial);
  PutAtaString(words, 23, 4, settings.firmware);
  PutAtaString(words, 27, 20, settings.model);
}

}  // namespace

void PutAtaString(IdentifyWords& words, int first_word, int word_count, const std::string& text) {
  for (int i = 0; i < word_count; ++i) {
    const size_t at = 2 * static_cast<size_t>(i);
    const uint8_t high = at < text.size() ? static_cast<uint8_t>(text[at]) : ' ';
    const uint8_t low = at + 1 < text.size() ? static_cast<uint8_t>(text[at + 1]) : ' ';
    words[first_word + i] = static_cast<uint16_t>(high << 8 | low);
  }
}

std::string GetAtaString(const IdentifyWords& words, int first_word, int word_count) {
  std::string text;
  for (int i = 0; i < word_count; ++i) {
    text.push_back(static_cast<char>(words[first_word + i] >> 8));
    text.push_back(static_cast<char>(words[first_word + i] & 0xff));
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

std::vector<uint8_t> IdentifyBytes(const IdentifyWords& words) {
  std::vector<uint8_t> bytes(512);
  for (int i = 0; i < 256; ++i) {
    bytes[2 * i] = static_cast<uint8_t>(words[i]);
    bytes[2 * i + 1] = static_cast<uint8_t>(words[i] >> 8);
  }
  return bytes;
}

IdentifyWords BuildIdentifyDevice(const DeviceSettings& s) {
  IdentifyWords w{};
  const uint64_t lba28 = std::min<uint64_t>(s.sectors, 0x0fffffff);
  const ChsGeometry& dflt = s.default_geometry;
  const ChsGeometry& cur = s.geometry;
  const uint64_t chs_capacity =
      std::min<uint64_t>(uint64_t{cur.cylinders} * cur.heads * cur.sectors, 0xffffffffu);

  w[0] = 0x0040;  // ATA device (bit 15 clear); bit 6 (obsolete): not removable
  w[1] = static_cast<uint16_t>(dflt.cylinders);
  w[2] = 0xc837;  // no SET FEATURES spin-up needed, IDENTIFY data complete
  w[3] = static_cast<uint16_t>(dflt.heads);
  w[6] = static_cast<uint16_t>(dflt.sectors);
  PutIdentityStrings(w, s);
  w[47] = 0x8000 | DeviceSettings::kMaxMultiple;  // READ/WRITE MULTIPLE: at most 16 per block
  w[48] = 0x4000;                                 // trusted computing: not supported
  w[49] = 0x0b00;  // IORDY supported (11), LBA supported (9), DMA supported (8)
  w[50] = 0x4000;
  w[51] = 0x0200;  // obsolete PIO timing, as drives still report
  w[52] = 0x0200;
  w[53] = 0x0007;  // words 54-58, 64-70 and 88 are valid
  w[54] = static_cast<uint16_t>(cur.cylinders);
  w[55] = static_cast<uint16_t>(cur.heads);
  w[56] = static_cast<uint16_t>(cur.sectors);
  w[57] = static_cast<uint16_t>(chs_capacity);
  w[58] = static_cast<uint16_t>(chs_capacity >> 16);
  w[59] = 0x0100 | s.multiple;  // the current multiple setting is valid
  w[60] = static_cast<uint16_t>(lba28);
  w[61] = static_cast<uint16_t>(lba28 >> 16);
  w[63] = MultiwordDmaWord(s.transfer_mode);
  w[64] = 0x0003;  // PIO modes 3 and 4
  w[65] = 120;     // minimum multiword DMA cycle time, ns (mode 2)
  w[66] = 120;     // recommended multiword DMA cycle time
  w[67] = 120;     // minimum PIO cycle time without flow control
  w[68] = 120;     // minimum PIO cycle time with IORDY
  w[80] = 0x01f0;  // major version: ATA/ATAPI-4 to ATA8-ACS
  // Command sets supported (82-84) and enabled (85-87). 82: NOP (14), write cache (5), power
  // management (3). 83: bit 14 set, FLUSH CACHE EXT (13), FLUSH CACHE (12), 48-bit address (10).
  // 84: bit 14 set, WRITE DMA FUA EXT and WRITE MULTIPLE FUA EXT (6).
  w[82] = 0x4028;
  w[83] = 0x7400;
  w[84] = 0x4040;
  w[85] = 0x4008 | (s.write_cache ? 0x0020 : 0);
  w[86] = 0x3400;
  w[87] = 0x4040;
  w[88] = UltraDmaWord(s.transfer_mode);
  w[93] = ResetResultsWord(s.unit);
  w[100] = static_cast<uint16_t>(s.sectors);
  w[101] = static_cast<uint16_t>(s.sectors >> 16);
  w[102] = static_cast<uint16_t>(s.sectors >> 32);
  w[103] = static_cast<uint16_t>(s.sectors >> 48);
  // Physical/logical sector size (7.16.7.59): valid, 2^3 logical sectors per physical one, so a
  // guest aligns its I/O to host pages (as the SCSI disk's READ CAPACITY(16) says); alignment of
  // logical sector 0 within a physical one (word 209): offset 0.
  w[106] = 0x6003;
  w[209] = 0x4000;
  PutIntegrityWord(w);
  return w;
}

IdentifyWords BuildIdentifyPacketDevice(const DeviceSettings& s) {
  IdentifyWords w{};
  // Word 0 (7.17.7.1): ATAPI (15:14 = 10b), CD-ROM device type 05h (12:8), removable (7), DRQ
  // within 50 us of PACKET (6:5 = 10b), 12-byte packets (1:0 = 00b). QEMU's value.
  w[0] = 0x85c0;
  PutIdentityStrings(w, s);
  w[49] = 0x0300;  // LBA (9), DMA (8)
  w[50] = 0x4000;
  w[53] = 0x0007;
  w[62] = 0x0007;  // DMADIR not required (bit 15 clear)
  w[63] = MultiwordDmaWord(s.transfer_mode);
  w[64] = 0x0003;
  w[65] = 0x00b4;
  w[66] = 0x00b4;
  w[67] = 0x012c;
  w[68] = 0x00b4;
  w[71] = 30;  // typical PACKET-to-bus-release and SERVICE-to-BSY-clear times, ns
  w[72] = 30;
  w[80] = 0x01f0;
  // 82: NOP (14), DEVICE RESET (9), PACKET (4); 83/84/87: bit 14 set.
  w[82] = 0x4210;
  w[83] = 0x4000;
  w[84] = 0x4000;
  w[85] = 0x4210;
  w[86] = 0x0000;
  w[87] = 0x4000;
  w[88] = UltraDmaWord(s.transfer_mode);
  w[93] = ResetResultsWord(s.unit);
  PutIntegrityWord(w);
  return w;
}

}  // namespace devices::ide

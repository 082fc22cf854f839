#ifndef DEVICES_IDE_TASK_FILE_H_
#define DEVICES_IDE_TASK_FILE_H_

#include <cstdint>
#include <optional>

namespace devices::ide {

// A CHS translation (ATA8-ACS: obsolete, but INITIALIZE DEVICE PARAMETERS and CHS addressing are
// still what old drivers use).
struct ChsGeometry {
  uint32_t cylinders = 0;
  uint32_t heads = 0;
  uint32_t sectors = 0;  // per track
};

// The default translation for a disk of `sectors` (ATA-5 Annex: 16 heads, 63 sectors per track,
// at most 16383 cylinders).
ChsGeometry DefaultGeometry(uint64_t sectors);

// The command block registers one device latches (ATA8-APT 5.2). Every write to Features, Count
// and the three LBA registers pushes the previous value into the "previous content" byte that the
// 48-bit address feature set reads as the high order byte (ATA8-ACS 4.x "48-bit Address feature
// set": the registers are a two-deep FIFO; the Device Control HOB bit selects which one reads).
struct TaskFile {
  uint8_t feature = 0;
  uint8_t count = 0;
  uint8_t lba_low = 0;
  uint8_t lba_mid = 0;
  uint8_t lba_high = 0;
  uint8_t device = 0;
  uint8_t hob_feature = 0;
  uint8_t hob_count = 0;
  uint8_t hob_lba_low = 0;
  uint8_t hob_lba_mid = 0;
  uint8_t hob_lba_high = 0;

  // A host write of register `reg` (reg::kFeature .. reg::kDevice).
  void Write(int reg, uint8_t value);
  // What the host reads from register `reg` (reg::kError is not here: errors are the device's),
  // with HOB set: the previous contents.
  uint8_t Read(int reg, bool hob) const;

  // 28-bit LBA (ATA8-ACS 4.x: LBA 27:24 in Device bits 3:0) and Count (0 means 256).
  uint64_t Lba28() const;
  uint32_t Count28() const { return count == 0 ? 256 : count; }
  // 48-bit LBA from the current and previous contents, and Count (0 means 65536).
  uint64_t Lba48() const;
  uint32_t Count48() const;
  // The LBA the CHS address in the registers means under `geometry`, or nullopt when the address
  // is not a valid one (sector 0, head or cylinder beyond the translation).
  std::optional<uint64_t> ChsToLba(const ChsGeometry& geometry) const;

  // Writes an address back (the LBA of an error, ATA8-ACS "LBA of first unrecoverable error").
  void SetLba(uint64_t lba, bool lba48);
  // A device's signature after a reset or diagnostic (ATA8-APT 9.12, ATA8-ACS table 184):
  // Count 01h, LBA Low 01h, LBA Mid/High 00h/00h for an ATA device and 14h/EBh for an ATAPI one.
  // The Device register is left alone (the caller knows whether the reset selects device 0).
  void SetSignature(bool packet_device);

  bool lba_mode() const { return (device & 0x40) != 0; }
  // The PACKET command's byte count limit in LBA Mid/High (ATA8-APT 11.x).
  uint16_t byte_count_limit() const { return static_cast<uint16_t>(lba_mid | lba_high << 8); }
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_TASK_FILE_H_

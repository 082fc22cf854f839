#ifndef DEVICES_IDE_BUS_MASTER_H_
#define DEVICES_IDE_BUS_MASTER_H_

#include <cstdint>

namespace devices::ide {

// One channel's bus master IDE registers (SFF-8038i rev 1.0 section 3; Intel PIIX3 datasheet
// "BMICX", "BMISX", "BMIDTPX"): the command register (Start/Stop, Read/Write control), the status
// register (Active, Error and Interrupt, the two drive "DMA capable" bits) and the PRD table
// pointer. A plain register model: the channel owns it under its lock and decides what a start
// means; this class only applies the access rules.
class BusMasterRegisters {
 public:
  // What a register write changed.
  struct WriteEffect {
    bool started = false;  // Start/Stop went 0 -> 1
    bool stopped = false;  // Start/Stop went 1 -> 0
  };

  // Byte `offset` (0..7) of the block. Unassigned bytes read 0.
  uint8_t Read(int offset) const;
  WriteEffect Write(int offset, uint8_t value);

  // The engine runs (Start/Stop is 1).
  bool started() const { return (command_ & kStart) != 0; }
  // Read/Write control: 1 = the bus master writes memory (a device-to-host transfer, a read).
  bool writes_memory() const { return (command_ & kWriteMemory) != 0; }
  uint32_t prd_table() const { return prd_table_; }
  uint8_t status() const { return status_; }

  // Bits the bus master sets when a transfer ends (SFF-8038i 3.1.2).
  void SetActive(bool active);
  void SetError() { status_ |= kError; }
  void SetInterrupt() { status_ |= kInterrupt; }
  // The driver's "drive n is DMA capable" bits, which firmware sets for attached drives.
  void SetDriveDmaCapable(int unit, bool capable);

  // Power-on values.
  void Reset();

 private:
  static constexpr uint8_t kStart = 0x01;
  static constexpr uint8_t kWriteMemory = 0x08;
  static constexpr uint8_t kActive = 0x01;
  static constexpr uint8_t kError = 0x02;
  static constexpr uint8_t kInterrupt = 0x04;
  static constexpr uint8_t kDriveBits = 0x60;

  uint8_t command_ = 0;
  uint8_t status_ = 0;
  uint32_t prd_table_ = 0;
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_BUS_MASTER_H_

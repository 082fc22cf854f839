#ifndef DEVICES_IDE_CHANNEL_H_
#define DEVICES_IDE_CHANNEL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "block/drive.h"
#include "devices/ide/ata.h"
#include "devices/ide/ata_command_set.h"
#include "devices/ide/atapi.h"
#include "devices/ide/bus_master.h"
#include "devices/ide/device_settings.h"
#include "devices/ide/io_worker.h"
#include "devices/ide/task_file.h"
#include "devices/iothread.h"
#include "devices/scsi/cdrom.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/irq_line.h"

namespace devices::ide {

// One device position of a channel, as configured.
struct ChannelUnitConfig {
  DeviceSettings settings;  // kind kNone: nothing there
  std::shared_ptr<block::Drive> drive;
  std::shared_ptr<scsi::CdRom> cdrom;
};

// One IDE channel (ATA8-APT): the command block registers, the Device Control / Alternate Status
// register, master and slave devices, the channel's INTRQ and its bus master registers
// (SFF-8038i). All register accesses come from vCPU threads; anything that waits for storage (a
// disk read or write, DMA, a flush, an ATAPI packet) is handed to the iothread with BSY set, and
// its completion sets the registers and raises INTRQ from that thread. One mutex guards the
// channel.
//
// What a hostile guest gets (every case leaves the channel usable):
// - registers written while the selected device is BSY or has DRQ: ignored (ATA8-APT 5.2: the
//   host shall not; QEMU ignores them too); a command then: ignored, except DEVICE RESET to a
//   packet device, which is what it is for;
// - data port reads without DRQ: 0, writes without DRQ: dropped; accesses past a DRQ block's end
//   pad with zeros and end the block;
// - a command to an absent device: nothing (status reads 00h, no INTRQ), except EXECUTE DEVICE
//   DIAGNOSTIC, which device 0 runs for both; an empty channel reads 7Fh (DD7 pulled down);
// - unknown or invalid commands: ABRT; addresses outside the medium: IDNF;
// - DMA: a PRD table outside memory, without EOT within a page, or shorter than the transfer, a
//   bus master started in the wrong direction or with bus mastering disabled in PCI Command:
//   bus master Error + Interrupt, Active cleared, and the command ends with ERR/ABRT and INTRQ;
// - SRST or DEVICE RESET abandon the command in flight: its I/O finishes on the iothread and its
//   result is dropped.
class IdeChannel {
 public:
  IdeChannel(int index, std::array<ChannelUnitConfig, 2> units, std::shared_ptr<vmm::IrqLine> irq,
             const vmm::GuestMemory& memory, IoThread& iothread,
             std::function<bool()> bus_master_enabled);
  ~IdeChannel();
  IdeChannel(const IdeChannel&) = delete;
  IdeChannel& operator=(const IdeChannel&) = delete;

  // Creates the iothread's queues. Before the first access.
  absl::Status StartIo();
  // Drains and removes them; afterwards nothing completes. Idempotent.
  void StopIo();

  // The command block (ATA8-APT 5.2): offset 0-7 from 1F0h/170h. The data register takes 16- and
  // 32-bit accesses (PIIX3 supports 32-bit PIO); other registers are 8-bit, so a wider access at
  // offset 1-7 reaches consecutive registers.
  void ReadCommandBlock(uint64_t offset, std::span<uint8_t> data);
  void WriteCommandBlock(uint64_t offset, std::span<const uint8_t> data);
  // String I/O on the data register (rep insw/outsw): item_size-byte accesses (2 or 4: the data
  // register's widths) one after the other, under one lock; each behaves as ReadCommandBlock/WriteCommandBlock of one item would,
  // so a string that runs past a DRQ block reads the next block or zeros as the items would.
  void ReadDataString(size_t item_size, std::span<uint8_t> data);
  void WriteDataString(size_t item_size, std::span<const uint8_t> data);
  // The control block register at 3F6h/376h: Alternate Status (read), Device Control (write).
  uint8_t ReadAlternateStatus();
  void WriteDeviceControl(uint8_t value);
  // The bus master registers, byte `offset` 0-7 (SFF-8038i 3.x).
  uint8_t ReadBusMaster(int offset);
  void WriteBusMaster(int offset, uint8_t value);

  bool has_devices() const { return has_devices_; }
  int index() const { return index_; }

 private:
  enum class Phase : uint8_t {
    kIdle,     // no command
    kBusy,     // a job is on the iothread
    kDmaWait,  // a DMA command waits for the bus master's Start
    kPioIn,    // DRQ: the host reads a block
    kPioOut,   // DRQ: the host writes a block (data, or the packet)
  };
  enum class PioOp : uint8_t {
    kNone,
    kIdentify,
    kDiskRead,
    kDiskWrite,
    kPacketCdb,
    kPacketIn,
    kPacketOut
  };

  struct Unit {
    DeviceSettings settings;
    TaskFile tf;
    uint8_t status = 0;
    uint8_t error = 0;
    bool irq_pending = false;
    Phase phase = Phase::kIdle;
    uint64_t job = 0;  // the job the unit waits for; 0: none
    // PIO: `data` holds everything of the current phase; the host moves through
    // [pos, block_end), one DRQ block.
    PioOp pio = PioOp::kNone;
    std::vector<uint8_t> data;
    size_t pos = 0;
    size_t block_end = 0;
    // A disk transfer: the next LBA and the sectors left, and the chunk on the iothread.
    DiskTransfer transfer;
    uint64_t next_lba = 0;
    uint32_t remaining = 0;
    uint32_t chunk_sectors = 0;
    // A packet: the byte count limit latched at PACKET, DMA or not.
    Packet cdb{};
    PacketPlan plan;
    bool packet_dma = false;
    uint16_t byte_limit = 0;
    std::shared_ptr<scsi::CdRom> cdrom;  // a packet device's MMC unit

    bool present() const { return settings.kind != DeviceKind::kNone; }
    bool packet_device() const { return settings.kind == DeviceKind::kCdRom; }
  };

  Unit& Selected() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return units_[selected_]; }
  int IndexOf(const Unit& unit) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
    return &unit == &units_[0] ? 0 : 1;
  }

  uint8_t ReadRegisterLocked(int reg) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteRegisterLocked(int reg, uint8_t value) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ReadDataLocked(std::span<uint8_t> data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WriteDataLocked(std::span<const uint8_t> data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void CommandLocked(uint8_t command) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ApplyOutcome(Unit& unit, AtaOutcome outcome) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Ends the command: status, error, phase idle, INTRQ if `interrupt`.
  void Finish(Unit& unit, uint8_t status, uint8_t error, bool interrupt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Fail(Unit& unit, uint8_t error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // Drops whatever the unit was doing (a reset): its job's result will be stale.
  void Abandon(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void ResetDevice(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void DeviceReset(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void Diagnostic() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  void StartPio(Unit& unit, Phase phase, PioOp op, size_t block_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void PioBlockDone(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SubmitJob(Unit& unit, IoJob job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void WaitForDma(Unit& unit, IoJob job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void MaybeStartDma() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void DmaFault(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Disk transfers.
  void StartDiskTransfer(Unit& unit, const DiskTransfer& transfer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SubmitDiskRead(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void StartDiskWriteBlock(Unit& unit, bool interrupt) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void FailDisk(Unit& unit, int error, uint64_t lba) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Packets.
  void PacketReceived(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void NextPacketBlock(Unit& unit, bool in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void PacketDone(Unit& unit, IoResult& result) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void PacketStatus(Unit& unit, uint8_t status, uint8_t error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // Interrupts (ATA8-APT 5.x INTRQ; SFF-8038i Interrupt bit).
  void RaiseInterrupt(Unit& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UpdateIrq() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  // On the iothread.
  void OnJobDone(IoResult result);

  const int index_;
  const bool has_devices_;
  const std::shared_ptr<vmm::IrqLine> irq_;
  const std::function<bool()> bus_master_enabled_;
  std::shared_ptr<IoWorker> worker_;

  absl::Mutex mutex_;
  std::array<Unit, 2> units_ ABSL_GUARDED_BY(mutex_);
  int selected_ ABSL_GUARDED_BY(mutex_) = 0;
  uint8_t device_control_ ABSL_GUARDED_BY(mutex_) = 0;
  bool irq_level_ ABSL_GUARDED_BY(mutex_) = false;
  BusMasterRegisters bus_master_ ABSL_GUARDED_BY(mutex_);
  // The DMA command waiting for Start (at most one: the channel runs one command at a time).
  std::optional<IoJob> dma_job_ ABSL_GUARDED_BY(mutex_);
  uint64_t next_job_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_CHANNEL_H_

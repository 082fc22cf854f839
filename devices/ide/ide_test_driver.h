#ifndef DEVICES_IDE_IDE_TEST_DRIVER_H_
#define DEVICES_IDE_IDE_TEST_DRIVER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "block/drive.h"
#include "block/media.h"
#include "block/memory_backend.h"
#include "devices/ide/ata.h"
#include "devices/ide/atapi.h"
#include "devices/ide/ide_controller.h"
#include "devices/pci/pci_root_bus.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/irq_line.h"

// Test support: a controller on real port and MMIO buses with guest memory, PCI enumeration and
// two recording IRQ lines, and a small host-side ATA/ATAPI driver that does what a guest driver
// does, one register access at a time.

namespace devices::ide::testing {

class FakeIrqLine : public vmm::IrqLine {
 public:
  void SetLevel(bool asserted) override {
    if (asserted && !level_.load()) raises_.fetch_add(1);
    level_.store(asserted);
  }
  bool level() const { return level_.load(); }
  int raises() const { return raises_.load(); }

 private:
  std::atomic<bool> level_{false};
  std::atomic<int> raises_{0};
};

// A disk on a MemoryBackend.
struct TestDisk {
  std::shared_ptr<block::MemoryBackend> backend;
  std::shared_ptr<block::Drive> drive;
};
TestDisk MakeDisk(uint64_t size_bytes, block::CacheMode cache = block::CacheMode::kWriteback,
                  bool native_fua = true, bool read_only = false);

// A CD-ROM drive with an ISO-like medium of `blocks` 2048-byte blocks (block i filled with the
// byte i + seed), or empty with blocks 0.
struct TestCd {
  std::shared_ptr<block::RemovableMedia> media;
  std::shared_ptr<block::Drive> drive;
};
TestCd MakeCd(uint64_t blocks, uint8_t seed = 0);
// Byte `offset` of such a medium.
uint8_t CdByte(uint64_t offset, uint8_t seed);
std::shared_ptr<block::MemoryBackend> MakeCdMedium(uint64_t blocks, uint8_t seed);

class IdeTestBed {
 public:
  static constexpr uint64_t kMemoryBytes = 16 << 20;

  // Creates the controller, puts it on a PCI root bus with its BAR assigned (unless
  // `assign_bars` is false) and Bus Master Enable set (unless `bus_master` is false).
  static absl::StatusOr<std::unique_ptr<IdeTestBed>> Create(IdeControllerOptions options,
                                                            bool assign_bars = true,
                                                            bool bus_master = true);
  ~IdeTestBed();

  uint8_t In8(uint16_t port);
  uint16_t In16(uint16_t port);
  uint32_t In32(uint16_t port);
  void Out8(uint16_t port, uint8_t value);
  void Out16(uint16_t port, uint16_t value);
  void Out32(uint16_t port, uint32_t value);
  // rep insw / rep outsw: data.size() / item_size accesses at `port` in one bus call, as KVM
  // hands a string instruction over.
  void InString(uint16_t port, size_t item_size, std::span<uint8_t> data);
  void OutString(uint16_t port, size_t item_size, std::span<const uint8_t> data);

  uint16_t ReadConfig16(uint32_t offset);
  uint32_t ReadConfig32(uint32_t offset);
  void WriteConfig16(uint32_t offset, uint16_t value);

  IdeController& controller() { return *controller_; }
  const vmm::GuestMemory& memory() const { return *memory_; }
  FakeIrqLine& irq(int channel) { return *irqs_[channel]; }
  uint16_t bus_master_base() const { return bus_master_base_; }
  uint8_t pci_slot() const { return slot_; }

 private:
  IdeTestBed() = default;

  std::unique_ptr<vmm::GuestMemory> memory_;
  vmm::Bus pio_{"pio"};
  vmm::Bus mmio_{"mmio"};
  std::shared_ptr<FakeIrqLine> irqs_[2];
  std::shared_ptr<pci::PciRootBus> root_;
  std::shared_ptr<IdeController> controller_;
  uint16_t bus_master_base_ = 0;
  uint8_t slot_ = 0;
};

// One PRD entry as a driver writes it.
struct PrdEntry {
  uint32_t address;
  uint32_t count;  // bytes; 0x10000 is written as 0
  bool eot;
};

struct PacketResult {
  uint8_t status = 0;
  uint8_t error = 0;
  uint8_t reason = 0;  // interrupt reason at the end
  std::vector<uint8_t> data;
  std::vector<uint32_t> block_sizes;  // PIO DRQ blocks
  uint8_t bm_status = 0;              // DMA: bus master status before the engine was stopped
  bool timed_out = false;
};

// The host side of one channel (what ata_piix / libata-sff does).
class AtaDriver {
 public:
  AtaDriver(IdeTestBed& bed, int channel);

  uint16_t command_base() const { return command_base_; }
  uint16_t control_port() const { return control_port_; }
  uint16_t bus_master() const { return bus_master_; }

  uint8_t Status() { return bed_.In8(command_base_ + reg::kStatus); }
  uint8_t AltStatus() { return bed_.In8(control_port_); }
  uint8_t Error() { return bed_.In8(command_base_ + reg::kError); }
  uint8_t Reg(int reg) { return bed_.In8(command_base_ + reg); }
  void SetReg(int reg, uint8_t value) { bed_.Out8(command_base_ + reg, value); }
  void DeviceControl(uint8_t value) { bed_.Out8(control_port_, value); }
  void Command(uint8_t command) { bed_.Out8(command_base_ + reg::kCommand, command); }

  void Select(int unit);
  // Polls Alternate Status until BSY clears; false after `timeout`.
  bool WaitNotBusy(absl::Duration timeout = absl::Seconds(5));
  // SRST pulse, then waits for BSY to clear on device 0.
  void SoftReset();

  // Loads the task file (LBA addressing) and writes the command; does not wait.
  void Issue28(uint8_t command, uint64_t lba, uint8_t count, uint8_t feature = 0);
  void Issue48(uint8_t command, uint64_t lba, uint16_t count, uint16_t feature = 0);

  // PIO data port transfers of `bytes` (16-bit accesses, or 32-bit with a 16-bit tail).
  std::vector<uint8_t> ReadData(size_t bytes, bool wide = false);
  void WriteData(std::span<const uint8_t> data, bool wide = false);

  // PIO data-in command: waits for each DRQ block of `block_bytes` and reads it; returns the data
  // (empty on an error or timeout). Leaves the final status readable.
  std::vector<uint8_t> PioIn(size_t total_bytes, size_t block_bytes, bool wide = false);
  // PIO data-out: writes `data` in blocks; waits for completion. Returns the final status.
  uint8_t PioOut(std::span<const uint8_t> data, size_t block_bytes, bool wide = false);
  // IDENTIFY (DEVICE or PACKET DEVICE) as words; nullopt if the device aborted.
  std::optional<std::array<uint16_t, 256>> Identify(uint8_t command);

  // Bus master.
  void WritePrdTable(uint32_t table, const std::vector<PrdEntry>& entries);
  void SetupDma(uint32_t table, bool to_memory);  // stops the engine, clears Error/Interrupt
  void StartDma();
  void StopDma();
  uint8_t BmStatus() { return bed_.In8(bus_master_ + bm::kStatus); }
  // Waits for the DMA command to end (BSY clear); then stops the engine as libata does.
  bool WaitDma();

  // ATAPI: a packet with a PIO data phase (byte count limit `limit`), read in DRQ blocks.
  PacketResult PacketPio(const Packet& cdb, uint16_t limit, bool wide = true);
  // A PIO data-out packet (MODE SELECT).
  PacketResult PacketPioOut(const Packet& cdb, uint16_t limit, std::span<const uint8_t> data);
  // A packet with a DMA data phase into guest memory at `buffer` (`length` bytes, one PRD entry
  // per 64 KiB at `table`); the data is copied back into the result.
  PacketResult PacketDma(const Packet& cdb, uint32_t table, uint32_t buffer, uint32_t length);
  // REQUEST SENSE (alloc 18, PIO): sense key, ASC, ASCQ.
  std::array<uint8_t, 3> RequestSense();

 private:
  // Writes the packet after PACKET; false if the device did not ask for it.
  bool SendPacket(const Packet& cdb, uint8_t features, uint16_t limit);
  PacketResult FinishPacket(PacketResult result);

  IdeTestBed& bed_;
  const int channel_;
  const uint16_t command_base_;
  const uint16_t control_port_;
  const uint16_t bus_master_;
};

Packet MakePacket(std::initializer_list<uint8_t> bytes);
Packet Read10(uint32_t lba, uint16_t blocks);

}  // namespace devices::ide::testing

#endif  // DEVICES_IDE_IDE_TEST_DRIVER_H_

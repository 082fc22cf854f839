#ifndef DEVICES_IDE_IDE_CONTROLLER_H_
#define DEVICES_IDE_IDE_CONTROLLER_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "block/drive.h"
#include "devices/ide/ata.h"
#include "devices/ide/channel.h"
#include "devices/iothread.h"
#include "devices/pci/pci_device.h"
#include "devices/scsi/cdrom.h"
#include "devices/scsi/logical_unit.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/irq_line.h"

namespace devices::ide {

// One drive on the controller.
struct IdeDriveConfig {
  int channel = 0;  // 0 primary (1F0h, IRQ 14), 1 secondary (170h, IRQ 15)
  int unit = 0;     // 0 master, 1 slave
  DeviceKind kind = DeviceKind::kDisk;
  // kDisk: a fixed drive with 512-byte logical blocks. kCdRom: a removable drive (its medium is
  // read from the drive's RemovableMedia cache, never probed per command).
  std::shared_ptr<block::Drive> drive;
  // IDENTIFY strings; empty: "MICROVM HARDDISK" / "MICROVM DVD-ROM", the drive's name (or a
  // position-derived serial), "1.0".
  std::string model;
  std::string serial;
  std::string firmware;
  // kCdRom: INQUIRY strings and limits of the MMC unit. The ATAPI settings (no power-on unit
  // attention, NOT READY then UNIT ATTENTION after a media change, physical interface ATAPI) are
  // forced.
  scsi::LogicalUnitOptions unit_options;
};

struct IdeControllerOptions {
  // At most one per channel/unit position, four in all.
  std::vector<IdeDriveConfig> drives;
  // The iothread for DMA and block I/O, started by the assembly (devices::StartIoThreads: the
  // controller starts no thread of its own). Required.
  std::shared_ptr<IoThread> iothread;
};

// The IDE function of an Intel PIIX3 (82371SB function 1, PCI 8086:7010, class 01 01 80:
// mass storage, IDE, both channels in compatibility mode, bus master capable), as Linux's ata_piix
// and firmware expect it (Intel PIIX3 datasheet, "IDE interface"; SFF-8038i for the bus master):
//
// - The channels decode the ISA-compatible ports, not BARs 0-3 (which are unimplemented and read
//   0; PCI's legacy IDE rules give the OS the fixed ranges): primary 1F0h-1F7h and 3F6h on IRQ
//   14, secondary 170h-177h and 376h on IRQ 15. The ports decode while PCI Command I/O Space
//   Enable is set and the channel's IDETIM IDE Decode Enable (bit 15) is set (datasheet: IOSE
//   "disables access to the Legacy IDE ports (both Primary and Secondary) and PCI Bus Master IDE
//   I/O registers"). Off: reads see FFh (nothing claims the cycle), writes are dropped.
// - BAR4: 16 I/O ports of bus master registers, eight per channel. Transfers need Bus Master
//   Enable in PCI Command.
// - IDETIM (40h primary, 42h secondary) start with Decode Enable set, as firmware leaves them for
//   ata_piix's "port enabled" check; SIDETIM (44h) is 0. See the note in the .cc about writes.
// - No INTx: the channels use ISA IRQs 14 and 15 (Interrupt Pin 0).
//
// The controller owns its channels (devices/ide/channel.h) and their iothread work; the VMM adds
// it to the PCI root bus like any PciDevice and gives it two IRQ lines.
class IdeController final : public pci::PciDevice {
 public:
  static constexpr uint16_t kVendorIntel = 0x8086;
  static constexpr uint16_t kDevicePiix3Ide = 0x7010;
  static constexpr uint32_t kClassIdeCompatBusMaster = 0x010180;
  static constexpr int kBusMasterBar = 4;
  // Intel PIIX3 IDE configuration registers.
  static constexpr uint32_t kIdetimPrimary = 0x40;
  static constexpr uint32_t kIdetimSecondary = 0x42;
  static constexpr uint32_t kSidetim = 0x44;
  static constexpr uint16_t kIdetimDecodeEnable = 0x8000;
  // ISA-compatible ranges (PCI IDE Controller Specification rev 1.0, "compatibility mode").
  static constexpr std::array<uint16_t, 2> kCommandBlockBase = {0x1f0, 0x170};
  static constexpr std::array<uint16_t, 2> kControlBlockBase = {0x3f6, 0x376};
  static constexpr std::array<uint32_t, 2> kIrq = {14, 15};
  // The command block registers whose writes may be posted: applied later than the guest made
  // them, but in its order and before any of its accesses that is not posted (so before the
  // Command write that uses them, and before any read of them). Features, Sector Count and LBA
  // Low/Mid/High (offsets 1-5) only latch a value (and shift the previous one to HOB). Not the
  // Device register (offset 6): its DEV bit selects the drive whose INTRQ the channel's line then
  // shows, which must happen at the write; nor Data, Command or anything in the control block.
  // One difference a guest can see: ATA8-APT 5.2 has a write made while BSY or DRQ is set
  // ignored, and a posted one is judged when applied; only a guest that breaks that rule sees it,
  // as if it had written a little later. The VMM posts them through KVM's coalesced ring
  // (vmm/kvm/coalesced_writes.h): 10 of the 38 exits of a Linux WRITE DMA EXT and FLUSH CACHE EXT.
  struct PostableWrites {
    uint16_t port;
    uint16_t count;
  };
  static constexpr std::array<PostableWrites, 2> kPostableWrites = {
      PostableWrites{kCommandBlockBase[0] + reg::kFeature, reg::kLbaHigh - reg::kFeature + 1},
      PostableWrites{kCommandBlockBase[1] + reg::kFeature, reg::kLbaHigh - reg::kFeature + 1}};

  // Builds the function, its channels and MMC units, starts the I/O, and registers the legacy
  // ports on `pio_bus` (which must outlive the registrations: Shutdown() removes them). `memory`
  // must outlive the controller's I/O (Shutdown() or destruction ends it). The BAR is left to the
  // VMM (AssignBars) and PciRootBus::AddDevice, as for every PCI function.
  static absl::StatusOr<std::shared_ptr<IdeController>> Create(
      IdeControllerOptions options, vmm::Bus& pio_bus, std::shared_ptr<vmm::IrqLine> primary_irq,
      std::shared_ptr<vmm::IrqLine> secondary_irq, const vmm::GuestMemory& memory);
  ~IdeController() override;

  // The MMC unit at a position (for the VMM's media API and tests), or null.
  std::shared_ptr<scsi::CdRom> cdrom(int channel, int unit) const;
  IdeChannel& channel(int index) const { return *channels_[index & 1]; }
  // Whether the legacy ports of `channel` decode now (IOSE and IDETIM Decode Enable).
  bool LegacyDecodeEnabled(int channel) const;

  // Public for std::make_shared; use Create().
  IdeController(vmm::Bus& pio_bus, std::shared_ptr<IoThread> iothread);

 protected:
  void ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) override;
  void WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) override;
  void OnShutdown() override;

 private:
  class LegacyPorts;

  absl::Status Init(IdeControllerOptions& options, std::shared_ptr<vmm::IrqLine> primary_irq,
                    std::shared_ptr<vmm::IrqLine> secondary_irq, const vmm::GuestMemory& memory);
  absl::Status RegisterPorts();
  void StopAll();

  vmm::Bus& pio_bus_;
  // Shared with the assembly; declared before the channels, which use it, so it outlives them.
  const std::shared_ptr<IoThread> iothread_;
  std::array<std::unique_ptr<IdeChannel>, 2> channels_;
  std::array<std::array<std::shared_ptr<scsi::CdRom>, 2>, 2> cdroms_;
  std::vector<uint64_t> registered_ports_;  // bases on pio_bus_
  bool stopped_ = false;
};

}  // namespace devices::ide

#endif  // DEVICES_IDE_IDE_CONTROLLER_H_

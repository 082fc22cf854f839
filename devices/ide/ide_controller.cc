#include "devices/ide/ide_controller.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "devices/ide/task_file.h"
#include "devices/pci/pci_regs.h"
#include "vmm/sys_util/status_macros.h"

namespace devices::ide {

// A channel's ISA-compatible port range on the port I/O bus: the command block (eight ports) or
// the control block (one port). It holds the controller alive while registered, like a BAR.
class IdeController::LegacyPorts : public vmm::BusDevice {
 public:
  LegacyPorts(std::shared_ptr<IdeController> controller, int channel, bool control)
      : controller_(std::move(controller)), channel_(channel), control_(control) {}

  void Read(uint64_t offset, std::span<uint8_t> data) override {
    if (!controller_->LegacyDecodeEnabled(channel_)) {
      std::fill(data.begin(), data.end(), 0xff);
      return;
    }
    IdeChannel& channel = controller_->channel(channel_);
    if (!control_) {
      channel.ReadCommandBlock(offset, data);
      return;
    }
    std::fill(data.begin(), data.end(), 0xff);
    if (offset == 0 && !data.empty()) data[0] = channel.ReadAlternateStatus();
  }

  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    if (!controller_->LegacyDecodeEnabled(channel_)) return;
    IdeChannel& channel = controller_->channel(channel_);
    if (!control_) {
      channel.WriteCommandBlock(offset, data);
      return;
    }
    if (offset == 0 && !data.empty()) channel.WriteDeviceControl(data[0]);
  }

  // rep insw/outsw on the data register: the whole string under one channel lock (a CD sector in
  // PIO is 1024 words in one exit). Anything else, item by item.
  static bool DataString(bool control, uint64_t offset, size_t item_size) {
    return !control && offset == reg::kData && (item_size == 2 || item_size == 4);
  }

  void ReadString(uint64_t offset, size_t item_size, std::span<uint8_t> data) override {
    if (!DataString(control_, offset, item_size) || !controller_->LegacyDecodeEnabled(channel_)) {
      BusDevice::ReadString(offset, item_size, data);
      return;
    }
    controller_->channel(channel_).ReadDataString(item_size, data);
  }

  void WriteString(uint64_t offset, size_t item_size, std::span<const uint8_t> data) override {
    if (!DataString(control_, offset, item_size) || !controller_->LegacyDecodeEnabled(channel_)) {
      BusDevice::WriteString(offset, item_size, data);
      return;
    }
    controller_->channel(channel_).WriteDataString(item_size, data);
  }

 private:
  const std::shared_ptr<IdeController> controller_;
  const int channel_;
  const bool control_;
};

namespace {

pci::PciIdentity Piix3IdeIdentity() {
  pci::PciIdentity identity;
  identity.vendor_id = IdeController::kVendorIntel;
  identity.device_id = IdeController::kDevicePiix3Ide;
  identity.class_code = IdeController::kClassIdeCompatBusMaster;
  identity.revision = 0;
  return identity;
}

}  // namespace

IdeController::IdeController(vmm::Bus& pio_bus, std::shared_ptr<IoThread> iothread)
    : pci::PciDevice(Piix3IdeIdentity()), pio_bus_(pio_bus), iothread_(std::move(iothread)) {}

IdeController::~IdeController() {
  // Every port registration holds the controller, so none is left when this runs (and the bus
  // may already be gone): nothing to unregister.
  registered_ports_.clear();
  StopAll();
}

absl::StatusOr<std::shared_ptr<IdeController>> IdeController::Create(
    IdeControllerOptions options, vmm::Bus& pio_bus, std::shared_ptr<vmm::IrqLine> primary_irq,
    std::shared_ptr<vmm::IrqLine> secondary_irq, const vmm::GuestMemory& memory) {
  if (primary_irq == nullptr || secondary_irq == nullptr) {
    return absl::InvalidArgumentError("the IDE controller needs IRQ lines for both channels");
  }
  if (options.iothread == nullptr) {
    return absl::InvalidArgumentError("the IDE controller needs an iothread");
  }
  auto controller = std::make_shared<IdeController>(pio_bus, options.iothread);
  absl::Status status =
      controller->Init(options, std::move(primary_irq), std::move(secondary_irq), memory);
  if (status.ok()) status = controller->RegisterPorts();
  if (!status.ok()) {
    controller->StopAll();
    return status;
  }
  return controller;
}

absl::Status IdeController::Init(IdeControllerOptions& options,
                                 std::shared_ptr<vmm::IrqLine> primary_irq,
                                 std::shared_ptr<vmm::IrqLine> secondary_irq,
                                 const vmm::GuestMemory& memory) {
  if (options.drives.size() > 4) {
    return absl::InvalidArgumentError("an IDE controller has four drive positions");
  }
  std::array<std::array<ChannelUnitConfig, 2>, 2> units;
  for (IdeDriveConfig& config : options.drives) {
    if (config.channel < 0 || config.channel > 1 || config.unit < 0 || config.unit > 1) {
      return absl::InvalidArgumentError(
          absl::StrFormat("IDE position %d.%d does not exist (channel 0-1, unit 0-1)",
                          config.channel, config.unit));
    }
    ChannelUnitConfig& unit = units[config.channel][config.unit];
    if (unit.settings.kind != DeviceKind::kNone) {
      return absl::InvalidArgumentError(
          absl::StrFormat("IDE position %d.%d is taken twice", config.channel, config.unit));
    }
    if (config.drive == nullptr || config.kind == DeviceKind::kNone) {
      return absl::InvalidArgumentError(
          absl::StrFormat("IDE position %d.%d: no drive", config.channel, config.unit));
    }
    DeviceSettings& settings = unit.settings;
    settings.kind = config.kind;
    settings.unit = config.unit;
    const std::string name = config.drive->name();
    settings.serial = !config.serial.empty() ? config.serial
                      : !name.empty()        ? name
                                      : absl::StrFormat("MV-IDE-%d%d", config.channel, config.unit);
    settings.firmware = config.firmware.empty() ? "1.0" : config.firmware;
    unit.drive = config.drive;
    if (config.kind == DeviceKind::kDisk) {
      if (config.drive->removable()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "IDE position %d.%d: a disk needs a fixed drive", config.channel, config.unit));
      }
      const block::DriveInfo info = config.drive->info();
      if (info.logical_block_size != kSectorSize) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "IDE position %d.%d: ATA disks have 512-byte sectors, the drive has %u-byte blocks",
            config.channel, config.unit, info.logical_block_size));
      }
      settings.model = config.model.empty() ? "MICROVM HARDDISK" : config.model;
      settings.sectors = info.size_bytes / kSectorSize;
      settings.read_only = info.read_only;
      settings.write_cache = info.write_cache_enabled;
      settings.default_geometry = DefaultGeometry(settings.sectors);
      settings.geometry = settings.default_geometry;
    } else {
      if (!config.drive->removable()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "IDE position %d.%d: a CD-ROM needs a removable drive", config.channel, config.unit));
      }
      settings.model = config.model.empty() ? "MICROVM DVD-ROM" : config.model;
      settings.read_only = true;
      scsi::LogicalUnitOptions unit_options = config.unit_options;
      unit_options.power_on_unit_attention = false;
      unit_options.media_change_report = scsi::MediaChangeReport::kNotReadyThenUnitAttention;
      unit_options.physical_interface = 2;
      if (unit_options.serial.empty()) unit_options.serial = settings.serial;
      ASSIGN_OR_RETURN(unit.cdrom, scsi::CdRom::Create(config.drive, std::move(unit_options)));
      cdroms_[config.channel][config.unit] = unit.cdrom;
    }
  }

  RETURN_IF_ERROR(DeclareBar(kBusMasterBar, pci::BarSpec{pci::BarKind::kIo, bm::kBarSize}));
  // Firmware's setting: both channels decode (IDETIM bit 15), timings left at compatible values.
  // The registers are read-write (PIIX3 datasheet); LegacyDecodeEnabled() reads Decode Enable
  // from configuration space on every access, so a guest that turns a channel off is obeyed.
  WriteConfigRaw(kIdetimPrimary, kIdetimDecodeEnable, 2);
  WriteConfigRaw(kIdetimSecondary, kIdetimDecodeEnable, 2);
  WriteConfigRaw(kSidetim, 0, 1);
  SetConfigWriteMask(kIdetimPrimary, 0xffff, 2);
  SetConfigWriteMask(kIdetimSecondary, 0xffff, 2);
  SetConfigWriteMask(kSidetim, 0xff, 1);

  std::weak_ptr<PciDevice> weak = weak_from_this();
  auto bus_master_enabled = [weak] {
    std::shared_ptr<PciDevice> self = weak.lock();
    return self != nullptr && (self->ReadConfigDword(pci::kCommand) & pci::kCommandBusMaster) != 0;
  };
  const std::array<std::shared_ptr<vmm::IrqLine>, 2> irqs = {std::move(primary_irq),
                                                             std::move(secondary_irq)};
  for (int c = 0; c < 2; ++c) {
    channels_[c] = std::make_unique<IdeChannel>(c, std::move(units[c]), irqs[c], memory, *iothread_,
                                                bus_master_enabled);
    RETURN_IF_ERROR(channels_[c]->StartIo());
  }
  return absl::OkStatus();
}

absl::Status IdeController::RegisterPorts() {
  std::shared_ptr<IdeController> self = std::static_pointer_cast<IdeController>(shared_from_this());
  for (int c = 0; c < 2; ++c) {
    struct Range {
      uint64_t base;
      uint64_t size;
      bool control;
    };
    const Range ranges[] = {{kCommandBlockBase[c], 8, false}, {kControlBlockBase[c], 1, true}};
    for (const Range& range : ranges) {
      absl::Status status = pio_bus_.Register(
          range.base, range.size, std::make_shared<LegacyPorts>(self, c, range.control));
      if (!status.ok()) {
        return absl::Status(status.code(), absl::StrFormat("IDE channel %d ports at 0x%x: %s", c,
                                                           range.base, status.message()));
      }
      registered_ports_.push_back(range.base);
    }
  }
  return absl::OkStatus();
}

void IdeController::StopAll() {
  if (stopped_) return;
  stopped_ = true;
  for (uint64_t base : registered_ports_) (void)pio_bus_.Unregister(base);
  registered_ports_.clear();
  for (std::unique_ptr<IdeChannel>& channel : channels_) {
    if (channel != nullptr) channel->StopIo();
  }
}

void IdeController::OnShutdown() { StopAll(); }

std::shared_ptr<scsi::CdRom> IdeController::cdrom(int channel, int unit) const {
  if (channel < 0 || channel > 1 || unit < 0 || unit > 1) return nullptr;
  return cdroms_[channel][unit];
}

bool IdeController::LegacyDecodeEnabled(int channel) const {
  const uint32_t command = ReadConfigRaw(pci::kCommand, 2);
  const uint32_t idetim = ReadConfigRaw(channel == 0 ? kIdetimPrimary : kIdetimSecondary, 2);
  return (command & pci::kCommandIoSpace) != 0 && (idetim & kIdetimDecodeEnable) != 0;
}

void IdeController::ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    data[i] = bar == kBusMasterBar && at < bm::kBarSize
                  ? channels_[at / bm::kChannelStride]->ReadBusMaster(
                        static_cast<int>(at % bm::kChannelStride))
                  : 0;
  }
}

void IdeController::WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) {
  if (bar != kBusMasterBar) return;
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    if (at >= bm::kBarSize) break;
    channels_[at / bm::kChannelStride]->WriteBusMaster(static_cast<int>(at % bm::kChannelStride),
                                                       data[i]);
  }
}

}  // namespace devices::ide

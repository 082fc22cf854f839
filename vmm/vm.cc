#include "vmm/vm.h"

#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "devices/ide/ide_controller.h"
#include "devices/legacy/acpi_pm.h"
#include "devices/legacy/cmos.h"
#include "devices/legacy/fw_cfg.h"
#include "devices/legacy/i8042.h"
#include "devices/legacy/port_devices.h"
#include "devices/legacy/serial.h"
#include "devices/pci/bar_allocator.h"
#include "devices/pci/pci_root_bus.h"
#include "devices/virtio/virtio_pci.h"
#include "vmm/acpi/machine_acpi.h"
#include "vmm/acpi/table_loader.h"
#include "vmm/fdt/machine_fdt.h"
#include "vmm/kvm/kvm_ioevent_registrar.h"
#include "vmm/kvm/kvm_irq_line.h"
#include "vmm/kvm/kvm_msi.h"
#include "vmm/loader/firmware.h"
#include "vmm/loader/initrd.h"
#include "vmm/loader/kernel_loader.h"
#include "vmm/loader/linux_boot.h"
#include "vmm/loader/pvh_boot.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"
#include "vmm/x86/boot_cpu.h"
#include "vmm/x86/cpuid.h"
#include "vmm/x86/firmware_config.h"
#include "vmm/x86/mptable.h"

namespace vmm {
namespace {

// KVM needs three pages for the real-mode TSS and one for the EPT identity map, below 4 GiB and
// outside RAM and MMIO: the top of the MMIO hole, below the BIOS ROM alias at 0xffff0000 (as QEMU).
constexpr uint64_t kKvmTssAddress = 0xfffbd000;
constexpr uint64_t kKvmIdentityMapAddress = 0xfffbc000;

// The POST code the test guest writes at its first ring-3 instruction (docs/machine.md).
constexpr uint8_t kPostCodeRing3 = 0x03;

// QEMU's debug console port, where SeaBIOS built for QEMU writes its log, and what a read of it
// returns: SeaBIOS logs there only when it reads this back.
constexpr uint16_t kFirmwareDebugPort = 0x402;
constexpr uint8_t kFirmwareDebugReadback = 0xe9;

DeviceDescription PortDevice(std::string name, std::vector<std::string> compatible,
                             std::vector<DeviceDescription::Range> ranges) {
  DeviceDescription device;
  device.node_name = std::move(name);
  device.compatible = std::move(compatible);
  device.space = DeviceDescription::AddressSpace::kPortIo;
  device.ranges = std::move(ranges);
  return device;
}

// The refusal of a boot order that names no drive (--boot at start, SetBootOrder later), listing
// the drives there are.
absl::Status NoSuchDrive(std::string_view context, const std::string& name,
                         const std::vector<AttachedDrive>& drives) {
  std::vector<std::string> names;
  for (const AttachedDrive& d : drives) names.push_back(d.name);
  return absl::InvalidArgumentError(
      absl::StrFormat("%sno drive named %s (the drives: %s)", context, name,
                      names.empty() ? "none" : absl::StrJoin(names, ", ")));
}

// Writes all of `byte` to `fd`, retrying on EINTR; output errors are not the guest's concern.
void WriteByte(int fd, uint8_t byte) {
  while (write(fd, &byte, 1) < 0 && errno == EINTR) {
  }
}

}  // namespace

Vm::Vm(const VmConfig& config) : config_(config), boot_order_(config.boot_order) {}

Vm::~Vm() {
  // A graceful stop's timer waits on the exit latch.
  if (stop_timer_.joinable()) {
    exit_latch_.Trigger({VmExit::Kind::kStopped, 0, "VM destroyed"});
    stop_timer_.join();
  }
  TearDownMachine();
  storage_.reset();
}

void Vm::TearDownMachine() {
  // Runners first: their threads use the buses, devices and memory below. Then the PCI devices
  // stop their iothreads and unregister their doorbells while the VM fd still exists.
  vcpus_.clear();
  posted_writes_.reset();
  if (pci_root_) pci_root_->Shutdown();
  // The buses hold the devices; the devices hold MSI vectors and doorbells that need the MSI
  // controller, the registrar and the VM fd. So the devices go first, explicitly.
  pio_bus_.Clear();
  mmio_bus_.Clear();
  pci_root_.reset();
  serial_.reset();
  i8042_.reset();
  acpi_pm_.reset();
  legacy_bios_area_.reset();
  fw_cfg_.reset();
  cmos_.reset();
  ioevents_.reset();
  msi_.reset();
  // Memory before the VM fd, as the members' destruction order has it.
  memory_.reset();
  firmware_rom_.reset();
  vm_fd_.reset();
  machine_ = MachineDescription{};
  device_tree_.clear();
  acpi_tables_ = acpi::AcpiTables{};
}

absl::StatusOr<std::unique_ptr<Vm>> Vm::Create(const VmConfig& config) {
  std::unique_ptr<Vm> vm(new Vm(config));
  RETURN_IF_ERROR(vm->Initialize());
  return vm;
}

absl::Status Vm::Initialize() {
  if (config_.vcpus == 0 || config_.vcpus > x86::kMpTableMaxCpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%u vCPUs requested; this machine supports 1 to %u", config_.vcpus, x86::kMpTableMaxCpus));
  }
  ASSIGN_OR_RETURN(kvm_, Kvm::Open(config_.kvm_path));
  if (!config_.firmware_path.empty()) {
    if (!config_.kernel_path.empty() || !config_.initrd_path.empty()) {
      return absl::InvalidArgumentError("a firmware boots from the drives: no kernel or initrd");
    }
    ASSIGN_OR_RETURN(firmware_file_, loader::ImageFile::Open(config_.firmware_path));
  } else {
    ASSIGN_OR_RETURN(kernel_file_, loader::ImageFile::Open(config_.kernel_path));
    if (!config_.initrd_path.empty()) {
      ASSIGN_OR_RETURN(initrd_file_, loader::ImageFile::Open(config_.initrd_path));
    }
  }
  RETURN_IF_ERROR(BuildMachine());
  first_build_ = false;
  return absl::OkStatus();
}

absl::Status Vm::BuildMachine() {
  ASSIGN_OR_RETURN(vm_fd_, kvm_->CreateVm());
  // Order matters: the TSS and identity map before any vCPU, the irqchip before the PIT and vCPUs.
  absl::Status status = vm_fd_->SetTssAddress(kKvmTssAddress);
  if (status.ok()) status = vm_fd_->SetIdentityMapAddress(kKvmIdentityMapAddress);
  if (status.ok()) status = vm_fd_->CreateIrqchip();
  if (status.ok()) status = vm_fd_->CreatePit2();
  if (status.ok()) status = SetUpMemory();
  if (status.ok()) status = SetUpLegacyDevices();
  if (status.ok()) status = SetUpPci();
  if (status.ok()) status = LoadGuest();
  if (status.ok()) status = CreateVcpus();
  return status;
}

absl::Status Vm::SetUpMemory() {
  ASSIGN_OR_RETURN(memory_, GuestMemory::CreateX86(config_.memory_bytes));
  uint32_t slot = 0;
  for (const auto& region : memory_->regions()) {
    machine_.memory.push_back({region->start().value(), region->size()});
    const uint64_t start = region->start().value();
    if (!firmware_file_.has_value() || start >= LegacyBiosArea::kEnd ||
        region->end().value() <= LegacyBiosArea::kStart) {
      RETURN_IF_ERROR(
          vm_fd_->SetUserMemoryRegion(slot++, start, region->size(), region->host_address()));
      continue;
    }
    // With a firmware the legacy BIOS area is the chipset's to route (its own slots below): the
    // RAM around it gets a slot on each side.
    if (start != 0 || region->end().value() < LegacyBiosArea::kEnd) {
      return absl::InvalidArgumentError("firmware boot needs RAM from 0 to past 1 MiB");
    }
    RETURN_IF_ERROR(
        vm_fd_->SetUserMemoryRegion(slot++, 0, LegacyBiosArea::kStart, region->host_address()));
    if (region->end().value() > LegacyBiosArea::kEnd) {
      RETURN_IF_ERROR(vm_fd_->SetUserMemoryRegion(slot++, LegacyBiosArea::kEnd,
                                                  region->end().value() - LegacyBiosArea::kEnd,
                                                  region->host_address() + LegacyBiosArea::kEnd));
    }
  }
  if (firmware_file_.has_value()) {
    // Read-only: the guest's writes there exit to user space and go nowhere (nothing is on the
    // MMIO bus at the top of 4 GiB), as writes to a ROM do.
    ASSIGN_OR_RETURN(firmware_rom_, loader::LoadFirmwareRom(*firmware_file_));
    RETURN_IF_ERROR(vm_fd_->SetUserMemoryRegion(slot++, firmware_rom_->start().value(),
                                                firmware_rom_->size(),
                                                firmware_rom_->host_address(), /*read_only=*/true));
    ASSIGN_OR_RETURN(
        std::span<uint8_t> shadow_ram,
        memory_->GetHostSpan(GuestAddress(LegacyBiosArea::kStart), LegacyBiosArea::kSize));
    ASSIGN_OR_RETURN(legacy_bios_area_,
                     LegacyBiosArea::Create(shadow_ram, loader::LegacyBiosAlias(*firmware_rom_)));
    legacy_slot_base_ = slot;
    legacy_slots_.fill({});
    // Power-on: the ROM alias in 0xe0000-0xfffff, nothing in 0xc0000-0xdffff.
    RETURN_IF_ERROR(MapLegacyBiosArea());
    // The accesses the slots do not serve come to the area itself.
    RETURN_IF_ERROR(
        mmio_bus_.Register(LegacyBiosArea::kStart, LegacyBiosArea::kSize, legacy_bios_area_));
  }
  return absl::OkStatus();
}

absl::Status Vm::MapLegacyBiosArea() {
  for (const LegacyBiosArea::Mapping& mapping : legacy_bios_area_->Mappings()) {
    LegacyBiosArea::Mapping& held = legacy_slots_[mapping.segment];
    if (held == mapping) continue;
    const uint32_t slot = legacy_slot_base_ + static_cast<uint32_t>(mapping.segment);
    // KVM changes neither a slot's backing nor its read-only flag in place: delete, then add.
    if (held.host_address != nullptr) {
      RETURN_IF_ERROR(vm_fd_->SetUserMemoryRegion(slot, held.guest_address, 0, nullptr));
      held = {};
    }
    if (mapping.host_address == nullptr) continue;
    RETURN_IF_ERROR(vm_fd_->SetUserMemoryRegion(slot, mapping.guest_address, mapping.size,
                                                mapping.host_address, mapping.read_only));
    held = mapping;
  }
  return absl::OkStatus();
}

void Vm::OnPamChange(const std::array<LegacyBiosArea::Route, LegacyBiosArea::kSegments>& routes) {
  if (legacy_bios_area_->SetRoutes(routes).empty()) return;
  // The writing vCPU waits until KVM's map follows, as the chipset's next access would.
  const absl::Status mapped = main_thread_calls_.Call([this] { return MapLegacyBiosArea(); });
  // UNAVAILABLE: the VM is stopping and nothing runs on.
  if (!mapped.ok() && !absl::IsUnavailable(mapped)) {
    exit_latch_.Trigger({VmExit::Kind::kFatal, 1,
                         absl::StrFormat("remapping the BIOS area: %s", mapped.message())});
  }
}

absl::Status Vm::SetUpLegacyDevices() {
  const int output_fd = config_.serial_output_fd;
  serial_ = std::make_shared<devices::legacy::Serial>(
      std::make_shared<KvmIrqLine>(*vm_fd_, kCom1Irq), [this, output_fd](uint8_t byte) {
        RecordSerialByte(byte);
        if (output_fd >= 0) WriteByte(output_fd, byte);
      });
  RETURN_IF_ERROR(pio_bus_.Register(kCom1Port, devices::legacy::Serial::kRegisterCount, serial_));
  DeviceDescription serial_node = PortDevice(
      "serial", {acpi::kSerialCompatible}, {{kCom1Port, devices::legacy::Serial::kRegisterCount}});
  serial_node.interrupt = kCom1Irq;
  serial_node.clock_frequency = 1843200;
  machine_.devices.push_back(serial_node);
  machine_.stdout_device = absl::StrFormat("serial@%x", kCom1Port);

  i8042_ = std::make_shared<devices::legacy::I8042>([this] {
    exit_latch_.Trigger({VmExit::Kind::kReset, 0, "guest reset (i8042)"});
  });
  // The bus holds shared_ptrs to the ports; they alias the controller's lifetime.
  RETURN_IF_ERROR(pio_bus_.Register(kI8042DataPort, 1,
                                    std::shared_ptr<BusDevice>(i8042_, &i8042_->data_port())));
  RETURN_IF_ERROR(pio_bus_.Register(kI8042CommandPort, 1,
                                    std::shared_ptr<BusDevice>(i8042_, &i8042_->command_port())));
  machine_.devices.push_back(PortDevice("keyboard-controller", {acpi::kI8042Compatible},
                                        {{kI8042DataPort, 1}, {kI8042CommandPort, 1}}));

  RETURN_IF_ERROR(pio_bus_.Register(
      kDebugExitPort, 1, std::make_shared<devices::legacy::WriteOnlyPort>([this](uint8_t value) {
        exit_latch_.Trigger({VmExit::Kind::kGuestExit, value, "guest exit"});
      })));
  machine_.devices.push_back(
      PortDevice("debug-exit", {"microvm,debug-exit"}, {{kDebugExitPort, 1}}));

  RETURN_IF_ERROR(pio_bus_.Register(kPostCodePort, 1,
                                    std::make_shared<devices::legacy::WriteOnlyPort>(
                                        [this](uint8_t code) { OnPostCode(code); })));
  machine_.devices.push_back(PortDevice("post-code", {"microvm,post-code"}, {{kPostCodePort, 1}}));

  // The ACPI fixed hardware the FADT points to, its SCI on ISA IRQ 9 (docs/machine.md).
  using AcpiPm = devices::legacy::AcpiPowerManagement;
  static_assert(kAcpiPmBlockSize == AcpiPm::kBlockSize &&
                kAcpiPm1EventPort == kAcpiPmBase + AcpiPm::kPm1EventBlockOffset &&
                kAcpiPm1ControlPort == kAcpiPmBase + AcpiPm::kPm1ControlOffset &&
                kAcpiPmTimerPort == kAcpiPmBase + AcpiPm::kPmTimerOffset &&
                kAcpiResetPort == kAcpiPmBase + AcpiPm::kResetOffset);
  acpi_pm_ = std::make_shared<AcpiPm>(
      std::make_shared<KvmIrqLine>(*vm_fd_, kAcpiSciIrq),
      [this] {
        exit_latch_.Trigger({VmExit::Kind::kPowerOff, 0, "guest power-off (ACPI)"});
      },
      [this] {
        exit_latch_.Trigger({VmExit::Kind::kReset, 0, "guest reset (ACPI)"});
      });
  RETURN_IF_ERROR(pio_bus_.Register(kAcpiPmBase, AcpiPm::kBlockSize, acpi_pm_));
  machine_.devices.push_back(
      PortDevice("acpi-pm", {acpi::kAcpiPmCompatible}, {{kAcpiPmBase, AcpiPm::kBlockSize}}));

  if (firmware_file_.has_value()) {
    // What firmware built for QEMU reads the machine through (filled in LoadFirmware), the
    // CMOS it keeps its settings in, and the debug console it logs to.
    using devices::legacy::Cmos;
    using devices::legacy::FwCfg;
    fw_cfg_ = std::make_shared<FwCfg>(&*memory_);
    RETURN_IF_ERROR(pio_bus_.Register(FwCfg::kPortBase, FwCfg::kPortCount, fw_cfg_));
    machine_.devices.push_back(
        PortDevice("fw-cfg", {"qemu,fw-cfg"}, {{FwCfg::kPortBase, FwCfg::kPortCount}}));
    // IRQ 8 comes when the main thread's loop calls Tick() at the time the clock asks for; the
    // clock says when that changes (a vCPU wrote register A or B, or acknowledged through C).
    cmos_ = std::make_shared<Cmos>(std::make_shared<KvmIrqLine>(*vm_fd_, kRtcIrq), [this] {
      sys_util::SignalEventFd(rtc_schedule_changed_.get());
    });
    RETURN_IF_ERROR(pio_bus_.Register(Cmos::kPortBase, Cmos::kPortCount, cmos_));
    DeviceDescription rtc_node =
        PortDevice("rtc", {acpi::kRtcCompatible}, {{Cmos::kPortBase, Cmos::kPortCount}});
    rtc_node.interrupt = kRtcIrq;
    machine_.devices.push_back(rtc_node);
    const int log_fd = config_.firmware_log_fd;
    RETURN_IF_ERROR(pio_bus_.Register(kFirmwareDebugPort, 1,
                                      std::make_shared<devices::legacy::WriteOnlyPort>(
                                          [log_fd](uint8_t byte) {
                                            if (log_fd >= 0) WriteByte(log_fd, byte);
                                          },
                                          kFirmwareDebugReadback)));
    machine_.devices.push_back(
        PortDevice("debug-console", {"qemu,debugcon"}, {{kFirmwareDebugPort, 1}}));
  }
  return absl::OkStatus();
}

absl::Status Vm::SetUpPci() {
  ASSIGN_OR_RETURN(pci_root_, devices::pci::PciRootBus::Create(pio_bus_, mmio_bus_));
  if (legacy_bios_area_ != nullptr) {
    using PamSegment = devices::pci::PciHostBridge::PamSegment;
    // The same segments in the same order (//devices/pci:pam_libfuzzer checks their ranges).
    static_assert(devices::pci::PciHostBridge::kPamSegments == LegacyBiosArea::kSegments);
    pci_root_->host_bridge()->SetPamListener([this](std::span<const PamSegment> segments) {
      std::array<LegacyBiosArea::Route, LegacyBiosArea::kSegments> routes{};
      for (size_t i = 0; i < segments.size() && i < routes.size(); ++i) {
        routes[i] = {segments[i].read_ram, segments[i].write_ram};
      }
      OnPamChange(routes);
    });
  }
  machine_.devices.push_back(devices::pci::PciRootBus::Describe());
  // The windows the BarAllocator below assigns from (the DSDT's \_SB.PCI0 _CRS).
  machine_.pci_windows = MachineDescription::PciWindows{
      .io = {devices::pci::kX86IoWindow.base, devices::pci::kX86IoWindow.size},
      .mmio32 = {devices::pci::kX86Mmio32Window.base, devices::pci::kX86Mmio32Window.size}};
  msi_ = std::make_unique<KvmMsiController>(*vm_fd_);
  ioevents_ = std::make_unique<KvmIoEventRegistrar>(*vm_fd_);

  // The drives are opened once; their devices are new with every machine.
  if (storage_ == nullptr) {
    ASSIGN_OR_RETURN(storage_, Storage::Create(config_.storage));
  } else {
    RETURN_IF_ERROR(storage_->CreateDevices());
  }
  devices::pci::BarAllocator allocator = devices::pci::BarAllocator::ForX86();
  if (!storage_->ide_drives().empty()) {
    devices::ide::IdeControllerOptions options;
    options.drives = storage_->ide_drives();
    options.iothread = storage_->ide_iothread();
    ASSIGN_OR_RETURN(
        auto ide,
        devices::ide::IdeController::Create(
            std::move(options), pio_bus_, std::make_shared<KvmIrqLine>(*vm_fd_, kIdePrimaryIrq),
            std::make_shared<KvmIrqLine>(*vm_fd_, kIdeSecondaryIrq), *memory_));
    RETURN_IF_ERROR(ide->AssignBars(allocator));
    ASSIGN_OR_RETURN(ide_slot_, pci_root_->AddDevice(ide));
    RETURN_IF_ERROR(PostIdeTaskfileWrites());
  }
  std::unique_ptr<devices::virtio::scsi::VirtioScsi> scsi = storage_->TakeScsiDevice();
  if (scsi == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto transport, devices::virtio::VirtioPciTransport::Create(
                                       std::move(scsi), *memory_, *msi_, ioevents_.get()));
  // The VMM assigns BARs and enables decoding, as a BIOS would (a firmware, if any, does it again).
  RETURN_IF_ERROR(transport->AssignBars(allocator));
  ASSIGN_OR_RETURN(scsi_slot_, pci_root_->AddDevice(transport));
  return absl::OkStatus();
}

absl::Status Vm::PostIdeTaskfileWrites() {
  // Coalesced port I/O: Linux 4.19 and later, PVM too. Without it every write exits, as before.
  if (kvm_->CheckExtension(KVM_CAP_COALESCED_PIO) <= 0) return absl::OkStatus();
  const int page_offset = kvm_->CheckExtension(KVM_CAP_COALESCED_MMIO);
  if (page_offset <= 0) return absl::OkStatus();
  for (const auto& range : devices::ide::IdeController::kPostableWrites) {
    RETURN_IF_ERROR(vm_fd_->RegisterCoalescedPio(range.port, range.count));
  }
  posted_writes_ = std::make_unique<CoalescedWrites>(
      pio_bus_, mmio_bus_, static_cast<size_t>(sysconf(_SC_PAGESIZE)), page_offset);
  return absl::OkStatus();
}

absl::Status Vm::LoadGuest() {
  for (uint32_t id = 0; id < config_.vcpus; ++id) machine_.cpu_apic_ids.push_back(id);
  if (firmware_file_.has_value()) return LoadFirmware();
  machine_.cmdline = config_.cmdline;
  ASSIGN_OR_RETURN(device_tree_, fdt::BuildMachineFdt(machine_));
  ASSIGN_OR_RETURN(acpi_tables_,
                   acpi::BuildMachineAcpi(machine_, kAcpiTablesAddress, kAcpiTablesEnd));

  ASSIGN_OR_RETURN(loader::LoadedKernel kernel, loader::LoadKernel(*memory_, *kernel_file_));
  std::optional<loader::InitrdPlacement> initrd;
  if (initrd_file_.has_value()) {
    ASSIGN_OR_RETURN(initrd, loader::LoadInitrd(*memory_, *initrd_file_, kernel));
  }
  absl::Status status = x86::WriteBootGdt(*memory_);
  if (status.ok()) status = x86::WriteMpTable(*memory_, config_.vcpus);
  // ACPI for kernels that want it (Linux without CONFIG_X86_MPPARSE); the MP table stays for
  // kernels without ACPI.
  if (status.ok()) status = acpi::WriteAcpiTables(*memory_, acpi_tables_);
  if (!status.ok()) return status;

  if (kernel.kind == loader::LoadedKernel::EntryKind::kPvh) {
    loader::PvhBootConfig boot;
    boot.cmdline = config_.cmdline;
    boot.initrd = initrd;
    boot.fdt = device_tree_;
    boot.rsdp_address = acpi_tables_.rsdp_address();
    status = loader::WritePvhStartInfo(*memory_, boot);
    entry_mode_ = x86::BootEntryMode::kPvh32;
    boot_info_address_ = kPvhStartInfoAddress;
  } else {
    RETURN_IF_ERROR(x86::WriteIdentityPageTables(*memory_));
    loader::LinuxBootConfig boot;
    boot.kernel = &kernel;
    boot.cmdline = config_.cmdline;
    boot.initrd = initrd;
    boot.fdt = device_tree_;
    boot.acpi_rsdp_address = acpi_tables_.rsdp_address();
    status = loader::WriteLinuxBootParams(*memory_, boot);
    entry_mode_ = x86::BootEntryMode::kLinux64;
    boot_info_address_ = kZeroPageAddress;
  }
  entry_address_ = kernel.entry.value();
  return status;
}

absl::Status Vm::LoadFirmware() {
  ASSIGN_OR_RETURN(device_tree_, fdt::BuildMachineFdt(machine_));
  // The same tables as direct boot, for the firmware to place (vmm/acpi/table_loader.h).
  ASSIGN_OR_RETURN(acpi_tables_, acpi::BuildMachineAcpi(machine_, 0, kAcpiTablesEnd));
  ASSIGN_OR_RETURN(acpi::FirmwareAcpi acpi, acpi::BuildFirmwareAcpi(acpi_tables_));
  x86::FirmwareOptions options;
  // No display: the firmware's screen and keyboard are the serial console's (SeaBIOS's sercon).
  options.serial_console_port = kCom1Port;
  // When nothing boots, wait for the user (a disc inserted, ResetVm) rather than reset after a
  // minute: QEMU's default too (-boot reboot-timeout=-1).
  options.boot_fail_wait_ms = UINT32_MAX;
  ASSIGN_OR_RETURN(options.boot_order, FirmwareBootPaths());
  ASSIGN_OR_RETURN(x86::FirmwareConfig firmware_config,
                   x86::BuildFirmwareConfig(machine_, options,
                                            {{acpi::kTablesFile, std::move(acpi.tables)},
                                             {acpi::kRsdpFile, std::move(acpi.rsdp)},
                                             {acpi::kTableLoaderFile, std::move(acpi.loader)}}));
  for (x86::FirmwareConfigItem& item : firmware_config.items) {
    RETURN_IF_ERROR(fw_cfg_->AddItem(item.key, std::move(item.data)));
  }
  for (x86::FirmwareConfigFile& file : firmware_config.files) {
    RETURN_IF_ERROR(fw_cfg_->AddFile(file.name, std::move(file.data)));
  }
  uint64_t below_4g = 0;
  uint64_t above_4g = 0;
  for (const MachineDescription::MemoryRange& range : machine_.memory) {
    (range.base < (uint64_t{1} << 32) ? below_4g : above_4g) += range.size;
  }
  cmos_->SetMemoryLayout(below_4g, above_4g, config_.vcpus);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Vm::FirmwareBootPaths() const {
  std::vector<std::string> paths;
  const std::vector<std::string> order = boot_order();
  if (order.empty()) return paths;
  const std::vector<AttachedDrive> drives = storage_->drives();
  for (const std::string& name : order) {
    const auto drive = std::find_if(drives.begin(), drives.end(),
                                    [&name](const AttachedDrive& d) { return d.name == name; });
    if (drive == drives.end() && !first_build_) {
      absl::FPrintF(stderr, "microvm: boot order: %s is no longer a drive; left out of it\n", name);
      continue;
    }
    if (drive == drives.end()) return NoSuchDrive("--boot: ", name, drives);
    // The paths SeaBIOS builds for what it finds (its boot.c): the host bridge's I/O port, the
    // controller's slot, then the IDE channel and unit, or the SCSI target and LUN.
    if (drive->spec.bus == DriveSpec::Bus::kIde && ide_slot_) {
      paths.push_back(absl::StrFormat("/pci@i0cf8/ide@%x/drive@%x/disk@%x", *ide_slot_,
                                      drive->ide_channel, drive->ide_unit));
    } else if (drive->spec.bus == DriveSpec::Bus::kScsi && scsi_slot_) {
      paths.push_back(
          absl::StrFormat("/pci@i0cf8/scsi@%x/channel@0/disk@0,%x", *scsi_slot_, drive->lun));
    }
  }
  return paths;
}

absl::Status Vm::CreateVcpus() {
  ASSIGN_OR_RETURN(std::vector<kvm_cpuid_entry2> supported, kvm_->GetSupportedCpuid());
  if (kvm_->CheckExtension(KVM_CAP_TSC_DEADLINE_TIMER) > 0) x86::AddTscDeadlineTimer(supported);
  ASSIGN_OR_RETURN(x86::CpuFeatureMask mask, x86::ParseCpuFeatures(config_.cpu_features));
  RETURN_IF_ERROR(x86::ApplyCpuFeatureMask(mask, supported));

  // What KVM can do is the same for every vCPU: asked once.
  const int sync_regs_capability = kvm_->CheckExtension(KVM_CAP_SYNC_REGS);
  const bool can_set_xcrs = kvm_->CheckExtension(KVM_CAP_XCRS) > 0;
  VcpuRunner::InstallKickSignalHandler();
  for (uint32_t id = 0; id < config_.vcpus; ++id) {
    ASSIGN_OR_RETURN(VcpuFd vcpu, vm_fd_->CreateVcpu(id));
    vcpu.SyncGeneralRegistersOnExit(sync_regs_capability);
    std::vector<kvm_cpuid_entry2> cpuid = supported;
    x86::FilterCpuidForVcpu(cpuid, id, config_.vcpus);
    absl::Status status = vcpu.SetCpuid(cpuid);
    // XCR0 starts with every XSAVE component leaf 0xD enumerates (see x86::BootXcr0 for why). It
    // only works around hypervisors below us that do not intercept XSETBV, so a KVM that refuses
    // it gets a note, not a failed start: the guest then boots with the architectural reset value.
    const std::optional<uint64_t> xcr0 = x86::BootXcr0(cpuid);
    if (status.ok() && xcr0 && can_set_xcrs) {
      if (absl::Status xcr_status = vcpu.SetXcr0(*xcr0); !xcr_status.ok() && id == 0) {
        absl::FPrintF(stderr, "microvm: note: XCR0 0x%x not preloaded (%s)\n", *xcr0,
                      xcr_status.message());
      }
    }
    if (status.ok()) status = x86::ConfigureCommonVcpuState(vcpu);
    // Only the bootstrap processor starts at the kernel's entry; the others wait for INIT/SIPI in
    // the in-kernel local APIC, as on real hardware.
    // With a firmware, the bootstrap processor keeps KVM's reset state: real mode at the reset
    // vector 0xfffffff0.
    if (status.ok() && id == 0 && !firmware_file_.has_value()) {
      status = x86::ConfigureBootVcpu(vcpu, entry_mode_, entry_address_, boot_info_address_);
    }
    if (!status.ok()) {
      return absl::Status(status.code(), absl::StrFormat("vCPU %u: %s", id, status.message()));
    }
    vcpus_.push_back(std::make_unique<VcpuRunner>(std::move(vcpu), pio_bus_, mmio_bus_, exit_latch_,
                                                  config_.vcpu_thread_start));
    vcpus_.back()->ApplyPostedWrites(posted_writes_.get());
    // Where the user asked for reboots to restart, a triple fault is one; otherwise it stays a
    // fatal error with the registers reported (a microVM's guest that faults so is broken).
    if (config_.on_reboot == VmConfig::OnReboot::kRestart) vcpus_.back()->TreatTripleFaultAsReset();
  }
  return absl::OkStatus();
}

void Vm::RecordSerialByte(uint8_t byte) {
  absl::MutexLock lock(&report_mutex_);
  if (!report_.first_serial_output) report_.first_serial_output = absl::Now() - config_.launch_time;
  const std::string& marker = config_.boot_marker;
  if (marker.empty() || report_.boot_marker_seen) return;
  serial_tail_.push_back(static_cast<char>(byte));
  if (serial_tail_.size() > marker.size())
    serial_tail_.erase(0, serial_tail_.size() - marker.size());
  if (serial_tail_ == marker) {
    report_.boot_marker_seen = absl::Now() - config_.launch_time;
    serial_tail_.clear();
  }
}

void Vm::OnPostCode(uint8_t code) {
  if (code != kPostCodeRing3) return;
  absl::MutexLock lock(&report_mutex_);
  if (!report_.first_ring3_instruction) {
    report_.first_ring3_instruction = absl::Now() - config_.launch_time;
  }
}

BootReport Vm::boot_report() const {
  absl::MutexLock lock(&report_mutex_);
  return report_;
}

void Vm::ForwardSerialInput(int stop_fd) {
  uint8_t buffer[256];
  while (true) {
    pollfd fds[2] = {{config_.serial_input_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents == 0) continue;
    const ssize_t count = read(config_.serial_input_fd, buffer, sizeof(buffer));
    if (count < 0 && errno == EINTR) continue;
    if (count <= 0) return;  // EOF or error: no more input.
    serial_->QueueInput(std::span<const uint8_t>(buffer, static_cast<size_t>(count)));
  }
}

VmExit Vm::Run(int signal_fd) {
  while (true) {
    const VmExit exit = RunGuest(signal_fd);
    if (exit.kind != VmExit::Kind::kReset) return exit;
    absl::MutexLock lock(&control_mutex_);
    const bool api_reset = std::exchange(reset_requested_, false);
    if (!api_reset && config_.on_reboot != VmConfig::OnReboot::kRestart) return exit;
    // A stop asked for (the API, a grace period running) wins over the guest's reboot.
    if (stop_requested_) return exit;
    absl::FPrintF(stderr, "microvm: %s, restarting the guest%s\n", exit.message,
                  api_reset ? "" : " (--on-reboot=restart)");
    if (!exit.detail.empty()) absl::FPrintF(stderr, "microvm: %s\n", exit.detail);
    // API calls wait on control_mutex_ meanwhile; media calls reach the drives, which stay.
    TearDownMachine();
    if (absl::Status built = BuildMachine(); !built.ok()) {
      return VmExit{VmExit::Kind::kFatal, 1,
                    absl::StrFormat("the guest could not be restarted: %s", built.message())};
    }
    exit_latch_.Rearm();
    paused_ = false;
    vcpus_stopped_ = false;
    ++restarts_;
  }
}

int Vm::restarts() const {
  absl::MutexLock lock(&control_mutex_);
  return restarts_;
}

VmExit Vm::RunGuest(int signal_fd) {
  // Before any vCPU runs: what they hand to this thread, it serves from its poll loop below.
  main_thread_calls_.Open();
  {
    absl::MutexLock lock(&control_mutex_);
    // A VM paused (through the API) before Run() starts with its vCPUs parked.
    for (auto& vcpu : vcpus_) vcpu->Start();
  }
  std::thread input_thread;
  if (config_.serial_input_fd >= 0) {
    absl::StatusOr<std::thread> started = sys_util::StartThread(
        {.name = "serial-input"}, [this] { ForwardSerialInput(exit_latch_.fd()); });
    if (started.ok()) {
      input_thread = *std::move(started);
    } else {
      absl::FPrintF(stderr, "microvm: no serial input: %s\n", started.status().message());
    }
  }
  while (!exit_latch_.triggered()) {
    // The RTC's next interrupt, if it has one enabled: the loop wakes for it.
    const std::optional<absl::Time> rtc_tick = cmos_ ? cmos_->NextTick() : std::nullopt;
    std::optional<timespec> timeout;
    if (rtc_tick) {
      timeout = absl::ToTimespec(std::max(*rtc_tick - absl::Now(), absl::ZeroDuration()));
    }
    // A negative signal_fd is ignored by poll.
    pollfd fds[4] = {{exit_latch_.fd(), POLLIN, 0},
                     {main_thread_calls_.fd(), POLLIN, 0},
                     {rtc_schedule_changed_.get(), POLLIN, 0},
                     {signal_fd, POLLIN, 0}};
    const int ready = ppoll(fds, 4, timeout ? &*timeout : nullptr, nullptr);
    if (ready < 0 && errno != EINTR) break;
    if (fds[1].revents & POLLIN) main_thread_calls_.RunPending();
    if (fds[2].revents & POLLIN) sys_util::DrainEventFd(rtc_schedule_changed_.get());
    if (rtc_tick && absl::Now() >= *rtc_tick) cmos_->Tick();
    if (signal_fd >= 0 && (fds[3].revents & POLLIN)) {
      signalfd_siginfo info{};
      if (read(signal_fd, &info, sizeof(info)) == sizeof(info)) {
        exit_latch_.Trigger({VmExit::Kind::kSignal, 128 + static_cast<int>(info.ssi_signo),
                             absl::StrFormat("received %s", strsignal(info.ssi_signo))});
      }
    }
  }
  // A vCPU waiting on this loop gets UNAVAILABLE, so that it can stop.
  main_thread_calls_.Close();
  {
    absl::MutexLock lock(&control_mutex_);
    vcpus_stopped_ = true;
    for (auto& vcpu : vcpus_) vcpu->Stop();
  }
  if (stop_timer_.joinable()) stop_timer_.join();  // the latch is set: it returns at once
  if (input_thread.joinable()) input_thread.join();
  return exit_latch_.Get().value_or(VmExit{VmExit::Kind::kFatal, 1, "VM stopped for no reason"});
}

Vm::RunState Vm::run_state() const {
  absl::MutexLock lock(&control_mutex_);
  // A reset asked for through the API restarts the guest: running, not stopping (until Run() has
  // rebuilt the machine, which it does holding this lock).
  if (reset_requested_ && !stop_requested_) return RunState::kRunning;
  if (stop_requested_ || vcpus_stopped_ || exit_latch_.triggered()) return RunState::kStopping;
  return paused_ ? RunState::kPaused : RunState::kRunning;
}

absl::Status Vm::Pause() {
  absl::MutexLock lock(&control_mutex_);
  if (stop_requested_ || vcpus_stopped_ || exit_latch_.triggered()) {
    return absl::FailedPreconditionError("the VM is stopping");
  }
  if (paused_) return absl::OkStatus();
  // Ask every vCPU first, then wait: they leave KVM_RUN in parallel.
  for (auto& vcpu : vcpus_) vcpu->RequestPause();
  for (auto& vcpu : vcpus_) vcpu->WaitUntilPaused();
  paused_ = true;
  return absl::OkStatus();
}

absl::Status Vm::Resume() {
  absl::MutexLock lock(&control_mutex_);
  if (stop_requested_ || vcpus_stopped_ || exit_latch_.triggered()) {
    return absl::FailedPreconditionError("the VM is stopping");
  }
  if (!paused_) return absl::OkStatus();
  for (auto& vcpu : vcpus_) vcpu->Resume();
  paused_ = false;
  return absl::OkStatus();
}

std::vector<std::string> Vm::boot_order() const {
  absl::MutexLock lock(&boot_order_mutex_);
  return boot_order_;
}

absl::Status Vm::SetBootOrder(const std::vector<std::string>& names) {
  if (config_.firmware_path.empty()) {
    return absl::FailedPreconditionError(
        "the VM boots its kernel directly (no --firmware): nothing reads a boot order");
  }
  const std::vector<AttachedDrive> drives = storage_->drives();
  for (size_t i = 0; i < names.size(); ++i) {
    if (std::find(names.begin(), names.begin() + i, names[i]) != names.begin() + i) {
      return absl::InvalidArgumentError(absl::StrFormat("%s is named twice", names[i]));
    }
    if (std::none_of(drives.begin(), drives.end(),
                     [&](const AttachedDrive& d) { return d.name == names[i]; })) {
      return NoSuchDrive("", names[i], drives);
    }
  }
  absl::MutexLock lock(&boot_order_mutex_);
  boot_order_ = names;
  return absl::OkStatus();
}

absl::Status Vm::RequestReset() {
  absl::MutexLock lock(&control_mutex_);
  if (stop_requested_ || vcpus_stopped_ || exit_latch_.triggered()) {
    return absl::FailedPreconditionError("the VM is stopping");
  }
  reset_requested_ = true;
  exit_latch_.Trigger({VmExit::Kind::kReset, 0, "reset through the API"});
  return absl::OkStatus();
}

void Vm::RequestStop(bool force, absl::Duration grace_period) {
  absl::MutexLock lock(&control_mutex_);
  if (force) {
    stop_requested_ = true;
    exit_latch_.Trigger({VmExit::Kind::kStopped, 0, "stopped by the API"});
    return;
  }
  if (stop_requested_ || vcpus_stopped_ || exit_latch_.triggered()) return;
  stop_requested_ = true;
  const int64_t grace_ms = absl::ToInt64Milliseconds(grace_period);
  absl::FPrintF(stderr,
                "microvm: graceful shutdown requested through the API: pressing the ACPI power "
                "button; the guest has %d ms to power off, then the VM is stopped\n",
                grace_ms);
  // A paused guest could not use its grace period.
  if (paused_) {
    for (auto& vcpu : vcpus_) vcpu->Resume();
    paused_ = false;
  }
  // ACPI 4.8.2.2.1.1: the fixed-feature power button. An OS that handles it (Linux's button driver
  // with acpid or systemd-logind) shuts down and powers off; one that ignores it is stopped at the
  // end of the grace period.
  if (acpi_pm_) acpi_pm_->PressPowerButton();
  absl::StatusOr<std::thread> timer =
      sys_util::StartThread({.name = "stop-timer"}, [this, grace_period, grace_ms] {
        const absl::Time deadline = absl::Now() + grace_period;
        while (!exit_latch_.triggered()) {
          const absl::Duration left = deadline - absl::Now();
          if (left <= absl::ZeroDuration()) break;
          pollfd fd = {exit_latch_.fd(), POLLIN, 0};
          // In steps of at most a minute (poll takes an int of milliseconds).
          poll(&fd, 1,
               static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 60'000)));
        }
        exit_latch_.Trigger(
            {VmExit::Kind::kStopped, 0,
             absl::StrFormat("stopped by the API after a grace period of %d ms", grace_ms)});
      });
  if (!timer.ok()) {
    // No timer to end the grace period: stop now rather than maybe never.
    exit_latch_.Trigger(
        {VmExit::Kind::kStopped, 0,
         absl::StrFormat("stopped by the API at once (%s)", timer.status().message())});
    return;
  }
  stop_timer_ = *std::move(timer);
}

}  // namespace vmm

#ifndef VMM_VM_H_
#define VMM_VM_H_

#include <sys/eventfd.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "vmm/acpi/machine_acpi.h"
#include "vmm/kvm/kvm.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/ioevent_registrar.h"
#include "vmm/machine/legacy_bios_area.h"
#include "vmm/machine/machine_description.h"
#include "vmm/storage.h"
#include "vmm/sys_util/call_queue.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/vcpu_runner.h"
#include "vmm/vm_exit.h"
#include "vmm/x86/boot_cpu.h"

namespace devices::pci {
class PciRootBus;
}  // namespace devices::pci

namespace devices::legacy {
class Serial;
class I8042;
class AcpiPowerManagement;
class FwCfg;
class Cmos;
}  // namespace devices::legacy

namespace vmm {

class KvmMsiController;

struct VmConfig {
  // Direct boot: the kernel the VMM loads and enters (required without a firmware).
  std::string kernel_path;
  std::string initrd_path;  // empty: none
  std::string cmdline;
  // Firmware boot instead (docs/firmware.md): a PC firmware image (SeaBIOS) the vCPU starts in at
  // the reset vector, which boots from the drives. No kernel, initrd or command line then.
  std::string firmware_path;
  // Where the firmware's debug console (port 0x402, QEMU's debugcon) goes; -1 discards it.
  int firmware_log_fd = -1;
  // The drives the firmware tries first, by name (disk0, cd0, an id=), in order; the others
  // follow in its own order. Empty: the firmware's order (hard disks, then CDs).
  std::vector<std::string> boot_order;
  uint64_t memory_bytes = 256ull << 20;
  uint32_t vcpus = 1;
  // Where the UART's output goes: an open fd (stdout, a file); -1 discards it.
  int serial_output_fd = 1;
  // Host input for the UART; -1 for none.
  int serial_input_fd = -1;
  std::string cpu_features;  // --cpu-features, e.g. "-xsave,-cx16"
  std::string kvm_path = "/dev/kvm";
  // Disks and CD-ROMs on a virtio-scsi controller, and its queues and iothreads.
  StorageConfig storage;
  // When the process started, for the start-up report.
  absl::Time launch_time = absl::Now();
  // The VMM's process id as whoever started it sees it (the API reports it): jailed, the VMM is
  // PID 1 of its own namespace (vmm/sandbox/pid_namespace.h). 0: getpid().
  pid_t host_pid = 0;
  // Text whose first appearance in the serial output the start-up report times; empty: none.
  std::string boot_marker;
  // Runs first on each vCPU thread (vmm/sandbox confines it there); empty: nothing. The
  // iothreads' counterpart is StorageConfig::iothread_start.
  std::function<absl::Status()> vcpu_thread_start;
  // A guest reset (i8042, ACPI reset register, triple fault reported as a reset): end Run()
  // (kExit), or build the machine again and boot the guest anew in this process (kRestart).
  enum class OnReboot { kExit, kRestart };
  OnReboot on_reboot = OnReboot::kExit;
};

// What the VMM measured about one run.
struct BootReport {
  std::optional<absl::Duration> first_ring3_instruction;  // POST code 0x03 after launch
  std::optional<absl::Duration> first_serial_output;
  std::optional<absl::Duration> boot_marker_seen;  // VmConfig::boot_marker in the serial output
};

// One microVM: guest memory, vCPUs, the legacy devices and the boot structures, assembled from a
// VmConfig. Run() starts the vCPUs and returns when the guest exits, resets, fails or a signal
// arrives.
class Vm {
 public:
  static absl::StatusOr<std::unique_ptr<Vm>> Create(const VmConfig& config);
  ~Vm();

  // The flattened device tree describing this machine (also handed to the guest).
  const std::vector<uint8_t>& device_tree() const { return device_tree_; }
  const MachineDescription& machine() const { return machine_; }
  // The ACPI tables written to guest memory (docs/machine.md "ACPI tables").
  const acpi::AcpiTables& acpi_tables() const { return acpi_tables_; }
  Storage& storage() { return *storage_; }

  // Blocks until the VM stops. `signal_fd` (a signalfd for SIGINT/SIGTERM/SIGHUP, or -1) ends the VM too.
  // With OnReboot::kRestart a guest reset does not stop it: the machine is built again (a new KVM
  // VM, cleared memory, every device in its power-on state, the kernel and initrd reloaded from
  // the files opened at the start) on the same drives, media and Vm object (the control API keeps
  // working), and the guest boots again.
  VmExit Run(int signal_fd);
  // Guest restarts so far (OnReboot::kRestart).
  int restarts() const;
  BootReport boot_report() const;
  const VmConfig& config() const { return config_; }

  // For the control API (any thread, before, during or after Run()).
  enum class RunState { kRunning, kPaused, kStopping };
  RunState run_state() const;
  // Takes every vCPU out of KVM_RUN and parks it / lets them run again; the devices and iothreads
  // keep running. Idempotent. Pause() returns once every vCPU is parked. FailedPrecondition once
  // the VM is stopping.
  absl::Status Pause();
  absl::Status Resume();
  // Stops the VM with VmExit::kStopped (status 0): now (`force`), or gracefully: the guest is
  // resumed if paused, its ACPI power button is pressed (PM1 PWRBTN_STS, an SCI if it enabled the
  // event), and it is given `grace_period` to stop by itself (its own exit or power-off wins), then
  // stopped. Idempotent (the button is pressed once); a forced stop overrides a pending graceful
  // one.
  void RequestStop(bool force, absl::Duration grace_period);
  // Resets the machine now, as its reset button would: Run() builds it again and the guest boots
  // anew whatever --on-reboot says (the drives, media and API stay). FailedPrecondition once the
  // VM is stopping.
  absl::Status RequestReset();
  // The drives the firmware tries first from its next start (a reset, a reboot), replacing
  // --boot's. InvalidArgument for a name that is no drive or comes twice; FailedPrecondition
  // without a firmware.
  absl::Status SetBootOrder(const std::vector<std::string>& names);
  std::vector<std::string> boot_order() const;

 private:
  explicit Vm(const VmConfig& config);
  absl::Status Initialize();
  // Everything but the KVM system fd, the drives and the kernel/initrd files: a new KVM VM, guest
  // memory, devices, boot structures and vCPUs (Initialize, and each restart).
  absl::Status BuildMachine();
  // Destroys what BuildMachine made, devices before the memory and the VM fd.
  void TearDownMachine();
  // One run of the guest until the exit latch fires.
  VmExit RunGuest(int signal_fd);
  absl::Status SetUpMemory();
  absl::Status SetUpLegacyDevices();
  absl::Status SetUpPci();
  // Registers the IDE command block registers whose writes may be posted
  // (IdeController::kPostableWrites) as KVM coalesced port I/O, where KVM has it.
  absl::Status PostIdeTaskfileWrites();
  absl::Status LoadGuest();
  // LoadGuest's firmware boot: the ROM, fw_cfg's items and the CMOS memory size.
  absl::Status LoadFirmware();
  // config_.boot_order as the OpenFirmware paths the firmware matches its drives against.
  absl::StatusOr<std::vector<std::string>> FirmwareBootPaths() const;
  absl::Status CreateVcpus();
  // Firmware boot: makes KVM's map of the legacy BIOS area (one slot per segment) what the area's
  // routes say now, whatever order the PAM changes of several vCPUs reach it in. On the main
  // thread only: the vCPU threads' filters forbid memory-slot changes, so the PAM listener hands
  // it over through main_thread_calls_.
  absl::Status MapLegacyBiosArea();
  void OnPamChange(const std::array<LegacyBiosArea::Route, LegacyBiosArea::kSegments>& routes);
  // Start-up milestones in the serial output (BootReport).
  void RecordSerialByte(uint8_t byte);
  void OnPostCode(uint8_t code);
  void ForwardSerialInput(int stop_fd);

  const VmConfig config_;
  std::optional<Kvm> kvm_;
  // Opened once: a restart reloads from these (inside a jail the paths may not resolve).
  std::optional<loader::ImageFile> kernel_file_;
  std::optional<loader::ImageFile> initrd_file_;
  std::optional<loader::ImageFile> firmware_file_;
  std::unique_ptr<GuestMemoryRegion> firmware_rom_;  // mapped read-only below 4 GiB
  // Firmware boot: 0xc0000-0xfffff as the PAM registers route it, its KVM slots from
  // legacy_slot_base_ on (what KVM holds in them: main thread only).
  std::shared_ptr<LegacyBiosArea> legacy_bios_area_;
  uint32_t legacy_slot_base_ = 0;
  std::array<LegacyBiosArea::Mapping, LegacyBiosArea::kSegments> legacy_slots_{};  // KVM's now
  // What the vCPU threads ask the main thread to do for them (its poll loop in RunGuest).
  sys_util::CallQueue main_thread_calls_;
  // Signalled when the RTC's next interrupt time may have changed (that loop's timeout).
  sys_util::ScopedFd rtc_schedule_changed_{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
  // The PCI slots of the storage controllers, for the firmware's boot order.
  std::optional<uint8_t> ide_slot_;
  std::optional<uint8_t> scsi_slot_;
  // Until the first machine is built: a --boot name that is no drive is an error then (a typo);
  // after a restart it is a disk the API detached, and is left out.
  bool first_build_ = true;
  std::optional<VmFd> vm_fd_;
  std::optional<GuestMemory> memory_;
  Bus pio_bus_{"port I/O"};
  Bus mmio_bus_{"MMIO"};
  ExitLatch exit_latch_;
  MachineDescription machine_;
  std::vector<uint8_t> device_tree_;
  acpi::AcpiTables acpi_tables_;
  std::shared_ptr<devices::legacy::Serial> serial_;
  std::shared_ptr<devices::legacy::I8042> i8042_;
  std::shared_ptr<devices::legacy::AcpiPowerManagement> acpi_pm_;  // the power button
  std::shared_ptr<devices::legacy::FwCfg> fw_cfg_;                 // firmware boot only
  std::shared_ptr<devices::legacy::Cmos> cmos_;                    // firmware boot only
  std::unique_ptr<KvmMsiController> msi_;
  std::unique_ptr<vmm::IoEventRegistrar> ioevents_;
  std::shared_ptr<devices::pci::PciRootBus> pci_root_;
  std::unique_ptr<Storage> storage_;
  // The IDE taskfile writes KVM queues instead of exiting (PostIdeTaskfileWrites); null without
  // IDE or where KVM cannot. Declared before the runners, which apply it.
  std::unique_ptr<CoalescedWrites> posted_writes_;
  std::vector<std::unique_ptr<VcpuRunner>> vcpus_;
  x86::BootEntryMode entry_mode_ = x86::BootEntryMode::kLinux64;
  uint64_t entry_address_ = 0;
  uint64_t boot_info_address_ = 0;

  // Serializes starting, stopping, pausing and resuming the vCPUs, and stop requests.
  mutable absl::Mutex control_mutex_;
  bool paused_ ABSL_GUARDED_BY(control_mutex_) = false;
  bool vcpus_stopped_ ABSL_GUARDED_BY(control_mutex_) = false;
  bool stop_requested_ ABSL_GUARDED_BY(control_mutex_) = false;
  bool reset_requested_ ABSL_GUARDED_BY(control_mutex_) = false;  // RequestReset, until Run sees it
  // --boot, then SetBootOrder's: what FirmwareBootPaths gives the firmware at each build. Its own
  // lock: the first build reads it without control_mutex_.
  mutable absl::Mutex boot_order_mutex_;
  std::vector<std::string> boot_order_ ABSL_GUARDED_BY(boot_order_mutex_);
  int restarts_ ABSL_GUARDED_BY(control_mutex_) = 0;
  std::thread stop_timer_;  // a graceful stop's grace period

  mutable absl::Mutex report_mutex_;
  BootReport report_ ABSL_GUARDED_BY(report_mutex_);
  // The last serial bytes, at most boot_marker's length, until the marker has been seen.
  std::string serial_tail_ ABSL_GUARDED_BY(report_mutex_);
};

}  // namespace vmm

#endif  // VMM_VM_H_

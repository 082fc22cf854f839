// microvm: launches a KVM microVM. See README.md and docs/machine.md. The launcher proper; main.cc
// (the product) and testing_main.cc (the test build, with the simulated host drive) call it.
#include "vmm/microvm_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "api/vm_control.h"
#include "vmm/acpi/machine_acpi.h"
#include "vmm/command_line.h"
#include "vmm/drive_spec.h"
#include "vmm/fdt/machine_fdt.h"
#include "vmm/host_kvm.h"
#include "vmm/launch_sequence.h"
#include "vmm/media_directory.h"
#include "vmm/storage_flags.h"
#include "vmm/sys_util/host_path.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/vm.h"
#include "vmm/vm_api.h"
#include "vmm/x86/cpuid.h"
#include "vmm/x86/mptable.h"

ABSL_FLAG(std::string, kernel, "",
          "Kernel to boot (required without --firmware): a Linux bzImage, or an ELF (with a PVH "
          "note it is entered in 32-bit mode, else in long mode).");
ABSL_FLAG(std::string, firmware, "",
          "Boot a PC firmware instead of a kernel (docs/firmware.md): SeaBIOS's bios-256k.bin, "
          "which boots from the drives. Not with --kernel or --initrd.");
ABSL_FLAG(std::string, boot, "",
          "With --firmware: the drives to boot from first, by name (disk0, cd0, an id=), "
          "comma-separated, e.g. --boot=cd0,disk0; the others follow in the firmware's order.");
ABSL_FLAG(std::string, firmware_log, "",
          "With --firmware: write the firmware's debug console (port 0x402, SeaBIOS's log) to "
          "FILE.");
ABSL_FLAG(std::string, initrd, "", "Initial ramdisk to load beside the kernel.");
ABSL_FLAG(std::string, cmdline, "console=ttyS0 reboot=k panic=1", "Kernel command line.");
ABSL_FLAG(std::string, memory, "256M",
          "Guest RAM: a number of MiB, or with a K, M, G or T suffix; 16M to 8T.");
ABSL_FLAG(uint32_t, vcpus, 1, "Number of vCPUs, 1 to 40 (the MP table's room in the EBDA).");
ABSL_FLAG(std::string, serial, "stdout",
          "Where the serial console (COM1) goes: stdout, none, or file:PATH.");
ABSL_FLAG(bool, serial_input, true, "Feed the VMM's stdin to the serial console.");
ABSL_FLAG(std::string, cpu_features, "",
          "CPUID features to hide (-xsave) or require (+avx2), comma-separated "
          "(docs/machine.md).");
ABSL_FLAG(std::string, dump_dtb, "",
          "Write the machine's flattened device tree to FILE and exit (`dtc -I dtb FILE` shows "
          "it).");
ABSL_FLAG(std::string, dump_acpi, "",
          "Write the machine's ACPI tables to this existing directory (rsdp.dat, xsdt.dat, "
          "facp.dat, facs.dat, apic.dat, dsdt.dat; `iasl -d` decodes them) and exit.");
ABSL_FLAG(bool, boot_report, false,
          "Print start-up times (to the first serial byte, the --boot-marker text and the test "
          "guest's first ring-3 instruction) and peak RSS on exit, to stderr.");
ABSL_FLAG(std::string, boot_marker, "",
          "With --boot-report: also time the first appearance of this text in the serial output "
          "(e.g. a line the guest's init prints).");
ABSL_FLAG(std::string, kvm_device, "/dev/kvm", "The KVM device node.");
ABSL_FLAG(
    std::string, on_reboot, "exit",
    "What a guest reset (reboot) does: exit (the VMM ends with status 0) or restart (the guest "
    "boots again in this process: every device back to its power-on state, memory cleared, "
    "the kernel and initrd reloaded; the drives, their media and the control API stay).");
ABSL_FLAG(uint32_t, scsi_queues, 1, "virtio-scsi request queues, 1 to 1024.");
ABSL_FLAG(bool, scsi_controller, false,
          "A virtio-scsi controller even without --disk or --cdrom, for disks the control API "
          "attaches later (AttachDisk, vmmctl disk add).");
// --ide-disk and --ide-cdrom may repeat; they are taken out of argv before the other flags are
// parsed (see vmm::ExtractDriveFlags). These definitions only document them. --disk, --cdrom,
// --iothreads and --poll-max-ns are vmm/storage_flags.cc's, shared with vhost-user-scsi.
ABSL_FLAG(std::string, ide_disk, "",
          "An IDE (PIIX3) disk, options as --disk (id= too); channel and unit place it (default: "
          "the first free place from the primary master). Repeatable, four IDE drives at most.");
ABSL_FLAG(std::string, ide_cdrom, "",
          "An IDE ATAPI CD/DVD-ROM, as --cdrom (default place: the secondary master, as QEMU's "
          "-cdrom). Repeatable.");

namespace {

std::vector<vmm::HelpFlag> DriveHelp() {
  std::vector<vmm::HelpFlag> flags = vmm::SharedStorageHelp();
  flags.push_back(
      {"ide-disk", "PATH[,cache=MODE][,fua=..][,readonly][,channel=0|1][,unit=0|1][,id=NAME]"});
  flags.push_back({"ide-cdrom", "[=PATH][,channel=0|1][,unit=0|1][,id=NAME]"});
  flags.push_back({"scsi-queues", "N"});
  flags.push_back({"scsi-controller", ""});
  return flags;
}

const vmm::ProgramHelp& Help() {
  static const auto* help = new vmm::ProgramHelp{
      .program = "microvm",
      .summary = "runs one KVM microVM (README.md, docs/machine.md).",
      .usage =
          "microvm --kernel=PATH [--initrd=PATH] [--cmdline=TEXT] | --firmware=PATH "
          "[--memory=SIZE] [--vcpus=N]\n               [--disk=IMAGE]... [--cdrom[=ISO]]... "
          "[--api-socket=PATH] [more flags below]",
      .groups =
          {
              {"Machine",
               {{"kernel", "PATH"},
                {"initrd", "PATH"},
                {"cmdline", "TEXT"},
                {"firmware", "PATH"},
                {"boot", "NAME,..."},
                {"firmware-log", "FILE"},
                {"memory", "SIZE"},
                {"vcpus", "N"},
                {"cpu-features", "LIST"},
                {"serial", "stdout|none|file:PATH"},
                {"serial-input", ""},
                {"kvm-device", "PATH"},
                {"on-reboot", "exit|restart"}}},
              {"Drives (virtio-scsi and IDE)", DriveHelp()},
              {"Control API (docs/api.md)",
               {{"api-socket", "PATH"},
                {"api-tcp", "HOST:PORT"},
                {"api-token-file", "FILE"},
                {"api-tcp-insecure", ""},
                {"api-listen-any", ""},
                {"media-dir", "DIR"}}},
              {"Sandbox (docs/security.md)",
               {{"seccomp", "trap|log|off"},
                {"jail", "auto|on|off"},
                {"jail-user", "UID:GID"},
                {"jail-cgroup", "FILE=VALUE,..."},
                {"jail-cgroup-parent", "PATH"}}},
              {"Debugging and benchmarks",
               {{"dump-dtb", "FILE"},
                {"dump-acpi", "DIR"},
                {"boot-report", ""},
                {"boot-marker", "TEXT"}}},
          },
      .epilogue =
          "Flags take --name=value or --name value (switches: --name, --name=false, --noname), "
          "once "
          "each; dashes and underscores are the same. Exit "
          "status: the guest's debug-exit value; 0 after a guest reset (unless "
          "--on-reboot=restart) or "
          "power-off or an API Shutdown; 128+N after signal N; 1 for an error of the VMM, printed "
          "as \"microvm: "
          "--flag=value: what is wrong\" (docs/errors.md lists them).",
  };
  return *help;
}

// The flags' values, checked and turned into the VM's configuration before anything is opened:
// every error names its flag and the value as typed (docs/errors.md).
absl::Status ConfigureVm(vmm::VmConfig& config) {
  const std::string kernel = absl::GetFlag(FLAGS_kernel);
  const std::string firmware = absl::GetFlag(FLAGS_firmware);
  if (!firmware.empty()) {
    if (!kernel.empty() || !absl::GetFlag(FLAGS_initrd).empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--firmware=%s: the firmware boots from the drives; drop --kernel and --initrd",
          firmware));
    }
    config.firmware_path = sys_util::AbsolutePath(firmware);
    RETURN_IF_ERROR(vmm::CheckInputFile("--firmware", firmware, config.firmware_path));
  } else if (!absl::GetFlag(FLAGS_firmware_log).empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--firmware-log=%s: only with --firmware",
                                                      absl::GetFlag(FLAGS_firmware_log)));
  } else if (!absl::GetFlag(FLAGS_boot).empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--boot=%s: only with --firmware (a kernel given with --kernel boots directly)",
        absl::GetFlag(FLAGS_boot)));
  }
  if (const std::string boot = absl::GetFlag(FLAGS_boot); !boot.empty()) {
    config.boot_order = absl::StrSplit(boot, ',');
    for (const std::string& name : config.boot_order) {
      if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("--boot=%s: an empty drive name", boot));
      }
    }
  }
  if (kernel.empty() && firmware.empty()) {
    return absl::InvalidArgumentError(
        "--kernel=PATH is required: the kernel to boot (a bzImage, or an ELF such as "
        "bazel-bin/tests/guest/test_guest), or --firmware=PATH to boot from the drives; "
        "microvm --help lists every flag");
  }
  // Absolute from here on: the control API reports them, and the VMM may chdir (--jail).
  if (!kernel.empty()) {
    config.kernel_path = sys_util::AbsolutePath(kernel);
    RETURN_IF_ERROR(vmm::CheckInputFile("--kernel", kernel, config.kernel_path));
  }
  const std::string initrd = absl::GetFlag(FLAGS_initrd);
  if (!initrd.empty()) {
    config.initrd_path = sys_util::AbsolutePath(initrd);
    RETURN_IF_ERROR(vmm::CheckInputFile("--initrd", initrd, config.initrd_path));
  }
  ASSIGN_OR_RETURN(config.memory_bytes, vmm::ParseMemorySize(absl::GetFlag(FLAGS_memory)));
  config.vcpus = absl::GetFlag(FLAGS_vcpus);
  RETURN_IF_ERROR(vmm::CheckRange(
      "--vcpus", config.vcpus, 1, vmm::x86::kMpTableMaxCpus,
      absl::StrCat("the MP table in the EBDA has room for ", vmm::x86::kMpTableMaxCpus, " vCPUs")));
  config.cpu_features = absl::GetFlag(FLAGS_cpu_features);
  if (auto features = vmm::x86::ParseCpuFeatures(config.cpu_features); !features.ok()) {
    absl::string_view message = features.status().message();
    absl::ConsumePrefix(&message, "--cpu-features: ");
    return absl::InvalidArgumentError(
        absl::StrFormat("--cpu-features=%s: %s", config.cpu_features, message));
  }
  // Checked whether or not a drive uses them: a value out of range is a mistake either way.
  config.storage.scsi_queues = absl::GetFlag(FLAGS_scsi_queues);
  config.storage.scsi_controller = absl::GetFlag(FLAGS_scsi_controller);
  RETURN_IF_ERROR(vmm::CheckRange("--scsi-queues", config.storage.scsi_queues, 1, 1024,
                                  "virtio-scsi request queues"));
  RETURN_IF_ERROR(vmm::IoThreadFlagsInto(config.storage));
  config.cmdline = absl::GetFlag(FLAGS_cmdline);
  config.kvm_path = absl::GetFlag(FLAGS_kvm_device);
  const std::string on_reboot = absl::GetFlag(FLAGS_on_reboot);
  if (on_reboot == "exit") {
    config.on_reboot = vmm::VmConfig::OnReboot::kExit;
  } else if (on_reboot == "restart") {
    config.on_reboot = vmm::VmConfig::OnReboot::kRestart;
  } else {
    return absl::InvalidArgumentError(
        absl::StrFormat("--on-reboot=%s: expected exit or restart", on_reboot));
  }
  config.boot_marker = absl::GetFlag(FLAGS_boot_marker);
  return absl::OkStatus();
}

// An error of Vm::Create reworded to name the flag of the file it is about (the loaders and KVM
// name the file; docs/errors.md). Drive errors already name their flag (vmm::DriveError).
absl::Status NameTheInput(const vmm::VmConfig& config, const absl::Status& status) {
  const struct {
    const char* flag;
    std::string given;
    std::string path;
  } inputs[] = {
      {"--kernel", absl::GetFlag(FLAGS_kernel), config.kernel_path},
      {"--initrd", absl::GetFlag(FLAGS_initrd), config.initrd_path},
      {"--firmware", absl::GetFlag(FLAGS_firmware), config.firmware_path},
      {"--kvm-device", config.kvm_path, config.kvm_path},
  };
  for (const auto& input : inputs) {
    absl::Status named = vmm::NameTheFlag(input.flag, input.given, input.path, status);
    if (named.message() != status.message()) return named;
  }
  return status;
}

// Whether --serial=file:PATH can be written, without creating or truncating it: an existing file
// must be a writable regular file (or a device, a FIFO), a new one needs a writable directory.
absl::Status CheckSerialFile(const std::string& path) {
  struct stat existing {};
  if (stat(path.c_str(), &existing) == 0) {
    if (S_ISDIR(existing.st_mode)) return absl::FailedPreconditionError(strerror(EISDIR));
    if (access(path.c_str(), W_OK) != 0) return absl::PermissionDeniedError(strerror(errno));
    return absl::OkStatus();
  }
  if (errno != ENOENT) return absl::ErrnoToStatus(errno, strerror(errno));
  const size_t slash = path.rfind('/');
  const std::string directory =
      slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
  if (access(directory.c_str(), W_OK) != 0) return absl::ErrnoToStatus(errno, strerror(errno));
  return absl::OkStatus();
}

// --serial: stdout, none, or file:PATH. The file is created or truncated only once the start has
// succeeded (OpenFile): a start that fails leaves an earlier run's console output alone. Until
// then the VM holds a stand-in (/dev/null) on the same descriptor number, which OpenFile replaces;
// nothing is written before the guest runs.
class SerialOutput {
 public:
  static absl::StatusOr<SerialOutput> FromFlag() {
    SerialOutput output;
    output.flag_ = absl::GetFlag(FLAGS_serial);
    if (output.flag_ == "stdout") {
      output.fd_ = STDOUT_FILENO;
    } else if (output.flag_ == "none") {
      output.fd_ = -1;
    } else if (absl::StartsWith(output.flag_, "file:")) {
      output.path_ = output.flag_.substr(5);
      if (absl::Status writable = CheckSerialFile(output.path_); !writable.ok()) {
        return absl::Status(writable.code(),
                            absl::StrFormat("--serial=%s: cannot open %s for writing: %s",
                                            output.flag_, output.path_, writable.message()));
      }
      output.stand_in_.Reset(open("/dev/null", O_WRONLY | O_CLOEXEC));
      if (!output.stand_in_.valid()) return sys_util::ErrnoStatus(errno, "/dev/null");
      output.fd_ = output.stand_in_.get();
    } else {
      return absl::InvalidArgumentError(
          absl::StrFormat("--serial=%s: expected stdout, none or file:PATH", output.flag_));
    }
    return output;
  }

  int fd() const { return fd_; }

  // For file:PATH, the file in place of the stand-in (dup3 onto its descriptor number).
  absl::Status OpenFile() {
    if (path_.empty()) return absl::OkStatus();
    sys_util::ScopedFd file(open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file.valid() || dup3(file.get(), stand_in_.get(), O_CLOEXEC) < 0) {
      const int error = errno;
      return sys_util::ErrnoStatus(
          error, absl::StrFormat("--serial=%s: cannot open %s for writing", flag_, path_));
    }
    return absl::OkStatus();
  }

 private:
  std::string flag_;
  std::string path_;  // file:PATH
  sys_util::ScopedFd stand_in_;
  int fd_ = -1;
};

// --boot-report: the boot's milestones since the launch, the peak RSS and the exit status.
void PrintBootReport(vmm::Vm& vm, const vmm::VmConfig& config, const vmm::VmExit& exit) {
  const vmm::BootReport report = vm.boot_report();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto since_launch = [](const std::optional<absl::Duration>& time, const char* otherwise) {
    return time ? absl::StrFormat("%.2f ms", absl::ToDoubleMilliseconds(*time))
                : std::string(otherwise);
  };
  // Linux writes no POST code 0x03: for it the serial output and the marker are the milestones.
  absl::FPrintF(stderr, "microvm: boot report: first serial output %s, ",
                since_launch(report.first_serial_output, "none"));
  if (!config.boot_marker.empty()) {
    absl::FPrintF(stderr, "boot marker \"%s\" %s, ", config.boot_marker,
                  since_launch(report.boot_marker_seen, "not seen"));
  }
  absl::FPrintF(
      stderr, "first ring-3 instruction (test guest) %s, peak RSS %d KiB, exit status %d\n",
      since_launch(report.first_ring3_instruction, "not reached"), usage.ru_maxrss, exit.status);
  for (const vmm::AttachedDrive& drive : vm.storage().drives()) {
    if (!drive.spec.probe_delay_us || drive.host_drive == nullptr) continue;
    absl::FPrintF(stderr, "microvm: %s: simulated host drive probed %d time(s)\n", drive.name,
                  drive.host_drive->stats().probes);
  }
}

// microvm's steps of the launch sequence (vmm/launch_sequence.h).
class MicrovmProgram : public vmm::LauncherProgram {
 public:
  explicit MicrovmProgram(const vmm::LauncherExtensions& extensions) : extensions_(extensions) {}

  const char* name() const override { return "microvm"; }
  const vmm::ProgramHelp& help() const override { return Help(); }

  absl::Status Configure(const vmm::ParsedCommandLine& parsed) override {
    config_.storage.drives = parsed.drives;
    config_.storage.io_groups = parsed.io_groups;
    config_.storage.simulated_drive = extensions_.simulated_drive;
    return ConfigureVm(config_);
  }

  // Every io_uring the drives, media and disks attached later will use, while the process may
  // still make one: no thread may once the sandbox is in force (block/raw/uring_ops.h RingPool).
  absl::Status BeforeSandbox(const vmm::LaunchContext&) override {
    return vmm::MakeRingPool(config_.storage);
  }

  absl::StatusOr<Next> Build(const vmm::LaunchContext& context) override {
    config_.launch_time = context.launch_time;
    config_.host_pid = context.sandbox->supervised.host_pid;
    config_.vcpu_thread_start =
        context.sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kVcpu);
    config_.storage.iothread_start =
        context.sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kIo);
    ASSIGN_OR_RETURN(serial_, SerialOutput::FromFlag());
    config_.serial_output_fd = serial_->fd();
    config_.serial_input_fd = absl::GetFlag(FLAGS_serial_input) ? STDIN_FILENO : -1;
    if (const std::string log = absl::GetFlag(FLAGS_firmware_log); !log.empty()) {
      firmware_log_.Reset(open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
      if (!firmware_log_.valid()) {
        return sys_util::ErrnoStatus(
            errno, absl::StrFormat("--firmware-log=%s: cannot open it for writing", log));
      }
      config_.firmware_log_fd = firmware_log_.get();
    }
    auto vm = vmm::Vm::Create(config_);
    if (!vm.ok()) return NameTheInput(config_, vm.status());
    vm_ = *std::move(vm);
    if (auto notice = vmm::Ring3CpuidNotice(vmm::DetectHostKvmKind())) {
      absl::FPrintF(stderr, "microvm: %s\n", *notice);
    }
    // Debugging aids that dump what the VM would run with, instead of running it.
    if (const std::string path = absl::GetFlag(FLAGS_dump_dtb); !path.empty()) {
      absl::Status status = vmm::fdt::WriteFdtFile(vm_->device_tree(), path);
      if (!status.ok()) return vmm::NameTheFlag("--dump-dtb", path, path, status);
      return Next::kDone;
    }
    if (const std::string dir = absl::GetFlag(FLAGS_dump_acpi); !dir.empty()) {
      absl::Status status = vmm::acpi::WriteAcpiFiles(vm_->acpi_tables(), dir);
      if (!status.ok()) return vmm::NameTheFlag("--dump-acpi", dir, dir, status);
      return Next::kDone;
    }
    return Next::kRun;
  }

  api::VmControl& ApiControl(const vmm::LaunchContext& context) override {
    api_control_ = std::make_unique<vmm::VmApiControl>(*vm_, context.media_dir);
    return *api_control_;
  }

  // The start has succeeded: now the console file may be created or truncated, in place of the
  // stand-in the VM holds.
  absl::Status BeforeJail(const vmm::LaunchContext&) override { return serial_->OpenFile(); }

  absl::StatusOr<int> Run(const vmm::LaunchContext& context) override {
    exit_ = vm_->Run(context.stop_signal_fd);
    return exit_.status;
  }

  int Finish(int status) override {
    if (exit_.kind == vmm::VmExit::Kind::kFatal) {
      absl::FPrintF(stderr, "microvm: fatal: %s\n", exit_.message);
    } else if (exit_.kind !=
               vmm::VmExit::Kind::kGuestExit) {  // the test guest's own status is its say
      absl::FPrintF(stderr, "microvm: %s, VM stopped\n", exit_.message);
    }
    if (absl::GetFlag(FLAGS_boot_report)) PrintBootReport(*vm_, config_, exit_);
    return status;
  }

 private:
  const vmm::LauncherExtensions& extensions_;
  vmm::VmConfig config_;
  std::optional<SerialOutput> serial_;
  sys_util::ScopedFd firmware_log_;  // --firmware-log, before the VM that writes to it
  std::unique_ptr<vmm::Vm> vm_;
  // Declared after the VM: the API's view of it goes first.
  std::unique_ptr<vmm::VmApiControl> api_control_;
  vmm::VmExit exit_{.kind = vmm::VmExit::Kind::kStopped};
};

}  // namespace

namespace vmm {

int RunMicrovm(int argc, char** argv, const LauncherExtensions& extensions) {
  MicrovmProgram program(extensions);
  return RunLauncher(program, argc, argv);
}

}  // namespace vmm

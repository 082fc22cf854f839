// microvm: launches a KVM microVM. See README.md and docs/machine.md.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "api/api_token.h"
#include "api/control_server.h"
#include "vmm/acpi/machine_acpi.h"
#include "vmm/command_line.h"
#include "vmm/control_api.h"
#include "vmm/drive_spec.h"
#include "vmm/fdt/machine_fdt.h"
#include "vmm/host_kvm.h"
#include "vmm/media_directory.h"
#include "vmm/sandbox/sandbox_flags.h"
#include "vmm/thread_stacks.h"
#include "vmm/vm.h"
#include "vmm/vm_api.h"

ABSL_FLAG(std::string, kernel, "", "Kernel to boot: a Linux bzImage, or an ELF (PVH note or 64-bit entry).");
ABSL_FLAG(std::string, initrd, "", "Initial ramdisk to load beside the kernel.");
ABSL_FLAG(std::string, cmdline, "console=ttyS0 reboot=k panic=1", "Kernel command line.");
ABSL_FLAG(std::string, memory, "256M", "Guest RAM: a number of MiB, or with a K/M/G suffix.");
ABSL_FLAG(uint32_t, vcpus, 1, "Number of vCPUs (1-40: the MP table's room in the EBDA).");
ABSL_FLAG(std::string, serial, "stdout", "Serial console output: stdout, none, or file:PATH.");
ABSL_FLAG(bool, serial_input, true, "Feed the VMM's stdin to the serial console.");
ABSL_FLAG(std::string, cpu_features, "",
          "CPUID features to hide or require, e.g. -xsave,-cx16 (see docs/machine.md).");
ABSL_FLAG(std::string, dump_dtb, "", "Write the machine's flattened device tree to this file and exit.");
ABSL_FLAG(std::string, dump_acpi, "",
          "Write the machine's ACPI tables to this existing directory (rsdp.dat, xsdt.dat, facp.dat, "
          "facs.dat, apic.dat, dsdt.dat; `iasl -d` decodes them) and exit.");
ABSL_FLAG(bool, boot_report, false,
          "Print start-up times (to the first serial byte, the --boot-marker text and the test "
          "guest's first ring-3 instruction) and peak RSS on exit, to stderr.");
ABSL_FLAG(std::string, boot_marker, "",
          "With --boot-report: also time the first appearance of this text in the serial output "
          "(e.g. a line the guest's init prints).");
ABSL_FLAG(std::string, kvm_device, "/dev/kvm", "The KVM device node.");
ABSL_FLAG(uint32_t, scsi_queues, 1, "virtio-scsi request queues.");
ABSL_FLAG(std::string, test_media, "",
          "Tests only: enables the test-control port (0xf5), through which the guest can eject "
          "CD-ROM N (0x10|N) or insert this file into it (0x20|N).");
ABSL_FLAG(uint32_t, iothreads, 1,
          "iothreads serving the virtio-scsi request queues (queue i on iothread i % N).");
ABSL_FLAG(int64_t, poll_max_ns, 32768,
          "Adaptive polling of each request queue before its iothread sleeps, in ns (0: off; the "
          "default is QEMU's iothread poll-max-ns).");
ABSL_FLAG(std::string, api_socket, "",
          "Serve the gRPC control API (docs/api.md) on this unix socket, created with mode 0600. "
          "Refused if the path exists and is not a stale socket. Default: no API.");
ABSL_FLAG(std::string, api_tcp, "",
          "Serve the control API over TCP on HOST:PORT (127.0.0.1:7000, [::1]:7000; port 0 picks "
          "one). Needs --api-token-file (or --api-tcp-insecure). Loopback only unless "
          "--api-listen-any: the traffic is not encrypted.");
ABSL_FLAG(std::string, api_token_file, "",
          "Every control-API call must carry the secret in this file (gRPC metadata "
          "\"authorization: Bearer <token>\"; vmmctl --api-token-file), on every listener. The "
          "file must belong to the VMM's user and be readable by it alone (mode 0600).");
ABSL_FLAG(bool, api_tcp_insecure, false,
          "DANGEROUS: allow --api-tcp without --api-token-file; every local user (with "
          "--api-listen-any, anyone who can connect) then controls the VM.");
ABSL_FLAG(std::string, media_dir, "",
          "The control API takes CD/DVD media from this directory only: paths relative to it, or "
          "absolute under it; anything else is refused. Without it, any file the VMM can read.");
ABSL_FLAG(bool, api_listen_any, false,
          "Allow --api-tcp on a non-loopback address (anyone who can connect controls the VM).");
// --disk and --cdrom may repeat; they are taken out of argv before absl parses it (see
// ExtractDriveFlags). These definitions only document them in --help.
ABSL_FLAG(std::string, disk, "",
          "A virtio-scsi disk: PATH[,cache=none|writeback|writethrough|directsync|unsafe]"
          "[,fua=native|emulate][,readonly]. Repeat for more disks.");
ABSL_FLAG(std::string, cdrom, "", "A virtio-scsi CD/DVD-ROM with the ISO at PATH (empty: no medium). "
                                  "Repeatable.");
ABSL_FLAG(std::string, ide_disk, "",
          "An IDE (PIIX3) disk: PATH[,cache=...][,fua=...][,readonly][,channel=0|1][,unit=0|1].");
ABSL_FLAG(std::string, ide_cdrom, "",
          "An IDE ATAPI CD/DVD-ROM: [PATH][,channel=0|1][,unit=0|1] (default: secondary master).");

namespace {

constexpr int kExitError = 1;

int Fail(const std::string& message) {
  absl::FPrintF(stderr, "microvm: %s\n", message);
  return kExitError;
}

}  // namespace

int main(int argc, char** argv) {
  const absl::Time launch_time = absl::Now();
  if (absl::Status stacks = vmm::UseSmallThreadStacks(); !stacks.ok()) {
    return Fail(std::string(stacks.message()));
  }
  absl::SetProgramUsageMessage(
      "Launches a KVM microVM.\n  microvm --kernel=PATH [--initrd=PATH] [--cmdline=...] "
      "[--memory=256M] [--vcpus=1] [--serial=stdout|none|file:PATH]");
  auto drives = vmm::ParseFlagsAndDrives(argc, argv);
  if (!drives.ok()) return Fail(std::string(drives.status().message()));
  // Before any thread starts: every thread inherits the process's filter (docs/security.md).
  auto sandbox = vmm::sandbox::EnableSandboxFromFlags();
  if (!sandbox.ok()) return Fail(std::string(sandbox.status().message()));

  vmm::VmConfig config;
  config.launch_time = launch_time;
  config.kernel_path = absl::GetFlag(FLAGS_kernel);
  config.initrd_path = absl::GetFlag(FLAGS_initrd);
  config.cmdline = absl::GetFlag(FLAGS_cmdline);
  config.vcpus = absl::GetFlag(FLAGS_vcpus);
  config.cpu_features = absl::GetFlag(FLAGS_cpu_features);
  config.kvm_path = absl::GetFlag(FLAGS_kvm_device);
  config.storage.drives = *std::move(drives);
  config.storage.scsi_queues = absl::GetFlag(FLAGS_scsi_queues);
  config.storage.iothreads = absl::GetFlag(FLAGS_iothreads);
  config.storage.poll_max_ns = absl::GetFlag(FLAGS_poll_max_ns);
  config.test_media_path = absl::GetFlag(FLAGS_test_media);
  config.boot_marker = absl::GetFlag(FLAGS_boot_marker);
  config.vcpu_thread_start = sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kVcpu);
  config.storage.iothread_start = sandbox->sandbox.ThreadStart(vmm::sandbox::ThreadRole::kIo);
  if (config.kernel_path.empty()) return Fail("--kernel is required");
  if (!vmm::ParseMemorySize(absl::GetFlag(FLAGS_memory), &config.memory_bytes)) {
    return Fail(absl::StrFormat("--memory=%s is not a size (e.g. 256, 256M, 2G)",
                                absl::GetFlag(FLAGS_memory)));
  }

  vmm::ScopedFd serial_file;
  const std::string serial = absl::GetFlag(FLAGS_serial);
  if (serial == "stdout") {
    config.serial_output_fd = STDOUT_FILENO;
  } else if (serial == "none") {
    config.serial_output_fd = -1;
  } else if (absl::StartsWith(serial, "file:")) {
    const std::string path = serial.substr(5);
    serial_file.Reset(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!serial_file.valid()) {
      return Fail(absl::StrFormat("cannot open serial output %s: %s", path, strerror(errno)));
    }
    config.serial_output_fd = serial_file.get();
  } else {
    return Fail(absl::StrFormat("--serial=%s: expected stdout, none or file:PATH", serial));
  }
  config.serial_input_fd = absl::GetFlag(FLAGS_serial_input) ? STDIN_FILENO : -1;

  // SIGINT/SIGTERM are taken through a signalfd by the main thread only: block them before any
  // thread starts so every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  vmm::ScopedFd signal_fd(signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));

  auto vm = vmm::Vm::Create(config);
  if (!vm.ok()) return Fail(std::string(vm.status().message()));
  if (auto notice = vmm::Ring3CpuidNotice(vmm::DetectHostKvmKind())) {
    absl::FPrintF(stderr, "microvm: %s\n", *notice);
  }

  const std::string dump_path = absl::GetFlag(FLAGS_dump_dtb);
  if (!dump_path.empty()) {
    absl::Status status = vmm::fdt::WriteFdtFile((*vm)->device_tree(), dump_path);
    if (!status.ok()) return Fail(std::string(status.message()));
    return 0;
  }
  const std::string acpi_dump_dir = absl::GetFlag(FLAGS_dump_acpi);
  if (!acpi_dump_dir.empty()) {
    absl::Status status = vmm::acpi::WriteAcpiFiles((*vm)->acpi_tables(), acpi_dump_dir);
    if (!status.ok()) return Fail(std::string(status.message()));
    return 0;
  }

  // The control API: after the VM exists, stopped before it is destroyed (declared after it).
  // Where its media may come from: declared first, destroyed last.
  std::unique_ptr<vmm::MediaDirectory> media_dir;
  if (!absl::GetFlag(FLAGS_media_dir).empty()) {
    auto opened = vmm::MediaDirectory::Open(absl::GetFlag(FLAGS_media_dir));
    if (!opened.ok()) return Fail(std::string(opened.status().message()));
    media_dir = *std::move(opened);
  }
  std::unique_ptr<vmm::VmApiControl> api_control;
  std::unique_ptr<api::ControlServer> api_server;
  api::ApiServerOptions api_options;
  api_options.unix_socket_path = absl::GetFlag(FLAGS_api_socket);
  api_options.tcp_address = absl::GetFlag(FLAGS_api_tcp);
  api_options.tcp_listen_any = absl::GetFlag(FLAGS_api_listen_any);
  if (api_options.tcp_listen_any && api_options.tcp_address.empty()) {
    return Fail("--api-listen-any applies to --api-tcp, which is not given");
  }
  api_options.tcp_insecure = absl::GetFlag(FLAGS_api_tcp_insecure);
  if (api_options.tcp_insecure && api_options.tcp_address.empty()) {
    return Fail("--api-tcp-insecure applies to --api-tcp, which is not given");
  }
  if (const std::string token_file = absl::GetFlag(FLAGS_api_token_file); !token_file.empty()) {
    if (api_options.unix_socket_path.empty() && api_options.tcp_address.empty()) {
      return Fail("--api-token-file applies to --api-socket and --api-tcp; neither is given");
    }
    auto token =
        api::ReadApiTokenFile(token_file, "--api-token-file", api::TokenFileCheck::kOwnerOnly);
    if (!token.ok()) return Fail(std::string(token.status().message()));
    api_options.auth_token = *std::move(token);
  }
  if (!api_options.unix_socket_path.empty() || !api_options.tcp_address.empty()) {
    api_control = std::make_unique<vmm::VmApiControl>(**vm, media_dir.get());
    auto server = vmm::StartControlApi(api_options, *api_control);
    if (!server.ok()) return Fail(absl::StrCat("control API: ", server.status().message()));
    api_server = *std::move(server);
    if (!api_server->unix_socket_path().empty()) {
      absl::FPrintF(stderr, "microvm: control API on unix:%s\n", api_server->unix_socket_path());
    }
    if (api_server->tcp_port() != 0) {
      absl::FPrintF(stderr, "microvm: control API on %s (port %d)\n", api_options.tcp_address,
                    api_server->tcp_port());
    }
  }

  // Everything is open (kernel, disks, /dev/kvm, the API's socket and plugin): into the jail
  // before the guest runs a single instruction.
  if (sandbox->jail.has_value()) {
    if (absl::Status jailed = vmm::sandbox::EnterJail(*sandbox->jail); !jailed.ok()) {
      if (api_server != nullptr) api_server->Stop();
      return Fail(absl::StrCat("--jail: ", jailed.message()));
    }
  }
  const vmm::VmExit exit = (*vm)->Run(signal_fd.get());
  // No API call may reach the VM once it is stopping (Watch streams end here).
  if (api_server != nullptr) api_server->Stop();
  if (exit.kind == vmm::VmExit::Kind::kFatal) {
    absl::FPrintF(stderr, "microvm: fatal: %s\n", exit.message);
  } else if (exit.kind == vmm::VmExit::Kind::kReset || exit.kind == vmm::VmExit::Kind::kPowerOff) {
    absl::FPrintF(stderr, "microvm: %s, VM stopped\n", exit.message);
  } else if (exit.kind == vmm::VmExit::Kind::kSignal) {
    absl::FPrintF(stderr, "microvm: %s, VM stopped\n", exit.message);
  } else if (exit.kind == vmm::VmExit::Kind::kStopped) {
    absl::FPrintF(stderr, "microvm: %s, VM stopped\n", exit.message);
  }
  if (absl::GetFlag(FLAGS_boot_report)) {
    const vmm::BootReport report = (*vm)->boot_report();
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
    absl::FPrintF(stderr, "first ring-3 instruction (test guest) %s, peak RSS %d KiB, exit status %d\n",
                  since_launch(report.first_ring3_instruction, "not reached"), usage.ru_maxrss,
                  exit.status);
    for (const vmm::AttachedDrive& drive : (*vm)->storage().drives()) {
      if (drive.simulated_drive == nullptr) continue;
      absl::FPrintF(stderr, "microvm: %s: simulated host drive probed %d time(s)\n", drive.name,
                    drive.simulated_drive->probes());
    }
  }
  return exit.status;
}

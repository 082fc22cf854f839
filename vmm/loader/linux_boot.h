#ifndef VMM_LOADER_LINUX_BOOT_H_
#define VMM_LOADER_LINUX_BOOT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "vmm/loader/boot_params.h"
#include "vmm/loader/initrd.h"
#include "vmm/loader/kernel_loader.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {

// With an FDT, the setup_data node that carries it sits at kFdtAddress and the blob itself follows
// its 16-byte header, so a guest sees the device tree at 0x30010 (8-byte aligned, as libfdt wants).
// Header plus blob must fit in kFdtMaxBytes.
inline constexpr uint64_t kLinuxFdtSetupDataAddress = kFdtAddress;
inline constexpr uint64_t kLinuxFdtBlobAddress = kFdtAddress + sizeof(SetupDataHeader);

// The boot protocol version the VMM writes into the minimal header it makes for an ELF kernel
// (which has no header of its own). Linux ignores setup_data (and so the FDT) unless the version is
// at least 2.09 (arch/x86/kernel/setup.c parse_setup_data()); 2.15 is the protocol this follows.
inline constexpr uint16_t kElfBootProtocolVersion = kProtocol2_15;
// boot.rst sample boot configuration: heap_end = 0xe000, heap_end_ptr = heap_end - 0x200. Only the
// 16-bit setup code uses the heap, which the 64-bit entry skips, but we say CAN_USE_HEAP, so make it
// a sane value.
inline constexpr uint16_t kHeapEndPtr = 0xe000 - 0x200;
// What Firecracker writes as kernel_alignment in the minimal ELF header (16 MiB, the x86-64
// CONFIG_PHYSICAL_ALIGN maximum).
inline constexpr uint32_t kElfKernelAlignment = 0x1000000;

struct LinuxBootConfig {
  // The kernel as LoadKernel() returned it; kind kLinux64 (bzImage) or kElf64. Not owned; must
  // outlive the call.
  const LoadedKernel* kernel = nullptr;
  // Without the terminating NUL; must not contain NUL.
  std::string cmdline;
  std::optional<InitrdPlacement> initrd;
  // A flattened device tree blob, passed as a SETUP_DTB setup_data entry. Empty: none.
  std::span<const uint8_t> fdt;
  // Guest-physical address of the ACPI RSDP, written to boot_params.acpi_rsdp_addr (zero-page.rst,
  // 0x070; Linux uses it before scanning the BIOS area). 0: no ACPI tables.
  uint64_t acpi_rsdp_address = 0;
};

// Writes the Linux zero page (boot_params, Documentation/x86/zero-page.rst) at kZeroPageAddress, the
// command line at kCmdlineAddress and, with an FDT, the setup_data node at kFdtAddress. For a bzImage
// the kernel's own setup header is the base (boot.rst "64-bit BOOT PROTOCOL"); for an ELF kernel a
// minimal one (boot_flag, "HdrS", version, kernel_alignment) as Firecracker writes. Then the loader
// fields: type_of_loader 0xff, loadflags |= LOADED_HIGH | CAN_USE_HEAP, heap_end_ptr, cmd_line_ptr
// (+ ext_), ramdisk_image/size (+ ext_), vid_mode 0xffff, setup_data, acpi_rsdp_addr, and the e820
// table from vmm::x86::BuildE820Map().
// InvalidArgument: no kernel, a PVH kernel, a command line that is too long (over the bzImage's
// cmdline_size, or kCmdlineMaxBytes including the NUL) or contains NUL, an FDT larger than
// kFdtMaxBytes minus the setup_data header. Nothing is written to guest memory on these errors.
absl::Status WriteLinuxBootParams(const GuestMemory& memory, const LinuxBootConfig& config);

}  // namespace vmm::loader

#endif  // VMM_LOADER_LINUX_BOOT_H_

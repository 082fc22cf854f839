#include "vmm/loader/linux_boot.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/loader/boot_util.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/x86/e820.h"

namespace vmm::loader {
namespace {

// boot.rst, cmdline_size: "For protocol 2.05 and earlier, the maximum size is 255."
constexpr uint64_t kPre206CmdlineMax = 255;

// The setup header of boot_params: a bzImage's own (the command line checked against its
// cmdline_size), or for an ELF kernel, which has none, the fields Linux checks.
absl::Status FillSetupHeader(const LoadedKernel& kernel, bool bzimage, const std::string& cmdline,
                             SetupHeader& hdr) {
  if (bzimage) {
    std::memcpy(&hdr, kernel.bzimage_setup_header->data(), kernel.bzimage_setup_header->size());
    // boot.rst, cmdline_size (2.06+): "The maximum size of the command line without the
    // terminating zero."
    const uint64_t kernel_max = hdr.version >= kProtocol2_06 ? hdr.cmdline_size : kPre206CmdlineMax;
    if (cmdline.size() > kernel_max) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "kernel command line is %u bytes; the kernel accepts at most %u (cmdline_size in its "
          "setup header)",
          cmdline.size(), kernel_max));
    }
  } else {
    // No header in an ELF file: write the fields Linux checks, as Firecracker does.
    hdr.boot_flag = kBootFlagMagic;
    hdr.header = kHdrSMagic;
    hdr.version = kElfBootProtocolVersion;
    hdr.kernel_alignment = kElfKernelAlignment;
    hdr.cmdline_size =
        static_cast<uint32_t>(std::min<uint64_t>(cmdline.size(), kCmdlineMaxBytes - 1));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteLinuxBootParams(const GuestMemory& memory, const LinuxBootConfig& config) {
  if (config.kernel == nullptr) {
    return absl::InvalidArgumentError("WriteLinuxBootParams: no kernel given");
  }
  const LoadedKernel& kernel = *config.kernel;
  if (kernel.kind == LoadedKernel::EntryKind::kPvh) {
    return absl::InvalidArgumentError(
        "a PVH kernel is entered with hvm_start_info, not boot_params (use WritePvhStartInfo)");
  }
  const bool bzimage = kernel.kind == LoadedKernel::EntryKind::kLinux64;
  if (bzimage && (!kernel.bzimage_setup_header.has_value() ||
                  kernel.bzimage_setup_header->size() > sizeof(SetupHeader))) {
    return absl::InvalidArgumentError(
        "a bzImage kernel needs its setup header (at most the protocol 2.15 size) to boot");
  }

  // Validate everything before writing anything.
  BootParams params;
  std::memset(&params, 0, sizeof(params));
  RETURN_IF_ERROR(FillSetupHeader(kernel, bzimage, config.cmdline, params.hdr));
  RETURN_IF_ERROR(CheckCommandLine(config.cmdline, kCmdlineMaxBytes));

  if (config.initrd.has_value()) {
    if (config.initrd->size == 0 ||
        !memory.IsValidRange(config.initrd->address, config.initrd->size)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("initrd at 0x%x (%u bytes) is not inside guest RAM",
                          config.initrd->address.value(), config.initrd->size));
    }
  }

  const std::vector<x86::E820Entry> e820 = x86::BuildE820Map(memory);
  if (e820.size() > kZeroPageE820MaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the memory map has %u entries; boot_params holds at most %u", e820.size(),
                        kZeroPageE820MaxEntries));
  }

  if (!config.fdt.empty()) {
    if (config.fdt.size() > kFdtMaxBytes - sizeof(SetupDataHeader)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "device tree blob is %u bytes; at most %u fit at 0x%x after the setup_data header",
          config.fdt.size(), kFdtMaxBytes - sizeof(SetupDataHeader), kLinuxFdtBlobAddress));
    }
    // setup_data exists from protocol 2.09 on; the 2.12 a bzImage needs for XLF_KERNEL_64 covers it.
    if (params.hdr.version < kProtocol2_09) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the kernel's boot protocol 0x%04x predates setup_data (2.09); it cannot take an FDT",
          params.hdr.version));
    }
  }

  // boot.rst "Details of Header Fields": what a boot loader must or should fill in.
  params.hdr.type_of_loader = kTypeOfLoaderUndefined;
  params.hdr.loadflags |= kLoadedHigh | kCanUseHeap;
  params.hdr.heap_end_ptr = kHeapEndPtr;
  params.hdr.vid_mode = kVidModeNormal;
  params.hdr.cmd_line_ptr = static_cast<uint32_t>(kCmdlineAddress);
  params.ext_cmd_line_ptr = static_cast<uint32_t>(kCmdlineAddress >> 32);
  // Always overwrite the ramdisk and setup_data fields: a hostile image could carry values there.
  params.hdr.ramdisk_image = 0;
  params.hdr.ramdisk_size = 0;
  params.hdr.setup_data = 0;
  if (config.initrd.has_value()) {
    const uint64_t address = config.initrd->address.value();
    params.hdr.ramdisk_image = static_cast<uint32_t>(address);
    params.hdr.ramdisk_size = static_cast<uint32_t>(config.initrd->size);
    params.ext_ramdisk_image = static_cast<uint32_t>(address >> 32);
    params.ext_ramdisk_size = static_cast<uint32_t>(config.initrd->size >> 32);
  }
  params.acpi_rsdp_addr = config.acpi_rsdp_address;
  params.e820_entries = static_cast<uint8_t>(e820.size());
  for (size_t i = 0; i < e820.size(); ++i) {
    params.e820_table[i] = {e820[i].address, e820[i].size, static_cast<uint32_t>(e820[i].type)};
  }

  RETURN_IF_ERROR(WriteCommandLine(memory, config.cmdline, kCmdlineMaxBytes));
  if (!config.fdt.empty()) {
    const SetupDataHeader node = {
        .next = 0, .type = kSetupDtb, .len = static_cast<uint32_t>(config.fdt.size())};
    RETURN_IF_ERROR(memory.WriteObject(GuestAddress(kLinuxFdtSetupDataAddress), node));
    RETURN_IF_ERROR(memory.Write(GuestAddress(kLinuxFdtBlobAddress), config.fdt));
    params.hdr.setup_data = kLinuxFdtSetupDataAddress;
  }
  return memory.WriteObject(GuestAddress(kZeroPageAddress), params);
}

}  // namespace vmm::loader

#include "vmm/loader/pvh_boot.h"

#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/loader/boot_util.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/x86/e820.h"

namespace vmm::loader {

absl::Status WritePvhStartInfo(const GuestMemory& memory, const PvhBootConfig& config) {
  // Validate everything before writing anything.
  RETURN_IF_ERROR(CheckCommandLine(config.cmdline, kCmdlineMaxBytes));
  if (config.initrd.has_value() &&
      (config.initrd->size == 0 ||
       !memory.IsValidRange(config.initrd->address, config.initrd->size))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("initrd at 0x%x (%u bytes) is not inside guest RAM",
                        config.initrd->address.value(), config.initrd->size));
  }
  if (config.fdt.size() > kFdtMaxBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("device tree blob is %u bytes; at most %u fit at 0x%x", config.fdt.size(),
                        kFdtMaxBytes, kFdtAddress));
  }
  const std::vector<x86::E820Entry> e820 = x86::BuildE820Map(memory);
  if (e820.size() > kPvhMemoryMapMaxEntries) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the memory map has %u entries; the PVH memory map at 0x%x holds at most %u", e820.size(),
        kPvhMemoryMapAddress, kPvhMemoryMapMaxEntries));
  }

  std::vector<HvmModlistEntry> modules;
  if (config.initrd.has_value()) {
    modules.push_back({.paddr = config.initrd->address.value(),
                       .size = config.initrd->size,
                       .cmdline_paddr = 0,
                       .reserved = 0});
  }
  if (!config.fdt.empty()) {
    modules.push_back({.paddr = kFdtAddress,
                       .size = config.fdt.size(),
                       .cmdline_paddr = kPvhFdtModuleNameAddress,
                       .reserved = 0});
  }

  std::vector<HvmMemmapTableEntry> memmap;
  memmap.reserve(e820.size());
  for (const x86::E820Entry& entry : e820) {
    // start_info.h: hvm_memmap_table_entry types are the E820 types.
    memmap.push_back({.addr = entry.address,
                      .size = entry.size,
                      .type = static_cast<uint32_t>(entry.type),
                      .reserved = 0});
  }

  const HvmStartInfo start_info = {
      .magic = kHvmStartMagic,
      .version = kHvmStartInfoVersion,
      .flags = 0,
      .nr_modules = static_cast<uint32_t>(modules.size()),
      .modlist_paddr = modules.empty() ? 0 : kPvhModuleListAddress,
      .cmdline_paddr = kCmdlineAddress,
      .rsdp_paddr = config.rsdp_address,
      .memmap_paddr = kPvhMemoryMapAddress,
      .memmap_entries = static_cast<uint32_t>(memmap.size()),
      .reserved = 0,
  };

  RETURN_IF_ERROR(WriteCommandLine(memory, config.cmdline, kCmdlineMaxBytes));
  if (!config.fdt.empty()) {
    RETURN_IF_ERROR(memory.Write(GuestAddress(kFdtAddress), config.fdt));
  }
  RETURN_IF_ERROR(
      memory.Write(GuestAddress(kPvhFdtModuleNameAddress),
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kPvhFdtModuleName),
                                            sizeof(kPvhFdtModuleName))));
  if (!modules.empty()) {
    RETURN_IF_ERROR(
        memory.Write(GuestAddress(kPvhModuleListAddress),
                     std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(modules.data()),
                                              modules.size() * sizeof(HvmModlistEntry))));
  }
  RETURN_IF_ERROR(
      memory.Write(GuestAddress(kPvhMemoryMapAddress),
                   std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(memmap.data()),
                                            memmap.size() * sizeof(HvmMemmapTableEntry))));
  return memory.WriteObject(GuestAddress(kPvhStartInfoAddress), start_info);
}

}  // namespace vmm::loader

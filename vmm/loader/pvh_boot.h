#ifndef VMM_LOADER_PVH_BOOT_H_
#define VMM_LOADER_PVH_BOOT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "vmm/loader/initrd.h"
#include "vmm/loader/start_info.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {

// The module list at kPvhModuleListAddress has room reserved for two entries: the initrd and the
// FDT. The FDT module's name, the NUL-terminated string "fdt", lives right after that room, at
// 0x6080, whether or not there is an initrd (docs/machine.md "Entry": a guest finds the FDT by that
// name).
inline constexpr uint64_t kPvhMaxModules = 2;
inline constexpr uint64_t kPvhFdtModuleNameAddress =
    kPvhModuleListAddress + kPvhMaxModules * sizeof(HvmModlistEntry);
inline constexpr char kPvhFdtModuleName[] = "fdt";

static_assert(kPvhStartInfoAddress + sizeof(HvmStartInfo) <= kPvhModuleListAddress);
static_assert(kPvhFdtModuleNameAddress == 0x6080);
static_assert(kPvhFdtModuleNameAddress + sizeof(kPvhFdtModuleName) <= kPvhMemoryMapAddress);
static_assert(kPvhMemoryMapAddress + kPvhMemoryMapMaxEntries * sizeof(HvmMemmapTableEntry) <=
              kZeroPageAddress);

struct PvhBootConfig {
  // Without the terminating NUL; must not contain NUL; at most kCmdlineMaxBytes - 1 bytes.
  std::string cmdline;
  // Module 0 when present: Linux's PVH entry takes the first module as its initrd
  // (arch/x86/platform/pvh/enlighten.c).
  std::optional<InitrdPlacement> initrd;
  // A flattened device tree blob, written at kFdtAddress (at most kFdtMaxBytes) and listed as the
  // last module, named "fdt". Empty: none.
  std::span<const uint8_t> fdt;
  // Guest-physical address of the ACPI RSDP, written to hvm_start_info.rsdp_paddr. 0: no ACPI
  // tables (the guest uses the MP table and the FDT).
  uint64_t rsdp_address = 0;
};

// Writes the PVH boot information (Xen PVH ABI; start_info.h): hvm_start_info version 1 at
// kPvhStartInfoAddress, the command line at kCmdlineAddress, the module list (initrd first, FDT
// last) at kPvhModuleListAddress, the FDT at kFdtAddress, and the memory map from
// vmm::x86::BuildE820Map() at kPvhMemoryMapAddress. InvalidArgument (nothing written) for a bad
// command line, an FDT larger than kFdtMaxBytes, an initrd outside guest RAM or a memory map with
// more than kPvhMemoryMapMaxEntries entries.
absl::Status WritePvhStartInfo(const GuestMemory& memory, const PvhBootConfig& config);

}  // namespace vmm::loader

#endif  // VMM_LOADER_PVH_BOOT_H_

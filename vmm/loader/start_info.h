#ifndef VMM_LOADER_START_INFO_H_
#define VMM_LOADER_START_INFO_H_

#include <cstddef>
#include <cstdint>

// The Xen PVH boot ABI's structures (xen/include/public/arch-x86/hvm/start_info.h; docs/misc/pvh.pandoc),
// written from the published layout. All fields little-endian; "paddr" fields are guest-physical.
namespace vmm::loader {

// start_info.h: XEN_HVM_START_MAGIC_VALUE.
inline constexpr uint32_t kHvmStartMagic = 0x336ec578;
// Version 1 adds memmap_paddr/memmap_entries (start_info.h: "All following fields only present in
// version 1 and newer").
inline constexpr uint32_t kHvmStartInfoVersion = 1;

// struct hvm_start_info.
struct __attribute__((packed)) HvmStartInfo {
  uint32_t magic;           // 0x00 kHvmStartMagic
  uint32_t version;         // 0x04
  uint32_t flags;           // 0x08 SIF_xxx
  uint32_t nr_modules;      // 0x0c
  uint64_t modlist_paddr;   // 0x10 array of HvmModlistEntry
  uint64_t cmdline_paddr;   // 0x18 NUL-terminated ASCII
  uint64_t rsdp_paddr;      // 0x20 ACPI RSDP, 0 if none
  uint64_t memmap_paddr;    // 0x28 array of HvmMemmapTableEntry (version >= 1)
  uint32_t memmap_entries;  // 0x30
  uint32_t reserved;        // 0x34 must be zero
};
static_assert(sizeof(HvmStartInfo) == 0x38);
static_assert(offsetof(HvmStartInfo, nr_modules) == 0x0c);
static_assert(offsetof(HvmStartInfo, modlist_paddr) == 0x10);
static_assert(offsetof(HvmStartInfo, cmdline_paddr) == 0x18);
static_assert(offsetof(HvmStartInfo, rsdp_paddr) == 0x20);
static_assert(offsetof(HvmStartInfo, memmap_paddr) == 0x28);
static_assert(offsetof(HvmStartInfo, memmap_entries) == 0x30);

// struct hvm_modlist_entry.
struct __attribute__((packed)) HvmModlistEntry {
  uint64_t paddr;          // 0x00
  uint64_t size;           // 0x08
  uint64_t cmdline_paddr;  // 0x10 NUL-terminated name/arguments of the module, 0 if none
  uint64_t reserved;       // 0x18
};
static_assert(sizeof(HvmModlistEntry) == 0x20);

// struct hvm_memmap_table_entry. start_info.h: the types are "the same as the E820 types".
struct __attribute__((packed)) HvmMemmapTableEntry {
  uint64_t addr;      // 0x00
  uint64_t size;      // 0x08
  uint32_t type;      // 0x10
  uint32_t reserved;  // 0x14
};
static_assert(sizeof(HvmMemmapTableEntry) == 0x18);

}  // namespace vmm::loader

#endif  // VMM_LOADER_START_INFO_H_

#ifndef VMM_LOADER_ELF_H_
#define VMM_LOADER_ELF_H_

#include <cstddef>
#include <cstdint>

// The parts of the ELF-64 format the kernel loader reads, from the System V ABI ("ELF-64 Object File
// Format" and the gABI chapters "ELF Header", "Program Header", "Note Section"), and the Xen ELF note
// the PVH boot ABI defines (xen/include/public/elfnote.h). Internal to //vmm/loader.
namespace vmm::loader::elf {

inline constexpr uint8_t kMagic[4] = {0x7f, 'E', 'L', 'F'};
inline constexpr size_t kIdentClass = 4;        // EI_CLASS
inline constexpr size_t kIdentData = 5;         // EI_DATA
inline constexpr size_t kIdentVersion = 6;      // EI_VERSION
inline constexpr uint8_t kClass32 = 1;          // ELFCLASS32
inline constexpr uint8_t kClass64 = 2;          // ELFCLASS64
inline constexpr uint8_t kDataLsb = 1;          // ELFDATA2LSB
inline constexpr uint8_t kVersionCurrent = 1;   // EV_CURRENT
inline constexpr uint16_t kTypeExec = 2;        // ET_EXEC
inline constexpr uint16_t kMachineX86_64 = 62;  // EM_X86_64
inline constexpr uint32_t kPtLoad = 1;          // PT_LOAD
inline constexpr uint32_t kPtNote = 4;          // PT_NOTE
// gABI: "If the number of program headers is greater than or equal to PN_XNUM (0xffff), this member
// has the value PN_XNUM" and the real count lives in section 0. Kernels never need that many.
inline constexpr uint16_t kPnXnum = 0xffff;

// elfnote.h: XEN_ELFNOTE_PHYS32_ENTRY, "Physical entry point into the kernel ... in 32-bit protected
// mode with paging disabled", in a note whose name is "Xen".
inline constexpr uint32_t kXenElfnotePhys32Entry = 18;
inline constexpr char kXenNoteName[] = "Xen";  // namesz 4, including the NUL.

struct __attribute__((packed)) Elf64Ehdr {
  uint8_t e_ident[16];
  uint16_t e_type;
  uint16_t e_machine;
  uint32_t e_version;
  uint64_t e_entry;
  uint64_t e_phoff;
  uint64_t e_shoff;
  uint32_t e_flags;
  uint16_t e_ehsize;
  uint16_t e_phentsize;
  uint16_t e_phnum;
  uint16_t e_shentsize;
  uint16_t e_shnum;
  uint16_t e_shstrndx;
};
static_assert(sizeof(Elf64Ehdr) == 64);
static_assert(offsetof(Elf64Ehdr, e_entry) == 0x18);
static_assert(offsetof(Elf64Ehdr, e_phoff) == 0x20);
static_assert(offsetof(Elf64Ehdr, e_phentsize) == 0x36);
static_assert(offsetof(Elf64Ehdr, e_phnum) == 0x38);

struct __attribute__((packed)) Elf64Phdr {
  uint32_t p_type;
  uint32_t p_flags;
  uint64_t p_offset;
  uint64_t p_vaddr;
  uint64_t p_paddr;
  uint64_t p_filesz;
  uint64_t p_memsz;
  uint64_t p_align;
};
static_assert(sizeof(Elf64Phdr) == 56);
static_assert(offsetof(Elf64Phdr, p_paddr) == 0x18);
static_assert(offsetof(Elf64Phdr, p_memsz) == 0x28);

// A note entry's header; the name and then the descriptor follow, each padded to the note alignment.
struct __attribute__((packed)) Elf64Nhdr {
  uint32_t n_namesz;
  uint32_t n_descsz;
  uint32_t n_type;
};
static_assert(sizeof(Elf64Nhdr) == 12);

}  // namespace vmm::loader::elf

#endif  // VMM_LOADER_ELF_H_

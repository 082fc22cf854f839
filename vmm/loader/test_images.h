#ifndef VMM_LOADER_TEST_IMAGES_H_
#define VMM_LOADER_TEST_IMAGES_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vmm/machine/guest_memory.h"

// Builders for synthetic kernel images, for the //vmm/loader tests. They write the formats from the
// specs (ELF-64, the Linux boot protocol's bzImage layout) with only what the loader reads.
namespace vmm::loader::test_images {

// A path under $TEST_TMPDIR (or /tmp outside Bazel).
std::string TempPath(std::string_view name);
// Writes `bytes` to TempPath(name) and returns the path.
std::string WriteTempFile(std::string_view name, std::span<const uint8_t> bytes);
// `size` bytes of a recognisable non-zero pattern.
std::vector<uint8_t> Pattern(size_t size, uint8_t seed);
// x86 guest memory of `bytes` (dies on failure: tests only).
GuestMemory MakeMemory(uint64_t bytes);

// Little-endian field access into byte buffers and guest memory.
template <typename T>
T ReadGuest(const GuestMemory& memory, uint64_t address) {
  return *memory.ReadObject<T>(GuestAddress(address));
}
void PutU16(std::vector<uint8_t>& bytes, size_t offset, uint16_t value);
void PutU32(std::vector<uint8_t>& bytes, size_t offset, uint32_t value);
void PutU64(std::vector<uint8_t>& bytes, size_t offset, uint64_t value);

struct ElfSegment {
  uint32_t type = 1;  // PT_LOAD
  uint64_t paddr = 0;
  std::vector<uint8_t> data;  // p_filesz = data.size()
  uint64_t memsz = 0;         // 0: same as data.size()
  uint64_t align = 0x1000;
};

struct ElfSpec {
  uint8_t elf_class = 2;  // ELFCLASS64
  uint16_t machine = 62;  // EM_X86_64
  uint16_t type = 2;      // ET_EXEC
  uint64_t entry = 0x1000000;
  std::vector<ElfSegment> segments;
  // Adds a PT_NOTE with a GNU note, then a Xen XEN_ELFNOTE_PHYS32_ENTRY note with this value.
  std::optional<uint64_t> pvh_entry;
  uint32_t pvh_desc_size = 4;  // 4 (elfnote.h) or 8 (Linux's _ASM_PTR).
  uint32_t pvh_note_type = 18;
  uint64_t note_align = 4;
};
std::vector<uint8_t> BuildElf(const ElfSpec& spec);

struct BzImageSpec {
  uint8_t setup_sects = 4;
  uint16_t version = 0x020f;
  uint16_t xloadflags = 0x1;  // XLF_KERNEL_64
  uint8_t relocatable = 1;
  uint8_t jump_offset = 0x6a;  // header ends at 0x202 + 0x6a = 0x26c
  uint16_t boot_flag = 0xaa55;
  uint32_t kernel_alignment = 0x200000;
  uint64_t pref_address = 0x1000000;
  uint32_t init_size = 0x400000;
  uint32_t initrd_addr_max = 0x7fffffff;
  uint32_t cmdline_size = 0x7ff;
  uint8_t loadflags = 0x01;  // LOADED_HIGH, as bzImages have it
  std::vector<uint8_t> payload = Pattern(0x3000, 7);
  uint64_t trailing_bytes = 0;  // after syssize * 16, like a signed kernel's signature
};
std::vector<uint8_t> BuildBzImage(const BzImageSpec& spec);

}  // namespace vmm::loader::test_images

#endif  // VMM_LOADER_TEST_IMAGES_H_

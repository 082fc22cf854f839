#include "vmm/loader/test_images.h"

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "vmm/loader/boot_util.h"

namespace vmm::loader::test_images {

std::string TempPath(std::string_view name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + std::string(name);
}

std::string WriteTempFile(std::string_view name, std::span<const uint8_t> bytes) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) std::abort();
  return path;
}

std::vector<uint8_t> Pattern(size_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(seed + i * 13 + (i >> 8)) | 1;
  return bytes;
}

GuestMemory MakeMemory(uint64_t bytes) {
  absl::StatusOr<GuestMemory> memory = GuestMemory::CreateX86(bytes);
  if (!memory.ok()) std::abort();
  return *std::move(memory);
}

void PutU16(std::vector<uint8_t>& bytes, size_t offset, uint16_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}
void PutU32(std::vector<uint8_t>& bytes, size_t offset, uint32_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}
void PutU64(std::vector<uint8_t>& bytes, size_t offset, uint64_t value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(value));
}

namespace {

void AppendNote(std::vector<uint8_t>& out, std::string_view name_with_nul, uint32_t type,
                std::span<const uint8_t> desc, uint64_t align) {
  // Padding aligns positions from the start of the segment (which `out` is).
  const size_t header = out.size();
  out.resize(header + 12);
  PutU32(out, header + 0, static_cast<uint32_t>(name_with_nul.size()));
  PutU32(out, header + 4, static_cast<uint32_t>(desc.size()));
  PutU32(out, header + 8, type);
  out.insert(out.end(), name_with_nul.begin(), name_with_nul.end());
  out.resize(AlignUp(out.size(), align));
  out.insert(out.end(), desc.begin(), desc.end());
  out.resize(AlignUp(out.size(), align));
}

}  // namespace

std::vector<uint8_t> BuildElf(const ElfSpec& spec) {
  std::vector<ElfSegment> segments = spec.segments;
  if (spec.pvh_entry.has_value()) {
    ElfSegment notes;
    notes.type = 4;  // PT_NOTE
    notes.align = spec.note_align;
    const uint8_t gnu_desc[4] = {1, 2, 3, 4};
    AppendNote(notes.data, std::string_view("GNU\0", 4), 3, gnu_desc, spec.note_align);
    std::vector<uint8_t> desc(spec.pvh_desc_size);
    std::memcpy(desc.data(), &*spec.pvh_entry, std::min<size_t>(desc.size(), 8));
    AppendNote(notes.data, std::string_view("Xen\0", 4), spec.pvh_note_type, desc, spec.note_align);
    segments.push_back(std::move(notes));
  }
  const size_t phoff = 64;
  size_t data_offset = phoff + segments.size() * 56;
  std::vector<uint8_t> out(data_offset);
  out[0] = 0x7f;
  out[1] = 'E';
  out[2] = 'L';
  out[3] = 'F';
  out[4] = spec.elf_class;
  out[5] = 1;  // ELFDATA2LSB
  out[6] = 1;  // EV_CURRENT
  PutU16(out, 0x10, spec.type);
  PutU16(out, 0x12, spec.machine);
  PutU32(out, 0x14, 1);
  PutU64(out, 0x18, spec.entry);
  PutU64(out, 0x20, phoff);
  PutU16(out, 0x34, 64);
  PutU16(out, 0x36, 56);
  PutU16(out, 0x38, static_cast<uint16_t>(segments.size()));
  for (size_t i = 0; i < segments.size(); ++i) {
    const ElfSegment& segment = segments[i];
    const size_t ph = phoff + i * 56;
    PutU32(out, ph + 0x00, segment.type);
    PutU32(out, ph + 0x04, 5);  // PF_R | PF_X
    PutU64(out, ph + 0x08, out.size());
    PutU64(out, ph + 0x10, 0xffffffff80000000ull + segment.paddr);  // vaddr: like vmlinux
    PutU64(out, ph + 0x18, segment.paddr);
    PutU64(out, ph + 0x20, segment.data.size());
    PutU64(out, ph + 0x28, segment.memsz != 0 ? segment.memsz : segment.data.size());
    PutU64(out, ph + 0x30, segment.align);
    out.insert(out.end(), segment.data.begin(), segment.data.end());
  }
  return out;
}

std::vector<uint8_t> BuildBzImage(const BzImageSpec& spec) {
  const size_t sects = spec.setup_sects == 0 ? 4 : spec.setup_sects;
  std::vector<uint8_t> out((sects + 1) * 512, 0);
  out[0x1f1] = spec.setup_sects;
  std::vector<uint8_t> payload = spec.payload;
  payload.resize(AlignUp(payload.size(), 16));
  PutU32(out, 0x1f4, static_cast<uint32_t>(payload.size() / 16));  // syssize
  PutU16(out, 0x1fe, spec.boot_flag);
  out[0x200] = 0xeb;  // jmp short
  out[0x201] = spec.jump_offset;
  std::memcpy(out.data() + 0x202, "HdrS", 4);
  PutU16(out, 0x206, spec.version);
  out[0x211] = spec.loadflags;
  PutU32(out, 0x22c, spec.initrd_addr_max);
  PutU32(out, 0x230, spec.kernel_alignment);
  out[0x234] = spec.relocatable;
  PutU16(out, 0x236, spec.xloadflags);
  PutU32(out, 0x238, spec.cmdline_size);
  PutU64(out, 0x258, spec.pref_address);
  PutU32(out, 0x260, spec.init_size);
  out[0x1ef] = 0xff;  // sentinel, as real bzImages have it; must not reach boot_params
  out.insert(out.end(), payload.begin(), payload.end());
  out.resize(out.size() + spec.trailing_bytes, 0x5a);
  return out;
}

}  // namespace vmm::loader::test_images

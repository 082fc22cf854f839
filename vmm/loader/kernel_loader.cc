#include "vmm/loader/kernel_loader.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

#include "absl/strings/str_format.h"
#include "vmm/loader/boot_params.h"
#include "vmm/loader/boot_util.h"
#include "vmm/loader/elf.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::loader {
namespace {

// A PT_NOTE segment larger than this is not a kernel's: Linux's notes are a few hundred bytes. The
// cap keeps a hostile file from making us allocate its whole size.
constexpr uint64_t kMaxNoteSegmentBytes = 1 << 20;

constexpr uint64_t MiBRoundedUp(uint64_t bytes) { return (bytes >> 20) + ((bytes & 0xfffff) != 0); }

// Checks that [start, start + size) is somewhere a kernel may be placed: in the low RAM region
// (which ends at `low_end` <= 3 GiB) and at or above 1 MiB, so it cannot overlap the VMM's boot
// structures (GDT, start_info, zero page, page tables, command line, FDT, MP table: all below
// 0xa0000) or the legacy BIOS hole (docs/machine.md "Memory map").
absl::Status CheckKernelRange(const ImageFile& file, std::string_view what, uint64_t start,
                              uint64_t size, uint64_t low_end) {
  if (start < kHighMemoryStart) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %s at guest address 0x%x (0x%x bytes) starts below 1 MiB (0x100000): that is where "
        "the VMM's boot structures and the legacy BIOS area live",
        file.path(), what, start, size));
  }
  if (size > kMmioHoleStart || start > kMmioHoleStart - size) {
    return absl::OutOfRangeError(absl::StrFormat(
        "%s: %s at guest address 0x%x (0x%x bytes) reaches past 3 GiB (0xc0000000), the top of "
        "the RAM a kernel can be loaded into",
        file.path(), what, start, size));
  }
  if (start + size > low_end) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %s at [0x%x, 0x%x) needs %u MiB of guest RAM, but the guest's RAM below 3 GiB ends "
        "at 0x%x (%u MiB)",
        file.path(), what, start, start + size, MiBRoundedUp(start + size), low_end,
        low_end >> 20));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// ELF

// Walks the notes of one PT_NOTE segment (gABI "Note Section": namesz, descsz, type, then the name
// and the descriptor, each padded to the segment's alignment) looking for the PVH entry note.
absl::StatusOr<std::optional<uint32_t>> FindPvhEntry(const ImageFile& file,
                                                     std::span<const uint8_t> notes,
                                                     uint64_t alignment) {
  size_t pos = 0;
  while (notes.size() - pos >= sizeof(elf::Elf64Nhdr)) {
    elf::Elf64Nhdr note;
    std::memcpy(&note, notes.data() + pos, sizeof(note));
    pos += sizeof(note);
    const size_t remaining_for_name = notes.size() - pos;
    if (note.n_namesz > remaining_for_name) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: an ELF note's name (%u bytes) overruns its PT_NOTE segment",
                          file.path(), note.n_namesz));
    }
    const uint8_t* name = notes.data() + pos;
    // Padding brings the position (from the segment start) to the alignment: with 8-byte notes
    // that is not the same as padding the name's length, as the header is 12 bytes. The last
    // note's padding may be cut off by the segment's end; that is harmless.
    pos = std::min<uint64_t>(AlignUp(pos + note.n_namesz, alignment), notes.size());
    const size_t remaining_for_desc = notes.size() - pos;
    if (note.n_descsz > remaining_for_desc) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: an ELF note's descriptor (%u bytes) overruns its PT_NOTE segment",
                          file.path(), note.n_descsz));
    }
    const uint8_t* desc = notes.data() + pos;
    pos = std::min<uint64_t>(AlignUp(pos + note.n_descsz, alignment), notes.size());

    if (note.n_type != elf::kXenElfnotePhys32Entry || note.n_namesz != sizeof(elf::kXenNoteName) ||
        std::memcmp(name, elf::kXenNoteName, sizeof(elf::kXenNoteName)) != 0) {
      continue;
    }
    // elfnote.h says the value is a 32-bit address, but Linux emits it with _ASM_PTR, which is a
    // .quad on x86-64 (arch/x86/platform/pvh/head.S), so accept both widths.
    if (note.n_descsz == 4) {
      uint32_t entry;
      std::memcpy(&entry, desc, sizeof(entry));
      return entry;
    }
    if (note.n_descsz == 8) {
      uint64_t entry;
      std::memcpy(&entry, desc, sizeof(entry));
      if (entry > UINT32_MAX) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: the PVH entry point (XEN_ELFNOTE_PHYS32_ENTRY) 0x%x is not a 32-bit address",
            file.path(), entry));
      }
      return static_cast<uint32_t>(entry);
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the XEN_ELFNOTE_PHYS32_ENTRY note holds %u bytes; expected a 4- or 8-byte address",
        file.path(), note.n_descsz));
  }
  return std::nullopt;
}

struct Segment {
  uint64_t offset;
  uint64_t paddr;
  uint64_t filesz;
  uint64_t memsz;
};

// The ELF header of a 64-bit little-endian x86-64 executable with a usable program header table
// (gABI "ELF Header"), or why the file is not one.
absl::StatusOr<elf::Elf64Ehdr> ReadElfHeader(const ImageFile& file) {
  const std::string& path = file.path();
  // Check the class before the size: a 32-bit ELF header is only 52 bytes long.
  std::array<uint8_t, 16> ident;
  RETURN_IF_ERROR(file.ReadAt(0, ident));
  if (ident[elf::kIdentClass] == elf::kClass32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: 32-bit ELF (ELFCLASS32); only 64-bit x86-64 kernels (ELFCLASS64) are supported",
        path));
  }
  if (ident[elf::kIdentClass] != elf::kClass64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown ELF class %d", path, ident[elf::kIdentClass]));
  }
  if (ident[elf::kIdentData] != elf::kDataLsb) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ELF file is not little-endian (ELFDATA2LSB)", path));
  }
  if (ident[elf::kIdentVersion] != elf::kVersionCurrent) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: unknown ELF version %d", path, ident[elf::kIdentVersion]));
  }

  elf::Elf64Ehdr ehdr;
  RETURN_IF_ERROR(
      file.ReadAt(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&ehdr), sizeof(ehdr))));
  if (ehdr.e_machine != elf::kMachineX86_64) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ELF machine %d is not x86-64 (EM_X86_64 = 62)", path, ehdr.e_machine));
  }
  if (ehdr.e_type != elf::kTypeExec) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: ELF type %d is not an executable (ET_EXEC = 2); relocatable and shared objects "
        "cannot be booted",
        path, ehdr.e_type));
  }
  if (ehdr.e_phnum == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: ELF file has no program headers", path));
  }
  if (ehdr.e_phnum == elf::kPnXnum) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: ELF file uses the PN_XNUM extended program header count, which is not supported",
        path));
  }
  if (ehdr.e_phentsize < sizeof(elf::Elf64Phdr)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ELF program header entries are %u bytes; an Elf64_Phdr needs %u", path,
                        ehdr.e_phentsize, sizeof(elf::Elf64Phdr)));
  }
  return ehdr;
}

absl::StatusOr<LoadedKernel> LoadElf(const GuestMemory& memory, const ImageFile& file,
                                     uint64_t low_end) {
  const std::string& path = file.path();
  ASSIGN_OR_RETURN(const elf::Elf64Ehdr ehdr, ReadElfHeader(file));
  // At most 0xfffe * 0xffff bytes: no overflow.
  const uint64_t table_size = uint64_t{ehdr.e_phnum} * ehdr.e_phentsize;
  if (ehdr.e_phoff > file.size() || table_size > file.size() - ehdr.e_phoff) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated or corrupt: the program header table [0x%x, +0x%x) is beyond the end of "
        "the %u-byte file",
        path, ehdr.e_phoff, table_size, file.size()));
  }
  std::vector<uint8_t> table(table_size);
  RETURN_IF_ERROR(file.ReadAt(ehdr.e_phoff, table));

  std::vector<Segment> segments;
  std::optional<uint32_t> pvh_entry;
  for (uint16_t i = 0; i < ehdr.e_phnum; ++i) {
    elf::Elf64Phdr phdr;
    std::memcpy(&phdr, table.data() + uint64_t{i} * ehdr.e_phentsize, sizeof(phdr));
    if (phdr.p_type != elf::kPtLoad && phdr.p_type != elf::kPtNote) continue;
    if (phdr.p_offset > file.size() || phdr.p_filesz > file.size() - phdr.p_offset) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: truncated or corrupt: program header %d's file bytes [0x%x, +0x%x) are beyond the "
          "end of the %u-byte file",
          path, i, phdr.p_offset, phdr.p_filesz, file.size()));
    }
    if (phdr.p_type == elf::kPtNote) {
      if (phdr.p_filesz > kMaxNoteSegmentBytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: PT_NOTE segment %d is %u bytes; more than the %u a kernel's notes need", path, i,
            phdr.p_filesz, kMaxNoteSegmentBytes));
      }
      std::vector<uint8_t> notes(phdr.p_filesz);
      RETURN_IF_ERROR(file.ReadAt(phdr.p_offset, notes));
      // gABI: notes in ELF-64 files are 8-byte aligned when the segment says so; Linux and most
      // toolchains use 4.
      ASSIGN_OR_RETURN(const std::optional<uint32_t> found,
                       FindPvhEntry(file, notes, phdr.p_align == 8 ? 8 : 4));
      if (found.has_value() && !pvh_entry.has_value()) pvh_entry = *found;
      continue;
    }
    // PT_LOAD.
    if (phdr.p_memsz == 0) continue;  // Nothing to place.
    if (phdr.p_filesz > phdr.p_memsz) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: segment %d has more file bytes (0x%x) than memory bytes (0x%x)",
                          path, i, phdr.p_filesz, phdr.p_memsz));
    }
    RETURN_IF_ERROR(CheckKernelRange(file, absl::StrFormat("segment %d", i), phdr.p_paddr,
                                     phdr.p_memsz, low_end));
    segments.push_back({phdr.p_offset, phdr.p_paddr, phdr.p_filesz, phdr.p_memsz});
  }
  if (segments.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: ELF file has no loadable (PT_LOAD) segment", path));
  }

  LoadedKernel kernel;
  kernel.kind =
      pvh_entry.has_value() ? LoadedKernel::EntryKind::kPvh : LoadedKernel::EntryKind::kElf64;
  const uint64_t entry = pvh_entry.has_value() ? *pvh_entry : ehdr.e_entry;
  const bool entry_loaded = std::any_of(segments.begin(), segments.end(), [&](const Segment& s) {
    return entry >= s.paddr && entry - s.paddr < s.memsz;
  });
  if (!entry_loaded) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the %s 0x%x is not inside any loaded segment", path,
                        pvh_entry.has_value() ? "PVH entry point (XEN_ELFNOTE_PHYS32_ENTRY)"
                                              : "entry point (e_entry)",
                        entry));
  }

  uint64_t start = UINT64_MAX;
  uint64_t end = 0;
  for (const Segment& segment : segments) {
    RETURN_IF_ERROR(
        file.ReadIntoGuest(memory, segment.offset, segment.filesz, GuestAddress(segment.paddr)));
    // The part of p_memsz beyond p_filesz is .bss: "the extra bytes are defined to hold the value
    // 0" (gABI "Program Header"). Guest RAM may have been used before (a reboot), so clear it.
    RETURN_IF_ERROR(
        memory.Zero(GuestAddress(segment.paddr + segment.filesz), segment.memsz - segment.filesz));
    start = std::min(start, segment.paddr);
    end = std::max(end, segment.paddr + segment.memsz);
  }
  kernel.entry = GuestAddress(entry);
  kernel.image_start = GuestAddress(start);
  kernel.image_end = GuestAddress(end);
  kernel.reserved_end = kernel.image_end;
  return kernel;
}

// ---------------------------------------------------------------------------------------------
// bzImage

std::string ProtocolString(uint16_t version) {
  return absl::StrFormat("%d.%02d", version >> 8, version & 0xff);
}

// A bzImage's setup header as this loader needs it (boot.rst): the boot flag, protocol 2.12 or
// later with a 64-bit entry point, and a header that reaches init_size. Returns where the header
// ends in the file.
absl::StatusOr<uint64_t> CheckSetupHeader(const std::string& path, const SetupHeader& header,
                                          uint8_t jump_offset_byte) {
  if (header.boot_flag != kBootFlagMagic) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: bzImage boot_flag at 0x1fe is 0x%04x, not 0xaa55", path, header.boot_flag));
  }
  if (header.version < kProtocol2_06) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: Linux boot protocol %s is too old; at least 2.06 is needed", path,
                        ProtocolString(header.version)));
  }
  // boot.rst: XLF_KERNEL_64 "This kernel has the legacy 64-bit entry point at 0x200"; xloadflags
  // only exists from protocol 2.12.
  if (header.version < kProtocol2_12 || (header.xloadflags & kXlfKernel64) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the kernel (boot protocol %s, xloadflags 0x%x) has no 64-bit entry point "
        "(XLF_KERNEL_64); only 64-bit kernels can be booted",
        path, ProtocolString(header.version),
        header.version < kProtocol2_12 ? 0 : header.xloadflags));
  }
  // boot.rst: "The end of setup header can be calculated as follows: 0x0202 + byte value at offset
  // 0x0201". A header claiming protocol 2.12 must reach at least init_size (2.10), which we use.
  const uint64_t header_end = kHeaderEndBase + jump_offset_byte;
  constexpr uint64_t kInitSizeEnd =
      kSetupHeaderOffset + offsetof(SetupHeader, init_size) + sizeof(uint32_t);
  if (header_end < kInitSizeEnd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: the setup header ends at 0x%x, before the fields protocol %s defines (to 0x%x)", path,
        header_end, ProtocolString(header.version), kInitSizeEnd));
  }
  return header_end;
}

absl::StatusOr<LoadedKernel> LoadBzImage(const GuestMemory& memory, const ImageFile& file,
                                         uint64_t low_end) {
  const std::string& path = file.path();
  constexpr uint64_t kHeaderEnd = kSetupHeaderOffset + sizeof(SetupHeader);
  // Any real bzImage is far longer: the setup code alone is at least 5 sectors.
  if (file.size() < kHeaderEnd) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated: the bzImage setup header runs to offset 0x%x but the file is %u bytes",
        path, kHeaderEnd, file.size()));
  }
  std::array<uint8_t, kHeaderEnd> head;
  RETURN_IF_ERROR(file.ReadAt(0, head));
  SetupHeader header;
  std::memcpy(&header, head.data() + kSetupHeaderOffset, sizeof(header));

  ASSIGN_OR_RETURN(const uint64_t header_end,
                   CheckSetupHeader(path, header, head[kJumpOffsetByte]));

  // boot.rst: "The real-mode code consists of the boot sector (always one 512-byte sector) plus the
  // setup code"; setup_sects 0 means 4. The protected-mode kernel follows it.
  const uint64_t setup_sects = header.setup_sects == 0 ? kDefaultSetupSects : header.setup_sects;
  const uint64_t payload_offset = (setup_sects + 1) * kSectorSize;
  if (file.size() <= payload_offset) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated: no protected-mode kernel after the %u bytes of real-mode setup code (the "
        "file is %u bytes)",
        path, payload_offset, file.size()));
  }
  const uint64_t payload_size = file.size() - payload_offset;
  // syssize counts 16-byte paragraphs. The image may be longer (a signature appended to a signed
  // kernel), never shorter.
  const uint64_t syssize_bytes = uint64_t{header.syssize} * 16;
  if (payload_size < syssize_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated: the protected-mode kernel is %u bytes but the header's syssize says %u",
        path, payload_size, syssize_bytes));
  }

  // Where to load. boot.rst, pref_address: "A relocating bootloader should attempt to load at this
  // address if possible. A non-relocatable kernel will unconditionally move itself and to run at
  // this address." So a relocatable kernel goes at pref_address (suitably aligned, so the kernel
  // need not move), anything else at the traditional 1 MiB (loadflags LOADED_HIGH). There is no
  // "if it fits, else 1 MiB" fallback because it would not save memory: loaded anywhere, the
  // kernel decompresses to the load address rounded up to kernel_alignment but never below
  // LOAD_PHYSICAL_ADDR, which header.S stores in pref_address (arch/x86/boot/compressed/head_64.S),
  // and needs init_size bytes there.
  const bool relocatable = header.relocatable_kernel != 0;
  const uint64_t alignment = header.kernel_alignment;
  if (relocatable && !std::has_single_bit(alignment)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: kernel_alignment 0x%x is not a power of two", path, alignment));
  }
  const uint64_t pref = header.pref_address;
  const bool at_pref =
      relocatable && pref >= kHighMemoryStart && pref < kMmioHoleStart && pref % alignment == 0;
  const uint64_t load = at_pref ? pref : kHighMemoryStart;
  const uint64_t run_start =
      relocatable ? std::max(AlignUp(load, alignment), pref) : (pref != 0 ? pref : load);
  RETURN_IF_ERROR(CheckKernelRange(file, "the protected-mode kernel", load, payload_size, low_end));
  RETURN_IF_ERROR(CheckKernelRange(file, "the kernel's decompression area (init_size)", run_start,
                                   header.init_size, low_end));
  RETURN_IF_ERROR(file.ReadIntoGuest(memory, payload_offset, payload_size, GuestAddress(load)));

  LoadedKernel kernel;
  kernel.kind = LoadedKernel::EntryKind::kLinux64;
  kernel.entry = GuestAddress(load + kLinux64EntryOffset);
  kernel.image_start = GuestAddress(load);
  kernel.image_end = GuestAddress(load + payload_size);
  kernel.reserved_end =
      GuestAddress(std::max(load + payload_size, run_start + uint64_t{header.init_size}));
  const uint64_t copy_end = std::min(header_end, kHeaderEnd);
  kernel.bzimage_setup_header =
      std::vector<uint8_t>(head.begin() + kSetupHeaderOffset, head.begin() + copy_end);
  kernel.boot_protocol_version = header.version;
  kernel.initrd_addr_max = header.version >= kProtocol2_03 && header.initrd_addr_max != 0
                               ? header.initrd_addr_max
                               : kDefaultInitrdAddrMax;
  return kernel;
}

}  // namespace

absl::StatusOr<LoadedKernel> LoadKernel(const GuestMemory& memory, const std::string& path) {
  ASSIGN_OR_RETURN(const ImageFile file, ImageFile::Open(path));
  return LoadKernel(memory, file);
}

absl::StatusOr<LoadedKernel> LoadKernel(const GuestMemory& memory, const ImageFile& file) {
  const std::string& path = file.path();
  if (file.size() == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: kernel image is empty", path));
  }
  ASSIGN_OR_RETURN(const uint64_t low_end, LowRamEnd(memory));

  // Detect the format: ELF by its e_ident magic, bzImage by "HdrS" at 0x202 (boot.rst).
  constexpr uint64_t kHdrSEnd = 0x202 + sizeof(uint32_t);
  std::array<uint8_t, kHdrSEnd> head{};
  const uint64_t head_size = std::min<uint64_t>(file.size(), head.size());
  RETURN_IF_ERROR(file.ReadAt(0, std::span<uint8_t>(head.data(), head_size)));
  if (head_size >= sizeof(elf::kMagic) &&
      std::memcmp(head.data(), elf::kMagic, sizeof(elf::kMagic)) == 0) {
    return LoadElf(memory, file, low_end);
  }
  uint32_t hdrs = 0;
  if (head_size >= kHdrSEnd) std::memcpy(&hdrs, head.data() + 0x202, sizeof(hdrs));
  if (hdrs == kHdrSMagic) return LoadBzImage(memory, file, low_end);
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: not a kernel image: neither ELF (\\x7fELF at offset 0) nor a bzImage ('HdrS' at "
      "offset 0x202)%s",
      path,
      head_size < kHdrSEnd ? absl::StrFormat(" (the file is only %u bytes)", file.size()) : ""));
}

}  // namespace vmm::loader

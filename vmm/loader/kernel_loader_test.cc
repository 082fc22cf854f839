#include "vmm/loader/kernel_loader.h"

#include <glob.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/loader/test_images.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {
namespace {

using test_images::BuildBzImage;
using test_images::BuildElf;
using test_images::BzImageSpec;
using test_images::ElfSegment;
using test_images::ElfSpec;
using test_images::MakeMemory;
using test_images::Pattern;
using test_images::PutU16;
using test_images::PutU32;
using test_images::PutU64;
using test_images::TempPath;
using test_images::WriteTempFile;
using ::testing::HasSubstr;
using EntryKind = LoadedKernel::EntryKind;

constexpr uint64_t kMiB = 1 << 20;

std::vector<uint8_t> GuestBytes(const GuestMemory& memory, uint64_t address, size_t size) {
  std::vector<uint8_t> bytes(size);
  EXPECT_TRUE(memory.Read(GuestAddress(address), bytes).ok());
  return bytes;
}

// The error's code and that its message names the file and says `what`.
void ExpectError(const absl::StatusOr<LoadedKernel>& result, absl::StatusCode code,
                 const std::string& path, const std::string& what) {
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), code) << result.status();
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(what));
}

// A two-segment vmlinux-like ELF: text at 16 MiB, data + bss at 18 MiB.
ElfSpec TwoSegmentElf() {
  ElfSpec spec;
  spec.entry = 0x1000040;
  spec.segments.push_back({.paddr = 0x1000000, .data = Pattern(0x1800, 1)});
  spec.segments.push_back({.paddr = 0x1200000, .data = Pattern(0x900, 2), .memsz = 0x3000});
  return spec;
}

// ----- ELF ---------------------------------------------------------------------------------------

TEST(KernelLoaderElfTest, SegmentsLandAtPaddrAndBssIsZeroed) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  // Dirty the bss range first: the loader must clear it, not rely on fresh memory.
  ASSERT_TRUE(memory.Write(GuestAddress(0x1200000), std::vector<uint8_t>(0x3000, 0xcc)).ok());
  const ElfSpec spec = TwoSegmentElf();
  const std::string path = WriteTempFile("elf_two_segments", BuildElf(spec));

  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, path);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->kind, EntryKind::kElf64);
  EXPECT_EQ(kernel->entry.value(), 0x1000040u);
  EXPECT_EQ(kernel->image_start.value(), 0x1000000u);
  EXPECT_EQ(kernel->image_end.value(), 0x1203000u);
  EXPECT_EQ(kernel->reserved_end.value(), 0x1203000u);
  EXPECT_FALSE(kernel->bzimage_setup_header.has_value());
  EXPECT_EQ(kernel->boot_protocol_version, 0);
  EXPECT_EQ(kernel->initrd_addr_max, 0xffffffffu);

  EXPECT_EQ(GuestBytes(memory, 0x1000000, 0x1800), spec.segments[0].data);
  EXPECT_EQ(GuestBytes(memory, 0x1200000, 0x900), spec.segments[1].data);
  EXPECT_EQ(GuestBytes(memory, 0x1200900, 0x3000 - 0x900), std::vector<uint8_t>(0x2700, 0));
  // Nothing written around the segments.
  EXPECT_EQ(GuestBytes(memory, 0x1001800, 0x10), std::vector<uint8_t>(0x10, 0));
}

TEST(KernelLoaderElfTest, PvhNoteGivesPvhEntry) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1000100;
  absl::StatusOr<LoadedKernel> kernel =
      LoadKernel(memory, WriteTempFile("elf_pvh4", BuildElf(spec)));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->kind, EntryKind::kPvh);
  EXPECT_EQ(kernel->entry.value(), 0x1000100u);
  EXPECT_EQ(kernel->image_end.value(), 0x1203000u);
}

TEST(KernelLoaderElfTest, EightBytePvhNoteAsLinuxEmitsIt) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1000200;
  spec.pvh_desc_size = 8;
  spec.note_align = 8;
  absl::StatusOr<LoadedKernel> kernel =
      LoadKernel(memory, WriteTempFile("elf_pvh8", BuildElf(spec)));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->kind, EntryKind::kPvh);
  EXPECT_EQ(kernel->entry.value(), 0x1000200u);
}

TEST(KernelLoaderElfTest, OtherXenNotesAreIgnored) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1000100;
  spec.pvh_note_type = 1;  // XEN_ELFNOTE_INFO, not the PVH entry.
  absl::StatusOr<LoadedKernel> kernel =
      LoadKernel(memory, WriteTempFile("elf_xen_other", BuildElf(spec)));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->kind, EntryKind::kElf64);
  EXPECT_EQ(kernel->entry.value(), 0x1000040u);
}

TEST(KernelLoaderElfTest, PvhNoteWithWrongSizeOrWideValue) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1000100;
  spec.pvh_desc_size = 2;
  std::string path = WriteTempFile("elf_pvh_size2", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "XEN_ELFNOTE_PHYS32_ENTRY");
  spec.pvh_desc_size = 8;
  spec.pvh_entry = 0x100001000ull;
  path = WriteTempFile("elf_pvh_wide", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "32-bit");
}

TEST(KernelLoaderElfTest, NoteOverrunningItsSegment) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1000100;
  std::vector<uint8_t> image = BuildElf(spec);
  // The note segment is the last program header; its first note's namesz becomes huge.
  const size_t ph = 64 + 2 * 56;
  uint64_t note_offset;
  std::memcpy(&note_offset, image.data() + ph + 8, 8);
  PutU32(image, note_offset, 0x7fffffff);
  const std::string path = WriteTempFile("elf_note_overrun", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "overruns");
}

TEST(KernelLoaderElfTest, PvhEntryOutsideSegments) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.pvh_entry = 0x1100000;  // Between the two segments.
  const std::string path = WriteTempFile("elf_pvh_outside", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "not inside any loaded segment");
}

TEST(KernelLoaderElfTest, EntryOutsideSegments) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.entry = 0xffffffff81000000ull;  // A virtual address.
  const std::string path = WriteTempFile("elf_entry_outside", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "e_entry");
}

TEST(KernelLoaderElfTest, ThirtyTwoBitElfRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.elf_class = 1;
  const std::string path = WriteTempFile("elf32", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "32-bit");
}

TEST(KernelLoaderElfTest, WrongMachineRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.machine = 183;  // EM_AARCH64
  const std::string path = WriteTempFile("elf_aarch64", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "x86-64");
}

TEST(KernelLoaderElfTest, NonExecutableRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec = TwoSegmentElf();
  spec.type = 3;  // ET_DYN
  const std::string path = WriteTempFile("elf_dyn", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "ET_EXEC");
}

TEST(KernelLoaderElfTest, BadIdentRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildElf(TwoSegmentElf());
  image[5] = 2;  // ELFDATA2MSB
  std::string path = WriteTempFile("elf_msb", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "little-endian");
  image = BuildElf(TwoSegmentElf());
  image[4] = 7;
  path = WriteTempFile("elf_class7", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "class");
}

TEST(KernelLoaderElfTest, TruncatedHeaderRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildElf(TwoSegmentElf());
  image.resize(40);
  const std::string path = WriteTempFile("elf_truncated_header", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "truncated");
}

TEST(KernelLoaderElfTest, TruncatedProgramHeadersRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildElf(TwoSegmentElf());
  image.resize(64 + 56 + 10);
  const std::string path = WriteTempFile("elf_truncated_phdrs", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "program header table");
  image = BuildElf(TwoSegmentElf());
  PutU64(image, 0x20, UINT64_MAX - 8);  // e_phoff
  const std::string wrapped = WriteTempFile("elf_phoff_wraps", image);
  ExpectError(LoadKernel(memory, wrapped), absl::StatusCode::kInvalidArgument, wrapped,
              "program header table");
}

TEST(KernelLoaderElfTest, TruncatedSegmentRejected) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildElf(TwoSegmentElf());
  image.resize(image.size() - 0x100);
  const std::string path = WriteTempFile("elf_truncated_segment", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "truncated");
  // A p_offset + p_filesz that wraps around 2^64.
  image = BuildElf(TwoSegmentElf());
  PutU64(image, 64 + 0x08, UINT64_MAX - 0x10);
  const std::string wrapped = WriteTempFile("elf_offset_wraps", image);
  ExpectError(LoadKernel(memory, wrapped), absl::StatusCode::kInvalidArgument, wrapped,
              "beyond the end");
}

TEST(KernelLoaderElfTest, MalformedProgramHeaders) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildElf(TwoSegmentElf());
  PutU16(image, 0x38, 0);  // e_phnum
  std::string path = WriteTempFile("elf_no_phdrs", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "no program headers");
  image = BuildElf(TwoSegmentElf());
  PutU16(image, 0x36, 32);  // e_phentsize
  path = WriteTempFile("elf_small_phentsize", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "Elf64_Phdr");
  image = BuildElf(TwoSegmentElf());
  PutU64(image, 64 + 0x20, 0x2000);  // p_filesz > p_memsz of segment 0
  path = WriteTempFile("elf_filesz_gt_memsz", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "more file bytes");
  ElfSpec notes_only;
  notes_only.pvh_entry = 0x1000000;
  path = WriteTempFile("elf_no_load", BuildElf(notes_only));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "PT_LOAD");
}

TEST(KernelLoaderElfTest, SegmentBeyondGuestRam) {
  GuestMemory memory = MakeMemory(16 * kMiB);  // The 16 MiB segment does not fit.
  const std::string path = WriteTempFile("elf_beyond_ram", BuildElf(TwoSegmentElf()));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kResourceExhausted, path, "MiB");
}

TEST(KernelLoaderElfTest, SegmentBeyondThreeGiB) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec;
  spec.entry = 0xf0000000;
  spec.segments.push_back({.paddr = 0xf0000000, .data = Pattern(0x100, 1)});
  std::string path = WriteTempFile("elf_above_3g", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kOutOfRange, path, "3 GiB");
  // p_paddr + p_memsz wrapping around 2^64.
  spec.entry = 0xfffffffffffff000ull;
  spec.segments[0].paddr = 0xfffffffffffff000ull;
  spec.segments[0].memsz = 0x2000;
  path = WriteTempFile("elf_wraps", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kOutOfRange, path, "3 GiB");
}

TEST(KernelLoaderElfTest, SegmentOverlappingBootStructures) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ElfSpec spec;
  spec.entry = kZeroPageAddress;
  spec.segments.push_back({.paddr = kZeroPageAddress, .data = Pattern(0x100, 1)});
  std::string path = WriteTempFile("elf_low", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "boot structures");
  // Starting just below 1 MiB and running into it is still rejected.
  spec.entry = 0xff000;
  spec.segments[0] = {.paddr = 0xff000, .data = Pattern(0x100, 1), .memsz = 0x2000};
  path = WriteTempFile("elf_straddles_1m", BuildElf(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "below 1 MiB");
  // Boot structures untouched.
  EXPECT_EQ(GuestBytes(memory, kZeroPageAddress, 0x100), std::vector<uint8_t>(0x100, 0));
}

// ----- bzImage -----------------------------------------------------------------------------------

TEST(KernelLoaderBzImageTest, RelocatableLoadsAtPrefAddress) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.trailing_bytes = 100;  // Like a signed kernel's appended signature.
  const std::vector<uint8_t> image = BuildBzImage(spec);
  const std::string path = WriteTempFile("bz_relocatable", image);
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, path);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const uint64_t payload_offset = 5 * 512;
  const uint64_t payload_size = image.size() - payload_offset;
  EXPECT_EQ(kernel->kind, EntryKind::kLinux64);
  EXPECT_EQ(kernel->image_start.value(), 0x1000000u);
  EXPECT_EQ(kernel->entry.value(), 0x1000200u);
  EXPECT_EQ(kernel->image_end.value(), 0x1000000u + payload_size);
  EXPECT_EQ(kernel->reserved_end.value(), 0x1000000u + spec.init_size);
  EXPECT_EQ(kernel->boot_protocol_version, 0x020f);
  EXPECT_EQ(kernel->initrd_addr_max, 0x7fffffffu);
  EXPECT_EQ(GuestBytes(memory, 0x1000000, payload_size),
            std::vector<uint8_t>(image.begin() + payload_offset, image.end()));
  ASSERT_TRUE(kernel->bzimage_setup_header.has_value());
  EXPECT_EQ(*kernel->bzimage_setup_header,
            std::vector<uint8_t>(image.begin() + 0x1f1, image.begin() + 0x26c));
}

TEST(KernelLoaderBzImageTest, NonRelocatableLoadsAtOneMiB) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.relocatable = 0;
  spec.setup_sects = 0;  // Means 4.
  const std::vector<uint8_t> image = BuildBzImage(spec);
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, WriteTempFile("bz_fixed", image));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->image_start.value(), kHighMemoryStart);
  EXPECT_EQ(kernel->entry.value(), kHighMemoryStart + 0x200);
  // It moves itself to pref_address and needs init_size there.
  EXPECT_EQ(kernel->reserved_end.value(), spec.pref_address + spec.init_size);
  EXPECT_EQ(GuestBytes(memory, kHighMemoryStart, 0x3000),
            std::vector<uint8_t>(image.begin() + 5 * 512, image.end()));
}

TEST(KernelLoaderBzImageTest, MisalignedPrefAddressLoadsAtOneMiB) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.pref_address = 0x1080000;  // Not a multiple of kernel_alignment (2 MiB).
  spec.setup_sects = 10;
  absl::StatusOr<LoadedKernel> kernel =
      LoadKernel(memory, WriteTempFile("bz_misaligned_pref", BuildBzImage(spec)));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->image_start.value(), kHighMemoryStart);
  // Decompresses at max(align_up(1 MiB, 2 MiB), pref_address).
  EXPECT_EQ(kernel->reserved_end.value(), 0x1080000u + spec.init_size);
}

TEST(KernelLoaderBzImageTest, SetupHeaderLengthFollowsJumpByte) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.jump_offset = 0x66;  // Header ends at 0x268 (protocol 2.12-2.14 size).
  const std::vector<uint8_t> image = BuildBzImage(spec);
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, WriteTempFile("bz_hdr_0x268", image));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->bzimage_setup_header->size(), 0x268u - 0x1f1u);
  // A jump past the header (start_of_setup further on) copies no more than the header.
  spec.jump_offset = 0x80;
  kernel = LoadKernel(memory, WriteTempFile("bz_hdr_long_jump", BuildBzImage(spec)));
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->bzimage_setup_header->size(), 0x26cu - 0x1f1u);
  spec.jump_offset = 0x20;  // Header would end at 0x222: too short for 2.15.
  const std::string path = WriteTempFile("bz_hdr_short", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "setup header ends");
}

TEST(KernelLoaderBzImageTest, ProtocolTooOld) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.version = 0x0205;
  const std::string path = WriteTempFile("bz_2_05", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "2.05");
}

TEST(KernelLoaderBzImageTest, NoSixtyFourBitEntry) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.xloadflags = 0x2;  // XLF_CAN_BE_LOADED_ABOVE_4G only.
  std::string path = WriteTempFile("bz_no_xlf64", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "XLF_KERNEL_64");
  // Protocol 2.10 predates xloadflags, whatever the bytes there say.
  spec.xloadflags = 0x1;
  spec.version = 0x020a;
  path = WriteTempFile("bz_2_10", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "XLF_KERNEL_64");
}

TEST(KernelLoaderBzImageTest, BadBootFlag) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.boot_flag = 0x1234;
  const std::string path = WriteTempFile("bz_boot_flag", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "boot_flag");
}

TEST(KernelLoaderBzImageTest, Truncated) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  std::vector<uint8_t> image = BuildBzImage(BzImageSpec());
  image.resize(image.size() - 16);  // Shorter than syssize says.
  std::string path = WriteTempFile("bz_truncated_payload", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "syssize");
  image.resize(5 * 512);  // Setup code only.
  path = WriteTempFile("bz_setup_only", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "truncated");
  image.resize(0x240);  // Inside the setup header.
  path = WriteTempFile("bz_header_cut", image);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "truncated");
}

TEST(KernelLoaderBzImageTest, InitSizeDoesNotFit) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.init_size = 0x4000000;  // 16 MiB + 64 MiB > 64 MiB of RAM.
  const std::string path = WriteTempFile("bz_init_size", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kResourceExhausted, path, "init_size");
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kResourceExhausted, path, "80 MiB");
}

TEST(KernelLoaderBzImageTest, HostileHeaderValues) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  BzImageSpec spec;
  spec.kernel_alignment = 0x300000;
  std::string path = WriteTempFile("bz_bad_alignment", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "power of two");
  // A non-relocatable kernel wanting to run below 1 MiB.
  spec = BzImageSpec();
  spec.relocatable = 0;
  spec.pref_address = 0x8000;
  path = WriteTempFile("bz_low_pref", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "below 1 MiB");
  // pref_address near 2^64: no wrap-around.
  spec.pref_address = 0xfffffffffff00000ull;
  path = WriteTempFile("bz_huge_pref", BuildBzImage(spec));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kOutOfRange, path, "3 GiB");
}

// ----- detection and file errors -----------------------------------------------------------------

TEST(KernelLoaderTest, MissingFile) {
  GuestMemory memory = MakeMemory(16 * kMiB);
  const std::string path = TempPath("no_such_kernel");
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kNotFound, path, "no such file");
}

TEST(KernelLoaderTest, EmptyFile) {
  GuestMemory memory = MakeMemory(16 * kMiB);
  const std::string path = WriteTempFile("empty_kernel", {});
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "empty");
}

TEST(KernelLoaderTest, NotAKernel) {
  GuestMemory memory = MakeMemory(16 * kMiB);
  std::string path = WriteTempFile("random_bytes", Pattern(8192, 9));
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "not a kernel image");
  const uint8_t tiny[] = {0x7f, 'E', 'L'};
  path = WriteTempFile("tiny", tiny);
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path, "only 3 bytes");
}

TEST(KernelLoaderTest, Directory) {
  GuestMemory memory = MakeMemory(16 * kMiB);
  const std::string path = TempPath("");
  ExpectError(LoadKernel(memory, path), absl::StatusCode::kInvalidArgument, path,
              "not a regular file");
}

// The Debian kernel, when installed (apt-get install linux-image-cloud-amd64): a real bzImage.
TEST(KernelLoaderTest, RealDebianKernel) {
  glob_t found;
  if (glob("/boot/vmlinuz-*", 0, nullptr, &found) != 0 || found.gl_pathc == 0) {
    globfree(&found);
    MICROVM_SKIP("no /boot/vmlinuz-* installed (tools/setup)");
  }
  const std::string path = found.gl_pathv[0];
  globfree(&found);
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path << " is not readable";
  const std::vector<uint8_t> image((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());

  GuestMemory memory = MakeMemory(512 * kMiB);
  absl::StatusOr<LoadedKernel> kernel = LoadKernel(memory, path);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  EXPECT_EQ(kernel->kind, EntryKind::kLinux64);
  EXPECT_GE(kernel->boot_protocol_version, 0x020c);
  ASSERT_TRUE(kernel->bzimage_setup_header.has_value());
  EXPECT_GE(kernel->bzimage_setup_header->size(), 0x264u - 0x1f1u);
  uint64_t pref_address;
  std::memcpy(&pref_address, image.data() + 0x258, 8);
  EXPECT_EQ(kernel->image_start.value(), pref_address);  // Debian kernels are relocatable.
  EXPECT_EQ(kernel->entry.value(), pref_address + 0x200);
  const uint64_t setup_sects = image[0x1f1] == 0 ? 4 : image[0x1f1];
  const uint64_t payload_offset = (setup_sects + 1) * 512;
  EXPECT_EQ(kernel->image_end.value() - kernel->image_start.value(), image.size() - payload_offset);
  EXPECT_EQ(
      GuestBytes(memory, kernel->image_start.value(), 4096),
      std::vector<uint8_t>(image.begin() + payload_offset, image.begin() + payload_offset + 4096));
  uint32_t init_size;
  std::memcpy(&init_size, image.data() + 0x260, 4);
  EXPECT_EQ(kernel->reserved_end.value(), pref_address + init_size);
}

}  // namespace
}  // namespace vmm::loader

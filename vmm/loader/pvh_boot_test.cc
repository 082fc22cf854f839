#include "vmm/loader/pvh_boot.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vmm/loader/test_images.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {
namespace {

using test_images::MakeMemory;
using test_images::Pattern;
using test_images::ReadGuest;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kSi = kPvhStartInfoAddress;
constexpr uint64_t kModules = kPvhModuleListAddress;

std::string GuestString(const GuestMemory& memory, uint64_t address, size_t size) {
  std::vector<uint8_t> bytes(size);
  EXPECT_TRUE(memory.Read(GuestAddress(address), bytes).ok());
  return std::string(bytes.begin(), bytes.end());
}

void ExpectMemmap(const GuestMemory& memory, uint64_t ram) {
  // hvm_memmap_table_entry {u64 addr, size; u32 type, reserved}: 24 bytes each.
  const uint64_t base = kPvhMemoryMapAddress;
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 0), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 8), 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, base + 16), 1u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, base + 20), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 24), 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 32), 0x100000u - 0x9fc00u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, base + 40), 2u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 48), 0x100000u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, base + 56), ram - 0x100000u);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, base + 64), 1u);
}

TEST(PvhBootTest, StartInfoWithInitrdAndFdt) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const std::vector<uint8_t> fdt = Pattern(1000, 8);
  const std::string cmdline = "console=ttyS0";
  ASSERT_TRUE(WritePvhStartInfo(memory, {.cmdline = cmdline,
                                         .initrd = InitrdPlacement{GuestAddress(0x3000000), 777},
                                         .fdt = fdt,
                                         .rsdp_address = kAcpiTablesAddress})
                  .ok());
  // hvm_start_info (start_info.h offsets).
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x00), 0x336ec578u);           // magic
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x04), 1u);                    // version
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x08), 0u);                    // flags
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x0c), 2u);                    // nr_modules
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x10), kModules);              // modlist_paddr
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x18), kCmdlineAddress);       // cmdline_paddr
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x20), 0xe0000u);              // rsdp_paddr
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x28), kPvhMemoryMapAddress);  // memmap_paddr
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x30), 3u);                    // memmap_entries
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x34), 0u);                    // reserved
  // Module 0: the initrd, no command line.
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x00), 0x3000000u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x08), 777u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x10), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x18), 0u);
  // Module 1 (the last): the FDT, named "fdt".
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x20), kFdtAddress);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x28), 1000u);
  const uint64_t name = ReadGuest<uint64_t>(memory, kModules + 0x30);
  EXPECT_EQ(name, 0x6080u);
  EXPECT_EQ(GuestString(memory, name, 4), std::string("fdt\0", 4));
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x38), 0u);
  // The FDT blob, the command line and the memory map.
  std::vector<uint8_t> back(fdt.size());
  ASSERT_TRUE(memory.Read(GuestAddress(kFdtAddress), back).ok());
  EXPECT_EQ(back, fdt);
  EXPECT_EQ(GuestString(memory, kCmdlineAddress, cmdline.size() + 1), cmdline + '\0');
  ExpectMemmap(memory, 64 * kMiB);
}

TEST(PvhBootTest, FdtOnlyIsTheOnlyAndLastModule) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const std::vector<uint8_t> fdt = Pattern(40, 8);
  ASSERT_TRUE(WritePvhStartInfo(memory, {.fdt = fdt}).ok());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x0c), 1u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x20), 0u);  // rsdp_paddr: no ACPI tables given
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x00), kFdtAddress);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x08), 40u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x10), kPvhFdtModuleNameAddress);
  EXPECT_EQ(GuestString(memory, kPvhFdtModuleNameAddress, 4), std::string("fdt\0", 4));
  EXPECT_EQ(ReadGuest<uint8_t>(memory, kCmdlineAddress), 0);  // Empty command line.
}

TEST(PvhBootTest, InitrdOnlyAndNoModules) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  ASSERT_TRUE(
      WritePvhStartInfo(memory, {.initrd = InitrdPlacement{GuestAddress(0x3000000), 4096}}).ok());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x0c), 1u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x00), 0x3000000u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kModules + 0x10), 0u);

  ASSERT_TRUE(WritePvhStartInfo(memory, {.cmdline = "quiet"}).ok());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x0c), 0u);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, kSi + 0x10), 0u);
  EXPECT_EQ(GuestString(memory, kCmdlineAddress, 6), std::string("quiet\0", 6));
  ExpectMemmap(memory, 64 * kMiB);
}

TEST(PvhBootTest, RamAboveFourGiB) {
  GuestMemory memory = MakeMemory(3072 * kMiB + 64 * kMiB);
  ASSERT_TRUE(WritePvhStartInfo(memory, {}).ok());
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi + 0x30), 4u);
  const uint64_t entry3 = kPvhMemoryMapAddress + 3 * 24;
  EXPECT_EQ(ReadGuest<uint64_t>(memory, entry3), kHighRamStart);
  EXPECT_EQ(ReadGuest<uint64_t>(memory, entry3 + 8), 64 * kMiB);
  EXPECT_EQ(ReadGuest<uint32_t>(memory, entry3 + 16), 1u);
}

TEST(PvhBootTest, Errors) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const std::vector<uint8_t> largest(kFdtMaxBytes, 1);
  EXPECT_TRUE(WritePvhStartInfo(memory, {.fdt = largest}).ok());
  ASSERT_TRUE(memory.Zero(GuestAddress(kSi), 0x1000).ok());

  const std::vector<uint8_t> too_big(kFdtMaxBytes + 1, 1);
  absl::Status status = WritePvhStartInfo(memory, {.fdt = too_big});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("device tree"));

  status = WritePvhStartInfo(memory, {.cmdline = std::string(kCmdlineMaxBytes, 'x')});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("command line"));
  EXPECT_TRUE(WritePvhStartInfo(memory, {.cmdline = std::string(kCmdlineMaxBytes - 1, 'x')}).ok());
  ASSERT_TRUE(memory.Zero(GuestAddress(kSi), 0x1000).ok());
  EXPECT_EQ(WritePvhStartInfo(memory, {.cmdline = std::string("a\0b", 3)}).code(),
            absl::StatusCode::kInvalidArgument);

  status =
      WritePvhStartInfo(memory, {.initrd = InitrdPlacement{GuestAddress(63 * kMiB), kMiB + 1}});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("initrd"));
  // Nothing written on any of these errors.
  EXPECT_EQ(ReadGuest<uint32_t>(memory, kSi), 0u);
}

}  // namespace
}  // namespace vmm::loader

#include "vmm/x86/boot_cpu.h"

#include "gtest/gtest.h"
#include "vmm/machine/layout.h"

namespace vmm::x86 {
namespace {

TEST(BootCpuTest, GdtEntriesEncodeLikeTheSdm) {
  // The well-known flat descriptors.
  EXPECT_EQ(GdtEntry(0xa09b, 0, 0xfffff), 0x00af9b000000ffffull);
  EXPECT_EQ(GdtEntry(0xc093, 0, 0xfffff), 0x00cf93000000ffffull);
  EXPECT_EQ(GdtEntry(0xc09b, 0, 0xfffff), 0x00cf9b000000ffffull);
  EXPECT_EQ(GdtEntry(0x808b, 0x12345678, 0x67), 0x12808b345678'0067ull);
}

TEST(BootCpuTest, SegmentsDecodeDescriptors) {
  const kvm_segment code = SegmentFromGdtEntry(GdtEntry(0xa09b, 0, 0xfffff), kCode64Selector);
  EXPECT_EQ(code.selector, kCode64Selector);
  EXPECT_EQ(code.limit, 0xffffffffu);
  EXPECT_EQ(code.type, 0xbu);
  EXPECT_EQ(code.l, 1u);
  EXPECT_EQ(code.db, 0u);
  EXPECT_EQ(code.s, 1u);
  EXPECT_EQ(code.present, 1u);
  const kvm_segment code32 = SegmentFromGdtEntry(GdtEntry(0xc09b, 0, 0xfffff), kCode32Selector);
  EXPECT_EQ(code32.l, 0u);
  EXPECT_EQ(code32.db, 1u);
  const kvm_segment tss = SegmentFromGdtEntry(GdtEntry(0x808b, 0x1000, 0x67), kTssSelector);
  EXPECT_EQ(tss.base, 0x1000u);
  EXPECT_EQ(tss.s, 0u);
  EXPECT_EQ(tss.type, 0xbu);
}

TEST(BootCpuTest, IdentityPageTablesMapFourGiB) {
  auto memory = GuestMemory::CreateX86(64 << 20);
  ASSERT_TRUE(memory.ok());
  ASSERT_TRUE(WriteIdentityPageTables(*memory).ok());
  ASSERT_TRUE(WriteBootGdt(*memory).ok());
  EXPECT_EQ(*memory->ReadObject<uint64_t>(GuestAddress(kPml4Address)), kPdptAddress | 3);
  for (uint64_t gib = 0; gib < 4; ++gib) {
    EXPECT_EQ(*memory->ReadObject<uint64_t>(GuestAddress(kPdptAddress + gib * 8)),
              (kPageDirectoryAddress + gib * 0x1000) | 3);
  }
  // 3 GiB + 2 MiB * 5 maps to itself as a present, writable 2 MiB page.
  const uint64_t address = (3ull << 30) + 5 * (2ull << 20);
  const uint64_t pde =
      *memory->ReadObject<uint64_t>(GuestAddress(kPageDirectoryAddress + 3 * 0x1000 + 5 * 8));
  EXPECT_EQ(pde, address | 0x83);
  EXPECT_EQ(*memory->ReadObject<uint64_t>(GuestAddress(kBootGdtAddress + 8)),
            0x00af9b000000ffffull);
}

}  // namespace
}  // namespace vmm::x86

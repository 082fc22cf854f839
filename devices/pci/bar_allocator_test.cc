#include "devices/pci/bar_allocator.h"

#include "gtest/gtest.h"

namespace devices::pci {
namespace {

TEST(BarAllocatorTest, NaturallyAlignedInTheirWindows) {
  BarAllocator allocator = BarAllocator::ForX86();
  auto io = allocator.Allocate({BarKind::kIo, 0x20});
  ASSERT_TRUE(io.ok()) << io.status();
  EXPECT_EQ(*io, 0xc000u);
  auto small = allocator.Allocate({BarKind::kMmio32, 0x1000});
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(*small, 0xc0000000u);
  // The next 64 KiB BAR is aligned to 64 KiB, past the first one.
  auto aligned = allocator.Allocate({BarKind::kMmio32, 0x10000});
  ASSERT_TRUE(aligned.ok());
  EXPECT_EQ(*aligned, 0xc0010000u);
  auto io2 = allocator.Allocate({BarKind::kIo, 0x100});
  ASSERT_TRUE(io2.ok());
  EXPECT_EQ(*io2, 0xc100u);
  // 64-bit BARs go low while there is room.
  auto wide = allocator.Allocate({BarKind::kMmio64, 0x4000, true});
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(*wide, 0xc0020000u);
}

TEST(BarAllocatorTest, SixtyFourBitBarsFallBackToTheHighWindow) {
  BarAllocator allocator({0xc0000000, 0x100000}, {0xc000, 0x4000},
                         AddressWindow{0x100000000ull * 8, 1ull << 36});
  auto low = allocator.Allocate({BarKind::kMmio64, 0x100000});
  ASSERT_TRUE(low.ok());
  EXPECT_EQ(*low, 0xc0000000u);
  auto high = allocator.Allocate({BarKind::kMmio64, 0x100000});
  ASSERT_TRUE(high.ok());
  EXPECT_EQ(*high, 0x800000000ull);
  // 32-bit BARs never go high.
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio32, 0x1000}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(BarAllocatorTest, RejectsBadSizesAndRunsOut) {
  BarAllocator allocator = BarAllocator::ForX86();
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio32, 0x3000}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio32, 0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Allocate({BarKind::kIo, 0x200}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio32, 8}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The I/O window holds 64 BARs of 256 bytes.
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(allocator.Allocate({BarKind::kIo, 0x100}).ok()) << i;
  EXPECT_EQ(allocator.Allocate({BarKind::kIo, 4}).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A BAR larger than the whole 32-bit window cannot fit (the window is 0x3ec00000 bytes).
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio32, 1ull << 31}).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Huge 64-bit BARs without a high window.
  EXPECT_EQ(allocator.Allocate({BarKind::kMmio64, 1ull << 40}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace devices::pci

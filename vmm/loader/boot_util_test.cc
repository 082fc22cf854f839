#include "vmm/loader/boot_util.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/loader/test_images.h"
#include "vmm/machine/layout.h"

namespace vmm::loader {
namespace {

using test_images::MakeMemory;

TEST(BootUtilTest, Alignment) {
  EXPECT_EQ(AlignUp(0x1001, 0x1000), 0x2000u);
  EXPECT_EQ(AlignUp(0x1000, 0x1000), 0x1000u);
  EXPECT_EQ(AlignDown(0x1fff, 0x1000), 0x1000u);
  // Saturates instead of wrapping to 0.
  EXPECT_EQ(AlignUp(UINT64_MAX - 5, 0x1000), AlignDown(UINT64_MAX, 0x1000));
}

TEST(BootUtilTest, LowRamEnd) {
  EXPECT_EQ(*LowRamEnd(MakeMemory(64 << 20)), uint64_t{64} << 20);
  // RAM above 3 GiB moves to 4 GiB; the low part stops at the MMIO hole.
  EXPECT_EQ(*LowRamEnd(MakeMemory((3ull << 30) + (16 << 20))), kMmioHoleStart);
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0), 0x10000));
  GuestMemory tiny = *GuestMemory::Create(std::move(regions));
  EXPECT_EQ(LowRamEnd(tiny).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(BootUtilTest, CommandLine) {
  GuestMemory memory = MakeMemory(16 << 20);
  ASSERT_TRUE(WriteCommandLine(memory, "console=ttyS0", 14).ok());
  std::vector<uint8_t> back(14);
  ASSERT_TRUE(memory.Read(GuestAddress(kCmdlineAddress), back).ok());
  EXPECT_EQ(std::string(back.begin(), back.end()), std::string("console=ttyS0\0", 14));
  EXPECT_EQ(WriteCommandLine(memory, "console=ttyS0", 13).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCommandLine(std::string("a\0b", 3), 100).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vmm::loader

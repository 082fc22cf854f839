#include "vmm/loader/initrd.h"

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
using test_images::TempPath;
using test_images::WriteTempFile;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

LoadedKernel KernelEndingAt(uint64_t end, uint32_t initrd_addr_max = 0xffffffff) {
  LoadedKernel kernel;
  kernel.kind = LoadedKernel::EntryKind::kElf64;
  kernel.image_start = GuestAddress(0x1000000);
  kernel.image_end = GuestAddress(end);
  kernel.reserved_end = GuestAddress(end);
  kernel.initrd_addr_max = initrd_addr_max;
  return kernel;
}

TEST(InitrdTest, PlacedPageAlignedAtTopOfRam) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  const std::vector<uint8_t> bytes = Pattern(10000, 4);
  absl::StatusOr<InitrdPlacement> initrd =
      LoadInitrd(memory, WriteTempFile("initrd_top", bytes), KernelEndingAt(0x1200000));
  ASSERT_TRUE(initrd.ok()) << initrd.status();
  EXPECT_EQ(initrd->size, 10000u);
  EXPECT_EQ(initrd->address.value() % kPageSize, 0u);
  EXPECT_LE(initrd->address.value() + initrd->size, 64 * kMiB);
  // As high as possible: less than a page of slack at the top.
  EXPECT_GT(initrd->address.value() + initrd->size + kPageSize, 64 * kMiB);
  EXPECT_EQ(initrd->address.value(), (64 * kMiB - 10000) & ~(kPageSize - 1));
  std::vector<uint8_t> back(bytes.size());
  ASSERT_TRUE(memory.Read(initrd->address, back).ok());
  EXPECT_EQ(back, bytes);
}

TEST(InitrdTest, RespectsInitrdAddrMax) {
  GuestMemory memory = MakeMemory(1024 * kMiB);
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(
      memory, WriteTempFile("initrd_max", Pattern(5000, 1)), KernelEndingAt(0x1200000, 0x37ffffff));
  ASSERT_TRUE(initrd.ok()) << initrd.status();
  // initrd_addr_max is the last byte the initrd may occupy.
  EXPECT_LE(initrd->address.value() + initrd->size - 1, 0x37ffffffu);
  EXPECT_EQ(initrd->address.value(), 0x38000000u - 2 * kPageSize);
}

TEST(InitrdTest, StaysBelowThreeGiB) {
  GuestMemory memory = MakeMemory(4096 * kMiB);  // 3 GiB low, 1 GiB above 4 GiB.
  absl::StatusOr<InitrdPlacement> initrd =
      LoadInitrd(memory, WriteTempFile("initrd_3g", Pattern(4096, 1)), KernelEndingAt(0x1200000));
  ASSERT_TRUE(initrd.ok()) << initrd.status();
  EXPECT_EQ(initrd->address.value(), kMmioHoleStart - kPageSize);
}

TEST(InitrdTest, AboveTheKernel) {
  GuestMemory memory = MakeMemory(64 * kMiB);
  // Exactly fills the space between the kernel's end (rounded up to a page) and the top of RAM.
  const uint64_t kernel_end = 64 * kMiB - 0x10000 - 0x10;
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(
      memory, WriteTempFile("initrd_exact", Pattern(0x10000, 2)), KernelEndingAt(kernel_end));
  ASSERT_TRUE(initrd.ok()) << initrd.status();
  EXPECT_EQ(initrd->address.value(), 64 * kMiB - 0x10000);
  EXPECT_GE(initrd->address.value(), kernel_end);
  // One byte more and it would overlap the kernel.
  const std::string path = WriteTempFile("initrd_exact_plus_one", Pattern(0x10001, 2));
  absl::StatusOr<InitrdPlacement> too_big = LoadInitrd(memory, path, KernelEndingAt(kernel_end));
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(InitrdTest, TooBig) {
  GuestMemory memory = MakeMemory(32 * kMiB);
  const std::string path = WriteTempFile("initrd_big", Pattern(20 * kMiB, 3));
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(memory, path, KernelEndingAt(0x1200000));
  ASSERT_FALSE(initrd.ok());
  EXPECT_EQ(initrd.status().code(), absl::StatusCode::kResourceExhausted);
  const std::string message(initrd.status().message());
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("20971520 bytes"));  // The initrd's size...
  EXPECT_THAT(message, HasSubstr("14680064 bytes"));  // ...and the room: 32 MiB - 18 MiB.
}

TEST(InitrdTest, KernelFillsRam) {
  GuestMemory memory = MakeMemory(32 * kMiB);
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(
      memory, WriteTempFile("initrd_no_room", Pattern(100, 3)), KernelEndingAt(32 * kMiB));
  EXPECT_EQ(initrd.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(InitrdTest, FileErrors) {
  GuestMemory memory = MakeMemory(32 * kMiB);
  const std::string missing = TempPath("no_such_initrd");
  absl::StatusOr<InitrdPlacement> initrd = LoadInitrd(memory, missing, KernelEndingAt(0x1200000));
  EXPECT_EQ(initrd.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(initrd.status().message()), HasSubstr(missing));
  const std::string empty = WriteTempFile("initrd_empty", {});
  initrd = LoadInitrd(memory, empty, KernelEndingAt(0x1200000));
  EXPECT_EQ(initrd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(initrd.status().message()), HasSubstr("empty"));
}

}  // namespace
}  // namespace vmm::loader

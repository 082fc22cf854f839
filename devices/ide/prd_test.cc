#include "devices/ide/prd.h"

#include <memory>
#include <vector>

#include "devices/ide/ata.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

class PrdTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMemory = 1 << 20;

  void SetUp() override {
    auto region = vmm::GuestMemoryRegion::Create(vmm::GuestAddress(0), kMemory);
    ASSERT_TRUE(region.ok());
    std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
    regions.push_back(*std::move(region));
    auto memory = vmm::GuestMemory::Create(std::move(regions));
    ASSERT_TRUE(memory.ok());
    memory_ = std::make_unique<vmm::GuestMemory>(*std::move(memory));
  }

  void Entry(uint32_t table, int index, uint32_t address, uint32_t control) {
    uint8_t raw[8];
    for (int b = 0; b < 4; ++b) {
      raw[b] = static_cast<uint8_t>(address >> (8 * b));
      raw[4 + b] = static_cast<uint8_t>(control >> (8 * b));
    }
    ASSERT_TRUE(memory_->Write(vmm::GuestAddress(table + 8 * index), raw).ok());
  }

  uint8_t* Host(uint64_t address) { return memory_->regions()[0]->host_address() + address; }

  std::unique_ptr<vmm::GuestMemory> memory_;
};

TEST_F(PrdTest, ExactTableIsExhausted) {
  Entry(0x1000, 0, 0x10000, 512);
  Entry(0x1000, 1, 0x20000, 512 | bm::kPrdEndOfTable);
  PrdWalk walk = WalkPrdTable(*memory_, 0x1000, 1024);
  EXPECT_TRUE(walk.covered());
  EXPECT_TRUE(walk.exhausted);
  ASSERT_EQ(walk.iov.size(), 2u);
  EXPECT_EQ(walk.iov[0].iov_base, Host(0x10000));
  EXPECT_EQ(walk.iov[1].iov_len, 512u);
  EXPECT_EQ(walk.entries, 2u);
}

TEST_F(PrdTest, LargerTableLeavesRoom) {
  Entry(0x1000, 0, 0x10000, 4096 | bm::kPrdEndOfTable);
  PrdWalk walk = WalkPrdTable(*memory_, 0x1000, 1024);
  EXPECT_TRUE(walk.covered());
  EXPECT_FALSE(walk.exhausted);  // SFF-8038i: Active stays set, a valid completion
  EXPECT_EQ(walk.total, 1024u);
}

TEST_F(PrdTest, ShortTableEndsAtEot) {
  Entry(0x1000, 0, 0x10000, 512 | bm::kPrdEndOfTable);
  PrdWalk walk = WalkPrdTable(*memory_, 0x1000, 1024);
  EXPECT_FALSE(walk.covered());
  EXPECT_EQ(walk.end, PrdEnd::kEndOfTable);
  EXPECT_FALSE(walk.faulted());
  EXPECT_EQ(walk.total, 512u);
}

TEST_F(PrdTest, ContiguousRegionsMerge) {
  Entry(0x1000, 0, 0x10000, 512);
  Entry(0x1000, 1, 0x10200, 512 | bm::kPrdEndOfTable);
  PrdWalk walk = WalkPrdTable(*memory_, 0x1000, 1024);
  ASSERT_EQ(walk.iov.size(), 1u);
  EXPECT_EQ(walk.iov[0].iov_len, 1024u);
}

TEST_F(PrdTest, ZeroCountIs64KiBAndBitZeroIsIgnored) {
  Entry(0x1000, 0, 0x20001, 0 | bm::kPrdEndOfTable);  // base bit 0 reserved; count 0 = 64 KiB
  PrdWalk walk = WalkPrdTable(*memory_, 0x1000, 0x10000);
  EXPECT_TRUE(walk.covered());
  EXPECT_TRUE(walk.exhausted);
  EXPECT_EQ(walk.iov[0].iov_base, Host(0x20000));
  Entry(0x1000, 0, 0x20000, 513 | bm::kPrdEndOfTable);  // odd count: bit 0 reserved
  walk = WalkPrdTable(*memory_, 0x1000, 512);
  EXPECT_TRUE(walk.covered());
  EXPECT_TRUE(walk.exhausted);
  Entry(0x1000, 0, 0x20000, 1 | bm::kPrdEndOfTable);  // 1 & ~1 = 0: 64 KiB
  walk = WalkPrdTable(*memory_, 0x1000, 512);
  EXPECT_TRUE(walk.covered());
  EXPECT_FALSE(walk.exhausted);
}

TEST_F(PrdTest, TableOutsideMemory) {
  PrdWalk walk = WalkPrdTable(*memory_, 0xfffff000, 512);
  EXPECT_EQ(walk.end, PrdEnd::kTableOutside);
  EXPECT_TRUE(walk.iov.empty());
  // A table that runs off the end of RAM.
  Entry(kMemory - 8, 0, 0x10000, 512);
  walk = WalkPrdTable(*memory_, kMemory - 8, 1024);
  EXPECT_EQ(walk.end, PrdEnd::kTableOutside);
  EXPECT_EQ(walk.total, 512u);
}

TEST_F(PrdTest, RegionOutsideMemory) {
  Entry(0x1000, 0, 0xfff00000, 512 | bm::kPrdEndOfTable);
  EXPECT_EQ(WalkPrdTable(*memory_, 0x1000, 512).end, PrdEnd::kRegionOutside);
  Entry(0x1000, 0, kMemory - 256, 512 | bm::kPrdEndOfTable);  // straddles the end
  EXPECT_EQ(WalkPrdTable(*memory_, 0x1000, 512).end, PrdEnd::kRegionOutside);
}

TEST_F(PrdTest, NoEndOfTableIsBounded) {
  for (int i = 0; i < 1024; ++i) Entry(0x8000, i, 0x40000, 2);  // never EOT
  PrdWalk walk = WalkPrdTable(*memory_, 0x8000, 1 << 20);
  EXPECT_EQ(walk.end, PrdEnd::kNoEndOfTable);
  EXPECT_EQ(walk.entries, kMaxPrdEntries);
  EXPECT_EQ(walk.total, 2u * kMaxPrdEntries);
  // Without EOT but covering the transfer: fine, as hardware fetches no further.
  walk = WalkPrdTable(*memory_, 0x8000, 64);
  EXPECT_TRUE(walk.covered());
}

TEST_F(PrdTest, ZeroLimitFetchesNothing) {
  PrdWalk walk = WalkPrdTable(*memory_, 0xfffff000, 0);
  EXPECT_TRUE(walk.covered());
  EXPECT_EQ(walk.entries, 0u);
}

}  // namespace
}  // namespace devices::ide

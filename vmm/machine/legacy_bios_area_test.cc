#include "vmm/machine/legacy_bios_area.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace vmm {
namespace {

using Route = LegacyBiosArea::Route;
using Routes = std::array<Route, LegacyBiosArea::kSegments>;
constexpr size_t kBiosSegment = LegacyBiosArea::kSegments - 1;

class LegacyBiosAreaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rom_.resize(LegacyBiosArea::kMaxRomAliasSize);
    std::iota(rom_.begin(), rom_.end(), uint8_t{1});
    auto area = LegacyBiosArea::Create(ram_, rom_);
    ASSERT_TRUE(area.ok()) << area.status();
    area_ = *std::move(area);
  }

  static Routes All(Route route) {
    Routes routes;
    routes.fill(route);
    return routes;
  }
  uint8_t ReadByte(uint64_t address) {
    uint8_t byte = 0;
    area_->Read(address - LegacyBiosArea::kStart, std::span<uint8_t>(&byte, 1));
    return byte;
  }
  void WriteByte(uint64_t address, uint8_t byte) {
    area_->Write(address - LegacyBiosArea::kStart, std::span<const uint8_t>(&byte, 1));
  }
  uint8_t& Ram(uint64_t address) { return ram_[address - LegacyBiosArea::kStart]; }
  uint8_t Rom(uint64_t address) {
    return rom_[address - (LegacyBiosArea::kEnd - LegacyBiosArea::kMaxRomAliasSize)];
  }

  std::vector<uint8_t> ram_ = std::vector<uint8_t>(LegacyBiosArea::kSize);
  std::vector<uint8_t> rom_;
  std::unique_ptr<LegacyBiosArea> area_;
};

TEST_F(LegacyBiosAreaTest, SegmentsFollowThePamLayout) {
  EXPECT_EQ(LegacyBiosArea::SegmentStart(0), 0xc0000u);
  EXPECT_EQ(LegacyBiosArea::SegmentStart(1), 0xc4000u);
  EXPECT_EQ(LegacyBiosArea::SegmentStart(11), 0xec000u);
  EXPECT_EQ(LegacyBiosArea::SegmentSize(11), 0x4000u);
  EXPECT_EQ(LegacyBiosArea::SegmentStart(kBiosSegment), 0xf0000u);
  EXPECT_EQ(LegacyBiosArea::SegmentSize(kBiosSegment), 0x10000u);
}

TEST_F(LegacyBiosAreaTest, AtPowerOnTheRomAnswersBelowOneMegabyte) {
  const std::vector<LegacyBiosArea::Mapping> mappings = area_->Mappings();
  ASSERT_EQ(mappings.size(), LegacyBiosArea::kSegments);
  // 0xc0000-0xdffff: nothing on the PCI side, nothing mapped.
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(mappings[i].host_address, nullptr) << i;
    EXPECT_EQ(mappings[i].guest_address, LegacyBiosArea::SegmentStart(i));
  }
  // 0xe0000-0xfffff: the ROM's last 128 KiB, read-only.
  for (size_t i = 8; i < LegacyBiosArea::kSegments; ++i) {
    EXPECT_EQ(mappings[i].host_address, &rom_[LegacyBiosArea::SegmentStart(i) - 0xe0000]) << i;
    EXPECT_TRUE(mappings[i].read_only);
  }
  EXPECT_EQ(ReadByte(0xc0000), 0xff);
  EXPECT_EQ(ReadByte(0xfffff), Rom(0xfffff));
  // Writes go nowhere: not to the RAM below, not to the ROM.
  WriteByte(0xf0000, 0x5a);
  EXPECT_EQ(Ram(0xf0000), 0);
  EXPECT_EQ(ReadByte(0xf0000), Rom(0xf0000));
}

TEST_F(LegacyBiosAreaTest, SeaBiosShadowsItselfThenWriteProtects) {
  // make_bios_writable: every segment read/write RAM, all thirteen mappings change.
  std::vector<LegacyBiosArea::Mapping> changed = area_->SetRoutes(All({true, true}));
  ASSERT_EQ(changed.size(), LegacyBiosArea::kSegments);
  for (const auto& mapping : changed) {
    EXPECT_EQ(mapping.host_address, &Ram(mapping.guest_address));
    EXPECT_FALSE(mapping.read_only);
  }
  WriteByte(0xf0000, 0x5a);
  EXPECT_EQ(Ram(0xf0000), 0x5a);
  EXPECT_EQ(ReadByte(0xf0000), 0x5a);

  // make_bios_readonly: 0x31 in PAM1 (0xc0000 read-only, 0xc4000 read/write), 0x10 in PAM0.
  Routes routes = All({true, true});
  routes[0] = {true, false};
  routes[kBiosSegment] = {true, false};
  changed = area_->SetRoutes(routes);
  ASSERT_EQ(changed.size(), 2u);
  EXPECT_EQ(changed[0].segment, 0u);
  EXPECT_TRUE(changed[0].read_only);
  EXPECT_EQ(changed[1].segment, kBiosSegment);
  EXPECT_TRUE(changed[1].read_only);
  EXPECT_EQ(changed[1].host_address, &Ram(0xf0000));
  // The hypervisor sends the writes to those read-only slots here: dropped.
  WriteByte(0xf0000, 0xa5);
  WriteByte(0xc0000, 0xa5);
  EXPECT_EQ(ReadByte(0xf0000), 0x5a);
  EXPECT_EQ(Ram(0xc0000), 0);
  // The same routes again change nothing.
  EXPECT_TRUE(area_->SetRoutes(routes).empty());
}

TEST_F(LegacyBiosAreaTest, WriteOnlyShadowFillsRamWhileReadsSeeTheRom) {
  Routes routes;
  routes[kBiosSegment] = {false, true};
  const std::vector<LegacyBiosArea::Mapping> changed = area_->SetRoutes(routes);
  // The ROM stays mapped for reads: nothing changes in the map, the writes already exit.
  EXPECT_TRUE(changed.empty());
  WriteByte(0xf1234, 0x77);
  EXPECT_EQ(Ram(0xf1234), 0x77);
  EXPECT_EQ(ReadByte(0xf1234), Rom(0xf1234));
  // Once reads go to RAM too, they see what was written.
  routes[kBiosSegment] = {true, true};
  ASSERT_EQ(area_->SetRoutes(routes).size(), 1u);
  EXPECT_EQ(ReadByte(0xf1234), 0x77);
}

TEST_F(LegacyBiosAreaTest, AnAccessAcrossSegmentsFollowsEachByteSegment) {
  Routes routes;
  routes[0] = {true, true};  // 0xc0000-0xc3fff RAM; 0xc4000 nothing
  area_->SetRoutes(routes);
  const uint8_t bytes[4] = {1, 2, 3, 4};
  area_->Write(0x3ffe, bytes);
  EXPECT_EQ(Ram(0xc3ffe), 1);
  EXPECT_EQ(Ram(0xc3fff), 2);
  EXPECT_EQ(Ram(0xc4000), 0);
  uint8_t read[4] = {};
  area_->Read(0x3ffe, read);
  EXPECT_EQ(read[0], 1);
  EXPECT_EQ(read[1], 2);
  EXPECT_EQ(read[2], 0xff);
  EXPECT_EQ(read[3], 0xff);
}

TEST_F(LegacyBiosAreaTest, ASmallRomAliasesOnlyTheBiosSegment) {
  std::vector<uint8_t> small_rom(64 * 1024, 0xcc);
  auto area = LegacyBiosArea::Create(ram_, small_rom);
  ASSERT_TRUE(area.ok());
  const auto mappings = (*area)->Mappings();
  EXPECT_EQ(mappings[kBiosSegment - 1].host_address, nullptr);
  EXPECT_EQ(mappings[kBiosSegment].host_address, small_rom.data());
}

TEST_F(LegacyBiosAreaTest, RefusesWrongSizes) {
  std::vector<uint8_t> short_ram(LegacyBiosArea::kSize - 1);
  EXPECT_FALSE(LegacyBiosArea::Create(short_ram, rom_).ok());
  std::vector<uint8_t> big_rom(LegacyBiosArea::kMaxRomAliasSize + 1);
  EXPECT_FALSE(LegacyBiosArea::Create(ram_, big_rom).ok());
}

}  // namespace
}  // namespace vmm

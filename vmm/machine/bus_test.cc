#include "vmm/machine/bus.h"

#include <array>
#include <vector>

#include "gtest/gtest.h"

namespace vmm {
namespace {

// Records every access; reads return the offset as data.
class RecordingDevice : public BusDevice {
 public:
  void Read(uint64_t offset, std::span<uint8_t> data) override {
    reads.push_back(offset);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(offset + i);
  }
  void Write(uint64_t offset, std::span<const uint8_t> data) override {
    writes.push_back({offset, std::vector<uint8_t>(data.begin(), data.end())});
  }
  std::vector<uint64_t> reads;
  std::vector<std::pair<uint64_t, std::vector<uint8_t>>> writes;
};

TEST(BusTest, DispatchesWithOffsets) {
  Bus bus("pio");
  auto a = std::make_shared<RecordingDevice>();
  auto b = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x3f8, 8, a).ok());
  ASSERT_TRUE(bus.Register(0x400, 0x10, b).ok());
  std::array<uint8_t, 2> data{};
  EXPECT_TRUE(bus.Read(0x3fa, data));
  EXPECT_EQ(a->reads, std::vector<uint64_t>{2});
  EXPECT_EQ(data[0], 2);
  EXPECT_EQ(data[1], 3);
  const std::array<uint8_t, 1> value = {0x5a};
  EXPECT_TRUE(bus.Write(0x40f, value));
  ASSERT_EQ(b->writes.size(), 1u);
  EXPECT_EQ(b->writes[0].first, 0xfu);
  EXPECT_EQ(b->writes[0].second, std::vector<uint8_t>{0x5a});
}

// String I/O reaches a device that has no string path of its own as one access per item, all at
// the same offset; unmapped, it reads all-ones.
TEST(BusTest, StringAccessesAreItemsAtOneOffset) {
  Bus bus("pio");
  auto a = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x1f0, 8, a).ok());
  std::array<uint8_t, 6> data{};
  EXPECT_TRUE(bus.ReadString(0x1f0, 2, data));
  EXPECT_EQ(a->reads, (std::vector<uint64_t>{0, 0, 0}));
  EXPECT_EQ(data, (std::array<uint8_t, 6>{0, 1, 0, 1, 0, 1}));
  const std::array<uint8_t, 4> words = {1, 2, 3, 4};
  EXPECT_TRUE(bus.WriteString(0x1f0, 2, words));
  ASSERT_EQ(a->writes.size(), 2u);
  EXPECT_EQ(a->writes[1].second, (std::vector<uint8_t>{3, 4}));
  EXPECT_FALSE(bus.ReadString(0x170, 2, data));
  EXPECT_EQ(data, (std::array<uint8_t, 6>{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}));
  // An item that runs past the device's range is not dispatched.
  EXPECT_FALSE(bus.ReadString(0x1f7, 2, data));
  EXPECT_EQ(a->reads.size(), 3u);
}

TEST(BusTest, UnmappedAccessesReadAllOnes) {
  Bus bus("pio");
  auto a = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x3f8, 8, a).ok());
  std::array<uint8_t, 4> data{};
  EXPECT_FALSE(bus.Read(0x3f0, data));
  EXPECT_EQ(data, (std::array<uint8_t, 4>{0xff, 0xff, 0xff, 0xff}));
  // Straddling the end of a device is not dispatched.
  EXPECT_FALSE(bus.Read(0x3fe, data));
  EXPECT_FALSE(bus.Write(0x3ff, data));
  EXPECT_FALSE(bus.Read(0x400, data));
  EXPECT_TRUE(a->reads.empty());
  EXPECT_TRUE(a->writes.empty());
}

TEST(BusTest, OverlappingRegistrationsAreErrors) {
  Bus bus("mmio");
  auto device = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x1000, 0x100, device).ok());
  EXPECT_EQ(bus.Register(0x1000, 0x100, device).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Register(0x10ff, 1, device).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Register(0xf00, 0x101, device).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(bus.Register(0x0, 0x2000, device).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(bus.Register(0xf00, 0x100, device).ok());
  EXPECT_TRUE(bus.Register(0x1100, 0x100, device).ok());
  EXPECT_FALSE(bus.Register(0x2000, 0, device).ok());
  EXPECT_FALSE(bus.Register(~0ull - 1, 4, device).ok());
}

TEST(BusTest, UnregisterFreesTheRange) {
  Bus bus("mmio");
  auto device = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x1000, 0x100, device).ok());
  ASSERT_TRUE(bus.Unregister(0x1000).ok());
  EXPECT_EQ(bus.Unregister(0x1000).code(), absl::StatusCode::kNotFound);
  std::array<uint8_t, 1> data{};
  EXPECT_FALSE(bus.Read(0x1000, data));
  EXPECT_TRUE(bus.Register(0x1080, 0x100, device).ok());
}

}  // namespace
}  // namespace vmm

namespace vmm {
namespace {

TEST(BusTest, ClearDropsTheDevices) {
  Bus bus("pio");
  auto device = std::make_shared<RecordingDevice>();
  ASSERT_TRUE(bus.Register(0x10, 4, device).ok());
  EXPECT_EQ(device.use_count(), 2);
  bus.Clear();
  EXPECT_EQ(device.use_count(), 1);
  std::array<uint8_t, 1> data{};
  EXPECT_FALSE(bus.Read(0x10, data));
}

}  // namespace
}  // namespace vmm

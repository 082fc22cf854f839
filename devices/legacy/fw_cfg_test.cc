#include "devices/legacy/fw_cfg.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/sys_util/byte_order.h"

namespace devices::legacy {
namespace {

constexpr uint64_t kRamBytes = 1 << 20;  // guest RAM [0, 1 MiB)
constexpr uint64_t kDescriptor = 0x1000;
constexpr uint64_t kBuffer = 0x2000;

class FwCfgTest : public ::testing::Test {
 protected:
  FwCfgTest() : memory_(MakeMemory()), device_(&memory_) {}

  static vmm::GuestMemory MakeMemory() {
    std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
    regions.push_back(*vmm::GuestMemoryRegion::Create(vmm::GuestAddress(0), kRamBytes));
    return *vmm::GuestMemory::Create(std::move(regions));
  }

  // outw(key, 0x510), as SeaBIOS selects.
  void Select(uint16_t key) {
    uint8_t bytes[2];
    sys_util::StoreLittleEndian(key, bytes);
    device_.Write(0, bytes);
  }
  // `count` inb(0x511).
  std::vector<uint8_t> ReadData(size_t count) {
    std::vector<uint8_t> data(count);
    for (uint8_t& byte : data) device_.Read(1, std::span<uint8_t>(&byte, 1));
    return data;
  }
  std::vector<uint8_t> Item(uint16_t key, size_t count) {
    Select(key);
    return ReadData(count);
  }
  // The guest's FWCfgDmaAccess at `descriptor` (big-endian; nothing written outside RAM).
  void PlaceDescriptor(uint32_t control, uint32_t length, uint64_t address,
                       uint64_t descriptor = kDescriptor) {
    uint8_t bytes[FwCfg::kDmaDescriptorSize];
    sys_util::PutBe32(bytes, control);
    sys_util::PutBe32(bytes + 4, length);
    sys_util::PutBe64(bytes + 8, address);
    (void)memory_.Write(vmm::GuestAddress(descriptor), bytes);
  }
  // The descriptor placed, then outl(htonl(high), 0x514); outl(htonl(low), 0x518); the control
  // word the device wrote back.
  uint32_t Dma(uint32_t control, uint32_t length, uint64_t address,
               uint64_t descriptor = kDescriptor) {
    PlaceDescriptor(control, length, address, descriptor);
    uint8_t half[4];
    sys_util::PutBe32(half, static_cast<uint32_t>(descriptor >> 32));
    device_.Write(4, half);
    sys_util::PutBe32(half, static_cast<uint32_t>(descriptor));
    device_.Write(8, half);
    uint8_t written[4] = {};
    (void)memory_.Read(vmm::GuestAddress(descriptor), written);
    return sys_util::Be32(written);
  }
  std::vector<uint8_t> Guest(uint64_t address, size_t count) {
    std::vector<uint8_t> data(count);
    EXPECT_TRUE(memory_.Read(vmm::GuestAddress(address), data).ok());
    return data;
  }
  void Fill(uint64_t address, size_t count, uint8_t value) {
    std::vector<uint8_t> data(count, value);
    ASSERT_TRUE(memory_.Write(vmm::GuestAddress(address), data).ok());
  }

  vmm::GuestMemory memory_;
  FwCfg device_;
};

std::vector<uint8_t> Bytes(const std::string& text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

TEST_F(FwCfgTest, SignatureAndFeaturesAsFirmwareProbesThem) {
  EXPECT_EQ(Item(FwCfg::kSignatureKey, 4), Bytes("QEMU"));
  const std::vector<uint8_t> id = Item(FwCfg::kIdKey, 4);
  EXPECT_EQ(sys_util::LoadLittleEndian(id), FwCfg::kFeatureTraditional | FwCfg::kFeatureDma);
  // The DMA register reads "QEMU CFG", big-endian, in 32-bit halves or as one 64-bit read.
  uint8_t high[4], low[4], whole[8];
  device_.Read(4, high);
  device_.Read(8, low);
  device_.Read(4, whole);
  EXPECT_EQ(std::string(high, high + 4) + std::string(low, low + 4), "QEMU CFG");
  EXPECT_EQ(std::string(whole, whole + 8), "QEMU CFG");
}

TEST_F(FwCfgTest, DataReadsPastTheEndOrOfAMissingKeyAreZero) {
  EXPECT_EQ(Item(FwCfg::kSignatureKey, 6), Bytes(std::string("QEMU\0\0", 6)));
  EXPECT_EQ(Item(0x0005, 3), std::vector<uint8_t>(3, 0));  // no CPU count given
  // A multi-byte read of the data port is successive bytes (rep insb).
  Select(FwCfg::kSignatureKey);
  uint8_t two[2];
  device_.Read(1, two);
  EXPECT_EQ(std::string(two, two + 2), "QE");
  // Selecting again rewinds.
  EXPECT_EQ(Item(FwCfg::kSignatureKey, 4), Bytes("QEMU"));
}

TEST_F(FwCfgTest, NumberedItemsAndTheirLimits) {
  ASSERT_TRUE(device_.AddItem(0x0005, {2, 0}).ok());     // QEMU's NB_CPUS, little-endian u16
  ASSERT_TRUE(device_.AddItem(0x8003, {1, 2, 3}).ok());  // an x86 item (bit 15)
  EXPECT_EQ(Item(0x0005, 2), (std::vector<uint8_t>{2, 0}));
  EXPECT_EQ(Item(0x8003, 3), (std::vector<uint8_t>{1, 2, 3}));
  // The write channel (bit 14) selects the same item for reading.
  EXPECT_EQ(Item(0x0005 | FwCfg::kWriteChannel, 2), (std::vector<uint8_t>{2, 0}));
  for (uint16_t key : {FwCfg::kSignatureKey, FwCfg::kIdKey, FwCfg::kFileDirKey,
                       FwCfg::kFirstFileKey, uint16_t{0x0005 | FwCfg::kWriteChannel}}) {
    EXPECT_EQ(device_.AddItem(key, {0}).code(), absl::StatusCode::kInvalidArgument) << key;
  }
}

TEST_F(FwCfgTest, FilesAreListedByNameInTheDirectory) {
  ASSERT_TRUE(device_.AddFile("etc/e820", std::vector<uint8_t>(40, 0xe8)).ok());
  ASSERT_TRUE(device_.AddFile("bootorder", Bytes("/pci@i0cf8/scsi@2/channel@0/disk@0,0\n")).ok());
  const std::vector<uint8_t> directory = Item(FwCfg::kFileDirKey, 4 + 2 * 64);
  ASSERT_EQ(sys_util::Be32(directory.data()), 2u);
  const uint8_t* first = directory.data() + 4;
  const uint8_t* second = first + 64;
  // Sorted by name: "bootorder" before "etc/e820", keys in the order they were added.
  EXPECT_STREQ(reinterpret_cast<const char*>(first + 8), "bootorder");
  EXPECT_EQ(sys_util::Be16(first + 4), FwCfg::kFirstFileKey + 1);
  EXPECT_EQ(sys_util::Be32(first), 37u);
  EXPECT_STREQ(reinterpret_cast<const char*>(second + 8), "etc/e820");
  EXPECT_EQ(sys_util::Be16(second + 4), FwCfg::kFirstFileKey);
  EXPECT_EQ(sys_util::Be32(second), 40u);
  EXPECT_EQ(Item(FwCfg::kFirstFileKey, 2), (std::vector<uint8_t>{0xe8, 0xe8}));

  EXPECT_EQ(device_.AddFile("bootorder", {}).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(device_.AddFile("", {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_.AddFile(std::string(56, 'x'), {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(device_.AddFile(std::string(55, 'x'), {}).ok());
  EXPECT_EQ(device_.AddFile(std::string("a\0b", 3), {}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(FwCfgTest, TooManyFilesIsResourceExhausted) {
  for (int i = 0; i < FwCfg::kMaxFiles; ++i) {
    ASSERT_TRUE(device_.AddFile("f" + std::to_string(i), {}).ok()) << i;
  }
  EXPECT_EQ(device_.AddFile("one-more", {}).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(sys_util::Be32(Item(FwCfg::kFileDirKey, 4).data()), FwCfg::kMaxFiles);
}

TEST_F(FwCfgTest, DmaSelectsReadsAndSkips) {
  ASSERT_TRUE(device_.AddFile("etc/table", Bytes("0123456789")).ok());
  const uint32_t select = uint32_t{FwCfg::kFirstFileKey} << 16 | FwCfg::kDmaSelect;
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 4, kBuffer), 0u);
  EXPECT_EQ(Guest(kBuffer, 4), Bytes("0123"));
  EXPECT_EQ(Dma(FwCfg::kDmaSkip, 2, 0), 0u);  // no buffer touched: address 0 is fine
  EXPECT_EQ(Dma(FwCfg::kDmaRead, 2, kBuffer), 0u);
  EXPECT_EQ(Guest(kBuffer, 4), Bytes("6723"));
  // Past the end: the rest reads as zeros.
  Fill(kBuffer, 8, 0xaa);
  EXPECT_EQ(Dma(FwCfg::kDmaRead, 8, kBuffer), 0u);
  EXPECT_EQ(Guest(kBuffer, 8), Bytes(std::string("89\0\0\0\0\0\0", 8)));
  // The port interface continues from the same offset (here: the end).
  EXPECT_EQ(ReadData(1), std::vector<uint8_t>{0});
  // A select alone rewinds; an 8-byte write of the address starts a transfer too.
  EXPECT_EQ(Dma(select, 0, 0), 0u);
  PlaceDescriptor(FwCfg::kDmaRead, 3, kBuffer);
  uint8_t address[8];
  sys_util::PutBe64(address, kDescriptor);
  device_.Write(4, address);
  EXPECT_EQ(Guest(kBuffer, 3), Bytes("012"));
  EXPECT_EQ(sys_util::Be32(Guest(kDescriptor, 4).data()), 0u);
}

// SeaBIOS writes only the low half (outl(htonl(addr), 0x518)): the high half is 0 after every
// transfer, as QEMU has it.
TEST_F(FwCfgTest, TheLowHalfAloneStartsATransfer) {
  ASSERT_TRUE(device_.AddFile("etc/table", Bytes("0123456789")).ok());
  EXPECT_EQ(Dma(uint32_t{FwCfg::kFirstFileKey} << 16 | FwCfg::kDmaSelect, 0, 0), 0u);
  PlaceDescriptor(FwCfg::kDmaRead, 5, kBuffer);
  uint8_t low[4];
  sys_util::PutBe32(low, static_cast<uint32_t>(kDescriptor));
  device_.Write(8, low);
  EXPECT_EQ(Guest(kBuffer, 5), Bytes("01234"));
  EXPECT_EQ(sys_util::Be32(Guest(kDescriptor, 4).data()), 0u);
}

// The guest is hostile: buffers and descriptors outside RAM, writes, lengths up to 4 GiB. Nothing
// outside guest RAM is touched, errors are reported in the descriptor when it can be.
TEST_F(FwCfgTest, HostileTransfersEndInErrorsNotCrashes) {
  ASSERT_TRUE(device_.AddFile("etc/table", Bytes("0123456789")).ok());
  const uint32_t select = uint32_t{FwCfg::kFirstFileKey} << 16 | FwCfg::kDmaSelect;
  // A buffer outside RAM, or running past its end.
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 4, kRamBytes), FwCfg::kDmaError);
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 4, kRamBytes - 2), FwCfg::kDmaError);
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 4, UINT64_MAX - 1), FwCfg::kDmaError);
  // The zeros past the item's end are checked too.
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, UINT32_MAX, kBuffer), FwCfg::kDmaError);
  // Zeros up to the end of RAM, exactly: fine.
  const uint64_t tail = kRamBytes - 0x10000;
  Fill(tail, 16, 0xaa);
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 0x10000, tail), 0u);
  EXPECT_EQ(Guest(tail, 12), Bytes(std::string("0123456789\0\0", 12)));
  // No item is writable; a write changes nothing.
  Fill(kBuffer, 4, 'X');
  EXPECT_EQ(Dma(select | FwCfg::kDmaWrite, 4, kBuffer), FwCfg::kDmaError);
  EXPECT_EQ(Dma(select | FwCfg::kDmaRead, 4, kBuffer), 0u);
  EXPECT_EQ(Guest(kBuffer, 4), Bytes("0123"));
  // A descriptor outside RAM: ignored. Straddling the end of RAM: ignored too.
  Dma(select | FwCfg::kDmaRead, 4, kBuffer, kRamBytes);
  Dma(select | FwCfg::kDmaRead, 4, kBuffer, kRamBytes - 8);
  Dma(select | FwCfg::kDmaRead, 4, kBuffer, UINT64_MAX - 7);
  // A read of a key with no item: zeros.
  Fill(kBuffer, 4, 'X');
  EXPECT_EQ(Dma(uint32_t{0x0ff0} << 16 | FwCfg::kDmaSelect | FwCfg::kDmaRead, 4, kBuffer), 0u);
  EXPECT_EQ(Guest(kBuffer, 4), std::vector<uint8_t>(4, 0));
}

TEST_F(FwCfgTest, OddAccessesChangeNothing) {
  // A byte written to the selector or the data port, reads of the unused ports.
  Select(FwCfg::kSignatureKey);
  const uint8_t byte = 0x19;
  device_.Write(0, std::span<const uint8_t>(&byte, 1));
  device_.Write(1, std::span<const uint8_t>(&byte, 1));
  EXPECT_EQ(ReadData(4), Bytes("QEMU"));
  uint8_t unused[2];
  device_.Read(2, unused);
  EXPECT_EQ(unused[0], 0xff);
  EXPECT_EQ(unused[1], 0xff);
  // Only the high half of the DMA address: no transfer until the low half.
  Fill(kBuffer, 4, 'X');
  uint8_t high[4] = {};
  device_.Write(4, high);
  EXPECT_EQ(Guest(kBuffer, 4), Bytes("XXXX"));
}

}  // namespace
}  // namespace devices::legacy

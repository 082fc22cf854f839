#include "devices/pci/pci_root_bus.h"

#include <array>
#include <cstring>
#include <memory>
#include <vector>

#include "devices/pci/bar_allocator.h"
#include "devices/pci/pci_device.h"
#include "devices/pci/pci_regs.h"
#include "devices/pci/testing/fake_msi.h"
#include "gtest/gtest.h"
#include "vmm/machine/bus.h"

namespace devices::pci {
namespace {

using testing::FakeMsiController;

// A function with an I/O BAR (0), a 32-bit BAR (1), a 64-bit prefetchable BAR (2+3) and
// optionally MSI-X in BAR 4. BAR reads return the low byte of offset + bar * 0x10; writes are
// recorded.
class TestDevice : public PciDevice {
 public:
  static std::shared_ptr<TestDevice> Create(uint16_t device_id, FakeMsiController* msi = nullptr) {
    auto device = std::shared_ptr<TestDevice>(new TestDevice(device_id));
    EXPECT_TRUE(device->DeclareBar(0, {BarKind::kIo, 0x20}).ok());
    EXPECT_TRUE(device->DeclareBar(1, {BarKind::kMmio32, 0x1000}).ok());
    EXPECT_TRUE(device->DeclareBar(2, {BarKind::kMmio64, 0x4000, true}).ok());
    if (msi != nullptr) {
      EXPECT_TRUE(device->DeclareBar(4, {BarKind::kMmio32, 0x2000}).ok());
      auto msix = MsixCapability::Create(*msi, 3);
      EXPECT_TRUE(msix.ok());
      EXPECT_TRUE(device->AddMsixCapability(*std::move(msix), 4, 0, 0x1000).ok());
    }
    return device;
  }

  using PciDevice::AddCapability;
  using PciDevice::DeclareBar;
  using PciDevice::WriteConfigRaw;

  struct Access {
    int bar;
    uint64_t offset;
    std::vector<uint8_t> data;
  };
  std::vector<Access> writes;
  std::vector<std::pair<int, uint64_t>> mapped;
  std::vector<std::pair<int, uint64_t>> unmapped;

 protected:
  void ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i)
      data[i] = static_cast<uint8_t>(offset + i + bar * 0x10);
  }
  void WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) override {
    writes.push_back({bar, offset, std::vector<uint8_t>(data.begin(), data.end())});
  }
  void OnBarMapped(int bar, uint64_t address) override { mapped.push_back({bar, address}); }
  void OnBarUnmapped(int bar, uint64_t address) override { unmapped.push_back({bar, address}); }

 private:
  explicit TestDevice(uint16_t device_id)
      : PciDevice(PciIdentity{.vendor_id = 0x1234,
                              .device_id = device_id,
                              .class_code = 0xff0000,
                              .revision = 7,
                              .subsystem_vendor_id = 0x1af4,
                              .subsystem_id = 0x1100}) {}
};

class PciRootBusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto root = PciRootBus::Create(pio_, mmio_);
    ASSERT_TRUE(root.ok()) << root.status();
    root_ = *std::move(root);
  }

  void Out(uint16_t port, uint32_t value, size_t size) {
    std::array<uint8_t, 4> bytes;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    pio_.Write(port, std::span<const uint8_t>(bytes.data(), size));
  }
  uint32_t In(uint16_t port, size_t size) {
    std::array<uint8_t, 4> bytes{};
    pio_.Read(port, std::span<uint8_t>(bytes.data(), size));
    uint32_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= uint32_t{bytes[i]} << (8 * i);
    return value;
  }
  static uint32_t Address(uint8_t device, uint8_t function, uint32_t offset, uint8_t bus = 0) {
    return 0x80000000u | bus << 16 | device << 11 | function << 8 | (offset & 0xfc);
  }
  // Configuration mechanism #1, as Linux's pci_conf1_read/write do it.
  uint32_t ConfigRead(uint8_t device, uint8_t function, uint32_t offset, size_t size) {
    Out(0xcf8, Address(device, function, offset), 4);
    return In(0xcfc + (offset & 3), size);
  }
  void ConfigWrite(uint8_t device, uint8_t function, uint32_t offset, uint32_t value, size_t size) {
    Out(0xcf8, Address(device, function, offset), 4);
    Out(0xcfc + (offset & 3), value, size);
  }
  uint32_t MmioRead32(uint64_t address) {
    std::array<uint8_t, 4> bytes{};
    if (!mmio_.Read(address, bytes)) return 0xffffffff;
    uint32_t value;
    std::memcpy(&value, bytes.data(), 4);
    return value;
  }
  void MmioWrite32(uint64_t address, uint32_t value) {
    std::array<uint8_t, 4> bytes;
    std::memcpy(bytes.data(), &value, 4);
    mmio_.Write(address, bytes);
  }

  vmm::Bus pio_{"pio"};
  vmm::Bus mmio_{"mmio"};
  std::shared_ptr<PciRootBus> root_;
};

TEST_F(PciRootBusTest, HostBridgeThroughByteWordAndDwordAccesses) {
  EXPECT_EQ(ConfigRead(0, 0, 0, 4), 0x12378086u);
  EXPECT_EQ(ConfigRead(0, 0, 0, 2), 0x8086u);
  EXPECT_EQ(ConfigRead(0, 0, 2, 2), 0x1237u);
  EXPECT_EQ(ConfigRead(0, 0, 0, 1), 0x86u);
  EXPECT_EQ(ConfigRead(0, 0, 1, 1), 0x80u);
  EXPECT_EQ(ConfigRead(0, 0, 3, 1), 0x12u);
  EXPECT_EQ(ConfigRead(0, 0, 0x0a, 2), 0x0600u);  // class: bridge / host
  EXPECT_EQ(ConfigRead(0, 0, 0x09, 1), 0x00u);
  EXPECT_EQ(ConfigRead(0, 0, 0x0e, 1), 0x00u);  // header type 0, single function
  EXPECT_EQ(ConfigRead(0, 0, 0x34, 1), 0x00u);  // no capabilities
  EXPECT_EQ(ConfigRead(0, 0, kInterruptPin, 1), 0u);
  // Word at byte 1 of the data window (0xCFD) is bytes 1..2 of the dword.
  EXPECT_EQ(ConfigRead(0, 0, 1, 2), 0x3780u);
}

TEST_F(PciRootBusTest, PamRegistersAsSeaBiosShadowsItself) {
  using Segment = PciHostBridge::PamSegment;
  std::vector<std::vector<Segment>> heard;
  root_->host_bridge()->SetPamListener([&heard](std::span<const Segment> segments) {
    heard.emplace_back(segments.begin(), segments.end());
  });
  // Power-on: every segment reads and writes the ROM.
  for (const Segment& segment : root_->host_bridge()->PamSegments()) {
    EXPECT_FALSE(segment.read_ram || segment.write_ram) << std::hex << segment.base;
  }
  // Every segment to read/write RAM (0x33 per register, as SeaBIOS's make_bios_writable asks),
  // in a dword write at 0x58 (PAM0-PAM2) and one at 0x5c; the reserved bits stay 0.
  ConfigWrite(0, 0, 0x58, 0x33333300 | 0xff, 4);
  EXPECT_EQ(ConfigRead(0, 0, 0x59, 1), 0x30u);
  EXPECT_EQ(ConfigRead(0, 0, 0x58, 1), 0x00u);  // not a PAM register: read-only here
  EXPECT_EQ(ConfigRead(0, 0, 0x5a, 2), 0x3333u);
  ConfigWrite(0, 0, 0x5c, 0xffffffff, 4);  // PAM3-PAM6
  EXPECT_EQ(ConfigRead(0, 0, 0x5c, 4), 0x33333333u);
  ASSERT_EQ(heard.size(), 2u);
  const auto segments = root_->host_bridge()->PamSegments();
  EXPECT_EQ(std::vector<Segment>(segments.begin(), segments.end()), heard.back());
  EXPECT_EQ(segments.front(), (Segment{0xc0000, 0x4000, true, true}));
  EXPECT_EQ(segments.back(), (Segment{0xf0000, 0x10000, true, true}));
  for (const Segment& segment : segments) EXPECT_TRUE(segment.read_ram && segment.write_ram);
  // Then read-only (make_bios_readonly: 0x11), only the F segment: one change, one call.
  ConfigWrite(0, 0, 0x59, 0x10, 1);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard.back().back(), (Segment{0xf0000, 0x10000, true, false}));
  EXPECT_EQ(heard.back().front(), (Segment{0xc0000, 0x4000, true, true}));
  // A write that changes nothing is not heard; nor one outside the PAM registers.
  ConfigWrite(0, 0, 0x59, 0x10, 1);
  ConfigWrite(0, 0, 0x60, 0xff, 1);
  EXPECT_EQ(heard.size(), 3u);
  // The upper half of PAM1 is 0xc4000's.
  ConfigWrite(0, 0, 0x5a, 0x01, 1);
  EXPECT_EQ(heard.back()[0], (Segment{0xc0000, 0x4000, true, false}));
  EXPECT_EQ(heard.back()[1], (Segment{0xc4000, 0x4000, false, false}));
}

TEST_F(PciRootBusTest, AbsentFunctionsOtherBusesAndDisabledAccessesReadAllOnes) {
  EXPECT_EQ(ConfigRead(1, 0, 0, 4), 0xffffffffu);
  EXPECT_EQ(ConfigRead(31, 7, 0, 4), 0xffffffffu);
  EXPECT_EQ(ConfigRead(0, 1, 0, 2), 0xffffu);
  Out(0xcf8, Address(0, 0, 0, /*bus=*/1), 4);
  EXPECT_EQ(In(0xcfc, 4), 0xffffffffu);
  Out(0xcf8, 0x00000000, 4);  // enable bit clear
  EXPECT_EQ(In(0xcfc, 4), 0xffffffffu);
  Out(0xcf8, Address(0, 0, 0) | 0x01000000, 4);  // extended register 0x100
  EXPECT_EQ(In(0xcfc, 4), 0xffffffffu);
  // Writes there go nowhere and do not crash.
  Out(0xcfc, 0x12345678, 4);
}

TEST_F(PciRootBusTest, LinuxType1Probe) {
  // arch/x86/pci/direct.c: a byte write to 0xCFB must not disturb the latch; a dword write of
  // 0x80000000 must read back unchanged.
  Out(0xcf8, 0x80001234, 4);
  Out(0xcfb, 0x01, 1);
  EXPECT_EQ(In(0xcf8, 4), 0x80001234u);
  Out(0xcf8, 0x80000000, 4);
  EXPECT_EQ(In(0xcf8, 4), 0x80000000u);
  EXPECT_EQ(In(0xcfa, 2), 0x8000u);
  // The reserved low bits are not kept.
  Out(0xcf8, 0x80000003, 4);
  EXPECT_EQ(In(0xcf8, 4), 0x80000000u);
  // Word writes to the address port are ignored.
  Out(0xcf8, 0xffff, 2);
  EXPECT_EQ(In(0xcf8, 4), 0x80000000u);
  // An access straddling address and data registers reaches neither.
  std::array<uint8_t, 4> bytes{};
  root_->Read(2, bytes);
  EXPECT_EQ(bytes, (std::array<uint8_t, 4>{0xff, 0xff, 0xff, 0xff}));
  root_->Write(2, bytes);
  EXPECT_EQ(In(0xcf8, 4), 0x80000000u);
}

TEST_F(PciRootBusTest, DevicesAndMultiFunction) {
  auto a = TestDevice::Create(0x0001);
  auto b = TestDevice::Create(0x0002);
  auto slot = root_->AddDevice(a);
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(*slot, 1);
  EXPECT_EQ(ConfigRead(1, 0, 0, 4), 0x00011234u);
  EXPECT_EQ(ConfigRead(1, 0, 8, 4), 0xff000007u);  // class ff0000, revision 7
  EXPECT_EQ(ConfigRead(1, 0, 0x2c, 4), 0x11001af4u);
  EXPECT_EQ(ConfigRead(1, 0, 0x0e, 1), 0x00u);
  ASSERT_TRUE(root_->AddDevice(1, 3, b).ok());
  EXPECT_EQ(ConfigRead(1, 0, 0x0e, 1), 0x80u);  // function 0 now multi-function
  EXPECT_EQ(ConfigRead(1, 3, 0, 4), 0x00021234u);
  EXPECT_EQ(root_->AddDevice(1, 3, b).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(root_->AddDevice(32, 0, b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->AddDevice(0, 8, b).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root_->GetDevice(1, 3), b);
}

TEST_F(PciRootBusTest, ReadOnlyFieldsAndWriteOneToClearStatus) {
  auto device = TestDevice::Create(0x0001);
  ASSERT_TRUE(root_->AddDevice(2, 0, device).ok());
  ConfigWrite(2, 0, 0, 0xdeadbeef, 4);  // vendor/device
  EXPECT_EQ(ConfigRead(2, 0, 0, 4), 0x00011234u);
  ConfigWrite(2, 0, 8, 0xffffffff, 4);  // revision/class
  EXPECT_EQ(ConfigRead(2, 0, 8, 4), 0xff000007u);
  ConfigWrite(2, 0, 0x0e, 0xff, 1);  // header type
  EXPECT_EQ(ConfigRead(2, 0, 0x0e, 1), 0u);
  ConfigWrite(2, 0, 0x2c, 0, 4);  // subsystem ids
  EXPECT_EQ(ConfigRead(2, 0, 0x2c, 4), 0x11001af4u);
  ConfigWrite(2, 0, 0x30, 0xffffffff, 4);  // no expansion ROM: sizes as 0
  EXPECT_EQ(ConfigRead(2, 0, 0x30, 4), 0u);
  ConfigWrite(2, 0, 0x3d, 1, 1);  // interrupt pin stays 0 (no INTx)
  EXPECT_EQ(ConfigRead(2, 0, 0x3d, 1), 0u);
  ConfigWrite(2, 0, 0x3c, 0x0b, 1);  // interrupt line is a scratch register
  EXPECT_EQ(ConfigRead(2, 0, 0x3c, 1), 0x0bu);
  // Command: only the implemented bits stick.
  ConfigWrite(2, 0, kCommand, 0xffff, 2);
  EXPECT_EQ(ConfigRead(2, 0, kCommand, 2), kCommandWritableMask);
  ConfigWrite(2, 0, kCommand, 0, 2);
  // Status: W1C bits clear only where 1 is written.
  device->WriteConfigRaw(kStatus, kStatusReceivedMasterAbort | kStatusSignaledSystemError, 2);
  ConfigWrite(2, 0, kStatus, 0, 2);
  EXPECT_EQ(ConfigRead(2, 0, kStatus, 2), kStatusReceivedMasterAbort | kStatusSignaledSystemError);
  ConfigWrite(2, 0, kStatus, kStatusReceivedMasterAbort, 2);
  EXPECT_EQ(ConfigRead(2, 0, kStatus, 2), kStatusSignaledSystemError);
  // A dword write to Command/Status at once: command set, status bits cleared.
  ConfigWrite(2, 0, kCommand, 0xffff0000 | kCommandBusMaster, 4);
  EXPECT_EQ(ConfigRead(2, 0, kCommand, 4), kCommandBusMaster);
}

TEST_F(PciRootBusTest, BarSizing) {
  auto device = TestDevice::Create(0x0001);
  ASSERT_TRUE(root_->AddDevice(3, 0, device).ok());
  EXPECT_EQ(ConfigRead(3, 0, 0x10, 4), 0x1u);  // I/O
  EXPECT_EQ(ConfigRead(3, 0, 0x14, 4), 0x0u);  // 32-bit memory
  EXPECT_EQ(ConfigRead(3, 0, 0x18, 4), 0xcu);  // 64-bit prefetchable
  for (uint32_t reg = 0x10; reg < 0x28; reg += 4) ConfigWrite(3, 0, reg, 0xffffffff, 4);
  EXPECT_EQ(ConfigRead(3, 0, 0x10, 4), 0xffffffe1u);
  EXPECT_EQ(ConfigRead(3, 0, 0x14, 4), 0xfffff000u);
  EXPECT_EQ(ConfigRead(3, 0, 0x18, 4), 0xffffc00cu);
  EXPECT_EQ(ConfigRead(3, 0, 0x1c, 4), 0xffffffffu);
  EXPECT_EQ(ConfigRead(3, 0, 0x20, 4), 0u);  // unimplemented BARs size as 0
  EXPECT_EQ(ConfigRead(3, 0, 0x24, 4), 0u);
  // Sizing with decoding off maps nothing.
  EXPECT_TRUE(device->mapped.empty());
}

TEST_F(PciRootBusTest, AssignedBarsAreMappedAndFollowReprogramming) {
  auto device = TestDevice::Create(0x0001);
  BarAllocator allocator = BarAllocator::ForX86();
  ASSERT_TRUE(device->AssignBars(allocator).ok());
  ASSERT_TRUE(root_->AddDevice(4, 0, device).ok());
  EXPECT_EQ(ConfigRead(4, 0, kCommand, 2), kCommandIoSpace | kCommandMemorySpace);
  EXPECT_EQ(ConfigRead(4, 0, 0x10, 4), 0xc001u);
  EXPECT_EQ(ConfigRead(4, 0, 0x14, 4), 0xc0000000u);
  EXPECT_EQ(ConfigRead(4, 0, 0x18, 4), 0xc000400cu);
  EXPECT_EQ(ConfigRead(4, 0, 0x1c, 4), 0u);
  EXPECT_EQ(device->bar_mapping(0), 0xc000u);
  EXPECT_EQ(device->bar_mapping(1), 0xc0000000u);
  EXPECT_EQ(device->bar_mapping(2), 0xc0004000u);
  EXPECT_EQ(device->mapped.size(), 3u);

  EXPECT_EQ(MmioRead32(0xc0000010), 0x23222120u);  // BAR 1, offset 0x10
  EXPECT_EQ(MmioRead32(0xc0004000), 0x23222120u);  // BAR 2, offset 0
  EXPECT_EQ(In(0xc004, 1), 0x04u);
  MmioWrite32(0xc0000ffc, 0x11223344);
  ASSERT_EQ(device->writes.size(), 1u);
  EXPECT_EQ(device->writes[0].bar, 1);
  EXPECT_EQ(device->writes[0].offset, 0xffcu);

  // Move BAR 1 as a firmware would: the old range is gone, the new one answers.
  ConfigWrite(4, 0, 0x14, 0xd0000000, 4);
  EXPECT_EQ(device->bar_mapping(1), 0xd0000000u);
  EXPECT_EQ(MmioRead32(0xc0000010), 0xffffffffu);
  EXPECT_EQ(MmioRead32(0xd0000010), 0x23222120u);
  // Move the 64-bit BAR above 4 GiB: low half then high half.
  ConfigWrite(4, 0, 0x18, 0x00008000, 4);
  ConfigWrite(4, 0, 0x1c, 0x00000001, 4);
  EXPECT_EQ(device->bar_mapping(2), 0x100008000ull);
  EXPECT_EQ(MmioRead32(0x100008000ull), 0x23222120u);
  // Move the I/O BAR.
  ConfigWrite(4, 0, 0x10, 0xd000, 4);
  EXPECT_EQ(In(0xc004, 1), 0xffu);
  EXPECT_EQ(In(0xd004, 1), 0x04u);
}

TEST_F(PciRootBusTest, CommandEnablesControlDecoding) {
  auto device = TestDevice::Create(0x0001);
  BarAllocator allocator = BarAllocator::ForX86();
  ASSERT_TRUE(device->AssignBars(allocator).ok());
  ASSERT_TRUE(root_->AddDevice(4, 0, device).ok());
  // Memory off: both memory BARs go, the I/O BAR stays.
  ConfigWrite(4, 0, kCommand, kCommandIoSpace, 2);
  EXPECT_FALSE(device->bar_mapping(1));
  EXPECT_FALSE(device->bar_mapping(2));
  EXPECT_TRUE(device->bar_mapping(0));
  EXPECT_EQ(MmioRead32(0xc0000000), 0xffffffffu);
  // Linux-style sizing with decoding off, then restore and re-enable.
  ConfigWrite(4, 0, 0x14, 0xffffffff, 4);
  EXPECT_FALSE(device->bar_mapping(1));
  ConfigWrite(4, 0, 0x14, 0xc0000000, 4);
  ConfigWrite(4, 0, kCommand, kCommandIoSpace | kCommandMemorySpace, 2);
  EXPECT_EQ(device->bar_mapping(1), 0xc0000000u);
  EXPECT_EQ(MmioRead32(0xc0000000), 0x13121110u);
  // I/O off.
  ConfigWrite(4, 0, kCommand, kCommandMemorySpace, 2);
  EXPECT_FALSE(device->bar_mapping(0));
  EXPECT_EQ(In(0xc000, 1), 0xffu);
}

TEST_F(PciRootBusTest, ConflictingAndInvalidPlacementsStayUnmapped) {
  auto a = TestDevice::Create(0x0001);
  auto b = TestDevice::Create(0x0002);
  BarAllocator allocator = BarAllocator::ForX86();
  ASSERT_TRUE(a->AssignBars(allocator).ok());
  ASSERT_TRUE(b->AssignBars(allocator).ok());
  ASSERT_TRUE(root_->AddDevice(1, 0, a).ok());
  ASSERT_TRUE(root_->AddDevice(2, 0, b).ok());
  const uint64_t a_bar1 = *a->bar_mapping(1);
  const uint64_t b_bar1 = *b->bar_mapping(1);
  // b's BAR 1 onto a's: refused by the bus, b's BAR stays unmapped, a is untouched.
  ConfigWrite(2, 0, 0x14, static_cast<uint32_t>(a_bar1), 4);
  EXPECT_FALSE(b->bar_mapping(1));
  EXPECT_EQ(a->bar_mapping(1), a_bar1);
  EXPECT_EQ(MmioRead32(a_bar1), 0x13121110u);
  ConfigWrite(2, 0, 0x14, static_cast<uint32_t>(b_bar1), 4);
  EXPECT_EQ(b->bar_mapping(1), b_bar1);
  // Address 0 and a 64-bit BAR half-way through sizing are not decoded.
  ConfigWrite(2, 0, 0x14, 0, 4);
  EXPECT_FALSE(b->bar_mapping(1));
  ConfigWrite(2, 0, 0x1c, 0xffffffff, 4);  // high half all-ones: 0xffffffff_xxxxx000
  ConfigWrite(2, 0, 0x18, 0xffffffff, 4);
  EXPECT_FALSE(b->bar_mapping(2));
  // An I/O BAR above 64 KiB cannot be decoded.
  ConfigWrite(2, 0, 0x10, 0x10000, 4);
  EXPECT_FALSE(b->bar_mapping(0));
  ConfigWrite(2, 0, 0x10, 0xfff0, 4);  // the size's low bits are hardwired: 0xffe0
  EXPECT_EQ(ConfigRead(2, 0, 0x10, 4), 0xffe1u);
  EXPECT_EQ(b->bar_mapping(0), 0xffe0u);
  // Putting the I/O BAR onto the configuration ports fails too.
  ConfigWrite(2, 0, 0x10, 0x0ce0, 4);
  EXPECT_FALSE(b->bar_mapping(0));
  EXPECT_EQ(ConfigRead(0, 0, 0, 4), 0x12378086u);
}

TEST_F(PciRootBusTest, CapabilityListWalk) {
  FakeMsiController msi;
  auto device = TestDevice::Create(0x0001, &msi);
  const std::array<uint8_t, 6> vendor = {8, 0xaa, 0xbb, 0xcc, 0xdd, 0xee};
  auto first = device->AddCapability(kCapabilityIdVendorSpecific, vendor);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(root_->AddDevice(5, 0, device).ok());
  EXPECT_NE(ConfigRead(5, 0, kStatus, 2) & kStatusCapabilitiesList, 0u);
  std::vector<uint8_t> ids;
  std::vector<uint8_t> offsets;
  uint8_t pointer = ConfigRead(5, 0, kCapabilitiesPointer, 1);
  for (int guard = 0; pointer != 0 && guard < 48; ++guard) {
    EXPECT_EQ(pointer % 4, 0);
    EXPECT_GE(pointer, 0x40);
    offsets.push_back(pointer);
    ids.push_back(ConfigRead(5, 0, pointer, 1));
    pointer = ConfigRead(5, 0, pointer + 1, 1);
  }
  EXPECT_EQ(ids, (std::vector<uint8_t>{kCapabilityIdMsix, kCapabilityIdVendorSpecific}));
  // MSI-X: table size 3 (N-1 = 2), table in BAR 4 at 0, PBA in BAR 4 at 0x1000.
  EXPECT_EQ(ConfigRead(5, 0, offsets[0] + 2, 2), 2u);
  EXPECT_EQ(ConfigRead(5, 0, offsets[0] + 4, 4), 4u);
  EXPECT_EQ(ConfigRead(5, 0, offsets[0] + 8, 4), 0x1004u);
  EXPECT_EQ(ConfigRead(5, 0, offsets[1] + 2, 2), 0xaa08u);
  EXPECT_EQ(ConfigRead(5, 0, offsets[1] + 4, 4), 0xeeddccbbu);
  // Capability bytes without a write mask are read-only, as are the list pointers.
  ConfigWrite(5, 0, offsets[1], 0xffffffff, 4);
  EXPECT_EQ(ConfigRead(5, 0, offsets[1], 4), 0xaa080009u);
  ConfigWrite(5, 0, kCapabilitiesPointer, 0, 1);
  EXPECT_EQ(ConfigRead(5, 0, kCapabilitiesPointer, 1), offsets[0]);
  ConfigWrite(5, 0, kStatus, 0xffff, 2);
  EXPECT_NE(ConfigRead(5, 0, kStatus, 2) & kStatusCapabilitiesList, 0u);
}

TEST_F(PciRootBusTest, MsixThroughConfigSpaceAndBar) {
  FakeMsiController msi;
  auto device = TestDevice::Create(0x0001, &msi);
  BarAllocator allocator = BarAllocator::ForX86();
  ASSERT_TRUE(device->AssignBars(allocator).ok());
  ASSERT_TRUE(root_->AddDevice(6, 0, device).ok());
  const uint64_t table = *device->bar_mapping(4);
  const uint8_t cap = ConfigRead(6, 0, kCapabilitiesPointer, 1);
  // Linux's order: enable with the function masked, program, unmask the function, unmask vector.
  ConfigWrite(6, 0, cap + 2, kMsixControlEnable | kMsixControlFunctionMask, 2);
  EXPECT_TRUE(device->msix()->enabled());
  EXPECT_EQ(ConfigRead(6, 0, cap + 2, 2), 0xc002u);  // table size is read-only
  MmioWrite32(table + 16, 0xfee00000);
  MmioWrite32(table + 20, 0);
  MmioWrite32(table + 24, 0x4055);
  ConfigWrite(6, 0, cap + 2, kMsixControlEnable, 2);
  MmioWrite32(table + 28, 0);
  ASSERT_EQ(msi.vector(1)->messages().size(), 1u);
  EXPECT_EQ(msi.vector(1)->messages()[0].data, 0x4055u);
  EXPECT_EQ(MmioRead32(table + 24), 0x4055u);
  device->msix()->Trigger(1);
  EXPECT_EQ(msi.vector(1)->triggers(), 1);
  // Pending shows in the PBA through the BAR.
  device->msix()->Trigger(2);
  EXPECT_EQ(MmioRead32(table + 0x1000), 0x4u);
  MmioWrite32(table + 0x1000, 0);  // read-only
  EXPECT_EQ(MmioRead32(table + 0x1000), 0x4u);
  // Byte accesses to the table are dropped; past the table reaches the device's own handler.
  std::array<uint8_t, 1> byte = {0xff};
  mmio_.Write(table + 28, byte);
  EXPECT_FALSE(device->msix()->entry(1).masked);
  EXPECT_TRUE(device->writes.empty());
  MmioWrite32(table + 0x800, 1);
  ASSERT_EQ(device->writes.size(), 1u);
  EXPECT_EQ(device->writes[0].bar, 4);
  // Disabling MSI-X through the capability holds interrupts.
  ConfigWrite(6, 0, cap + 2, 0, 2);
  device->msix()->Trigger(1);
  EXPECT_EQ(msi.vector(1)->triggers(), 1);
  ConfigWrite(6, 0, cap + 2, kMsixControlEnable, 2);
  EXPECT_EQ(msi.vector(1)->triggers(), 2);
}

TEST_F(PciRootBusTest, DeclarationErrors) {
  auto device = TestDevice::Create(0x0001);
  EXPECT_EQ(device->DeclareBar(1, {BarKind::kMmio32, 0x1000}).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(device->DeclareBar(3, {BarKind::kMmio32, 0x1000}).code(),
            absl::StatusCode::kAlreadyExists);  // upper half of BAR 2
  EXPECT_EQ(device->DeclareBar(5, {BarKind::kMmio64, 0x1000}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->DeclareBar(6, {BarKind::kMmio32, 0x1000}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->DeclareBar(4, {BarKind::kMmio32, 0x1800}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device->DeclareBar(4, {BarKind::kIo, 0x400}).code(),
            absl::StatusCode::kInvalidArgument);
  // Capabilities run out before configuration space does.
  std::array<uint8_t, 62> big{};
  int added = 0;
  while (device->AddCapability(kCapabilityIdVendorSpecific, big).ok()) ++added;
  EXPECT_EQ(added, 3);  // 0x40, 0x80, 0xc0
}

TEST_F(PciRootBusTest, HostileConfigAccessesDoNotCrash) {
  auto device = TestDevice::Create(0x0001);
  ASSERT_TRUE(root_->AddDevice(7, 0, device).ok());
  std::array<uint8_t, 4> four{};
  device->ReadConfig(3, std::span<uint8_t>(four.data(), 2));  // crosses a dword
  EXPECT_EQ(four[0], 0xff);
  device->ReadConfig(256, four);
  device->ReadConfig(UINT32_MAX, four);
  device->WriteConfig(UINT32_MAX - 1, four);
  std::array<uint8_t, 3> three{};
  device->ReadConfig(0, three);
  EXPECT_EQ(three, (std::array<uint8_t, 3>{0xff, 0xff, 0xff}));
  device->ReadBarRegion(7, 0, four);
  device->ReadBarRegion(3, 0, four);      // upper half of a 64-bit BAR
  device->ReadBarRegion(1, 0xffe, four);  // runs past the BAR
  EXPECT_EQ(four, (std::array<uint8_t, 4>{}));
  device->WriteBarRegion(1, UINT64_MAX, four);
  EXPECT_TRUE(device->writes.empty());
  // Walk the whole space with every access size.
  for (uint32_t offset = 0; offset < 256; ++offset) {
    for (size_t size : {1, 2, 4}) {
      if ((offset % 4) + size > 4) continue;
      ConfigWrite(7, 0, offset, 0xffffffff, size);
      (void)ConfigRead(7, 0, offset, size);
    }
  }
  EXPECT_EQ(ConfigRead(7, 0, 0, 4), 0x00011234u);
}

TEST_F(PciRootBusTest, ShutdownUnmapsEverything) {
  auto device = TestDevice::Create(0x0001);
  BarAllocator allocator = BarAllocator::ForX86();
  ASSERT_TRUE(device->AssignBars(allocator).ok());
  ASSERT_TRUE(root_->AddDevice(4, 0, device).ok());
  root_->Shutdown();
  EXPECT_FALSE(device->bar_mapping(0));
  EXPECT_FALSE(device->bar_mapping(1));
  EXPECT_EQ(device->unmapped.size(), 3u);
  EXPECT_EQ(MmioRead32(0xc0000000), 0xffffffffu);
  // Later writes do not map again.
  ConfigWrite(4, 0, kCommand, kCommandMemorySpace, 2);
  EXPECT_FALSE(device->bar_mapping(1));
}

// Buses dying before the devices (or the other way round) is safe: the registrations own the device.
TEST(PciLifetimeTest, DevicesOutliveOrPredeceaseBuses) {
  std::shared_ptr<TestDevice> device = TestDevice::Create(0x0001);
  {
    vmm::Bus pio("pio");
    vmm::Bus mmio("mmio");
    auto root = PciRootBus::Create(pio, mmio);
    ASSERT_TRUE(root.ok());
    BarAllocator allocator = BarAllocator::ForX86();
    ASSERT_TRUE(device->AssignBars(allocator).ok());
    ASSERT_TRUE((*root)->AddDevice(1, 0, device).ok());
    (*root)->Shutdown();
  }
  device.reset();
}

}  // namespace
}  // namespace devices::pci

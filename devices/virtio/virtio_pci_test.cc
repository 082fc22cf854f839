#include "devices/virtio/virtio_pci.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "devices/pci/bar_allocator.h"
#include "devices/pci/pci_regs.h"
#include "devices/pci/pci_root_bus.h"
#include "devices/pci/testing/fake_msi.h"
#include "devices/virtio/virtio_device.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/kvm/kvm.h"
#include "vmm/kvm/kvm_ioevent_registrar.h"
#include "vmm/kvm/kvm_msi.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/ioevent_registrar.h"

namespace devices::virtio {
namespace {

using pci::testing::FakeMsiController;

constexpr uint64_t kDeviceFeatureA = 1ull << 0;
constexpr uint64_t kDeviceFeatureB = 1ull << 2;

// Records what the transport tells it.
class FakeDevice : public VirtioDevice {
 public:
  uint32_t device_type() const override { return kDeviceTypeScsi; }
  // ACCESS_PLATFORM is reserved for the transport, which must not pass it on.
  uint64_t device_features() const override {
    return kDeviceFeatureA | kDeviceFeatureB | kFeatureAccessPlatform;
  }
  std::vector<uint16_t> queue_max_sizes() const override { return max_sizes; }
  uint32_t config_size() const override { return config.size(); }
  void ReadConfig(uint32_t offset, std::span<uint8_t> data) override {
    EXPECT_LE(offset + data.size(), config.size());
    std::memcpy(data.data(), config.data() + offset, data.size());
  }
  void WriteConfig(uint32_t offset, std::span<const uint8_t> data) override {
    EXPECT_LE(offset + data.size(), config.size());
    std::memcpy(config.data() + offset, data.data(), data.size());
  }
  absl::Status Activate(VirtioActivation a) override {
    ++activations;
    activation = std::move(a);
    return activate_status;
  }
  void Reset() override {
    ++resets;
    activation.reset();
  }

  std::vector<uint16_t> max_sizes = {128, 128, 256};
  std::array<uint8_t, 12> config = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  absl::Status activate_status = absl::OkStatus();
  std::optional<VirtioActivation> activation;
  int activations = 0;
  int resets = 0;
};

class FakeRegistrar : public vmm::IoEventRegistrar {
 public:
  struct Entry {
    int fd;
    Spec spec;
  };
  absl::Status Register(int event_fd, const Spec& spec) override {
    if (fail) return absl::InternalError("fake: refused");
    registered.push_back({event_fd, spec});
    return absl::OkStatus();
  }
  absl::Status Unregister(int event_fd, const Spec& spec) override {
    for (auto it = registered.begin(); it != registered.end(); ++it) {
      if (it->fd == event_fd && it->spec.address == spec.address &&
          it->spec.length == spec.length) {
        registered.erase(it);
        return absl::OkStatus();
      }
    }
    ADD_FAILURE() << "unregistering something never registered";
    return absl::NotFoundError("fake: not registered");
  }
  std::vector<Entry> registered;
  bool fail = false;
};

// Offsets in struct virtio_pci_common_cfg (§4.1.4.3).
enum Common : uint64_t {
  kDfSelect = 0x00,
  kDf = 0x04,
  kGfSelect = 0x08,
  kGf = 0x0c,
  kMsixConfig = 0x10,
  kNumQ = 0x12,
  kStatus = 0x14,
  kGeneration = 0x15,
  kQSelect = 0x16,
  kQSize = 0x18,
  kQMsix = 0x1a,
  kQEnable = 0x1c,
  kQNotifyOff = 0x1e,
  kQDescLo = 0x20,
  kQDescHi = 0x24,
  kQAvailLo = 0x28,
  kQAvailHi = 0x2c,
  kQUsedLo = 0x30,
  kQUsedHi = 0x34,
  kQReset = 0x3a,
};

constexpr uint8_t kAck = VirtioPciTransport::kStatusAcknowledge;
constexpr uint8_t kDriver = VirtioPciTransport::kStatusDriver;
constexpr uint8_t kFeaturesOk = VirtioPciTransport::kStatusFeaturesOk;
constexpr uint8_t kDriverOk = VirtioPciTransport::kStatusDriverOk;
constexpr uint8_t kNeedsReset = VirtioPciTransport::kStatusNeedsReset;
constexpr uint16_t kNoVector = VirtioPciTransport::kNoVector;
constexpr uint8_t kDevice = 3;  // PCI device number used by the tests

class VirtioPciTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto memory = vmm::GuestMemory::CreateX86(16 << 20);
    ASSERT_TRUE(memory.ok());
    memory_.emplace(*std::move(memory));
    auto root = pci::PciRootBus::Create(pio_, mmio_);
    ASSERT_TRUE(root.ok());
    root_ = *std::move(root);
  }

  // Creates the transport, assigns BARs and plugs it in at 00:03.0.
  void Plug(bool with_registrar = true) {
    auto device = std::make_unique<FakeDevice>();
    device_ = device.get();
    auto transport = VirtioPciTransport::Create(std::move(device), *memory_, msi_,
                                                with_registrar ? &registrar_ : nullptr);
    ASSERT_TRUE(transport.ok()) << transport.status();
    transport_ = *std::move(transport);
    pci::BarAllocator allocator = pci::BarAllocator::ForX86();
    ASSERT_TRUE(transport_->AssignBars(allocator).ok());
    ASSERT_TRUE(root_->AddDevice(kDevice, 0, transport_).ok());
    bar0_ = transport_->bar_address(VirtioPciTransport::kConfigBar);
    msix_table_ = transport_->bar_address(VirtioPciTransport::kMsixBar);
  }

  uint32_t Config(uint32_t offset, size_t size) {
    std::array<uint8_t, 4> bytes{};
    root_->ReadConfig(0, kDevice, 0, offset, std::span<uint8_t>(bytes.data(), size));
    uint32_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= uint32_t{bytes[i]} << (8 * i);
    return value;
  }
  void SetConfig(uint32_t offset, uint32_t value, size_t size) {
    std::array<uint8_t, 4> bytes;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    root_->WriteConfig(0, kDevice, 0, offset, std::span<const uint8_t>(bytes.data(), size));
  }
  uint64_t Mmio(uint64_t address, size_t size) {
    std::array<uint8_t, 8> bytes{};
    mmio_.Read(address, std::span<uint8_t>(bytes.data(), size));
    uint64_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= uint64_t{bytes[i]} << (8 * i);
    return value;
  }
  void SetMmio(uint64_t address, uint64_t value, size_t size) {
    std::array<uint8_t, 8> bytes;
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    mmio_.Write(address, std::span<const uint8_t>(bytes.data(), size));
  }
  uint64_t Common(uint64_t field, size_t size) { return Mmio(bar0_ + field, size); }
  void SetCommon(uint64_t field, uint64_t value, size_t size) {
    SetMmio(bar0_ + field, value, size);
  }
  uint8_t Status() { return static_cast<uint8_t>(Common(kStatus, 1)); }
  void AddStatus(uint8_t bits) { SetCommon(kStatus, Status() | bits, 1); }

  // The capability list: (cfg_type -> capability offset) for the virtio ones, and MSI-X.
  std::vector<std::pair<uint8_t, uint32_t>> VirtioCapabilities() {
    std::vector<std::pair<uint8_t, uint32_t>> caps;
    uint32_t pointer = Config(pci::kCapabilitiesPointer, 1);
    for (int guard = 0; pointer != 0 && guard < 48; ++guard) {
      if (Config(pointer, 1) == pci::kCapabilityIdVendorSpecific) {
        caps.push_back({static_cast<uint8_t>(Config(pointer + 3, 1)), pointer});
      } else if (Config(pointer, 1) == pci::kCapabilityIdMsix) {
        msix_cap_ = pointer;
      }
      pointer = Config(pointer + 1, 1);
    }
    return caps;
  }
  uint32_t FindCapability(uint8_t cfg_type) {
    for (auto [type, offset] : VirtioCapabilities()) {
      if (type == cfg_type) return offset;
    }
    return 0;
  }

  // MSI-X on, every vector programmed (data = 0x40 + vector) and unmasked.
  void EnableMsix() {
    VirtioCapabilities();
    ASSERT_NE(msix_cap_, 0u);
    SetConfig(msix_cap_ + 2, pci::kMsixControlEnable | pci::kMsixControlFunctionMask, 2);
    for (uint32_t v = 0; v < 4; ++v) {
      SetMmio(msix_table_ + 16 * v, 0xfee00000, 4);
      SetMmio(msix_table_ + 16 * v + 4, 0, 4);
      SetMmio(msix_table_ + 16 * v + 8, 0x40 + v, 4);
      SetMmio(msix_table_ + 16 * v + 12, 0, 4);
    }
    SetConfig(msix_cap_ + 2, pci::kMsixControlEnable, 2);
  }

  // §3.1.1 steps 1-6 (with feature words 0 and 1, as Linux writes them).
  void Negotiate(uint64_t features) {
    SetCommon(kStatus, 0, 1);
    ASSERT_EQ(Status(), 0);
    AddStatus(kAck);
    AddStatus(kDriver);
    for (uint32_t word = 0; word < 2; ++word) {
      SetCommon(kGfSelect, word, 4);
      SetCommon(kGf, static_cast<uint32_t>(features >> (32 * word)), 4);
    }
    AddStatus(kFeaturesOk);
  }
  uint64_t ReadDeviceFeatures() {
    uint64_t features = 0;
    for (uint32_t word = 0; word < 2; ++word) {
      SetCommon(kDfSelect, word, 4);
      features |= Common(kDf, 4) << (32 * word);
    }
    return features;
  }
  void SetUpQueue(uint16_t index, uint16_t size, uint16_t vector, uint64_t desc, uint64_t avail,
                  uint64_t used) {
    SetCommon(kQSelect, index, 2);
    SetCommon(kQSize, size, 2);
    SetCommon(kQMsix, vector, 2);
    SetCommon(kQDescLo, static_cast<uint32_t>(desc), 4);
    SetCommon(kQDescHi, static_cast<uint32_t>(desc >> 32), 4);
    SetCommon(kQAvailLo, static_cast<uint32_t>(avail), 4);
    SetCommon(kQAvailHi, static_cast<uint32_t>(avail >> 32), 4);
    SetCommon(kQUsedLo, static_cast<uint32_t>(used), 4);
    SetCommon(kQUsedHi, static_cast<uint32_t>(used >> 32), 4);
    SetCommon(kQEnable, 1, 2);
  }
  // Everything up to DRIVER_OK, queues 0 and 2 enabled (1 left off).
  void BringUp(uint64_t features = kFeatureVersion1 | kFeatureEventIdx | kDeviceFeatureA) {
    EnableMsix();
    Negotiate(features);
    ASSERT_EQ(Status(), kAck | kDriver | kFeaturesOk);
    SetCommon(kMsixConfig, 0, 2);
    SetUpQueue(0, 64, 1, 0x10000, 0x11000, 0x12000);
    SetUpQueue(2, 256, 3, 0x20000, 0x21000, 0x22000);
    AddStatus(kDriverOk);
  }
  static uint64_t ReadEventFd(int fd) {
    uint64_t count = 0;
    if (read(fd, &count, sizeof(count)) != sizeof(count)) return 0;
    return count;
  }

  vmm::Bus pio_{"pio"};
  vmm::Bus mmio_{"mmio"};
  std::optional<vmm::GuestMemory> memory_;
  FakeMsiController msi_;
  FakeRegistrar registrar_;
  std::shared_ptr<pci::PciRootBus> root_;
  std::shared_ptr<VirtioPciTransport> transport_;
  FakeDevice* device_ = nullptr;
  uint64_t bar0_ = 0;
  uint64_t msix_table_ = 0;
  uint32_t msix_cap_ = 0;
};

TEST_F(VirtioPciTest, IdentityBarsAndCapabilities) {
  Plug();
  EXPECT_EQ(Config(pci::kVendorId, 2), 0x1af4u);
  EXPECT_EQ(Config(pci::kDeviceId, 2), 0x1048u);  // 0x1040 + SCSI host
  EXPECT_EQ(Config(pci::kRevisionId, 1), 1u);
  EXPECT_EQ(Config(pci::kRevisionId, 4) >> 8, 0x010000u);
  EXPECT_EQ(Config(pci::kSubsystemVendorId, 2), 0x1af4u);
  EXPECT_GE(Config(pci::kSubsystemId, 2), 0x40u);
  EXPECT_EQ(Config(pci::kInterruptPin, 1), 0u);
  // BAR 0: 64-bit, not prefetchable; BAR 2: 32-bit.
  EXPECT_EQ(Config(pci::kBar0, 4) & 0xf, 0x4u);
  EXPECT_EQ(Config(pci::kBar0 + 8, 4) & 0xf, 0x0u);
  EXPECT_GE(bar0_, 0xc0000000u);
  EXPECT_LT(bar0_, 0x100000000u);
  EXPECT_EQ(transport_->bar_mapping(0), bar0_);
  EXPECT_EQ(transport_->bar_mapping(2), msix_table_);

  auto caps = VirtioCapabilities();
  std::vector<uint8_t> types;
  for (auto [type, offset] : caps) types.push_back(type);
  EXPECT_EQ(types, (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  ASSERT_NE(msix_cap_, 0u);
  EXPECT_EQ(Config(msix_cap_ + 2, 2) & 0x7ff, 3u);  // 4 vectors: 3 queues + config
  EXPECT_EQ(Config(msix_cap_ + 4, 4), 2u);          // table in BAR 2 at 0
  EXPECT_EQ(Config(msix_cap_ + 8, 4), 0x1002u);     // PBA in BAR 2 at 0x1000
  struct Expected {
    uint8_t type;
    uint32_t cap_len, offset, length;
  };
  for (const Expected& e :
       {Expected{1, 16, 0x0000, 0x3c}, Expected{2, 20, 0x3000, 12}, Expected{3, 16, 0x1000, 4},
        Expected{4, 16, 0x2000, 12}, Expected{5, 20, 0, 0}}) {
    const uint32_t cap = FindCapability(e.type);
    ASSERT_NE(cap, 0u) << int{e.type};
    EXPECT_EQ(Config(cap + 2, 1), e.cap_len) << int{e.type};
    EXPECT_EQ(Config(cap + 4, 1), 0u) << int{e.type};  // bar
    EXPECT_EQ(Config(cap + 8, 4), e.offset) << int{e.type};
    EXPECT_EQ(Config(cap + 12, 4), e.length) << int{e.type};
  }
  EXPECT_EQ(Config(FindCapability(2) + 16, 4), 4u);  // notify_off_multiplier
  // num_queues and the maximum sizes.
  EXPECT_EQ(Common(kNumQ, 2), 3u);
  SetCommon(kQSelect, 2, 2);
  EXPECT_EQ(Common(kQSize, 2), 256u);
  EXPECT_EQ(Common(kQNotifyOff, 2), 2u);
  EXPECT_EQ(Common(kQMsix, 2), kNoVector);
  EXPECT_EQ(Common(kMsixConfig, 2), kNoVector);
}

TEST_F(VirtioPciTest, FullInitializationActivatesWithTheQueueConfiguration) {
  Plug();
  EnableMsix();
  // §3.1.1: reset, ACKNOWLEDGE, DRIVER.
  SetCommon(kStatus, 0, 1);
  EXPECT_EQ(Status(), 0);
  AddStatus(kAck);
  AddStatus(kDriver);
  EXPECT_EQ(Status(), kAck | kDriver);
  // Offered: the device's own bits, VERSION_1, EVENT_IDX, INDIRECT_DESC; not ACCESS_PLATFORM.
  const uint64_t offered = ReadDeviceFeatures();
  EXPECT_EQ(offered, kDeviceFeatureA | kDeviceFeatureB | kFeatureVersion1 | kFeatureEventIdx |
                         kFeatureIndirectDesc);
  SetCommon(kDfSelect, 2, 4);
  EXPECT_EQ(Common(kDf, 4), 0u);  // words past 1 are empty
  const uint64_t accepted =
      kFeatureVersion1 | kFeatureEventIdx | kFeatureIndirectDesc | kDeviceFeatureB;
  for (uint32_t word = 0; word < 2; ++word) {
    SetCommon(kGfSelect, word, 4);
    SetCommon(kGf, static_cast<uint32_t>(accepted >> (32 * word)), 4);
    EXPECT_EQ(Common(kGf, 4), static_cast<uint32_t>(accepted >> (32 * word)));
  }
  AddStatus(kFeaturesOk);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk);
  EXPECT_EQ(transport_->driver_features(), accepted);
  // Features are fixed now.
  SetCommon(kGfSelect, 0, 4);
  SetCommon(kGf, 0, 4);
  EXPECT_EQ(transport_->driver_features(), accepted);

  // Vectors: config change on 0, queue i on i + 1.
  SetCommon(kMsixConfig, 0, 2);
  EXPECT_EQ(Common(kMsixConfig, 2), 0u);
  SetUpQueue(0, 64, 1, 0x10000, 0x11000, 0x12000);
  SetUpQueue(1, 128, 2, 0x40000, 0x30000, 0x31000);
  SetCommon(kQSelect, 1, 2);
  EXPECT_EQ(Common(kQEnable, 2), 1u);
  EXPECT_EQ(Common(kQDescLo, 8), 0x40000u);
  EXPECT_EQ(Common(kQMsix, 2), 2u);
  // 64-bit fields take 32-bit halves or one 64-bit write (queue 2 stays disabled).
  SetCommon(kQSelect, 2, 2);
  SetCommon(kQDescHi, 0x12345678, 4);
  SetCommon(kQDescLo, 0x9abcdef0, 4);
  EXPECT_EQ(Common(kQDescLo, 8), 0x123456789abcdef0ull);
  EXPECT_EQ(Common(kQDescHi, 4), 0x12345678u);
  SetCommon(kQUsedLo, 0x1122334455667788ull, 8);
  EXPECT_EQ(Common(kQUsedLo, 8), 0x1122334455667788ull);
  EXPECT_EQ(device_->activations, 0);
  AddStatus(kDriverOk);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk | kDriverOk);
  ASSERT_EQ(device_->activations, 1);
  ASSERT_TRUE(device_->activation.has_value());
  const VirtioActivation& a = *device_->activation;
  EXPECT_EQ(a.memory, &*memory_);
  EXPECT_EQ(a.features, accepted);
  EXPECT_NE(a.events, nullptr);
  ASSERT_EQ(a.queues.size(), 2u);  // queue 2 was never enabled
  EXPECT_EQ(a.queues[0].index, 0);
  EXPECT_EQ(a.queues[0].config.size, 64);
  EXPECT_EQ(a.queues[0].config.descriptor_table.value(), 0x10000u);
  EXPECT_EQ(a.queues[0].config.available_ring.value(), 0x11000u);
  EXPECT_EQ(a.queues[0].config.used_ring.value(), 0x12000u);
  EXPECT_TRUE(a.queues[0].config.event_idx);
  EXPECT_TRUE(a.queues[0].config.indirect);
  EXPECT_EQ(a.queues[0].notify_fd, transport_->notify_fd(0));
  EXPECT_EQ(a.queues[1].index, 1);
  EXPECT_EQ(a.queues[1].config.size, 128);
  EXPECT_EQ(a.queues[1].config.descriptor_table.value(), 0x40000u);
  EXPECT_EQ(a.queues[1].notify_fd, transport_->notify_fd(1));
  EXPECT_TRUE(transport_->activated());

  // The queue interrupts reach their MSI-X vectors.
  a.queues[1].interrupt->Signal();
  EXPECT_EQ(msi_.vector(2)->triggers(), 1);
  EXPECT_EQ(msi_.vector(2)->messages().back().data, 0x42u);
  // A masked vector holds the interrupt until unmasked.
  SetMmio(msix_table_ + 16 * 1 + 12, 1, 4);
  a.queues[0].interrupt->Signal();
  EXPECT_EQ(msi_.vector(1)->triggers(), 0);
  EXPECT_EQ(Mmio(msix_table_ + 0x1000, 8), 0b10u);
  SetMmio(msix_table_ + 16 * 1 + 12, 0, 4);
  EXPECT_EQ(msi_.vector(1)->triggers(), 1);
  // ISR stays clear for queue interrupts with MSI-X on.
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 0u);
}

TEST_F(VirtioPciTest, FeaturesOkRefusedForBadFeatureSets) {
  Plug();
  // Not offered.
  Negotiate(kFeatureVersion1 | (1ull << 5));
  EXPECT_EQ(Status() & kFeaturesOk, 0);
  // VERSION_1 missing.
  Negotiate(kDeviceFeatureA);
  EXPECT_EQ(Status() & kFeaturesOk, 0);
  // A reserved bit the device asked for but the transport does not offer.
  Negotiate(kFeatureVersion1 | kFeatureAccessPlatform);
  EXPECT_EQ(Status() & kFeaturesOk, 0);
  // Refusal is not NEEDS_RESET; the driver can give up (FAILED) or retry after a reset.
  EXPECT_EQ(Status() & kNeedsReset, 0);
  AddStatus(VirtioPciTransport::kStatusFailed);
  EXPECT_EQ(Status(), kAck | kDriver | VirtioPciTransport::kStatusFailed);
  Negotiate(kFeatureVersion1 | kDeviceFeatureA);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk);
  // DRIVER_OK right after FEATURES_OK with no queue is fine.
  AddStatus(kDriverOk);
  EXPECT_EQ(device_->activations, 1);
  EXPECT_TRUE(device_->activation->queues.empty());
}

TEST_F(VirtioPciTest, BadQueueSetupsSetNeedsReset) {
  Plug();
  struct Case {
    uint16_t size;
    uint64_t desc;
  };
  for (const Case& c : {Case{512, 0x10000},                   // above the maximum of 128
                        Case{96, 0x10000},                    // not a power of two
                        Case{0, 0x10000}, Case{64, 0x10008},  // misaligned descriptor table
                        Case{64, 0xfffff000},                 // outside guest memory (16 MiB)
                        Case{64, 0xfffffffffffff000}}) {
    EnableMsix();
    Negotiate(kFeatureVersion1);
    ASSERT_EQ(Status(), kAck | kDriver | kFeaturesOk);
    SetUpQueue(0, c.size, 1, c.desc, 0x11000, 0x12000);
    EXPECT_EQ(Status() & kNeedsReset, kNeedsReset) << c.size << " " << c.desc;
    EXPECT_EQ(Common(kQEnable, 2), 0u);
    // Before DRIVER_OK NEEDS_RESET sends no interrupt.
    EXPECT_EQ(msi_.vector(0)->triggers(), 0);
  }
  // A reset clears it.
  SetCommon(kStatus, 0, 1);
  EXPECT_EQ(Status(), 0);
}

TEST_F(VirtioPciTest, ProtocolViolationsSetNeedsReset) {
  Plug();
  // Enabling a queue before FEATURES_OK.
  SetCommon(kStatus, 0, 1);
  AddStatus(kAck | kDriver);
  SetUpQueue(0, 64, kNoVector, 0x10000, 0x11000, 0x12000);
  EXPECT_NE(Status() & kNeedsReset, 0);
  EXPECT_EQ(Common(kQEnable, 2), 0u);
  // DRIVER_OK without FEATURES_OK: not kept.
  SetCommon(kStatus, 0, 1);
  AddStatus(kAck | kDriver | kDriverOk);
  EXPECT_EQ(Status(), kAck | kDriver | kNeedsReset);
  EXPECT_EQ(device_->activations, 0);
  // Clearing a status bit other than by reset.
  Negotiate(kFeatureVersion1);
  SetCommon(kStatus, kAck, 1);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk | kNeedsReset);
  // Enabling a queue after DRIVER_OK.
  Negotiate(kFeatureVersion1);
  SetUpQueue(0, 64, kNoVector, 0x10000, 0x11000, 0x12000);
  AddStatus(kDriverOk);
  EXPECT_EQ(Status() & kNeedsReset, 0);
  SetUpQueue(1, 64, kNoVector, 0x20000, 0x21000, 0x22000);
  EXPECT_NE(Status() & kNeedsReset, 0);
  EXPECT_EQ(device_->activation->queues.size(), 1u);
}

TEST_F(VirtioPciTest, ResetMidOperationClearsEverything) {
  Plug();
  BringUp();
  ASSERT_EQ(device_->activations, 1);
  const int resets_before = device_->resets;
  // A notification pending from before the reset is dropped.
  SetMmio(bar0_ + VirtioPciTransport::kNotifyOffset, 0, 2);
  SetCommon(kStatus, 0, 1);
  EXPECT_EQ(device_->resets, resets_before + 1);
  EXPECT_FALSE(device_->activation.has_value());
  EXPECT_FALSE(transport_->activated());
  EXPECT_EQ(Status(), 0);
  EXPECT_EQ(transport_->driver_features(), 0u);
  EXPECT_EQ(Common(kMsixConfig, 2), kNoVector);
  EXPECT_EQ(Common(kQSelect, 2), 0u);
  for (uint16_t q = 0; q < 3; ++q) {
    SetCommon(kQSelect, q, 2);
    EXPECT_EQ(Common(kQEnable, 2), 0u);
    EXPECT_EQ(Common(kQMsix, 2), kNoVector);
    EXPECT_EQ(Common(kQDescLo, 8), 0u);
    EXPECT_EQ(Common(kQAvailLo, 8), 0u);
    EXPECT_EQ(Common(kQUsedLo, 8), 0u);
    EXPECT_EQ(Common(kQSize, 2), device_->max_sizes[q]);
    EXPECT_EQ(ReadEventFd(transport_->notify_fd(q)), 0u);
  }
  // And the device comes up again.
  BringUp();
  EXPECT_EQ(device_->activations, 2);
  EXPECT_EQ(device_->activation->queues.size(), 2u);
}

TEST_F(VirtioPciTest, FailedActivationSetsNeedsResetWithAConfigInterrupt) {
  Plug();
  device_->activate_status = absl::InternalError("no iothread");
  const int resets_before = device_->resets;
  BringUp();
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk | kDriverOk | kNeedsReset);
  EXPECT_FALSE(transport_->activated());
  // One reset starts the initialization, one cleans up after the failed activation.
  EXPECT_EQ(device_->resets, resets_before + 2);
  EXPECT_EQ(msi_.vector(0)->triggers(), 1);
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 2u);
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 0u);  // read clears
}

TEST_F(VirtioPciTest, NotifyWritesSignalTheQueuesEventfdWithoutIoeventfd) {
  Plug(/*with_registrar=*/false);
  BringUp();
  const uint64_t doorbell = bar0_ + VirtioPciTransport::kNotifyOffset;
  SetCommon(kQSelect, 2, 2);
  const uint64_t off = Common(kQNotifyOff, 2);
  SetMmio(doorbell + off * VirtioPciTransport::kNotifyOffMultiplier, 2, 2);
  SetMmio(doorbell + off * VirtioPciTransport::kNotifyOffMultiplier, 2, 2);
  EXPECT_EQ(ReadEventFd(transport_->notify_fd(2)), 2u);
  EXPECT_EQ(ReadEventFd(transport_->notify_fd(0)), 0u);
  EXPECT_EQ(ReadEventFd(transport_->notify_fd(1)), 0u);
  SetMmio(doorbell, 0, 4);  // other widths are served too
  EXPECT_EQ(ReadEventFd(transport_->notify_fd(0)), 1u);
  // Past the last queue's slot: nothing.
  SetMmio(doorbell + 3 * VirtioPciTransport::kNotifyOffMultiplier, 3, 2);
  SetMmio(doorbell + 0x800, 3, 2);
  for (uint16_t q = 0; q < 3; ++q) EXPECT_EQ(ReadEventFd(transport_->notify_fd(q)), 0u);
  EXPECT_EQ(Mmio(doorbell, 2), 0u);  // doorbells read as zero
}

TEST_F(VirtioPciTest, DoorbellsAreIoeventfdsThatFollowTheBar) {
  Plug();
  ASSERT_EQ(registrar_.registered.size(), 3u);
  for (uint16_t q = 0; q < 3; ++q) {
    EXPECT_EQ(registrar_.registered[q].fd, transport_->notify_fd(q));
    EXPECT_EQ(registrar_.registered[q].spec.address,
              bar0_ + VirtioPciTransport::kNotifyOffset + 4 * q);
    EXPECT_EQ(registrar_.registered[q].spec.length, 2u);
    EXPECT_FALSE(registrar_.registered[q].spec.pio);
    EXPECT_FALSE(registrar_.registered[q].spec.datamatch.has_value());
    EXPECT_TRUE(transport_->notify_registered(q));
  }
  // Memory decoding off: unregistered. Moved and back on: registered at the new place.
  SetConfig(pci::kCommand, pci::kCommandBusMaster, 2);
  EXPECT_TRUE(registrar_.registered.empty());
  SetConfig(pci::kBar0, 0xd0000000, 4);
  SetConfig(pci::kBar0 + 4, 0, 4);
  SetConfig(pci::kCommand, pci::kCommandMemorySpace | pci::kCommandBusMaster, 2);
  ASSERT_EQ(registrar_.registered.size(), 3u);
  EXPECT_EQ(registrar_.registered[1].spec.address, 0xd0000000u + 0x3000 + 4);
  // Moving while enabled moves the registrations too.
  SetConfig(pci::kBar0, 0xe0000000, 4);
  ASSERT_EQ(registrar_.registered.size(), 3u);
  EXPECT_EQ(registrar_.registered[0].spec.address, 0xe0003000u);
  // Shutdown unregisters and resets the device.
  const int resets = device_->resets;
  root_->Shutdown();
  EXPECT_TRUE(registrar_.registered.empty());
  EXPECT_EQ(device_->resets, resets + 1);
}

TEST_F(VirtioPciTest, FailedIoeventfdRegistrationFallsBackToMmio) {
  registrar_.fail = true;
  Plug();
  EXPECT_FALSE(transport_->notify_registered(0));
  SetMmio(bar0_ + VirtioPciTransport::kNotifyOffset + 4, 1, 2);
  EXPECT_EQ(ReadEventFd(transport_->notify_fd(1)), 1u);
}

TEST_F(VirtioPciTest, PciCfgWindowAccessesTheBar) {
  Plug();
  const uint32_t cap = FindCapability(5);
  ASSERT_NE(cap, 0u);
  // Read num_queues (2 bytes at 0x12 of BAR 0).
  SetConfig(cap + 4, 0, 1);
  SetConfig(cap + 8, kNumQ, 4);
  SetConfig(cap + 12, 2, 4);
  EXPECT_EQ(Config(cap + 8, 4), kNumQ);
  EXPECT_EQ(Config(cap + 16, 4), 3u);
  // Write device_feature_select = 1 through the window, then read device_feature.
  SetConfig(cap + 8, kDfSelect, 4);
  SetConfig(cap + 12, 4, 4);
  SetConfig(cap + 16, 1, 4);
  EXPECT_EQ(Common(kDfSelect, 4), 1u);
  SetConfig(cap + 8, kDf, 4);
  EXPECT_EQ(Config(cap + 16, 4), 1u);  // VERSION_1 is bit 32
  // Device configuration bytes (1-byte window).
  SetConfig(cap + 8, VirtioPciTransport::kDeviceConfigOffset + 5, 4);
  SetConfig(cap + 12, 1, 4);
  EXPECT_EQ(Config(cap + 16, 1), 6u);
  // Status through the window drives the state machine: reset and ACKNOWLEDGE.
  SetConfig(cap + 8, kStatus, 4);
  SetConfig(cap + 16, kAck, 1);
  EXPECT_EQ(Status(), kAck);
  // The MSI-X table in BAR 2.
  SetConfig(cap + 4, 2, 1);
  SetConfig(cap + 8, 16 + 8, 4);
  SetConfig(cap + 12, 4, 4);
  SetConfig(cap + 16, 0x1234, 4);
  EXPECT_EQ(Mmio(msix_table_ + 24, 4), 0x1234u);
  // Invalid windows do nothing: length 3, misaligned, BAR 5 (absent), offset past the BAR.
  SetConfig(cap + 12, 3, 4);
  SetConfig(cap + 16, 0xdead, 4);
  EXPECT_EQ(Config(cap + 16, 4), 0xdeadu);  // just the register
  SetConfig(cap + 12, 4, 4);
  SetConfig(cap + 8, 2, 4);
  SetConfig(cap + 16, 0xbeef, 4);
  SetConfig(cap + 4, 5, 1);
  SetConfig(cap + 8, 0, 4);
  SetConfig(cap + 16, 0xbeef, 4);
  EXPECT_EQ(Config(cap + 16, 4), 0u);  // absent BAR reads zero
  SetConfig(cap + 4, 0, 1);
  SetConfig(cap + 8, 0xfffffffc, 4);
  EXPECT_EQ(Config(cap + 16, 4), 0u);
  SetConfig(cap + 16, 0xbeef, 4);
  EXPECT_EQ(Mmio(msix_table_ + 24, 4), 0x1234u);
  // The window's own fields stay readable and writable.
  SetConfig(cap + 4, 0xff, 1);
  EXPECT_EQ(Config(cap + 4, 1), 0xffu);
  EXPECT_EQ(Config(cap + 16, 4), 0xbeefu);  // bar 0xff: no access
}

TEST_F(VirtioPciTest, DeviceEventsNeedsResetAndConfigChange) {
  Plug();
  BringUp();
  VirtioDeviceEvents* events = device_->activation->events;
  ASSERT_NE(events, nullptr);
  const uint64_t generation = Common(kGeneration, 1);
  events->ConfigChanged();
  EXPECT_EQ(Common(kGeneration, 1), (generation + 1) & 0xff);
  EXPECT_EQ(msi_.vector(0)->triggers(), 1);
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 2u);
  events->NeedsReset();
  EXPECT_NE(Status() & kNeedsReset, 0);
  EXPECT_EQ(msi_.vector(0)->triggers(), 2);
  events->NeedsReset();  // once is enough
  EXPECT_EQ(msi_.vector(0)->triggers(), 2);
  // Writing the status back with NEEDS_RESET does not clear it or disturb anything.
  SetCommon(kStatus, Status(), 1);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk | kDriverOk | kNeedsReset);
  // With the config vector unmapped, no MSI-X message but the ISR bit.
  SetCommon(kStatus, 0, 1);
  BringUp();
  SetCommon(kMsixConfig, kNoVector, 2);
  device_->activation->events->ConfigChanged();
  EXPECT_EQ(msi_.vector(0)->triggers(), 2);
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 2u);
}

TEST_F(VirtioPciTest, QueueInterruptsWithMsixDisabledSetTheIsr) {
  Plug();
  BringUp();
  VirtioInterrupt* interrupt = device_->activation->queues[0].interrupt;
  SetConfig(msix_cap_ + 2, 0, 2);  // MSI-X off
  interrupt->Signal();
  EXPECT_EQ(msi_.vector(1)->triggers(), 0);
  EXPECT_EQ(Mmio(bar0_ + VirtioPciTransport::kIsrOffset, 1), 1u);
  SetConfig(msix_cap_ + 2, pci::kMsixControlEnable, 2);
  EXPECT_EQ(msi_.vector(1)->triggers(), 1);  // the pending message
}

TEST_F(VirtioPciTest, DeviceConfigurationPassThrough) {
  Plug();
  const uint64_t cfg = bar0_ + VirtioPciTransport::kDeviceConfigOffset;
  EXPECT_EQ(Mmio(cfg, 4), 0x04030201u);
  EXPECT_EQ(Mmio(cfg + 8, 4), 0x0c0b0a09u);
  EXPECT_EQ(Mmio(cfg + 10, 4), 0x0c0bu);  // clipped at the end
  EXPECT_EQ(Mmio(cfg + 12, 4), 0u);
  EXPECT_EQ(Mmio(cfg + 0xffc, 4), 0u);
  SetMmio(cfg + 4, 0xa1a2a3a4, 4);
  EXPECT_EQ(device_->config[4], 0xa4);
  SetMmio(cfg + 10, 0xffffffff, 4);  // only bytes 10 and 11 land
  EXPECT_EQ(device_->config[11], 0xff);
  SetMmio(cfg + 12, 0xffffffff, 4);
}

TEST_F(VirtioPciTest, HostileCommonConfigurationAccesses) {
  Plug();
  EnableMsix();
  Negotiate(kFeatureVersion1);
  // A queue that does not exist: size reads 0, writes go nowhere.
  SetCommon(kQSelect, 100, 2);
  EXPECT_EQ(Common(kQSelect, 2), 100u);
  EXPECT_EQ(Common(kQSize, 2), 0u);
  EXPECT_EQ(Common(kQMsix, 2), kNoVector);
  SetCommon(kQSize, 64, 2);
  SetCommon(kQEnable, 1, 2);
  EXPECT_EQ(Common(kQEnable, 2), 0u);
  SetCommon(kQSelect, 0xffff, 2);
  SetCommon(kQDescLo, 0x1000, 4);
  // Vectors beyond the table read back NO_VECTOR (§4.1.5.1.2).
  SetCommon(kQSelect, 0, 2);
  SetCommon(kQMsix, 4, 2);
  EXPECT_EQ(Common(kQMsix, 2), kNoVector);
  SetCommon(kMsixConfig, 0x7fff, 2);
  EXPECT_EQ(Common(kMsixConfig, 2), kNoVector);
  // Wrong widths are ignored.
  SetCommon(kQSize, 32, 1);
  SetCommon(kQSize, 32, 4);
  EXPECT_EQ(Common(kQSize, 2), 128u);
  SetCommon(kStatus, kAck | kDriver | kFeaturesOk | kDriverOk, 2);
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk);
  SetCommon(kQMsix, 1, 4);
  EXPECT_EQ(Common(kQMsix, 2), kNoVector);
  // Read-only fields.
  SetCommon(kDf, 0xffffffff, 4);
  SetCommon(kNumQ, 9, 2);
  SetCommon(kGeneration, 9, 1);
  SetCommon(kQNotifyOff, 9, 2);
  SetCommon(kQReset, 1, 2);
  EXPECT_EQ(Common(kNumQ, 2), 3u);
  EXPECT_EQ(Common(kQNotifyOff, 2), 0u);
  EXPECT_EQ(Common(kQReset, 2), 0u);
  // Writing 0 to queue_enable is ignored, and an enabled queue's fields are fixed.
  SetUpQueue(0, 64, 1, 0x10000, 0x11000, 0x12000);
  ASSERT_EQ(Common(kQEnable, 2), 1u);
  SetCommon(kQEnable, 0, 2);
  SetCommon(kQSize, 16, 2);
  SetCommon(kQDescLo, 0x50000, 4);
  EXPECT_EQ(Common(kQEnable, 2), 1u);
  EXPECT_EQ(Common(kQSize, 2), 64u);
  EXPECT_EQ(Common(kQDescLo, 8), 0x10000u);
  EXPECT_EQ(Status() & kNeedsReset, 0);
  // Spray every offset of BAR 0 and BAR 2 with every width; nothing may crash.
  for (uint64_t offset = 0; offset < 0x4000; offset += 1) {
    for (size_t size : {1, 2, 4, 8}) {
      (void)Mmio(bar0_ + offset, size);
      // Status is exercised elsewhere; all-ones there would only set FAILED and friends.
      if (offset + size > kStatus && offset <= kStatus) continue;
      SetMmio(bar0_ + offset, 0xffffffffffffffffull, size);
    }
  }
  for (uint64_t offset = 0; offset < 0x2000; offset += 1) {
    for (size_t size : {1, 2, 4, 8}) {
      (void)Mmio(msix_table_ + offset, size);
      SetMmio(msix_table_ + offset, 0xffffffffffffffffull, size);
    }
  }
  // Still a working device after a reset.
  SetCommon(kStatus, 0, 1);
  EXPECT_EQ(Status(), 0);
  BringUp();
  EXPECT_EQ(Status(), kAck | kDriver | kFeaturesOk | kDriverOk);
}

TEST_F(VirtioPciTest, CreateValidatesTheDevice) {
  auto make = [&](std::vector<uint16_t> sizes) {
    auto device = std::make_unique<FakeDevice>();
    device->max_sizes = std::move(sizes);
    return VirtioPciTransport::Create(std::move(device), *memory_, msi_, nullptr).status();
  };
  EXPECT_TRUE(make({1, 32768}).ok());
  EXPECT_EQ(make({100}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(make({0}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(make(std::vector<uint16_t>(2048, 64)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(VirtioPciTransport::Create(nullptr, *memory_, msi_, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  FakeMsiController failing;
  failing.FailAfter(1);
  EXPECT_FALSE(
      VirtioPciTransport::Create(std::make_unique<FakeDevice>(), *memory_, failing, nullptr).ok());
}

TEST_F(VirtioPciTest, ManyQueuesGetABiggerBar) {
  auto device = std::make_unique<FakeDevice>();
  device->max_sizes = std::vector<uint16_t>(2047, 256);
  auto transport = VirtioPciTransport::Create(std::move(device), *memory_, msi_, nullptr);
  ASSERT_TRUE(transport.ok()) << transport.status();
  EXPECT_EQ((*transport)->num_queues(), 2047);
  auto bar0 = (*transport)->bar_spec(0);
  ASSERT_TRUE(bar0.has_value());
  EXPECT_GE(bar0->size, 0x3000u + 2047 * 4);
  auto bar2 = (*transport)->bar_spec(2);
  ASSERT_TRUE(bar2.has_value());
  EXPECT_GE(bar2->size, 2048u * 16 + 256);
}

// The real KVM pieces behind the interfaces: KVM_IOEVENTFD doorbells that follow the BAR, and MSI-X
// entries routed with KVM_SET_GSI_ROUTING. No vCPU runs; KVM itself refuses duplicate or unknown
// ioeventfds, so a registration that is off by anything shows up as an error.
TEST(VirtioPciKvmTest, DoorbellsAndVectorsOnKvm) {
  if (std::string why = tests::NoKvmReason(); !why.empty()) MICROVM_SKIP(why);
  auto kvm = vmm::Kvm::Open();
  ASSERT_TRUE(kvm.ok()) << kvm.status();
  auto vm = kvm->CreateVm();
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE(vm->CreateIrqchip().ok());
  vmm::KvmMsiController msi(*vm);
  vmm::KvmIoEventRegistrar registrar(*vm);
  auto memory = vmm::GuestMemory::CreateX86(16 << 20);
  ASSERT_TRUE(memory.ok());
  vmm::Bus pio("pio");
  vmm::Bus mmio("mmio");
  auto root = pci::PciRootBus::Create(pio, mmio);
  ASSERT_TRUE(root.ok());
  auto transport =
      VirtioPciTransport::Create(std::make_unique<FakeDevice>(), *memory, msi, &registrar);
  ASSERT_TRUE(transport.ok()) << transport.status();
  pci::BarAllocator allocator = pci::BarAllocator::ForX86();
  ASSERT_TRUE((*transport)->AssignBars(allocator).ok());
  ASSERT_TRUE((*root)->AddDevice(1, 0, *transport).ok());
  const uint64_t bar0 = (*transport)->bar_address(0);
  for (uint16_t q = 0; q < 3; ++q) EXPECT_TRUE((*transport)->notify_registered(q)) << q;
  // KVM has queue 1's doorbell: the same registration again is refused.
  const vmm::IoEventRegistrar::Spec doorbell{.address = bar0 + 0x3004, .length = 2};
  EXPECT_FALSE(registrar.Register((*transport)->notify_fd(1), doorbell).ok());

  auto config_write = [&](uint32_t offset, uint32_t value, size_t size) {
    std::array<uint8_t, 4> bytes;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    (*root)->WriteConfig(0, 1, 0, offset, std::span<const uint8_t>(bytes.data(), size));
  };
  // Move BAR 0 the way firmware would (decode off, new address, decode on).
  config_write(pci::kCommand, 0, 2);
  for (uint16_t q = 0; q < 3; ++q) EXPECT_FALSE((*transport)->notify_registered(q)) << q;
  EXPECT_TRUE(registrar.Register((*transport)->notify_fd(1), doorbell).ok());  // free again
  EXPECT_TRUE(registrar.Unregister((*transport)->notify_fd(1), doorbell).ok());
  config_write(pci::kBar0, 0xd0000000, 4);
  config_write(pci::kCommand, pci::kCommandMemorySpace, 2);
  for (uint16_t q = 0; q < 3; ++q) EXPECT_TRUE((*transport)->notify_registered(q)) << q;
  EXPECT_FALSE(
      registrar.Register((*transport)->notify_fd(2), {.address = 0xd0003008, .length = 2}).ok());

  // MSI-X: enable, program and unmask vector 1 (a KVM_SET_GSI_ROUTING), fire it.
  auto* msix = (*transport)->msix();
  ASSERT_NE(msix, nullptr);
  uint32_t cap = 0;
  for (uint32_t p = (*transport)->ReadConfigDword(pci::kCapabilitiesPointer) & 0xff; p != 0;
       p = ((*transport)->ReadConfigDword(p) >> 8) & 0xff) {
    if (((*transport)->ReadConfigDword(p) & 0xff) == pci::kCapabilityIdMsix) cap = p;
  }
  ASSERT_NE(cap, 0u);
  config_write(cap + 2, pci::kMsixControlEnable, 2);
  const uint64_t table = (*transport)->bar_address(2);
  auto mmio_write = [&](uint64_t address, uint32_t value) {
    std::array<uint8_t, 4> bytes;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    mmio.Write(address, bytes);
  };
  mmio_write(table + 16, 0xfee00000);
  mmio_write(table + 24, 0x41);
  mmio_write(table + 28, 0);
  EXPECT_FALSE(msix->entry(1).masked);
  msix->Trigger(1);
  (*root)->Shutdown();
  for (uint16_t q = 0; q < 3; ++q) EXPECT_FALSE((*transport)->notify_registered(q)) << q;
}

}  // namespace
}  // namespace devices::virtio

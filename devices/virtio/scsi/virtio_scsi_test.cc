#include "devices/virtio/scsi/virtio_scsi.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "block/drive.h"
#include "block/memory_backend.h"
#include "block/raw/raw_file_backend.h"
#include "devices/scsi/disk.h"
#include "devices/virtio/scsi/wire.h"
#include "devices/virtio/split_queue_test_util.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/scoped_fd.h"

namespace devices::virtio::scsi {
namespace {

using ::devices::virtio::testing::Buffer;
using ::devices::virtio::testing::DriverQueue;
using ::devices::virtio::testing::GuestAllocator;
using ::devices::virtio::testing::MakeGuestMemory;
using ::devices::virtio::testing::UsedElement;
using vmm::GuestAddress;

class CountingInterrupt : public VirtioInterrupt {
 public:
  void Signal() override { ++count; }
  std::atomic<int> count{0};
};

class RecordingEvents : public VirtioDeviceEvents {
 public:
  void ConfigChanged() override { ++config_changes; }
  void NeedsReset() override { ++needs_reset; }
  std::atomic<int> config_changes{0};
  std::atomic<int> needs_reset{0};
};

constexpr uint32_t kSenseSize = kDefaultSenseSize;
constexpr uint32_t kCdbSize = kDefaultCdbSize;
constexpr uint16_t kQueueSize = 64;

// A guest with a virtio-scsi driver's rings: control, event and `request_queues` request queues.
class VirtioScsiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    memory_.emplace(MakeGuestMemory({{0, 16 << 20}}));
    block::MemoryBackendOptions backend_options;
    backend_options.size_bytes = 8 << 20;
    backend_options.native_fua = true;
    backend_ = std::make_shared<block::MemoryBackend>(backend_options);
    block::DriveOptions drive_options;
    drive_options.cache_mode = block::CacheMode::kNone;
    drive_options.name = "disk0";
    auto drive = block::Drive::CreateFixed(drive_options, backend_);
    ASSERT_TRUE(drive.ok());
    auto disk = devices::scsi::Disk::Create(std::shared_ptr<block::Drive>(*std::move(drive)));
    ASSERT_TRUE(disk.ok()) << disk.status();
    target_ = std::make_shared<devices::scsi::Target>();
    ASSERT_TRUE(target_->AddLogicalUnit(0, *disk).ok());
  }

  void StartDevice(uint32_t request_queues, uint32_t iothreads, uint64_t features = 0) {
    VirtioScsiOptions options;
    options.num_request_queues = request_queues;
    auto threads = devices::StartIoThreads("scsi-io", iothreads, {});
    ASSERT_TRUE(threads.ok()) << threads.status();
    options.iothreads = *std::move(threads);
    options.queue_size = kQueueSize;
    auto device = VirtioScsi::Create(options, {{0, target_}});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    GuestAllocator rings(GuestAddress(0x10000), GuestAddress(0x100000));
    VirtioActivation activation;
    activation.memory = &*memory_;
    activation.events = &events_;
    activation.features = features;
    const uint16_t total = static_cast<uint16_t>(2 + request_queues);
    interrupts_ = std::vector<CountingInterrupt>(total);
    for (uint16_t index = 0; index < total; ++index) {
      const GuestAddress base = rings.Allocate(DriverQueue::LayoutBytes(kQueueSize), 4096);
      const QueueConfig config = DriverQueue::Layout(kQueueSize, base, /*event_idx=*/true);
      drivers_.push_back(std::make_unique<DriverQueue>(*memory_, config));
      notify_fds_.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      VirtioQueue queue;
      queue.index = index;
      queue.config = config;
      queue.notify_fd = notify_fds_.back().get();
      queue.interrupt = &interrupts_[index];
      activation.queues.push_back(queue);
    }
    ASSERT_TRUE(device_->Activate(activation).ok());
  }

  void TearDown() override {
    if (device_) device_->Reset();
  }

  struct Command {
    GuestAddress request;
    GuestAddress response;
    GuestAddress data;
    uint16_t head = 0;
  };

  // Builds a request (header + CDB [+ data-out]) and response (+ data-in) chain on `queue`.
  Command Submit(uint16_t queue, std::array<uint8_t, 8> lun, std::span<const uint8_t> cdb,
                 uint32_t data_in = 0, std::span<const uint8_t> data_out = {},
                 uint32_t response_bytes = sizeof(CommandResponse) + kSenseSize,
                 uint32_t request_bytes = sizeof(CommandHeader) + kCdbSize) {
    Command command;
    command.request = allocator_.Allocate(request_bytes + data_out.size());
    std::vector<uint8_t> request(request_bytes, 0);
    std::memcpy(request.data(), lun.data(), std::min<size_t>(8, request.size()));
    if (request.size() >= sizeof(CommandHeader)) {
      std::memcpy(request.data() + sizeof(CommandHeader), cdb.data(),
                  std::min<size_t>(cdb.size(), request.size() - sizeof(CommandHeader)));
    }
    EXPECT_TRUE(memory_->Write(command.request, request).ok());
    std::vector<Buffer> chain = {{command.request, request_bytes, false}};
    if (!data_out.empty()) {
      const GuestAddress out = command.request + request_bytes;
      EXPECT_TRUE(memory_->Write(out, data_out).ok());
      chain.push_back({out, static_cast<uint32_t>(data_out.size()), false});
    }
    command.response = allocator_.Allocate(response_bytes);
    chain.push_back({command.response, response_bytes, true});
    if (data_in > 0) {
      command.data = allocator_.Allocate(data_in);
      chain.push_back({command.data, data_in, true});
    }
    auto head = drivers_[queue]->AddChain(chain);
    EXPECT_TRUE(head.ok());
    command.head = *head;  // AddChain() exposed it
    const uint64_t one = 1;
    EXPECT_EQ(write(notify_fds_[queue].get(), &one, sizeof(one)), 8);
    return command;
  }

  // Waits for the next used element on `queue`.
  std::optional<UsedElement> WaitUsed(uint16_t queue) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (absl::Now() < deadline) {
      if (auto used = drivers_[queue]->CollectUsed()) return used;
      absl::SleepFor(absl::Microseconds(100));
    }
    return std::nullopt;
  }

  // Waits until queue `queue`'s interrupt was signalled: the device signals after it publishes the
  // used entry, so a test that saw the entry may look a moment before the signal.
  bool WaitInterrupt(uint16_t queue) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (interrupts_[queue].count.load() == 0) {
      if (absl::Now() >= deadline) return false;
      absl::SleepFor(absl::Microseconds(100));
    }
    return true;
  }

  // Sends LOGICAL UNIT RESET for `lun` on the control queue; the TMF response byte (0 if the
  // device never answered).
  uint8_t LogicalUnitReset(const std::array<uint8_t, 8>& lun) {
    TmfRequest tmf{};
    tmf.type = kControlTmf;
    tmf.subtype = kTmfLogicalUnitReset;
    std::memcpy(tmf.lun, lun.data(), 8);
    const GuestAddress request = allocator_.Allocate(sizeof(tmf));
    const GuestAddress response = allocator_.Allocate(1);
    if (!memory_->WriteObject(request, tmf).ok() ||
        !memory_->WriteObject<uint8_t>(response, 0xff).ok()) {
      return 0;
    }
    const std::vector<Buffer> chain = {{request, sizeof(tmf), false}, {response, 1, true}};
    if (!drivers_[0]->AddChain(chain).ok()) return 0;
    const uint64_t one = 1;
    if (write(notify_fds_[0].get(), &one, sizeof(one)) != 8 || !WaitUsed(0).has_value()) return 0;
    return *memory_->ReadObject<uint8_t>(response);
  }

  CommandResponse ResponseOf(const Command& command) {
    return *memory_->ReadObject<CommandResponse>(command.response);
  }
  std::array<uint8_t, 18> SenseOf(const Command& command) {
    return *memory_->ReadObject<std::array<uint8_t, 18>>(command.response +
                                                         sizeof(CommandResponse));
  }

  static constexpr std::array<uint8_t, 8> kLun0 = {1, 0, 0x40, 0, 0, 0, 0, 0};

  // A disk over its own memory backend, for hot-plug.
  std::shared_ptr<devices::scsi::LogicalUnit> MakeDisk(const std::string& name,
                                                       std::weak_ptr<block::Drive>* drive_out) {
    block::MemoryBackendOptions backend_options;
    backend_options.size_bytes = 1 << 20;
    block::DriveOptions drive_options;
    drive_options.name = name;
    auto drive = block::Drive::CreateFixed(drive_options,
                                           std::make_shared<block::MemoryBackend>(backend_options));
    EXPECT_TRUE(drive.ok());
    std::shared_ptr<block::Drive> shared(*std::move(drive));
    if (drive_out != nullptr) *drive_out = shared;
    auto disk = devices::scsi::Disk::Create(shared);
    EXPECT_TRUE(disk.ok());
    return *std::move(disk);
  }

  // Makes `count` event buffers available on the event queue (§5.6.6.3), and their addresses.
  std::vector<GuestAddress> PostEventBuffers(int count, uint32_t bytes = sizeof(Event)) {
    std::vector<GuestAddress> buffers;
    for (int i = 0; i < count; ++i) {
      const GuestAddress buffer = allocator_.Allocate(bytes);
      const std::vector<Buffer> chain = {{buffer, bytes, true}};
      EXPECT_TRUE(drivers_[1]->AddChain(chain).ok());
      buffers.push_back(buffer);
    }
    const uint64_t one = 1;
    EXPECT_EQ(write(notify_fds_[1].get(), &one, sizeof(one)), 8);
    return buffers;
  }

  // The sense key, ASC and ASCQ of a TEST UNIT READY to `lun` on request queue `queue` (0 0 0:
  // GOOD).
  std::array<uint8_t, 3> TestUnitReady(uint16_t queue, std::array<uint8_t, 8> lun) {
    const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
    Command command = Submit(queue, lun, tur);
    if (!WaitUsed(queue).has_value()) return {0xff, 0xff, 0xff};
    if (ResponseOf(command).status == 0) return {0, 0, 0};
    const auto sense = SenseOf(command);
    return {static_cast<uint8_t>(sense[2] & 0x0f), sense[12], sense[13]};
  }

  std::optional<vmm::GuestMemory> memory_;
  std::shared_ptr<block::MemoryBackend> backend_;
  std::shared_ptr<devices::scsi::Target> target_;
  std::unique_ptr<VirtioScsi> device_;
  RecordingEvents events_;
  std::vector<CountingInterrupt> interrupts_;
  std::vector<std::unique_ptr<DriverQueue>> drivers_;
  std::vector<sys_util::ScopedFd> notify_fds_;
  GuestAllocator allocator_{GuestAddress(0x200000), GuestAddress(16 << 20)};
};

TEST_F(VirtioScsiTest, ConfigReportsQueuesAndDefaults) {
  StartDevice(2, 1);
  Config config{};
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&config), sizeof(config)));
  EXPECT_EQ(config.num_queues, 2u);
  EXPECT_EQ(config.sense_size, 96u);
  EXPECT_EQ(config.cdb_size, 32u);
  EXPECT_EQ(config.seg_max, kQueueSize - 2u);
  EXPECT_EQ(device_->queue_max_sizes().size(), 4u);
  const uint32_t sense = 64;
  device_->WriteConfig(kConfigSenseSizeOffset,
                       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&sense), 4));
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&config), sizeof(config)));
  EXPECT_EQ(config.sense_size, 64u);
  device_->Reset();
  device_->ReadConfig(0, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&config), sizeof(config)));
  EXPECT_EQ(config.sense_size, 96u);
  device_.reset();
}

TEST_F(VirtioScsiTest, InquiryThroughTheRequestQueue) {
  StartDevice(1, 1);
  const uint8_t inquiry[6] = {0x12, 0, 0, 0, 96, 0};
  Command command = Submit(2, kLun0, inquiry, 96);
  auto used = WaitUsed(2);
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->id, command.head);
  const CommandResponse response = ResponseOf(command);
  EXPECT_EQ(response.response, kResponseOk);
  EXPECT_EQ(response.status, 0);
  auto data = *memory_->ReadObject<std::array<uint8_t, 36>>(command.data);
  EXPECT_EQ(data[0] & 0x1f, 0);  // direct-access block device
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(&data[8]), 7), "MICROVM");
  EXPECT_EQ(used->len, sizeof(CommandResponse) + kSenseSize + 96 - response.residual);
  EXPECT_TRUE(WaitInterrupt(2));
}

TEST_F(VirtioScsiTest, FuaWriteReachesTheBackendAndReadsBack) {
  StartDevice(1, 1);
  // The first command after power-on reports the unit attention.
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Command first = Submit(2, kLun0, tur);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(first).status, 2);  // CHECK CONDITION
  EXPECT_EQ(SenseOf(first)[2] & 0x0f, 6);  // UNIT ATTENTION
  EXPECT_EQ(ResponseOf(first).sense_len, 18u);

  std::vector<uint8_t> block(4096);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<uint8_t>(i * 7);
  // WRITE(10) with FUA: LBA 16, 8 blocks.
  const uint8_t write10[10] = {0x2a, 0x08, 0, 0, 0, 16, 0, 0, 8, 0};
  Command write = Submit(2, kLun0, write10, 0, block);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(write).status, 0);
  EXPECT_EQ(ResponseOf(write).residual, 0u);
  bool saw_fua = false;
  for (const auto& op : backend_->operations()) {
    if (op.type == block::RequestType::kWrite && op.offset == 16 * 512) saw_fua = op.fua;
  }
  EXPECT_TRUE(saw_fua);

  const uint8_t read10[10] = {0x28, 0, 0, 0, 0, 16, 0, 0, 8, 0};
  Command read = Submit(2, kLun0, read10, 4096);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(read).status, 0);
  std::vector<uint8_t> back(4096);
  ASSERT_TRUE(memory_->Read(read.data, back).ok());
  EXPECT_EQ(back, block);
}

TEST_F(VirtioScsiTest, UnknownTargetIsBadTarget) {
  StartDevice(1, 1);
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Command command = Submit(2, {1, 5, 0x40, 0, 0, 0, 0, 0}, tur);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(command).response, kResponseBadTarget);
  Command malformed = Submit(2, {2, 0, 0x40, 0, 0, 0, 0, 0}, tur);
  auto used = WaitUsed(2);
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->id, malformed.head) << "first head " << command.head;
  EXPECT_EQ(ResponseOf(malformed).response, kResponseBadTarget);
}

TEST_F(VirtioScsiTest, ShortRequestHeaderGetsAFailureResponse) {
  StartDevice(1, 1);
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Command command = Submit(2, kLun0, tur, 0, {}, sizeof(CommandResponse) + kSenseSize,
                           /*request_bytes=*/10);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(command).response, kResponseFailure);
  EXPECT_EQ(events_.needs_reset.load(), 0);
  // The queue keeps working.
  const uint8_t inquiry[6] = {0x12, 0, 0, 0, 36, 0};
  Command next = Submit(2, kLun0, inquiry, 36);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(next).response, kResponseOk);
}

TEST_F(VirtioScsiTest, ResponseBufferTooShortNeedsReset) {
  StartDevice(1, 1);
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Submit(2, kLun0, tur, 0, {}, /*response_bytes=*/8);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (events_.needs_reset.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(events_.needs_reset.load(), 1);
}

TEST_F(VirtioScsiTest, DescriptorLoopNeedsResetAndTheDeviceSurvivesReset) {
  StartDevice(1, 1);
  // A descriptor that chains to itself.
  const GuestAddress buffer = allocator_.Allocate(64);
  drivers_[2]->WriteDescriptor(0, {buffer.value(), 64, testing::kDescNext, 0});
  drivers_[2]->Publish(0);
  const uint64_t one = 1;
  ASSERT_EQ(write(notify_fds_[2].get(), &one, sizeof(one)), 8);
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (events_.needs_reset.load() == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(events_.needs_reset.load(), 1);
  device_->Reset();
}

TEST_F(VirtioScsiTest, LogicalUnitResetRaisesAUnitAttention) {
  StartDevice(1, 1);
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Submit(2, kLun0, tur);  // consumes the power-on unit attention
  ASSERT_TRUE(WaitUsed(2).has_value());
  Command clean = Submit(2, kLun0, tur);
  ASSERT_TRUE(WaitUsed(2).has_value());
  ASSERT_EQ(ResponseOf(clean).status, 0);

  EXPECT_EQ(LogicalUnitReset(kLun0), kTmfFunctionComplete);

  Command after = Submit(2, kLun0, tur);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(after).status, 2);
  EXPECT_EQ(SenseOf(after)[2] & 0x0f, 6);
  EXPECT_EQ(SenseOf(after)[12], 0x29);  // POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
}

// Task management decodes the LUN as commands do (devices/scsi/lun.h): a peripheral-form LUN with
// bus identifier 1, or a LUN with a second level, is no unit of this target (the transport's own
// decoding used to read the second form as LUN 0 and reset it).
TEST_F(VirtioScsiTest, LogicalUnitResetOfALunWithABusIdentifierIsIncorrectLun) {
  StartDevice(1, 1);
  for (const std::array<uint8_t, 8>& lun :
       {std::array<uint8_t, 8>{1, 0, 0x01, 0x00, 0, 0, 0, 0},           // bus 1, LUN 0
        std::array<uint8_t, 8>{1, 0, 0x40, 0x00, 0x40, 0x01, 0, 0}}) {  // a second level
    EXPECT_EQ(LogicalUnitReset(lun), kTmfIncorrectLun);
  }
}

TEST_F(VirtioScsiTest, TwoQueuesOnTwoIothreads) {
  StartDevice(2, 2);
  const uint8_t tur[6] = {0, 0, 0, 0, 0, 0};
  Submit(2, kLun0, tur);
  ASSERT_TRUE(WaitUsed(2).has_value());
  // 40 writes spread over both queues, then each block read back through the other queue.
  std::vector<Command> writes;
  for (int i = 0; i < 40; ++i) {
    std::vector<uint8_t> block(512, static_cast<uint8_t>(i + 1));
    const uint8_t lba = static_cast<uint8_t>(i);
    const uint8_t write10[10] = {0x2a, 0, 0, 0, 0, lba, 0, 0, 1, 0};
    writes.push_back(Submit(static_cast<uint16_t>(2 + i % 2), kLun0, write10, 0, block));
  }
  int completed = 0;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (completed < 40 && absl::Now() < deadline) {
    for (uint16_t q : {2, 3}) {
      while (drivers_[q]->CollectUsed()) ++completed;
    }
  }
  ASSERT_EQ(completed, 40);
  for (const Command& write : writes) EXPECT_EQ(ResponseOf(write).status, 0);
  for (int i = 0; i < 40; ++i) {
    const uint8_t lba = static_cast<uint8_t>(i);
    const uint8_t read10[10] = {0x28, 0, 0, 0, 0, lba, 0, 0, 1, 0};
    const uint16_t q = static_cast<uint16_t>(2 + (i + 1) % 2);
    Command read = Submit(q, kLun0, read10, 512);
    ASSERT_TRUE(WaitUsed(q).has_value());
    EXPECT_EQ(*memory_->ReadObject<uint8_t>(read.data + 100), static_cast<uint8_t>(i + 1));
  }
  EXPECT_TRUE(WaitInterrupt(2));
  EXPECT_TRUE(WaitInterrupt(3));
}

TEST_F(VirtioScsiTest, HotplugAttachTellsTheDriverAndTheUnitAnswersOnEveryQueue) {
  StartDevice(2, 2, kFeatureHotplug | kFeatureChange);
  EXPECT_EQ(device_->device_features() & (kFeatureHotplug | kFeatureChange),
            kFeatureHotplug | kFeatureChange);
  const std::vector<GuestAddress> buffers = PostEventBuffers(2);
  // LUN 0 has seen its power-on attention; what changes next is the inventory.
  EXPECT_EQ(TestUnitReady(2, kLun0), (std::array<uint8_t, 3>{6, 0x29, 0}));
  ASSERT_TRUE(device_->hotplug()->Attach(0, 300, MakeDisk("disk1", nullptr)).ok());
  auto used = WaitUsed(1);
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->len, sizeof(Event));
  const Event event = *memory_->ReadObject<Event>(buffers[0]);
  EXPECT_EQ(event.event, kEventTransportReset);
  EXPECT_EQ(event.reason, kResetRescan);
  // Target 0, LUN 300 in flat form (as REPORT LUNS lists it and Linux names it).
  EXPECT_EQ((std::array<uint8_t, 4>{event.lun[0], event.lun[1], event.lun[2], event.lun[3]}),
            (std::array<uint8_t, 4>{1, 0, 0x41, 0x2c}));
  EXPECT_TRUE(WaitInterrupt(1));
  // SPC-4: the other unit reports that the inventory changed, once.
  EXPECT_EQ(TestUnitReady(2, kLun0), (std::array<uint8_t, 3>{6, 0x3f, 0x0e}));
  EXPECT_EQ(TestUnitReady(2, kLun0), (std::array<uint8_t, 3>{0, 0, 0}));
  // The new unit answers on both queues (both iothreads have it).
  constexpr std::array<uint8_t, 8> kLun300 = {1, 0, 0x41, 0x2c, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun300), (std::array<uint8_t, 3>{6, 0x29, 0}));
  EXPECT_EQ(TestUnitReady(3, kLun300), (std::array<uint8_t, 3>{0, 0, 0}));
  // REPORT LUNS on the other queue lists both.
  const uint8_t report_luns[12] = {0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 0, 0};
  Command report = Submit(3, kLun0, report_luns, 64);
  ASSERT_TRUE(WaitUsed(3).has_value());
  const auto list = *memory_->ReadObject<std::array<uint8_t, 24>>(report.data);
  EXPECT_EQ(list[3], 16);  // two entries
  EXPECT_EQ(list[8 + 1], 0);
  EXPECT_EQ(list[16], 0x41);
  EXPECT_EQ(list[17], 0x2c);
  // A LUN in use, and a target the controller does not have.
  EXPECT_EQ(device_->hotplug()->Attach(0, 300, MakeDisk("disk2", nullptr)).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(device_->hotplug()->Attach(1, 0, MakeDisk("disk2", nullptr)).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(events_.needs_reset.load(), 0);
}

TEST_F(VirtioScsiTest, HotplugDetachDrainsTellsTheDriverAndReleasesTheDrive) {
  StartDevice(2, 2, kFeatureHotplug);
  const std::vector<GuestAddress> buffers = PostEventBuffers(2);
  std::weak_ptr<block::Drive> drive;
  ASSERT_TRUE(device_->hotplug()->Attach(0, 1, MakeDisk("disk1", &drive)).ok());
  ASSERT_TRUE(WaitUsed(1).has_value());
  constexpr std::array<uint8_t, 8> kLun1 = {1, 0, 0x40, 1, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun1), (std::array<uint8_t, 3>{6, 0x29, 0}));
  std::vector<uint8_t> block(512, 0x5a);
  const uint8_t write10[10] = {0x2a, 0, 0, 0, 0, 3, 0, 0, 1, 0};
  Command write = Submit(3, kLun1, write10, 0, block);
  ASSERT_TRUE(WaitUsed(3).has_value());
  EXPECT_EQ(ResponseOf(write).status, 0);

  auto unit = device_->hotplug()->Detach(0, 1);
  ASSERT_TRUE(unit.ok()) << unit.status();
  auto used = WaitUsed(1);
  ASSERT_TRUE(used.has_value());
  const Event event = *memory_->ReadObject<Event>(buffers[1]);
  EXPECT_EQ(event.event, kEventTransportReset);
  EXPECT_EQ(event.reason, kResetRemoved);
  EXPECT_EQ(event.lun[3], 1);
  // The LUN is gone on every queue: LOGICAL UNIT NOT SUPPORTED.
  EXPECT_EQ(TestUnitReady(2, kLun1), (std::array<uint8_t, 3>{5, 0x25, 0}));
  EXPECT_EQ(TestUnitReady(3, kLun1), (std::array<uint8_t, 3>{5, 0x25, 0}));
  // No queue holds the drive any more: once the caller drops the unit, the image is closed.
  unit->reset();
  EXPECT_TRUE(drive.expired());
  EXPECT_EQ(device_->hotplug()->Detach(0, 1).status().code(), absl::StatusCode::kNotFound);
  // LUN 0 carries on, told of the change.
  EXPECT_EQ(TestUnitReady(2, kLun0), (std::array<uint8_t, 3>{6, 0x29, 0}));
  EXPECT_EQ(TestUnitReady(2, kLun0), (std::array<uint8_t, 3>{6, 0x3f, 0x0e}));
  EXPECT_EQ(TestUnitReady(3, kLun0), (std::array<uint8_t, 3>{0, 0, 0}));
}

TEST_F(VirtioScsiTest, AnEventWithoutABufferIsReportedAsMissedWhenOneComes) {
  StartDevice(1, 1, kFeatureHotplug);
  ASSERT_TRUE(device_->hotplug()->Attach(0, 2, MakeDisk("disk1", nullptr)).ok());
  EXPECT_FALSE(drivers_[1]->CollectUsed().has_value());
  const std::vector<GuestAddress> buffers = PostEventBuffers(1);
  ASSERT_TRUE(WaitUsed(1).has_value());
  const Event event = *memory_->ReadObject<Event>(buffers[0]);
  EXPECT_EQ(event.event, kEventNoEvent | kEventsMissed);
  EXPECT_EQ(events_.needs_reset.load(), 0);
}

TEST_F(VirtioScsiTest, NoEventsUnlessTheDriverTookHotplug) {
  StartDevice(1, 1, /*features=*/0);
  PostEventBuffers(1);
  ASSERT_TRUE(device_->hotplug()->Attach(0, 2, MakeDisk("disk1", nullptr)).ok());
  // Attach() returns after the event would have been written (it runs on the iothread).
  EXPECT_FALSE(drivers_[1]->CollectUsed().has_value());
  constexpr std::array<uint8_t, 8> kLun2 = {1, 0, 0x40, 2, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun2), (std::array<uint8_t, 3>{6, 0x29, 0}));
}

TEST_F(VirtioScsiTest, AnEventBufferTooSmallNeedsReset) {
  StartDevice(1, 1, kFeatureHotplug);
  PostEventBuffers(1, /*bytes=*/8);
  ASSERT_TRUE(device_->hotplug()->Attach(0, 2, MakeDisk("disk1", nullptr)).ok());
  EXPECT_EQ(events_.needs_reset.load(), 1);
  // The request queue still serves the new unit until the driver resets the device.
  constexpr std::array<uint8_t, 8> kLun2 = {1, 0, 0x40, 2, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun2), (std::array<uint8_t, 3>{6, 0x29, 0}));
}

TEST_F(VirtioScsiTest, UnitsAttachedWhileInactiveAreThereAtActivation) {
  VirtioScsiOptions options;
  auto threads = devices::StartIoThreads("scsi-io", 1, {});
  ASSERT_TRUE(threads.ok());
  options.iothreads = *std::move(threads);
  auto device = VirtioScsi::Create(options, {{0, target_}});
  ASSERT_TRUE(device.ok());
  std::shared_ptr<ScsiHotplug> hotplug = (*device)->hotplug();
  ASSERT_TRUE(hotplug->Attach(0, 7, MakeDisk("disk1", nullptr)).ok());
  device->reset();
  // The device is gone: the hot-plug handle still changes the target.
  EXPECT_TRUE(hotplug->Detach(0, 7).ok());
  ASSERT_TRUE(hotplug->Attach(0, 4, MakeDisk("disk1", nullptr)).ok());
  StartDevice(1, 1, kFeatureHotplug);
  constexpr std::array<uint8_t, 8> kLun4 = {1, 0, 0x40, 4, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun4), (std::array<uint8_t, 3>{6, 0x29, 0}));
  EXPECT_EQ(TestUnitReady(2, kLun4), (std::array<uint8_t, 3>{0, 0, 0}));
}

// A disk grown while the guest runs: the driver gets PARAM_CHANGE with CAPACITY DATA HAS CHANGED
// (2Ah/09h in the reason), the unit reports it as a unit attention, and READ CAPACITY the new size.
TEST_F(VirtioScsiTest, CapacityChangeReachesTheDriverAndReadCapacity) {
  StartDevice(1, 1, kFeatureHotplug | kFeatureChange);
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/grow.img";
  {
    sys_util::ScopedFd file(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    ASSERT_TRUE(file.valid());
    ASSERT_EQ(ftruncate(file.get(), 1 << 20), 0);
  }
  auto image = block::raw::RawFileBackend::Open(path, {});
  ASSERT_TRUE(image.ok()) << image.status();
  auto drive = block::Drive::CreateFixed({.name = "grow"}, *image);
  ASSERT_TRUE(drive.ok());
  std::shared_ptr<block::Drive> shared(*std::move(drive));
  auto disk = devices::scsi::Disk::Create(shared);
  ASSERT_TRUE(disk.ok());
  const std::vector<GuestAddress> buffers = PostEventBuffers(2);
  ASSERT_TRUE(device_->hotplug()->Attach(0, 1, *disk).ok());
  ASSERT_TRUE(WaitUsed(1).has_value());
  constexpr std::array<uint8_t, 8> kLun1 = {1, 0, 0x40, 1, 0, 0, 0, 0};
  EXPECT_EQ(TestUnitReady(2, kLun1), (std::array<uint8_t, 3>{6, 0x29, 0}));

  auto grown = shared->Resize(uint64_t{3} << 20);
  ASSERT_TRUE(grown.ok()) << grown.status();
  device_->hotplug()->CapacityChanged(0, 1);
  ASSERT_TRUE(WaitUsed(1).has_value());
  const Event event = *memory_->ReadObject<Event>(buffers[1]);
  EXPECT_EQ(event.event, kEventParamChange);
  EXPECT_EQ(event.reason, 0x2au | (0x09u << 8));
  EXPECT_EQ(event.lun[3], 1);
  EXPECT_EQ(TestUnitReady(2, kLun1), (std::array<uint8_t, 3>{6, 0x2a, 0x09}));
  const uint8_t read_capacity[10] = {0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  Command capacity = Submit(2, kLun1, read_capacity, 8);
  ASSERT_TRUE(WaitUsed(2).has_value());
  ASSERT_EQ(ResponseOf(capacity).status, 0);
  const auto data = *memory_->ReadObject<std::array<uint8_t, 8>>(capacity.data);
  const uint32_t last_lba = (data[0] << 24) | (data[1] << 16) | (data[2] << 8) | data[3];
  EXPECT_EQ(last_lba, (3u << 20) / 512 - 1);
  // A write in the new space goes through.
  std::vector<uint8_t> block(512, 0x77);
  const uint8_t write10[10] = {0x2a, 0, 0, 0, 0x17, 0, 0, 0, 1, 0};  // LBA 5888 > 2048 blocks
  Command write = Submit(2, kLun1, write10, 0, block);
  ASSERT_TRUE(WaitUsed(2).has_value());
  EXPECT_EQ(ResponseOf(write).status, 0);
}

}  // namespace
}  // namespace devices::virtio::scsi

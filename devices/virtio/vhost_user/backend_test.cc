#include "devices/virtio/vhost_user/backend.h"

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstring>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "block/drive.h"
#include "block/memory_backend.h"
#include "devices/scsi/disk.h"
#include "devices/virtio/scsi/virtio_scsi.h"
#include "devices/virtio/scsi/wire.h"
#include "devices/virtio/split_queue_test_util.h"
#include "devices/virtio/vhost_user/server.h"
#include "gtest/gtest.h"

namespace devices::virtio::vhost_user {
namespace {

using ::devices::virtio::testing::Buffer;
using ::devices::virtio::testing::DriverQueue;
using ::devices::virtio::testing::GuestAllocator;
using vmm::GuestAddress;

constexpr uint64_t kMemoryBytes = 16 << 20;
constexpr uint64_t kGuestBase = 0x100000;  // guest-physical start of the front end's RAM
constexpr uint16_t kQueueSize = 64;

// Records what the transport does to the device.
class FakeDevice : public VirtioDevice {
 public:
  uint32_t device_type() const override { return kDeviceTypeScsi; }
  uint64_t device_features() const override { return 1ull << 2 | 1ull << 40; }
  std::vector<uint16_t> queue_max_sizes() const override { return {256, 256, 256}; }
  uint32_t config_size() const override { return 8; }
  void ReadConfig(uint32_t offset, std::span<uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i) data[i] = config[offset + i];
  }
  void WriteConfig(uint32_t offset, std::span<const uint8_t> data) override {
    for (size_t i = 0; i < data.size(); ++i) config[offset + i] = data[i];
  }
  absl::Status Activate(VirtioActivation activation) override {
    ++activations;
    last = std::move(activation);
    return activate_error;
  }
  void Reset() override { ++resets; }
  void Stop() override { ++stops; }

  std::array<uint8_t, 8> config = {1, 2, 3, 4, 5, 6, 7, 8};
  absl::Status activate_error;
  int activations = 0;
  int resets = 0;
  int stops = 0;
  VirtioActivation last;
};

// The front end's side: guest RAM in a memfd it maps itself, rings laid out in it.
class FrontEnd {
 public:
  FrontEnd() {
    memfd_ = sys_util::ScopedFd(memfd_create("vhost-user-test", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    EXPECT_EQ(ftruncate(memfd_.get(), kMemoryBytes), 0);
    // As QEMU's memory-backend-memfd: the back end accepts only memory that cannot shrink.
    EXPECT_EQ(fcntl(memfd_.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
    regions.push_back(*vmm::GuestMemoryRegion::CreateFromFile(GuestAddress(kGuestBase),
                                                              kMemoryBytes, memfd_.get(), 0));
    memory_.emplace(*vmm::GuestMemory::Create(std::move(regions)));
  }

  const vmm::GuestMemory& memory() const { return *memory_; }
  int memfd() const { return memfd_.get(); }
  // The front end's own address of guest-physical `address` (what SET_VRING_ADDR carries).
  uint64_t UserAddress(GuestAddress address) const {
    return reinterpret_cast<uint64_t>(memory_->GetHostSpan(address, 1)->data());
  }
  uint64_t user_base() const { return UserAddress(GuestAddress(kGuestBase)); }

  Message MemTable(uint64_t size = kMemoryBytes, uint64_t offset = 0) const {
    Message message;
    message.header = {static_cast<uint32_t>(Request::kSetMemTable), kVersion, 0};
    MemoryTableHeader header{1, 0};
    MemoryRegion region{kGuestBase, size, user_base(), offset};
    message.payload.resize(sizeof(header) + sizeof(region));
    std::memcpy(message.payload.data(), &header, sizeof(header));
    std::memcpy(message.payload.data() + sizeof(header), &region, sizeof(region));
    message.fds.emplace_back(dup(memfd_.get()));
    message.header.size = static_cast<uint32_t>(message.payload.size());
    return message;
  }

 private:
  sys_util::ScopedFd memfd_;
  std::optional<vmm::GuestMemory> memory_;
};

template <typename T>
Message Make(Request request, const T& payload, uint32_t flags = 0) {
  Message message;
  message.header = {static_cast<uint32_t>(request), kVersion | flags, sizeof(T)};
  message.payload.assign(AsBytes(payload).begin(), AsBytes(payload).end());
  return message;
}

Message MakeEmpty(Request request) {
  Message message;
  message.header = {static_cast<uint32_t>(request), kVersion, 0};
  return message;
}

Message RingFd(Request request, uint32_t index, sys_util::ScopedFd fd) {
  Message message = Make<uint64_t>(request, fd.valid() ? index : (index | kVringNoFd));
  if (fd.valid()) message.fds.push_back(std::move(fd));
  return message;
}

sys_util::ScopedFd NewEventFd() {
  return sys_util::ScopedFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
}

uint64_t ReplyU64(const VhostUserBackend::Result& result) {
  EXPECT_TRUE(result.reply.has_value());
  uint64_t value = ~0ull;
  if (result.reply && result.reply->size() == 8) std::memcpy(&value, result.reply->data(), 8);
  return value;
}

class VhostUserBackendTest : public ::testing::Test {
 protected:
  VhostUserBackend::Result Send(Message message) { return backend_.Handle(std::move(message)); }
  void ExpectOk(Message message) {
    const std::string name = std::to_string(message.header.request);
    auto result = Send(std::move(message));
    EXPECT_TRUE(result.status.ok()) << name << ": " << result.status;
  }
  void ExpectError(Message message) {
    const std::string name = std::to_string(message.header.request);
    EXPECT_FALSE(Send(std::move(message)).status.ok()) << name;
  }

  // Negotiates like QEMU: features (optionally with protocol features), owner, memory.
  void Negotiate(bool protocol_features) {
    auto features = Send(MakeEmpty(Request::kGetFeatures));
    uint64_t accepted = ReplyU64(features) & ~(1ull << 2);
    if (!protocol_features) accepted &= ~kFeatureProtocolFeatures;
    if (protocol_features) {
      ExpectOk(Make<uint64_t>(Request::kSetProtocolFeatures,
                              kProtocolMq | kProtocolReplyAck | kProtocolResetDevice));
    }
    ExpectOk(MakeEmpty(Request::kSetOwner));
    ExpectOk(Make<uint64_t>(Request::kSetFeatures, accepted));
    ExpectOk(front_.MemTable());
  }

  // Ring `index` at a layout in guest memory, started from `base`.
  QueueConfig SetUpRing(uint32_t index, uint16_t base = 0) {
    const QueueConfig config = DriverQueue::Layout(
        kQueueSize, GuestAddress(kGuestBase + 0x10000 * (index + 1)), /*event_idx=*/true);
    ExpectOk(Make(Request::kSetVringNum, VringState{index, kQueueSize}));
    ExpectOk(Make(Request::kSetVringBase, VringState{index, base}));
    VringAddress address{index,
                         0,
                         front_.UserAddress(config.descriptor_table),
                         front_.UserAddress(config.used_ring),
                         front_.UserAddress(config.available_ring),
                         0};
    ExpectOk(Make(Request::kSetVringAddr, address));
    // The used index a device that stopped at `base` left behind.
    EXPECT_TRUE(front_.memory().WriteObject<uint16_t>(config.used_ring + 2, base).ok());
    ExpectOk(RingFd(Request::kSetVringKick, index, NewEventFd()));
    ExpectOk(RingFd(Request::kSetVringCall, index, NewEventFd()));
    return config;
  }

  FakeDevice device_;
  VhostUserBackend backend_{device_};
  FrontEnd front_;
};

TEST_F(VhostUserBackendTest, OffersFeaturesAndQueues) {
  const uint64_t features = ReplyU64(Send(MakeEmpty(Request::kGetFeatures)));
  EXPECT_NE(features & kFeatureVersion1, 0u);
  EXPECT_NE(features & kFeatureEventIdx, 0u);
  EXPECT_NE(features & kFeatureIndirectDesc, 0u);
  EXPECT_NE(features & kFeatureProtocolFeatures, 0u);
  EXPECT_NE(features & (1ull << 2), 0u);   // the device's own bit
  EXPECT_EQ(features & (1ull << 40), 0u);  // a transport bit the device may not offer
  const uint64_t protocol = ReplyU64(Send(MakeEmpty(Request::kGetProtocolFeatures)));
  EXPECT_NE(protocol & kProtocolMq, 0u);
  EXPECT_NE(protocol & kProtocolReplyAck, 0u);
  EXPECT_EQ(ReplyU64(Send(MakeEmpty(Request::kGetQueueNum))), 3u);

  // A transport bit that was not offered (it would change the ring layout) is refused; device
  // bits the front end handles itself pass, but the device never sees them.
  ExpectError(Make<uint64_t>(Request::kSetFeatures, features | kFeatureRingPacked));
  ExpectOk(Make<uint64_t>(Request::kSetFeatures, kFeatureVersion1 | (1ull << 3)));
  // ANY_LAYOUT, which QEMU offers guests itself and passes on, changes nothing for the device.
  ExpectOk(Make<uint64_t>(Request::kSetFeatures, kFeatureVersion1 | (1ull << 27)));
  ExpectError(Make<uint64_t>(Request::kSetProtocolFeatures, 1ull << 1));  // LOG_SHMFD
}

TEST_F(VhostUserBackendTest, RingsStartWhenKickedAndStopOnGetVringBase) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0, /*base=*/7);
  const QueueConfig ring2 = SetUpRing(2, /*base=*/40);
  ASSERT_TRUE(backend_.Synchronize().ok());
  ASSERT_EQ(device_.activations, 1);
  EXPECT_EQ(backend_.active_rings(), (std::set<uint32_t>{0, 2}));
  ASSERT_EQ(device_.last.queues.size(), 2u);
  const VirtioQueue& queue = device_.last.queues[1];
  EXPECT_EQ(queue.index, 2);
  EXPECT_EQ(queue.config.size, kQueueSize);
  EXPECT_EQ(queue.config.descriptor_table, ring2.descriptor_table);
  EXPECT_EQ(queue.config.available_ring, ring2.available_ring);
  EXPECT_EQ(queue.config.used_ring, ring2.used_ring);
  EXPECT_EQ(queue.config.start_index, 40);
  EXPECT_TRUE(queue.config.event_idx);
  EXPECT_EQ(device_.last.memory->regions().size(), 1u);
  // Chains made available before the start are announced by a kick the back end injects.
  uint64_t kicks = 0;
  EXPECT_EQ(eventfd_read(queue.notify_fd, &kicks), 0);
  EXPECT_EQ(kicks, 1u);

  // The device made two chains used on ring 2: the base it reports is where to resume.
  ASSERT_TRUE(front_.memory().WriteObject<uint16_t>(ring2.used_ring + 2, 42).ok());
  auto base = Send(Make(Request::kGetVringBase, VringState{2, 0}));
  ASSERT_TRUE(base.status.ok()) << base.status;
  VringState state;
  ASSERT_EQ(base.reply->size(), sizeof(state));
  std::memcpy(&state, base.reply->data(), sizeof(state));
  EXPECT_EQ(state.index, 2u);
  EXPECT_EQ(state.num, 42u);
  EXPECT_EQ(device_.stops, 1);
  EXPECT_FALSE(backend_.device_active());
  // Ring 0 carries on alone.
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(backend_.active_rings(), (std::set<uint32_t>{0}));
  EXPECT_EQ(device_.last.queues[0].config.start_index, 7);
  EXPECT_EQ(device_.resets, 0);  // stopping rings never resets the device
}

TEST_F(VhostUserBackendTest, WithProtocolFeaturesRingsWaitForEnable) {
  Negotiate(/*protocol_features=*/true);
  SetUpRing(0);
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_FALSE(backend_.device_active());
  ExpectOk(Make(Request::kSetVringEnable, VringState{0, 1}));
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(backend_.active_rings(), (std::set<uint32_t>{0}));
  ExpectOk(Make(Request::kSetVringEnable, VringState{0, 0}));
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_FALSE(backend_.device_active());
  ExpectError(Make(Request::kSetVringEnable, VringState{0, 2}));
}

TEST_F(VhostUserBackendTest, ReplyAckReportsSuccessAndFailure) {
  Negotiate(/*protocol_features=*/true);
  auto ok = Send(Make(Request::kSetVringNum, VringState{0, 64}, kFlagNeedReply));
  EXPECT_EQ(ReplyU64(ok), 0u);
  auto bad = Send(Make(Request::kSetVringNum, VringState{0, 100}, kFlagNeedReply));
  EXPECT_EQ(ReplyU64(bad), 1u);
  EXPECT_FALSE(bad.status.ok());
  // Without NEED_REPLY there is nothing to say.
  EXPECT_FALSE(Send(Make(Request::kSetVringNum, VringState{0, 64})).reply.has_value());
}

TEST_F(VhostUserBackendTest, MemoryTableSwapStopsAndRestartsTheDevice) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  ASSERT_TRUE(backend_.Synchronize().ok());
  const vmm::GuestMemory* first = device_.last.memory;
  ExpectOk(front_.MemTable());
  EXPECT_EQ(device_.stops, 1);  // before the old table was unmapped
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 2);
  EXPECT_NE(device_.last.memory, first);
}

TEST_F(VhostUserBackendTest, HostileMessagesAreRefused) {
  Negotiate(/*protocol_features=*/false);
  // Wrong payload sizes, rings that do not exist, sizes that are not powers of two.
  Message short_num = Make(Request::kSetVringNum, VringState{0, 64});
  short_num.payload.pop_back();
  ExpectError(std::move(short_num));
  ExpectError(Make(Request::kSetVringNum, VringState{3, 64}));
  ExpectError(Make(Request::kSetVringNum, VringState{0, 0}));
  ExpectError(Make(Request::kSetVringNum, VringState{0, 65536}));
  ExpectError(Make(Request::kSetVringBase, VringState{0, 0x10000}));
  ExpectError(Make(Request::kGetVringBase, VringState{255, 0}));
  // Descriptor counts and flags on ring fds.
  ExpectError(RingFd(Request::kSetVringKick, 0, sys_util::ScopedFd()));  // polling mode
  Message two_fds = RingFd(Request::kSetVringCall, 0, NewEventFd());
  two_fds.fds.push_back(NewEventFd());
  ExpectError(std::move(two_fds));
  ExpectError(Make<uint64_t>(Request::kSetVringCall, 0x200));                 // reserved bit
  ExpectError(Make(Request::kSetVringAddr, VringAddress{0, 1, 0, 0, 0, 0}));  // dirty log
  // Memory tables: past the file's end, misaligned, wrapping, descriptor count mismatch.
  ExpectError(front_.MemTable(kMemoryBytes + 4096));
  ExpectError(front_.MemTable(kMemoryBytes, 100));
  Message no_fd = front_.MemTable();
  no_fd.fds.clear();
  ExpectError(std::move(no_fd));
  Message zero_regions = front_.MemTable();
  zero_regions.payload[0] = 0;
  ExpectError(std::move(zero_regions));
  Message nine_regions = front_.MemTable();
  nine_regions.payload[0] = 9;
  ExpectError(std::move(nine_regions));
  // H3 of docs/security.md: memory its owner could shrink under our mapping (SIGBUS on the next
  // ring access) is refused: an unsealed memfd of the right size.
  Message unsealed = front_.MemTable();
  unsealed.fds.clear();
  sys_util::ScopedFd loose(memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(ftruncate(loose.get(), kMemoryBytes), 0);
  unsealed.fds.push_back(std::move(loose));
  ExpectError(std::move(unsealed));
  // Logging, configuration and unknown requests were never offered.
  ExpectError(Make<uint64_t>(Request::kSetLogBase, 0));
  ExpectError(MakeEmpty(Request::kGetConfig));
  Message unknown = MakeEmpty(static_cast<Request>(999));
  auto result = Send(std::move(unknown));
  EXPECT_EQ(result.status.code(), absl::StatusCode::kUnimplemented);
  // Descriptors on a request that takes none.
  Message owner = MakeEmpty(Request::kSetOwner);
  owner.fds.push_back(NewEventFd());
  ExpectError(std::move(owner));

  // A ring whose addresses lie outside the memory table never reaches the device.
  ExpectOk(Make(Request::kSetVringNum, VringState{0, kQueueSize}));
  ExpectOk(Make(Request::kSetVringAddr, VringAddress{0, 0, 0x1000, 0x2000, 0x3000, 0}));
  ExpectOk(RingFd(Request::kSetVringKick, 0, NewEventFd()));
  EXPECT_FALSE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 0);
  EXPECT_FALSE(backend_.device_active());
}

TEST_F(VhostUserBackendTest, RunningRingChangesStopTheDeviceFirst) {
  Negotiate(/*protocol_features=*/false);
  const QueueConfig ring0 = SetUpRing(0, /*base=*/3);
  ASSERT_TRUE(backend_.Synchronize().ok());
  // A new kick eventfd: the device stops before the one it polls is closed.
  ASSERT_TRUE(front_.memory().WriteObject<uint16_t>(ring0.used_ring + 2, 9).ok());
  ExpectOk(RingFd(Request::kSetVringKick, 0, NewEventFd()));
  EXPECT_EQ(device_.stops, 1);
  EXPECT_FALSE(backend_.device_active());
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.last.queues[0].config.start_index, 9);
  // New addresses: the position is read at the old used ring before the ring moves.
  ASSERT_TRUE(front_.memory().WriteObject<uint16_t>(ring0.used_ring + 2, 12).ok());
  const QueueConfig moved =
      DriverQueue::Layout(kQueueSize, GuestAddress(kGuestBase + 0x80000), true);
  ExpectOk(
      Make(Request::kSetVringAddr, VringAddress{0, 0, front_.UserAddress(moved.descriptor_table),
                                                front_.UserAddress(moved.used_ring),
                                                front_.UserAddress(moved.available_ring), 0}));
  EXPECT_EQ(device_.stops, 2);
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.last.queues[0].config.start_index, 12);
  EXPECT_EQ(device_.last.queues[0].config.used_ring, moved.used_ring);
}

TEST_F(VhostUserBackendTest, FailedStartIsNotRetriedUntilSomethingChanges) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  device_.activate_error = absl::ResourceExhaustedError("no io_uring");
  EXPECT_FALSE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 1);
  EXPECT_EQ(device_.resets, 1);  // a failed activation is undone with a reset
  EXPECT_FALSE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 1);
  device_.activate_error = absl::OkStatus();
  ExpectOk(RingFd(Request::kSetVringCall, 0, NewEventFd()));  // any message: try again
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 2);
  EXPECT_TRUE(backend_.device_active());
}

TEST_F(VhostUserBackendTest, MisalignedRingNeverReachesTheDevice) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  const QueueConfig ring2 = SetUpRing(2);
  ExpectOk(Make(Request::kSetVringAddr,
                VringAddress{2, 0, front_.UserAddress(ring2.descriptor_table + 8),
                             front_.UserAddress(ring2.used_ring),
                             front_.UserAddress(ring2.available_ring), 0}));
  EXPECT_FALSE(backend_.Synchronize().ok());
  EXPECT_EQ(device_.activations, 0);  // ring 0 did not start (and consume buffers) either
}

TEST_F(VhostUserBackendTest, RingDescriptorsMustBeEventFds) {
  Negotiate(/*protocol_features=*/false);
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  close(pipe_fds[0]);  // a reader that is gone: a write would raise SIGPIPE
  ExpectError(RingFd(Request::kSetVringCall, 0, sys_util::ScopedFd(pipe_fds[1])));
  ExpectError(RingFd(Request::kSetVringKick, 0, sys_util::ScopedFd(dup(front_.memfd()))));
  ExpectError(RingFd(Request::kSetVringErr, 0, sys_util::ScopedFd(dup(front_.memfd()))));
}

// The descriptors share their open file description with the front end: the back end leaves its
// flags as the front end made them (F_SETFL would change the front end's own descriptor).
TEST_F(VhostUserBackendTest, BlockingEventFdsAreLeftAsTheFrontEndMadeThem) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  const Request requests[] = {Request::kSetVringKick, Request::kSetVringCall,
                              Request::kSetVringErr};
  for (const Request request : requests) {
    sys_util::ScopedFd front_end(eventfd(0, EFD_CLOEXEC));  // blocking, as the front end's own
    const int flags = fcntl(front_end.get(), F_GETFL);
    ExpectOk(RingFd(request, 0, sys_util::ScopedFd(dup(front_end.get()))));
    EXPECT_EQ(fcntl(front_end.get(), F_GETFL), flags) << static_cast<int>(request);
    EXPECT_EQ(fcntl(front_end.get(), F_GETFL) & O_NONBLOCK, 0) << static_cast<int>(request);
  }
  // The rings run on them all the same.
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_TRUE(backend_.device_active());
}

// The back end's writes to a blocking eventfd whose counter is full (2^64-2: eventfd(2) would make
// the write wait for a read the front end never does) are skipped, not waited for: the kick it
// injects when a ring starts, and the interrupts on the call eventfd.
TEST_F(VhostUserBackendTest, AFullBlockingEventFdNeverBlocksTheBackEnd) {
  constexpr uint64_t kFull = 0xfffffffffffffffeull;
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  auto full_blocking = [] {
    sys_util::ScopedFd fd(eventfd(0, EFD_CLOEXEC));
    EXPECT_EQ(eventfd_write(fd.get(), kFull), 0);
    return fd;
  };
  sys_util::ScopedFd kick = full_blocking();
  sys_util::ScopedFd call = full_blocking();
  sys_util::ScopedFd second_call = full_blocking();
  sys_util::ScopedFd empty_call(eventfd(0, EFD_CLOEXEC));
  ExpectOk(RingFd(Request::kSetVringKick, 0, sys_util::ScopedFd(dup(kick.get()))));
  ExpectOk(RingFd(Request::kSetVringCall, 0, sys_util::ScopedFd(dup(call.get()))));

  // Run on a thread of its own: a write that blocks would hang it, and the test then unblocks it
  // by reading the counters (and fails) instead of hanging.
  std::atomic<bool> finished{false};
  std::thread back_end([&] {
    EXPECT_TRUE(backend_.Synchronize().ok());  // starts the ring: injects a kick
    ASSERT_EQ(device_.last.queues.size(), 1u);
    device_.last.queues[0].interrupt->Signal();
    // Swapped while the ring runs: the back end signals the new descriptor once.
    ExpectOk(RingFd(Request::kSetVringCall, 0, sys_util::ScopedFd(dup(second_call.get()))));
    device_.last.queues[0].interrupt->Signal();
    ExpectOk(RingFd(Request::kSetVringCall, 0, sys_util::ScopedFd(dup(empty_call.get()))));
    finished = true;
  });
  for (int i = 0; i < 3000 && !finished; ++i) absl::SleepFor(absl::Milliseconds(10));
  const bool blocked = !finished;
  if (blocked) {
    uint64_t value;
    for (int fd : {kick.get(), call.get(), second_call.get()}) {
      [[maybe_unused]] ssize_t got = read(fd, &value, sizeof(value));
    }
  }
  back_end.join();
  EXPECT_FALSE(blocked) << "a write to a full blocking eventfd waited for the front end";
  // Nothing was added to the full counters; the empty one got its interrupt.
  for (int fd : {kick.get(), call.get(), second_call.get()}) {
    uint64_t value = 0;
    EXPECT_EQ(eventfd_read(fd, &value), 0);
    EXPECT_EQ(value, kFull);
  }
  uint64_t interrupts = 0;
  EXPECT_EQ(eventfd_read(empty_call.get(), &interrupts), 0);
  EXPECT_EQ(interrupts, 1u);
}

TEST_F(VhostUserBackendTest, RingSizeAboveTheDevicesMaximumIsRefused) {
  Negotiate(/*protocol_features=*/true);
  auto refused = Send(Make(Request::kSetVringNum, VringState{0, 512}, kFlagNeedReply));
  EXPECT_EQ(ReplyU64(refused), 1u);  // the front end hears of it
  ExpectOk(Make(Request::kSetVringNum, VringState{0, 256}));
}

TEST_F(VhostUserBackendTest, ResetDeviceAndDisconnectForgetTheRings) {
  Negotiate(/*protocol_features=*/false);
  SetUpRing(0);
  ASSERT_TRUE(backend_.Synchronize().ok());
  ExpectOk(MakeEmpty(Request::kResetDevice));
  EXPECT_EQ(device_.resets, 1);
  EXPECT_FALSE(backend_.device_active());
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_FALSE(backend_.device_active());  // the ring must be set up again
  SetUpRing(0);
  ASSERT_TRUE(backend_.Synchronize().ok());
  EXPECT_TRUE(backend_.device_active());
  backend_.Disconnect();
  EXPECT_FALSE(backend_.device_active());
  EXPECT_EQ(device_.resets, 2);
}

// ---------------------------------------------------------------------------------------------
// End to end: a socket, the server, and virtio-scsi serving a real request from the ring.

class Connection {
 public:
  explicit Connection(const std::string& path) {
    fd_ = sys_util::ScopedFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    connected_ = connect(fd_.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  bool connected() const { return connected_; }
  int fd() const { return fd_.get(); }

  template <typename T>
  void Send(Request request, const T& payload, std::vector<int> fds = {}) {
    ASSERT_TRUE(SendMessage(fd_.get(), request, 0, AsBytes(payload), fds).ok());
  }
  void SendEmpty(Request request) { ASSERT_TRUE(SendMessage(fd_.get(), request, 0, {}).ok()); }
  uint64_t ReadU64() {
    auto reply = ReadReply(fd_.get());
    EXPECT_TRUE(reply.ok()) << reply.status();
    uint64_t value = 0;
    if (reply.ok() && reply->payload.size() == 8) std::memcpy(&value, reply->payload.data(), 8);
    return value;
  }

 private:
  sys_util::ScopedFd fd_;
  bool connected_ = false;
};

class VhostUserServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    block::MemoryBackendOptions backend_options;
    backend_options.size_bytes = 8 << 20;
    backend_options.native_fua = true;
    auto drive = block::Drive::CreateFixed(block::DriveOptions{},
                                           std::make_shared<block::MemoryBackend>(backend_options));
    ASSERT_TRUE(drive.ok()) << drive.status();
    auto disk = devices::scsi::Disk::Create(std::shared_ptr<block::Drive>(*std::move(drive)));
    ASSERT_TRUE(disk.ok()) << disk.status();
    auto target = std::make_shared<devices::scsi::Target>();
    ASSERT_TRUE(target->AddLogicalUnit(0, *disk).ok());
    scsi::VirtioScsiOptions options;
    options.queue_size = kQueueSize;
    auto threads = devices::StartIoThreads("scsi-io", 1, {});
    ASSERT_TRUE(threads.ok()) << threads.status();
    options.iothreads = *std::move(threads);
    auto device = scsi::VirtioScsi::Create(options, {{0, target}});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);

    // A fresh directory under /tmp: TEST_TMPDIR can be longer than a socket path may be, and
    // parallel runs of this test in other sandboxes may have the same pid.
    char directory[] = "/tmp/vhost-user-test-XXXXXX";
    ASSERT_NE(mkdtemp(directory), nullptr);
    directory_ = directory;
    path_ = directory_ + "/socket";
    sys_util::ScopedFd listener(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path_.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(listener.get(), 1), 0);
    server_ = std::make_unique<VhostUserServer>(std::move(listener), *device_);
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
  }

  void TearDown() override {
    server_->Stop();
    thread_.join();
    server_.reset();
    unlink(path_.c_str());
    rmdir(directory_.c_str());
  }

  // Sets the device up over `connection` like QEMU does, request queue (ring 2) only, and sends
  // an INQUIRY through it; returns the INQUIRY data's vendor field.
  std::string InquiryOverConnection(Connection& connection, FrontEnd& front) {
    connection.SendEmpty(Request::kGetFeatures);
    const uint64_t features = connection.ReadU64();
    connection.SendEmpty(Request::kSetOwner);
    connection.Send<uint64_t>(Request::kSetFeatures, features & ~kFeatureProtocolFeatures);
    Message table = front.MemTable();
    EXPECT_TRUE(SendMessage(connection.fd(), Request::kSetMemTable, 0, table.payload,
                            std::vector<int>{front.memfd()})
                    .ok());
    const uint32_t ring = scsi::kFirstRequestQueue;
    const QueueConfig config =
        DriverQueue::Layout(kQueueSize, GuestAddress(kGuestBase + 0x10000), true);
    DriverQueue driver(front.memory(), config);
    connection.Send(Request::kSetVringNum, VringState{ring, kQueueSize});
    connection.Send(Request::kSetVringBase, VringState{ring, 0});
    connection.Send(Request::kSetVringAddr,
                    VringAddress{ring, 0, front.UserAddress(config.descriptor_table),
                                 front.UserAddress(config.used_ring),
                                 front.UserAddress(config.available_ring), 0});
    sys_util::ScopedFd kick = NewEventFd();
    sys_util::ScopedFd call = NewEventFd();
    connection.Send<uint64_t>(Request::kSetVringKick, ring, {kick.get()});
    connection.Send<uint64_t>(Request::kSetVringCall, ring, {call.get()});
    // A round trip: everything above has been handled once the reply arrives.
    connection.SendEmpty(Request::kGetQueueNum);
    EXPECT_EQ(connection.ReadU64(), 3u);

    // INQUIRY (SPC-4 §6.6), 96 bytes.
    GuestAllocator allocator(GuestAddress(kGuestBase + 0x40000),
                             GuestAddress(kGuestBase + kMemoryBytes));
    const GuestAddress request =
        allocator.Allocate(sizeof(scsi::CommandHeader) + scsi::kDefaultCdbSize);
    const GuestAddress response =
        allocator.Allocate(sizeof(scsi::CommandResponse) + scsi::kDefaultSenseSize);
    const GuestAddress data = allocator.Allocate(96);
    std::vector<uint8_t> bytes(sizeof(scsi::CommandHeader) + scsi::kDefaultCdbSize, 0);
    bytes[0] = 1;  // LUN format: target 0, LUN 0
    bytes[sizeof(scsi::CommandHeader)] = 0x12;
    bytes[sizeof(scsi::CommandHeader) + 4] = 96;
    EXPECT_TRUE(front.memory().Write(request, bytes).ok());
    const Buffer chain[] = {
        {request, static_cast<uint32_t>(bytes.size()), false},
        {response, sizeof(scsi::CommandResponse) + scsi::kDefaultSenseSize, true},
        {data, 96, true},
    };
    EXPECT_TRUE(driver.AddChain(chain).ok());
    EXPECT_EQ(eventfd_write(kick.get(), 1), 0);
    // The completion arrives with a call-eventfd signal (an extra, spurious one is allowed).
    std::optional<testing::UsedElement> used;
    for (int i = 0; i < 100 && !used.has_value(); ++i) {
      pollfd wait{call.get(), POLLIN, 0};
      if (poll(&wait, 1, 100) == 1) {
        uint64_t count;
        EXPECT_EQ(eventfd_read(call.get(), &count), 0);
      }
      used = driver.CollectUsed();
    }
    if (!used.has_value()) return "(no completion)";
    auto status = front.memory().ReadObject<scsi::CommandResponse>(response);
    EXPECT_EQ(status->response, scsi::kResponseOk);
    EXPECT_EQ(status->status, 0);
    std::array<char, 8> vendor{};
    EXPECT_TRUE(
        front.memory()
            .Read(data + 8, std::span<uint8_t>(reinterpret_cast<uint8_t*>(vendor.data()), 8))
            .ok());
    return std::string(vendor.data(), 8);
  }

  std::unique_ptr<scsi::VirtioScsi> device_;
  std::string directory_;
  std::string path_;
  std::unique_ptr<VhostUserServer> server_;
  std::thread thread_;
};

TEST_F(VhostUserServerTest, ServesARequestAndSurvivesReconnects) {
  for (int round = 0; round < 3; ++round) {
    FrontEnd front;
    Connection connection(path_);
    ASSERT_TRUE(connection.connected());
    const std::string vendor = InquiryOverConnection(connection, front);
    EXPECT_FALSE(vendor.empty());
    EXPECT_NE(vendor, "(no completion)") << "round " << round;
  }  // each front end disconnects; the server takes the next
  EXPECT_EQ(server_->connections(), 3u);
}

TEST_F(VhostUserServerTest, MalformedFramingDropsTheConnectionOnly) {
  {
    Connection connection(path_);
    ASSERT_TRUE(connection.connected());
    // Version 2 and an oversized payload: dropped.
    Header header{static_cast<uint32_t>(Request::kGetFeatures), 2, 0};
    ASSERT_EQ(send(connection.fd(), &header, sizeof(header), MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(header)));
    char byte;
    EXPECT_EQ(recv(connection.fd(), &byte, 1, 0), 0);  // closed by the back end
  }
  {
    Connection connection(path_);
    ASSERT_TRUE(connection.connected());
    Header header{static_cast<uint32_t>(Request::kSetMemTable), kVersion, 1 << 20};
    ASSERT_EQ(send(connection.fd(), &header, sizeof(header), MSG_NOSIGNAL),
              static_cast<ssize_t>(sizeof(header)));
    char byte;
    EXPECT_EQ(recv(connection.fd(), &byte, 1, 0), 0);
  }
  FrontEnd front;
  Connection connection(path_);
  ASSERT_TRUE(connection.connected());
  EXPECT_NE(InquiryOverConnection(connection, front), "(no completion)");
}

// A front end trickling its message a byte at a time (H11 of docs/security.md): the server
// stops promptly when asked, though every byte arrives well within any per-recv timeout.
TEST_F(VhostUserServerTest, StopEndsATricklingMessage) {
  Connection connection(path_);
  ASSERT_TRUE(connection.connected());
  const Header header{static_cast<uint32_t>(Request::kSetVringNum), kVersion, 8};
  const auto* bytes = reinterpret_cast<const uint8_t*>(&header);
  std::atomic<bool> done{false};
  std::atomic<size_t> sent{0};
  absl::Notification inside;
  std::thread trickle([&] {
    for (size_t i = 0; i < sizeof(header) && !done; ++i) {
      (void)!send(connection.fd(), bytes + i, 1, MSG_NOSIGNAL);
      sent = i + 1;
      // SIOCOUTQ on a unix socket: the bytes the peer has not read yet. Once the first byte is
      // read, the server is inside the message.
      int unread = 1;
      for (int tries = 0; tries < 10000 && !done && unread > 0; ++tries) {
        if (ioctl(connection.fd(), SIOCOUTQ, &unread) != 0) break;
        if (unread > 0) absl::SleepFor(absl::Milliseconds(1));
      }
      if (!inside.HasBeenNotified() && unread == 0) inside.Notify();
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  ASSERT_TRUE(inside.WaitForNotificationWithTimeout(absl::Seconds(30)))
      << "the server never read the message's first byte";
  const absl::Time asked = absl::Now();
  server_->Stop();
  thread_.join();  // Run() returned
  EXPECT_LT(absl::Now() - asked, absl::Seconds(2));
  // The case is the one meant: the message was still incomplete when the server stopped.
  EXPECT_LT(sent.load(), sizeof(header));
  done = true;
  trickle.join();
  // TearDown stops and joins again: a fresh thread that returns at once (stop is still set).
  thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
}

// ReadMessage's own bounds, on a socket pair: a message that does not finish in time, and a stop.
TEST(ReadMessageTest, DeadlineAndStopBoundAMessage) {
  int pair[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  sys_util::ScopedFd front(pair[0]), back(pair[1]);
  const Header header{static_cast<uint32_t>(Request::kGetFeatures), kVersion, 0};
  ASSERT_EQ(send(front.get(), &header, 3, MSG_NOSIGNAL), 3);  // part of a header, then nothing
  auto message = ReadMessage(back.get(), ReadLimits{absl::Now() + absl::Milliseconds(200), -1});
  EXPECT_EQ(message.status().code(), absl::StatusCode::kDeadlineExceeded) << message.status();

  sys_util::ScopedFd stop(eventfd(1, EFD_CLOEXEC));
  message = ReadMessage(back.get(), ReadLimits{absl::InfiniteFuture(), stop.get()});
  EXPECT_EQ(message.status().code(), absl::StatusCode::kCancelled) << message.status();
}

}  // namespace
}  // namespace devices::virtio::vhost_user

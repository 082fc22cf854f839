#include "block/host_cdrom.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "block/fault_injection.h"
#include "block/media.h"
#include "block/memory_backend.h"
#include "block/uevent_monitor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/status_macros.h"

namespace block {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint64_t kDiscA = 650ull * 1024 * 1024;   // a CD
constexpr uint64_t kDiscB = 4700ull * 1000 * 1000;  // a DVD

// A host drive in memory. Counts every probe, so tests can prove when the drive is asked. Its
// tray commands move the fake tray as a drive would: eject opens it, close brings the disc back.
class FakeCdromDevice : public CdromDevice {
 public:
  struct Counts {
    int drive_status = 0;
    int capacity = 0;
    int probes() const { return drive_status + capacity; }
  };

  const std::string& path() const override { return path_; }
  std::string kernel_name() const override { return "sr0"; }

  absl::StatusOr<HostDriveStatus> DriveStatus() override {
    absl::MutexLock lock(&mutex_);
    ++counts_.drive_status;
    RETURN_IF_ERROR(status_error_);
    return status_;
  }
  absl::StatusOr<uint64_t> CapacityBytes() override {
    absl::MutexLock lock(&mutex_);
    ++counts_.capacity;
    return status_ == HostDriveStatus::kDiscOk || status_ == HostDriveStatus::kNoInfo ? capacity_
                                                                                      : 0;
  }
  absl::Status LockDoor(bool locked) override {
    absl::MutexLock lock(&mutex_);
    mutex_.Await(absl::Condition(
        +[](bool* held) { return !*held; }, &commands_held_));
    commands_.push_back(locked ? "lock" : "unlock");
    return command_error_;
  }
  // A drive busy with a slow command: LockDoor waits until released.
  void HoldCommands(bool held) {
    absl::MutexLock lock(&mutex_);
    commands_held_ = held;
  }
  absl::Status Eject() override {
    absl::MutexLock lock(&mutex_);
    commands_.push_back("eject");
    RETURN_IF_ERROR(command_error_);
    disc_in_tray_ = status_ == HostDriveStatus::kDiscOk ? capacity_ : disc_in_tray_;
    status_ = HostDriveStatus::kTrayOpen;
    return absl::OkStatus();
  }
  absl::Status Reopen() override {
    absl::MutexLock lock(&mutex_);
    commands_.push_back("reopen");
    return reopen_error_;
  }
  void Close() override {
    absl::MutexLock lock(&mutex_);
    commands_.push_back("close-node");
  }
  void FailReopen(absl::Status error) {
    absl::MutexLock lock(&mutex_);
    reopen_error_ = std::move(error);
  }
  absl::Status CloseTray() override {
    absl::MutexLock lock(&mutex_);
    commands_.push_back("close");
    RETURN_IF_ERROR(command_error_);
    if (status_ == HostDriveStatus::kTrayOpen) {
      status_ = disc_in_tray_ > 0 ? HostDriveStatus::kDiscOk : HostDriveStatus::kNoDisc;
      capacity_ = disc_in_tray_;
    }
    return absl::OkStatus();
  }

  // The host side: what a person does at the drive.
  void InsertDisc(uint64_t capacity) {
    absl::MutexLock lock(&mutex_);
    status_ = HostDriveStatus::kDiscOk;
    capacity_ = capacity;
    disc_in_tray_ = capacity;
  }
  void SetStatus(HostDriveStatus status, uint64_t capacity = 0) {
    absl::MutexLock lock(&mutex_);
    status_ = status;
    capacity_ = capacity;
  }
  void FailStatus(absl::Status error) {
    absl::MutexLock lock(&mutex_);
    status_error_ = std::move(error);
  }
  void FailCommands(absl::Status error) {
    absl::MutexLock lock(&mutex_);
    command_error_ = std::move(error);
  }

  Counts counts() const {
    absl::MutexLock lock(&mutex_);
    return counts_;
  }
  // For the test's backend factory, which stands for the raw backend sizing the disc it opened:
  // not a HostCdrom probe, so not counted.
  uint64_t CapacityForFactory() const {
    absl::MutexLock lock(&mutex_);
    return capacity_;
  }
  std::vector<std::string> commands() const {
    absl::MutexLock lock(&mutex_);
    return commands_;
  }

 private:
  const std::string path_ = "/dev/sr0";
  mutable absl::Mutex mutex_;
  HostDriveStatus status_ ABSL_GUARDED_BY(mutex_) = HostDriveStatus::kNoDisc;
  uint64_t capacity_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t disc_in_tray_ ABSL_GUARDED_BY(mutex_) = 0;
  absl::Status status_error_ ABSL_GUARDED_BY(mutex_);
  absl::Status reopen_error_ ABSL_GUARDED_BY(mutex_);
  absl::Status command_error_ ABSL_GUARDED_BY(mutex_);
  Counts counts_ ABSL_GUARDED_BY(mutex_);
  std::vector<std::string> commands_ ABSL_GUARDED_BY(mutex_);
  bool commands_held_ ABSL_GUARDED_BY(mutex_) = false;
};

// Records every media event (type, by_guest).
class Recorder : public MediaListener {
 public:
  void OnMediaEvent(const MediaEvent& event) override {
    absl::MutexLock lock(&mutex_);
    events_.push_back(event.type);
  }
  std::vector<MediaEventType> Take() {
    absl::MutexLock lock(&mutex_);
    return std::exchange(events_, {});
  }

 private:
  absl::Mutex mutex_;
  std::vector<MediaEventType> events_ ABSL_GUARDED_BY(mutex_);
};

class HostCdromTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = std::make_unique<FakeCdromDevice>();
    device_ = device.get();
    HostCdrom::Options options;
    options.backend_factory =
        [this](const std::string& path) -> absl::StatusOr<std::shared_ptr<BlockBackend>> {
      opened_paths_.push_back(path);
      RETURN_IF_ERROR(factory_error_);
      // The raw backend would read the disc; a MemoryBackend of the disc's size stands in.
      const uint64_t size = device_->CapacityForFactory();
      auto disc = std::make_shared<MemoryBackend>(
          MemoryBackendOptions{.size_bytes = size, .logical_block_size = 2048, .read_only = true});
      if (read_error_ == 0) return disc;
      // A drive whose disc went away under the open backend: every read fails.
      auto failing = std::make_shared<FaultInjectingBackend>(disc);
      failing->AddRule(FaultRule::FailEvery(1, read_error_));
      return failing;
    };
    options.on_error = [this](const absl::Status& status) {
      absl::MutexLock lock(&errors_mutex_);
      errors_.push_back(status);
    };
    options.on_eject_request = [this] { ++eject_requests_; };
    media_.AddListener(&recorder_);
    auto cdrom = HostCdrom::Create(std::move(device), &media_, std::move(options));
    ASSERT_TRUE(cdrom.ok()) << cdrom.status();
    cdrom_ = *std::move(cdrom);
  }
  void TearDown() override {
    cdrom_.reset();
    media_.RemoveListener(&recorder_);
  }

  std::vector<absl::Status> Errors() {
    absl::MutexLock lock(&errors_mutex_);
    return errors_;
  }

  std::shared_ptr<const MediaState> State() const { return media_.Current(); }

  RemovableMedia media_;
  Recorder recorder_;
  FakeCdromDevice* device_ = nullptr;
  std::unique_ptr<HostCdrom> cdrom_;
  std::vector<std::string> opened_paths_;
  absl::Status factory_error_;
  int read_error_ = 0;  // > 0: the discs the factory opens fail every read with this errno
  absl::Mutex errors_mutex_;
  std::vector<absl::Status> errors_ ABSL_GUARDED_BY(errors_mutex_);
  int eject_requests_ = 0;
};

TEST_F(HostCdromTest, RefreshPublishesADiscWithOneProbeRound) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto state = State();
  EXPECT_TRUE(state->ready());
  EXPECT_EQ(state->size_bytes(), kDiscA);
  EXPECT_EQ(state->source, "/dev/sr0");
  EXPECT_EQ(state->generation, 1u);
  EXPECT_THAT(opened_paths_, ElementsAre("/dev/sr0"));
  EXPECT_EQ(device_->counts().drive_status, 1);
  EXPECT_EQ(cdrom_->last_host_status(), HostDriveStatus::kDiscOk);
  EXPECT_EQ(cdrom_->stats().refreshes, 1u);
  EXPECT_EQ(cdrom_->stats().changes_published, 1u);
  // The statistics count every command that asked the drive: its status, then the disc's size.
  EXPECT_EQ(cdrom_->stats().probes, 2u);
  EXPECT_EQ(device_->counts().probes(), 2);
  // Our own publications are not sent back to the drive.
  cdrom_->WaitForHostCommands();
  EXPECT_TRUE(device_->commands().empty());
}

TEST_F(HostCdromTest, IoNeverProbesTheDrive) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  const FakeCdromDevice::Counts after_refresh = device_->counts();

  // The I/O path: take the snapshot, read through its backend. 1000 requests, zero probes.
  int completed = 0;
  auto queue = State()->backend->CreateQueue([&](uint64_t, Completion c) {
    EXPECT_TRUE(c.ok());
    ++completed;
  });
  ASSERT_TRUE(queue.ok());
  std::vector<uint8_t> buffer(2048);
  iovec iov = {buffer.data(), buffer.size()};
  for (int i = 0; i < 1000; ++i) {
    auto snapshot = State();  // what a device does per request
    ASSERT_TRUE(snapshot->ready());
    Request read;
    read.offset = static_cast<uint64_t>(i) * 2048;
    read.buffers = std::span<const iovec>(&iov, 1);
    (*queue)->Enqueue(read, i);
    (*queue)->Submit();
    (*queue)->ProcessCompletions();
  }
  EXPECT_EQ(completed, 1000);
  EXPECT_EQ(device_->counts().drive_status, after_refresh.drive_status);
  EXPECT_EQ(device_->counts().capacity, after_refresh.capacity);
}

TEST_F(HostCdromTest, AnImageCannotBeInsertedIntoAPassthroughDrive) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  ASSERT_TRUE(media_.Eject(/*force=*/false).ok());
  cdrom_->WaitForHostCommands();
  auto image = std::make_shared<MemoryBackend>(
      MemoryBackendOptions{.size_bytes = 2048 * 16, .logical_block_size = 2048, .read_only = true});
  const absl::Status inserted = media_.Insert(image, "/tmp/other.iso");
  EXPECT_EQ(inserted.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(inserted.message(), HasSubstr("/dev/sr0"));
  EXPECT_NE(State()->source, "/tmp/other.iso");
}

TEST_F(HostCdromTest, EjectAndTrayCloseFromTheApiMoveTheHostTray) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  recorder_.Take();
  // The API's eject: a change not made by the guest nor by HostCdrom.
  ASSERT_TRUE(media_.Eject(/*force=*/false).ok());
  cdrom_->WaitForHostCommands();
  EXPECT_THAT(device_->commands(), ElementsAre("eject"));
  EXPECT_FALSE(State()->present);
  EXPECT_TRUE(State()->tray_open);
  // The API closes the tray: the drive pulls the disc back in and the probe after it publishes it.
  ASSERT_TRUE(media_.SetTrayOpen(false, /*force=*/false).ok());
  cdrom_->WaitForHostCommands();
  EXPECT_THAT(device_->commands(), ElementsAre("eject", "close"));
  EXPECT_TRUE(State()->ready());
  EXPECT_EQ(State()->size_bytes(), kDiscA);
}

TEST_F(HostCdromTest, AReadFailingAsIfTheDiscWentAwayProbesTheDriveOnce) {
  read_error_ = EIO;
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  const int status_probes_before = device_->counts().drive_status;
  device_->SetStatus(HostDriveStatus::kNoDisc);  // taken out on the host, no uevent seen

  int failed = 0;
  auto queue = State()->backend->CreateQueue([&](uint64_t, Completion c) {
    EXPECT_EQ(c.error, EIO);
    ++failed;
  });
  ASSERT_TRUE(queue.ok()) << queue.status();
  std::vector<uint8_t> buffer(2048);
  iovec iov = {buffer.data(), buffer.size()};
  Request read;
  read.buffers = std::span<const iovec>(&iov, 1);
  (*queue)->Enqueue(read, 1);
  (*queue)->Submit();
  while (failed == 0) {
    pollfd ready = {(*queue)->completion_fd(), POLLIN, 0};
    ASSERT_EQ(poll(&ready, 1, 5000), 1);
    (*queue)->ProcessCompletions();
  }
  cdrom_->WaitForHostCommands();
  EXPECT_EQ(cdrom_->stats().medium_errors, 1u);
  EXPECT_EQ(device_->counts().drive_status, status_probes_before + 1);
  EXPECT_FALSE(State()->present);  // the probe found the drive empty
  EXPECT_TRUE(device_->commands().empty());
}

TEST_F(HostCdromTest, UnchangedDriveChangesNothing) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  recorder_.Take();
  ASSERT_TRUE(cdrom_->Refresh().ok());
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_EQ(State()->generation, 1u);
  EXPECT_TRUE(recorder_.Take().empty());
  EXPECT_EQ(opened_paths_.size(), 1u);  // the disc was opened once
  EXPECT_EQ(cdrom_->stats().refreshes, 3u);
  EXPECT_EQ(cdrom_->stats().changes_published, 1u);
}

TEST_F(HostCdromTest, DiscRemovedOnTheHost) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  recorder_.Take();
  device_->SetStatus(HostDriveStatus::kNoDisc);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto state = State();
  EXPECT_FALSE(state->present);
  EXPECT_FALSE(state->tray_open);  // closed and empty, as the host drive
  EXPECT_EQ(state->backend, nullptr);
  EXPECT_EQ(state->generation, 2u);
  EXPECT_THAT(recorder_.Take(), ElementsAre(MediaEventType::kTrayOpened, MediaEventType::kRemoved,
                                            MediaEventType::kTrayClosed));
}

TEST_F(HostCdromTest, HostTrayOpen) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  device_->SetStatus(HostDriveStatus::kTrayOpen);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_FALSE(State()->present);
  EXPECT_TRUE(State()->tray_open);
  // An empty drive whose tray opens and closes.
  device_->SetStatus(HostDriveStatus::kNoDisc);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_FALSE(State()->tray_open);
  device_->SetStatus(HostDriveStatus::kTrayOpen);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_TRUE(State()->tray_open);
}

TEST_F(HostCdromTest, DiscSwappedForOneOfAnotherSize) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto first = State();
  device_->InsertDisc(kDiscB);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto second = State();
  EXPECT_TRUE(second->ready());
  EXPECT_EQ(second->size_bytes(), kDiscB);
  EXPECT_NE(second->backend, first->backend);
  EXPECT_EQ(second->generation, first->generation + 2);  // removed, then inserted
}

TEST_F(HostCdromTest, MediaChangeNotificationReplacesADiscOfTheSameSize) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto first = State();
  // Refresh() cannot tell two discs of one size apart...
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_EQ(State(), first);
  // ...the kernel's DISK_MEDIA_CHANGE can.
  Uevent change;
  change.action = "change";
  change.vars = {{"SUBSYSTEM", "block"}, {"DEVNAME", "sr0"}, {"DISK_MEDIA_CHANGE", "1"}};
  cdrom_->HandleUevent(change);
  auto second = State();
  EXPECT_TRUE(second->ready());
  EXPECT_NE(second->backend, first->backend);
  EXPECT_GT(second->generation, first->generation);
  EXPECT_TRUE(Errors().empty());
}

TEST_F(HostCdromTest, NotReadyChangesNothing) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto before = State();
  device_->SetStatus(HostDriveStatus::kNotReady);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_EQ(State(), before);
  EXPECT_EQ(cdrom_->last_host_status(), HostDriveStatus::kNotReady);
}

TEST_F(HostCdromTest, NoInfoDecidesByCapacity) {
  device_->SetStatus(HostDriveStatus::kNoInfo, kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_TRUE(State()->ready());
  device_->SetStatus(HostDriveStatus::kNoInfo, 0);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_FALSE(State()->present);
}

TEST_F(HostCdromTest, ProbeFailureIsReturnedAndChangesNothing) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  auto before = State();
  device_->FailStatus(absl::UnavailableError("/dev/sr0: CDROM_DRIVE_STATUS: I/O error"));
  absl::Status status = cdrom_->Refresh();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(State(), before);
}

TEST_F(HostCdromTest, HostRemovalOverridesTheGuestsLock) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  media_.SetLocked(true, /*by_guest=*/true);
  device_->SetStatus(HostDriveStatus::kNoDisc);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_FALSE(State()->present);
  EXPECT_TRUE(State()->locked);  // the guest's lock is the guest's to release
}

TEST_F(HostCdromTest, FactoryFailureLeavesNoStaleMedium) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  factory_error_ = absl::PermissionDeniedError("open /dev/sr0: Permission denied");
  device_->InsertDisc(kDiscB);
  absl::Status status = cdrom_->Refresh();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(status.message(), HasSubstr("/dev/sr0"));
  EXPECT_FALSE(State()->present);
  // Once the disc can be opened, the next refresh publishes it.
  factory_error_ = absl::OkStatus();
  ASSERT_TRUE(cdrom_->Refresh().ok());
  EXPECT_EQ(State()->size_bytes(), kDiscB);
}

TEST_F(HostCdromTest, GuestLockAndUnlockReachTheDrive) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  media_.SetLocked(true, /*by_guest=*/true);
  media_.SetLocked(true, /*by_guest=*/true);  // repeated: no change, no command
  media_.SetLocked(false, /*by_guest=*/true);
  media_.SetLocked(true, /*by_guest=*/false);  // the API's, not the guest's: not forwarded
  cdrom_->WaitForHostCommands();
  // The drive ends unlocked; the lock reached it first unless the unlock replaced it while waiting.
  const std::vector<std::string> sent = device_->commands();
  ASSERT_FALSE(sent.empty());
  EXPECT_EQ(sent.back(), "unlock");
  EXPECT_LE(sent.size(), 2u);
  EXPECT_EQ(cdrom_->stats().host_commands, sent.size());
  // Locking probes nothing.
  EXPECT_EQ(device_->counts().drive_status, 1);
}

// A guest toggling its lock in a loop while the drive is slow (H12 of docs/security.md): the
// commands do not pile up; the drive gets the latest state, a few commands in all.
TEST_F(HostCdromTest, LockFloodIsCoalesced) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  device_->HoldCommands(true);
  for (int i = 0; i < 10000; ++i) media_.SetLocked(i % 2 == 0, /*by_guest=*/true);
  media_.SetLocked(true, /*by_guest=*/true);  // the last word: locked
  device_->HoldCommands(false);
  cdrom_->WaitForHostCommands();
  const std::vector<std::string> sent = device_->commands();
  ASSERT_FALSE(sent.empty());
  EXPECT_LE(sent.size(), 3u);  // the one in progress when held, then the latest state
  EXPECT_EQ(sent.back(), "lock");
}

// An unlock and an eject asked for together reach the drive in that order.
TEST_F(HostCdromTest, UnlockGoesBeforeTheEject) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  media_.SetLocked(true, /*by_guest=*/true);
  cdrom_->WaitForHostCommands();
  device_->HoldCommands(true);
  media_.SetLocked(false, /*by_guest=*/true);
  media_.SetLocked(true, /*by_guest=*/true);
  media_.SetLocked(false, /*by_guest=*/true);
  ASSERT_TRUE(media_.GuestLoadEject(/*eject=*/true).ok());
  device_->HoldCommands(false);
  cdrom_->WaitForHostCommands();
  const std::vector<std::string> sent = device_->commands();
  ASSERT_GE(sent.size(), 2u);
  EXPECT_EQ(sent[sent.size() - 2], "unlock");
  EXPECT_EQ(sent.back(), "eject");
}

TEST_F(HostCdromTest, GuestEjectAndLoadMoveTheHostTray) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  const uint64_t generation = State()->generation;

  ASSERT_TRUE(media_.GuestLoadEject(/*eject=*/true).ok());
  cdrom_->WaitForHostCommands();
  // CDROMEJECT went to the drive; the re-probe after it found the host tray open, so the guest
  // sees what the host has: no medium (the disc is out of reach in the open tray).
  EXPECT_THAT(device_->commands(), ElementsAre("eject"));
  EXPECT_TRUE(State()->tray_open);
  EXPECT_FALSE(State()->present);

  ASSERT_TRUE(media_.GuestLoadEject(/*eject=*/false).ok());
  cdrom_->WaitForHostCommands();
  EXPECT_THAT(device_->commands(), ElementsAre("eject", "close"));
  EXPECT_TRUE(State()->ready());  // the disc came back in with the tray
  EXPECT_EQ(State()->size_bytes(), kDiscA);
  EXPECT_GT(State()->generation, generation);  // the guest gets its UNIT ATTENTION
  EXPECT_TRUE(Errors().empty());
}

TEST_F(HostCdromTest, GuestEjectRefusedWhileLockedSendsNothing) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  media_.SetLocked(true, /*by_guest=*/true);
  EXPECT_FALSE(media_.GuestLoadEject(/*eject=*/true).ok());
  cdrom_->WaitForHostCommands();
  EXPECT_THAT(device_->commands(), ElementsAre("lock"));
}

TEST_F(HostCdromTest, FailedHostCommandsAreReported) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  device_->FailCommands(
      absl::ResourceExhaustedError("/dev/sr0: CDROMEJECT: Device or resource busy"));
  ASSERT_TRUE(media_.GuestLoadEject(/*eject=*/true).ok());
  cdrom_->WaitForHostCommands();
  std::vector<absl::Status> errors = Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message(), HasSubstr("CDROMEJECT"));
  EXPECT_EQ(cdrom_->stats().host_command_errors, 1u);
  // The host tray did not move: the re-probe closes the guest's tray again over the same disc,
  // without a new generation.
  EXPECT_TRUE(State()->ready());
  EXPECT_EQ(State()->generation, 1u);
}

TEST_F(HostCdromTest, EjectButtonWhileTheGuestPreventsRemovalGoesToTheApi) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  Uevent request;
  request.action = "change";
  request.vars = {{"SUBSYSTEM", "block"}, {"DEVNAME", "sr0"}, {"DISK_EJECT_REQUEST", "1"}};

  media_.SetLocked(true, /*by_guest=*/true);
  cdrom_->HandleUevent(request);
  cdrom_->WaitForHostCommands();
  EXPECT_EQ(eject_requests_, 1);
  EXPECT_THAT(device_->commands(), ElementsAre("lock"));  // no eject
  EXPECT_TRUE(State()->ready());

  // Not locked by the guest: the button opens the drive.
  media_.SetLocked(false, /*by_guest=*/true);
  cdrom_->HandleUevent(request);
  cdrom_->WaitForHostCommands();
  EXPECT_EQ(eject_requests_, 1);
  EXPECT_THAT(device_->commands(), ElementsAre("lock", "unlock", "eject"));
  EXPECT_FALSE(State()->present);
  EXPECT_TRUE(State()->tray_open);
}

TEST_F(HostCdromTest, DriveRemovedFromTheHost) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  Uevent remove;
  remove.action = "remove";
  remove.devpath = "/devices/pci0000:00/usb1/1-1/host6/block/sr0";
  cdrom_->HandleUevent(remove);
  EXPECT_FALSE(State()->present);
  std::vector<absl::Status> errors = Errors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(errors[0].message(), HasSubstr("removed"));
}

// A drive removed and added again (a USB drive replugged, a SCSI rescan): the "add" reopens the
// node, since the old descriptor is the removed device's, and the disc it holds is published.
TEST_F(HostCdromTest, DriveAddedBackIsReopenedAndItsDiscPublished) {
  device_->InsertDisc(kDiscA);
  ASSERT_TRUE(cdrom_->Refresh().ok());
  Uevent remove;
  remove.action = "remove";
  cdrom_->HandleUevent(remove);
  ASSERT_FALSE(State()->present);
  device_->InsertDisc(kDiscB);
  Uevent add;
  add.action = "add";
  cdrom_->HandleUevent(add);
  EXPECT_THAT(device_->commands(), ElementsAre("close-node", "reopen"));
  EXPECT_TRUE(State()->present);
  EXPECT_EQ(State()->size_bytes(), kDiscB);

  // A node that cannot be reopened (another drive took the name): reported, nothing published.
  cdrom_->HandleUevent(remove);
  device_->FailReopen(absl::FailedPreconditionError("host CD-ROM /dev/sr0 is now sr1, not sr0"));
  const size_t errors_before = Errors().size();
  cdrom_->HandleUevent(add);
  EXPECT_FALSE(State()->present);
  std::vector<absl::Status> errors = Errors();
  ASSERT_GT(errors.size(), errors_before);
  EXPECT_THAT(errors.back().message(), HasSubstr("is now sr1"));
}

TEST_F(HostCdromTest, UeventsFromTheMonitorRefreshOnlyTheirDrive) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  auto monitor = UeventMonitor::CreateForTesting(fds[0]);
  auto watch = cdrom_->WatchUevents(monitor.get());
  auto send = [&](const std::string& name, const std::string& variable) {
    const std::string devpath = "/devices/virtual/block/" + name;
    std::string message = "change@" + devpath;
    for (const std::string& field :
         std::vector<std::string>{"ACTION=change", "DEVPATH=" + devpath, "SUBSYSTEM=block",
                                  variable, "DEVNAME=" + name}) {
      message.push_back('\0');
      message += field;
    }
    message.push_back('\0');
    ASSERT_EQ(::send(fds[1], message.data(), message.size(), 0),
              static_cast<ssize_t>(message.size()));
  };

  // Another drive's media change: no probe.
  send("sr1", "DISK_MEDIA_CHANGE=1");
  ASSERT_TRUE(monitor->ProcessEvents().ok());
  EXPECT_EQ(device_->counts().drive_status, 0);

  // Ours: one probe, and the disc is published.
  device_->InsertDisc(kDiscA);
  send("sr0", "DISK_MEDIA_CHANGE=1");
  ASSERT_TRUE(monitor->ProcessEvents().ok());
  EXPECT_EQ(device_->counts().drive_status, 1);
  EXPECT_TRUE(State()->ready());

  // Removed on the host, announced the same way.
  device_->SetStatus(HostDriveStatus::kNoDisc);
  send("sr0", "DISK_MEDIA_CHANGE=1");
  ASSERT_TRUE(monitor->ProcessEvents().ok());
  EXPECT_EQ(device_->counts().drive_status, 2);
  EXPECT_FALSE(State()->present);

  // After the watch is gone nothing reaches the HostCdrom.
  watch.reset();
  send("sr0", "DISK_MEDIA_CHANGE=1");
  ASSERT_TRUE(monitor->ProcessEvents().ok());
  EXPECT_EQ(device_->counts().drive_status, 2);
  ::close(fds[1]);
}

TEST_F(HostCdromTest, RefreshesFromSeveralThreadsAreSerialized) {
  device_->InsertDisc(kDiscA);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([this] {
      for (int j = 0; j < 50; ++j) EXPECT_TRUE(cdrom_->Refresh().ok());
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_TRUE(State()->ready());
  EXPECT_EQ(State()->generation, 1u);  // one insertion, however many refreshes raced
  EXPECT_EQ(opened_paths_.size(), 1u);
}

TEST(HostCdromCreateTest, NeedsAFactory) {
  RemovableMedia media;
  auto cdrom = HostCdrom::Create(std::make_unique<FakeCdromDevice>(), &media, {});
  EXPECT_EQ(cdrom.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OpenHostCdromDeviceTest, MissingPathIsNotFoundAndNamed) {
  auto device = OpenHostCdromDevice("/dev/sr-does-not-exist");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(device.status().message(), HasSubstr("/dev/sr-does-not-exist"));
}

TEST(OpenHostCdromDeviceTest, DevNullIsNotACdrom) {
  auto device = OpenHostCdromDevice("/dev/null");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("/dev/null is not a CD-ROM drive"));
}

TEST(OpenHostCdromDeviceTest, RegularFileIsNotACdrom) {
  const std::string path = ::testing::TempDir() + "/not-a-drive.iso";
  FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fclose(file);
  auto device = OpenHostCdromDevice(path);
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(device.status().message(), HasSubstr("not a block device"));
  std::remove(path.c_str());
}

}  // namespace
}  // namespace block

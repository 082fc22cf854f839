#include "block/host_cdrom.h"

#include <fcntl.h>
#include <linux/cdrom.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

namespace block {
namespace {

// "/dev/sr0" -> "sr0"; a symlink such as /dev/cdrom is resolved first, since uevents name the
// kernel's device, not the link.
std::string KernelName(const std::string& path) {
  std::string resolved = path;
  if (char* real = ::realpath(path.c_str(), nullptr); real != nullptr) {
    resolved = real;
    std::free(real);
  }
  size_t slash = resolved.find_last_of('/');
  return slash == std::string::npos ? resolved : resolved.substr(slash + 1);
}

// The real drive: ioctls on an fd of the device node, opened O_RDONLY | O_NONBLOCK.
class LinuxCdromDevice : public CdromDevice {
 public:
  LinuxCdromDevice(std::string path, std::string kernel_name, sys_util::ScopedFd fd)
      : path_(std::move(path)), kernel_name_(std::move(kernel_name)), fd_(std::move(fd)) {}

  const std::string& path() const override { return path_; }
  std::string kernel_name() const override { return kernel_name_; }
  absl::StatusOr<HostDriveStatus> DriveStatus() override;
  absl::StatusOr<uint64_t> CapacityBytes() override;
  absl::Status LockDoor(bool locked) override;
  absl::Status Eject() override;
  absl::Status CloseTray() override;
  absl::Status Reopen() override;
  void Close() override { fd_.Reset(); }

 private:
  const std::string path_;
  const std::string kernel_name_;
  // Replaced only by Reopen(); HostCdrom serializes every call into the device.
  sys_util::ScopedFd fd_;
};

// Errors of a read that say the disc may be gone (sr fails reads of a removed or changed disc with
// EIO; a vanished device gives ENXIO/ENODEV).
bool LooksLikeMediumLoss(int error) {
  return error == ENOMEDIUM || error == EIO || error == ENXIO || error == ENODEV;
}

// A published disc's backend: the same I/O, plus a call to `on_loss` when a request fails as if
// the disc went away. Only failures cost anything; successful reads pass straight through.
class MediumWatchingBackend : public BlockBackend {
 public:
  MediumWatchingBackend(std::shared_ptr<BlockBackend> inner, std::function<void()> on_loss)
      : inner_(std::move(inner)), on_loss_(std::move(on_loss)) {}

  const BackendInfo& info() const override { return inner_->info(); }
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) override {
    return inner_->CreateQueue([handler = std::move(handler), on_loss = on_loss_](
                                   uint64_t cookie, Completion completion) mutable {
      if (LooksLikeMediumLoss(completion.error)) on_loss();
      handler(cookie, completion);
    });
  }

 private:
  const std::shared_ptr<BlockBackend> inner_;
  const std::function<void()> on_loss_;
};

}  // namespace

// Lets the backends published by a HostCdrom reach it while it exists (they may outlive it: a
// request in flight holds its media snapshot).
class HostCdrom::MediumLossSignal {
 public:
  explicit MediumLossSignal(HostCdrom* owner) : owner_(owner) {}
  void Notify() {
    absl::MutexLock lock(&mutex_);
    if (owner_ == nullptr) return;
    {
      absl::MutexLock state_lock(&owner_->state_mutex_);
      ++owner_->stats_.medium_errors;
    }
    owner_->RequestRefresh();
  }
  void Detach() {
    absl::MutexLock lock(&mutex_);
    owner_ = nullptr;
  }

 private:
  absl::Mutex mutex_;
  HostCdrom* owner_ ABSL_GUARDED_BY(mutex_);
};

const char* HostDriveStatusName(HostDriveStatus status) {
  switch (status) {
    case HostDriveStatus::kNoInfo:
      return "no info";
    case HostDriveStatus::kNoDisc:
      return "no disc";
    case HostDriveStatus::kTrayOpen:
      return "tray open";
    case HostDriveStatus::kNotReady:
      return "drive not ready";
    case HostDriveStatus::kDiscOk:
      return "disc ok";
  }
  return "?";
}

// ---- LinuxCdromDevice ---------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<CdromDevice>> OpenHostCdromDevice(const std::string& path) {
  sys_util::ScopedFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    int error = errno;
    if (error == ENOENT) {
      return absl::NotFoundError(absl::StrCat("host CD-ROM ", path, ": no such device node"));
    }
    if (error == ENXIO || error == ENODEV) {
      // A node without a driver behind it (sr_mod not loaded, drive unplugged).
      return absl::NotFoundError(
          absl::StrCat("host CD-ROM ", path, ": no such device: ", std::strerror(error)));
    }
    return sys_util::ErrnoStatus(error, absl::StrCat("host CD-ROM ", path, ": open"));
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrCat("host CD-ROM ", path, ": fstat"));
  }
  if (!S_ISBLK(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "host CD-ROM ", path, " is not a CD-ROM drive: not a block device (expected /dev/sr*)"));
  }
  // Only the uniform CD-ROM driver (drivers/cdrom/cdrom.c) answers CDROM_GET_CAPABILITY; any other
  // block device fails it (ENOTTY/EINVAL), which is the cheapest "is this a CD-ROM?" there is.
  if (::ioctl(fd.get(), CDROM_GET_CAPABILITY, 0) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host CD-ROM ", path,
                     " is not a CD-ROM drive: CDROM_GET_CAPABILITY: ", std::strerror(errno)));
  }
  return std::make_unique<LinuxCdromDevice>(path, KernelName(path), std::move(fd));
}

absl::Status LinuxCdromDevice::Reopen() {
  ASSIGN_OR_RETURN(std::unique_ptr<CdromDevice> fresh, OpenHostCdromDevice(path_));
  auto* linux_device = static_cast<LinuxCdromDevice*>(fresh.get());
  if (linux_device->kernel_name_ != kernel_name_) {
    // The node now names another drive (the removed one's name was taken): not ours to follow.
    return absl::FailedPreconditionError(absl::StrCat(
        "host CD-ROM ", path_, " is now ", linux_device->kernel_name_, ", not ", kernel_name_));
  }
  fd_ = std::move(linux_device->fd_);
  return absl::OkStatus();
}

absl::StatusOr<HostDriveStatus> LinuxCdromDevice::DriveStatus() {
  // CDSL_CURRENT: the drive's own slot (only changers have others). cdrom-standard.rst: the driver
  // returns CDS_NO_INFO when it cannot tell, and for CDROM_DRIVE_STATUS the uniform driver sends
  // TEST UNIT READY / GET EVENT STATUS NOTIFICATION to the drive: a real command, hence probed
  // only on demand.
  int status = ::ioctl(fd_.get(), CDROM_DRIVE_STATUS, CDSL_CURRENT);
  if (status < 0) return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": CDROM_DRIVE_STATUS"));
  switch (status) {
    case CDS_NO_INFO:
      return HostDriveStatus::kNoInfo;
    case CDS_NO_DISC:
      return HostDriveStatus::kNoDisc;
    case CDS_TRAY_OPEN:
      return HostDriveStatus::kTrayOpen;
    case CDS_DRIVE_NOT_READY:
      return HostDriveStatus::kNotReady;
    case CDS_DISC_OK:
      return HostDriveStatus::kDiscOk;
    default:
      return absl::InternalError(
          absl::StrCat(path_, ": CDROM_DRIVE_STATUS returned unknown status ", status));
  }
}

absl::StatusOr<uint64_t> LinuxCdromDevice::CapacityBytes() {
  // A fresh open, not our long-lived fd: the sr driver re-reads the capacity of a changed disc when
  // the device is opened (drivers/scsi/sr.c, sr_block_open -> disk_check_media_change ->
  // sr_revalidate_disk), and our fd was opened before the change. O_NONBLOCK as at Open().
  sys_util::ScopedFd fd(::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": open"));
  uint64_t bytes = 0;
  if (::ioctl(fd.get(), BLKGETSIZE64, &bytes) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": BLKGETSIZE64"));
  }
  return bytes;
}

absl::Status LinuxCdromDevice::LockDoor(bool locked) {
  // cdrom.c refuses to unlock (EBUSY) while someone else has the drive open unless the caller has
  // CAP_SYS_ADMIN; the backend reading the disc is such an opener. Best effort by design.
  if (::ioctl(fd_.get(), CDROM_LOCKDOOR, locked ? 1 : 0) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": CDROM_LOCKDOOR ", locked ? 1 : 0));
  }
  return absl::OkStatus();
}

absl::Status LinuxCdromDevice::Eject() {
  // Unlock first. Opening the drive for data locks its door (cdrom.c open_for_data, CDO_LOCK is on
  // by default), and since Linux 5.18 sr_block_ioctl sends CDROMEJECT straight to scsi_ioctl as
  // START STOP UNIT, skipping cdrom_ioctl_eject, which used to unlock (and which refused with EBUSY
  // whenever another opener existed). Failure to unlock is not final: the eject says what happened.
  (void)::ioctl(fd_.get(), CDROM_LOCKDOOR, 0);
  if (::ioctl(fd_.get(), CDROMEJECT, 0) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": CDROMEJECT"));
  }
  return absl::OkStatus();
}

absl::Status LinuxCdromDevice::CloseTray() {
  if (::ioctl(fd_.get(), CDROMCLOSETRAY, 0) != 0) {
    return sys_util::ErrnoStatus(errno, absl::StrCat(path_, ": CDROMCLOSETRAY"));
  }
  return absl::OkStatus();
}

// ---- HostCdrom ----------------------------------------------------------------------------------

HostCdrom::HostCdrom(std::unique_ptr<CdromDevice> device, RemovableMedia* media, Options options)
    : device_(std::move(device)),
      media_(media),
      options_(std::move(options)),
      medium_loss_signal_(std::make_shared<MediumLossSignal>(this)) {}

absl::StatusOr<std::unique_ptr<HostCdrom>> HostCdrom::Create(std::unique_ptr<CdromDevice> device,
                                                             RemovableMedia* media,
                                                             Options options) {
  if (device == nullptr || media == nullptr) {
    return absl::InvalidArgumentError("HostCdrom needs a device and a RemovableMedia");
  }
  if (!options.backend_factory) {
    return absl::InvalidArgumentError("HostCdrom needs a backend factory");
  }
  std::unique_ptr<HostCdrom> cdrom(new HostCdrom(std::move(device), media, std::move(options)));
  ASSIGN_OR_RETURN(cdrom->worker_, sys_util::StartThread({.name = "host-cd"}, [raw = cdrom.get()] {
                     raw->WorkerLoop();
                   }));
  media->FollowHostDrive(cdrom->device_->path());
  media->AddListener(cdrom.get());
  return cdrom;
}

HostCdrom::~HostCdrom() {
  // No new commands once unregistered; the worker finishes those queued (a guest's unlock should
  // still reach the drive) and exits.
  media_->RemoveListener(this);
  medium_loss_signal_->Detach();
  {
    absl::MutexLock lock(&queue_mutex_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();
}

absl::Status HostCdrom::Refresh() {
  absl::MutexLock lock(&refresh_mutex_);
  return RefreshLocked(/*media_changed=*/false);
}

absl::Status HostCdrom::RefreshLocked(bool media_changed) {
  absl::StatusOr<HostDriveStatus> status;
  {
    absl::MutexLock device_lock(&device_mutex_);
    status = device_->DriveStatus();
  }
  {
    absl::MutexLock state_lock(&state_mutex_);
    ++stats_.refreshes;
    ++stats_.probes;
    if (status.ok()) last_status_ = *status;
  }
  if (!status.ok()) return status.status();

  switch (*status) {
    case HostDriveStatus::kNotReady:
      // Spinning up or reading the TOC. Publishing "no medium" now would make the guest see a
      // spurious removal; the kernel sends DISK_MEDIA_CHANGE once the drive settles.
      return absl::OkStatus();
    case HostDriveStatus::kDiscOk:
      return PublishDisc(media_changed);
    case HostDriveStatus::kTrayOpen:
      return PublishEmpty(/*tray_open=*/true);
    case HostDriveStatus::kNoDisc:
      return PublishEmpty(/*tray_open=*/false);
    case HostDriveStatus::kNoInfo: {
      // The driver cannot report the tray: a disc with a capacity is a disc.
      absl::StatusOr<uint64_t> capacity;
      {
        absl::MutexLock device_lock(&device_mutex_);
        capacity = device_->CapacityBytes();
      }
      CountProbe();
      if (capacity.ok() && *capacity > 0) return PublishDisc(media_changed);
      return PublishEmpty(/*tray_open=*/false);
    }
  }
  return absl::OkStatus();
}

void HostCdrom::CountProbe() {
  absl::MutexLock state_lock(&state_mutex_);
  ++stats_.probes;
}

// Marks the changes HostCdrom publishes as its own for the duration of a scope (OnMediaEvent).
class HostCdrom::OwnPublications {
 public:
  explicit OwnPublications(std::atomic<std::thread::id>& thread) : thread_(thread) {
    thread_.store(std::this_thread::get_id());
  }
  ~OwnPublications() { thread_.store(std::thread::id()); }

 private:
  std::atomic<std::thread::id>& thread_;
};

absl::Status HostCdrom::PublishDisc(bool replace) {
  OwnPublications own(publishing_thread_);
  std::shared_ptr<const MediaState> current = media_->Current();
  absl::StatusOr<uint64_t> capacity;
  {
    absl::MutexLock device_lock(&device_mutex_);
    capacity = device_->CapacityBytes();
  }
  CountProbe();
  const bool same_disc = !replace && current->present && current->backend != nullptr &&
                         current->source == device_->path() && capacity.ok() &&
                         *capacity == current->size_bytes();
  if (same_disc) {
    // The disc we published is still there. A tray the guest opened while the host's did not
    // move (the forwarded eject failed) is closed again: the host is the truth for a passthrough
    // drive, and the medium did not change, so no new generation.
    if (!current->tray_open) return absl::OkStatus();
    absl::Status closed = media_->SetTrayOpen(false, /*force=*/true);
    if (closed.ok()) {
      absl::MutexLock state_lock(&state_mutex_);
      ++stats_.changes_published;
    }
    return closed;
  }

  absl::StatusOr<std::shared_ptr<BlockBackend>> backend = options_.backend_factory(device_->path());
  if (!backend.ok() || *backend == nullptr) {
    absl::Status error =
        backend.ok() ? absl::InternalError("backend factory returned null") : backend.status();
    // Whatever was published before is not what the drive holds now: show no medium rather than a
    // stale one.
    if (current->present) (void)media_->Eject(/*force=*/true);
    return absl::Status(error.code(), absl::StrCat("host CD-ROM ", device_->path(),
                                                   ": cannot open the disc: ", error.message()));
  }
  if (current->present) {
    // Forced: the guest's PREVENT ALLOW MEDIUM REMOVAL cannot keep a disc the host already took.
    RETURN_IF_ERROR(media_->Eject(/*force=*/true));
  }
  absl::Status inserted =
      media_->InsertFromHostDrive(WatchForMediumLoss(*std::move(backend)), device_->path());
  if (inserted.ok()) {
    absl::MutexLock state_lock(&state_mutex_);
    ++stats_.changes_published;
  }
  return inserted;
}

absl::Status HostCdrom::PublishEmpty(bool tray_open) {
  OwnPublications own(publishing_thread_);
  std::shared_ptr<const MediaState> current = media_->Current();
  bool changed = false;
  if (current->present) {
    RETURN_IF_ERROR(media_->Eject(/*force=*/true));  // leaves the tray open
    changed = true;
    current = media_->Current();
  }
  if (current->tray_open != tray_open) {
    RETURN_IF_ERROR(media_->SetTrayOpen(tray_open, /*force=*/true));
    changed = true;
  }
  if (changed) {
    absl::MutexLock state_lock(&state_mutex_);
    ++stats_.changes_published;
  }
  return absl::OkStatus();
}

void HostCdrom::HandleUevent(const Uevent& event) {
  absl::Status status;
  if (event.lost_events || event.IsMediaChange() || event.action == "add") {
    absl::MutexLock lock(&refresh_mutex_);
    if (event.action == "add") {
      // The drive came back after a "remove": our descriptor is the removed device's.
      absl::MutexLock device_lock(&device_mutex_);
      status = device_->Reopen();
    }
    if (status.ok()) status = RefreshLocked(/*media_changed=*/true);
  } else if (event.IsEjectRequest()) {
    // block/disk-events.c reports the button only while removal is prevented: the drive itself
    // ignores it then. Whoever prevents removal decides.
    if (media_->Current()->locked) {
      if (options_.on_eject_request) {
        options_.on_eject_request();
      } else {
        status = absl::FailedPreconditionError(
            absl::StrCat("host CD-ROM ", device_->path(),
                         ": eject button pressed, but the guest prevents medium removal"));
      }
    } else {
      // The host (not the guest) holds the door locked, e.g. because opening the drive for data
      // locked it (cdrom.c, CDO_LOCK): honour the button. The worker re-probes afterwards.
      Enqueue(HostCommand::kEject);
    }
  } else if (event.action == "remove") {
    absl::MutexLock lock(&refresh_mutex_);
    absl::Status emptied = PublishEmpty(/*tray_open=*/false);
    {
      absl::MutexLock device_lock(&device_mutex_);
      device_->Close();
    }
    status = absl::UnavailableError(absl::StrCat("host CD-ROM ", device_->path(), " was removed",
                                                 emptied.ok() ? "" : "; ", emptied.message()));
  }
  if (!status.ok()) ReportError(status);
}

std::unique_ptr<HostCdrom::UeventWatch> HostCdrom::WatchUevents(UeventMonitor* monitor) {
  UeventMonitor::WatchId id =
      monitor->Watch(device_->kernel_name(), [this](const Uevent& event) { HandleUevent(event); });
  return std::make_unique<UeventWatch>(monitor, id);
}

std::shared_ptr<BlockBackend> HostCdrom::WatchForMediumLoss(std::shared_ptr<BlockBackend> backend) {
  return std::make_shared<MediumWatchingBackend>(
      std::move(backend), [signal = medium_loss_signal_] { signal->Notify(); });
}

void HostCdrom::RequestRefresh() {
  absl::MutexLock lock(&queue_mutex_);
  if (stopping_) return;
  pending_.refresh = true;
  ++commands_queued_;
}

void HostCdrom::OnMediaEvent(const MediaEvent& event) {
  if (!event.by_guest) {
    // Our own publications describe the host; sending them back would loop.
    if (publishing_thread_.load() == std::this_thread::get_id()) return;
    // Someone else (the API's eject or tray command) moved the tray: the drive follows, and the
    // worker's probe afterwards shows where it really went. Nobody but the guest locks.
    if (event.type == MediaEventType::kTrayOpened) Enqueue(HostCommand::kEject);
    if (event.type == MediaEventType::kTrayClosed) Enqueue(HostCommand::kCloseTray);
    return;
  }
  switch (event.type) {
    case MediaEventType::kLockChanged:
      Enqueue(event.state != nullptr && event.state->locked ? HostCommand::kLock
                                                            : HostCommand::kUnlock);
      break;
    case MediaEventType::kTrayOpened:
      Enqueue(HostCommand::kEject);
      break;
    case MediaEventType::kTrayClosed:
      Enqueue(HostCommand::kCloseTray);
      break;
    case MediaEventType::kInserted:
    case MediaEventType::kRemoved:
    case MediaEventType::kEjectRequested:
      // A guest cannot insert; its refused eject (while it prevents removal) is for the API.
      break;
  }
}

void HostCdrom::Enqueue(HostCommand command) {
  absl::MutexLock lock(&queue_mutex_);
  if (command == HostCommand::kLock || command == HostCommand::kUnlock) {
    pending_.lock = command == HostCommand::kLock;
  } else {
    pending_.tray = command;
  }
  ++commands_queued_;
}

void HostCdrom::WaitForHostCommands() {
  struct Waiting {
    const uint64_t* done;
    uint64_t target;
  };
  absl::MutexLock lock(&queue_mutex_);
  Waiting waiting{&commands_done_, commands_queued_};
  queue_mutex_.Await(absl::Condition(
      +[](Waiting* w) { return *w->done >= w->target; }, &waiting));
}

void HostCdrom::WorkerLoop() {
  while (true) {
    PendingCommands taken;
    uint64_t taken_upto = 0;
    {
      absl::MutexLock lock(&queue_mutex_);
      queue_mutex_.Await(absl::Condition(
          +[](HostCdrom* self) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return self->stopping_ || !self->pending_.empty();
          },
          this));
      if (pending_.empty()) return;  // stopping, and everything asked for was sent
      taken = pending_;
      pending_ = {};
      taken_upto = commands_queued_;
    }
    // In the order a guest's sequence needs: an unlock before a tray move (the drive refuses to
    // eject while locked), a lock after it (close the tray, then lock the disc in).
    std::vector<HostCommand> commands;
    if (taken.lock && !*taken.lock) commands.push_back(HostCommand::kUnlock);
    if (taken.tray) commands.push_back(*taken.tray);
    if (taken.lock && *taken.lock) commands.push_back(HostCommand::kLock);
    // A tray command probes the drive after it anyway; a refresh asked for alone probes once.
    if (taken.refresh && !taken.tray) {
      absl::MutexLock lock(&refresh_mutex_);
      absl::Status refreshed = RefreshLocked(/*media_changed=*/false);
      if (!refreshed.ok()) ReportError(refreshed);
    }
    for (const HostCommand command : commands) {
      absl::Status status = RunHostCommand(command);
      {
        absl::MutexLock state_lock(&state_mutex_);
        ++stats_.host_commands;
        if (!status.ok()) ++stats_.host_command_errors;
      }
      if (!status.ok()) ReportError(status);
      if (command == HostCommand::kEject || command == HostCommand::kCloseTray) {
        // The tray moved (or failed to): look at the drive once, so the guest sees what the host
        // has even when the host sends no uevents (the kernel polls removable drives only when
        // events_poll_msecs is set, which udev does, not the kernel: block/disk-events.c).
        absl::MutexLock lock(&refresh_mutex_);
        absl::Status refreshed = RefreshLocked(/*media_changed=*/false);
        if (!refreshed.ok()) ReportError(refreshed);
      }
    }
    absl::MutexLock lock(&queue_mutex_);
    commands_done_ = taken_upto;
  }
}

absl::Status HostCdrom::RunHostCommand(HostCommand command) {
  absl::MutexLock device_lock(&device_mutex_);
  switch (command) {
    case HostCommand::kLock:
      return device_->LockDoor(true);
    case HostCommand::kUnlock:
      return device_->LockDoor(false);
    case HostCommand::kEject:
      return device_->Eject();
    case HostCommand::kCloseTray:
      return device_->CloseTray();
  }
  return absl::InternalError("unknown host command");
}

void HostCdrom::ReportError(const absl::Status& status) {
  if (options_.on_error) options_.on_error(status);
}

HostDriveStatus HostCdrom::last_host_status() const {
  absl::MutexLock lock(&state_mutex_);
  return last_status_;
}

HostCdrom::Stats HostCdrom::stats() const {
  absl::MutexLock lock(&state_mutex_);
  return stats_;
}

}  // namespace block

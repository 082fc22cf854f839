#ifndef BLOCK_HOST_CDROM_H_
#define BLOCK_HOST_CDROM_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "block/backend.h"
#include "block/media.h"
#include "block/uevent_monitor.h"

namespace block {

// What a host optical drive says about its tray and medium: CDROM_DRIVE_STATUS's answers
// (include/uapi/linux/cdrom.h, CDS_*; Documentation/cdrom/cdrom-standard.rst "drive_status").
enum class HostDriveStatus {
  kNoInfo,    // CDS_NO_INFO: the driver cannot tell
  kNoDisc,    // CDS_NO_DISC: tray closed, empty
  kTrayOpen,  // CDS_TRAY_OPEN
  kNotReady,  // CDS_DRIVE_NOT_READY: e.g. spinning up or reading the TOC of a disc just loaded
  kDiscOk,    // CDS_DISC_OK
};

const char* HostDriveStatusName(HostDriveStatus status);

// The host drive operations a passed-through CD-ROM needs: the ioctls of the Linux uniform CD-ROM
// driver. An interface so HostCdrom is tested with a fake (there is no drive on a build machine).
// Implementations need not be thread-safe: HostCdrom serializes its calls.
class CdromDevice {
 public:
  virtual ~CdromDevice() = default;

  // The device node ("/dev/sr0"); what the backend factory opens for reading.
  virtual const std::string& path() const = 0;
  // The kernel's name for the drive ("sr0"), which its uevents carry in DEVNAME.
  virtual std::string kernel_name() const = 0;

  // Probes. Each one asks the drive (a SCSI command, milliseconds to seconds): called only from
  // HostCdrom::Refresh(), never per I/O request.
  virtual absl::StatusOr<HostDriveStatus> DriveStatus() = 0;  // CDROM_DRIVE_STATUS
  virtual absl::StatusOr<uint64_t> CapacityBytes() = 0;       // BLKGETSIZE64

  // Tray and door commands, forwarded from the guest.
  virtual absl::Status LockDoor(bool locked) = 0;  // CDROM_LOCKDOOR
  virtual absl::Status Eject() = 0;                // CDROMEJECT (opens the tray)
  virtual absl::Status CloseTray() = 0;            // CDROMCLOSETRAY

  // The drive went away (the kernel's "remove" uevent): lets go of the removed device, whose
  // name the kernel gives to no other drive while it is held open (sr's index is freed with the
  // last reference), so that the same drive plugged in again comes back under the same name.
  virtual void Close() {}
  // The drive came back (the kernel's "add" uevent after a "remove": a USB drive plugged in
  // again, a SCSI rescan): opens the node afresh. Devices without a descriptor of their own need
  // not do anything.
  virtual absl::Status Reopen() { return absl::OkStatus(); }
};

// The real drive: ioctls on the device node `path` ("/dev/sr0", or a link to it: /dev/cdrom).
// Opens it with O_RDONLY | O_NONBLOCK: without O_NONBLOCK, opening a drive that holds no disc
// fails (ENOMEDIUM), and Documentation/cdrom/cdrom-standard.rst provides the non-blocking open for
// exactly this use, controlling the drive whatever its medium. Fails with NotFound naming a
// missing path (or a node with no drive behind it), PermissionDenied, and InvalidArgument for a
// node that is not a CD-ROM drive (not a block device, or one refusing CDROM_GET_CAPABILITY).
absl::StatusOr<std::unique_ptr<CdromDevice>> OpenHostCdromDevice(const std::string& path);

// Opens the medium in the drive for reading: the raw io_uring backend (or a fake in tests).
// Called by Refresh() each time a disc is found, with CdromDevice::path(). A note for the real
// one: a blocking open of a CD-ROM for data also locks its door while open (drivers/cdrom/cdrom.c,
// open_for_data, CDO_LOCK is on by default), which HostCdrom's forwarded unlock and eject then
// have to undo; the backend's size must come from the open disc (BLKGETSIZE64 on its own fd).
using CdromBackendFactory =
    std::function<absl::StatusOr<std::shared_ptr<BlockBackend>>(const std::string& path)>;

// Passes a host optical drive through to a guest CD-ROM by keeping a RemovableMedia in step with
// the drive.
//
// The property this class exists for: the drive is probed only when asked, by Refresh() (from the
// API, or at start) or by a host notification (a kernel uevent, HandleUevent()). Never per I/O
// request: the I/O path reads RemovableMedia's cached snapshot. QEMU's host_cdrom asked the drive
// "is a disc inserted?" (CDROM_DRIVE_STATUS) on every request and lost two thirds of its throughput
// (qemu-devel, January 2019).
//
// The guest's own actions go the other way: its PREVENT ALLOW MEDIUM REMOVAL and its tray
// open/close (START STOP UNIT LoEj), which RemovableMedia reports to its listeners, become
// CDROM_LOCKDOOR, CDROMEJECT and CDROMCLOSETRAY on the host drive. Those take up to seconds (a tray
// is mechanical) while MediaListener callbacks must not block, so they run, in order, on a worker
// thread of this class; they are best effort and failures go to the error callback. After a tray
// command the worker probes the drive once, so the guest sees where the tray really went even
// when the host sends no uevents (the kernel polls removable drives only if events_poll_msecs is
// set, which udev does; block/disk-events.c).
//
// HostCdrom owns its RemovableMedia's medium: a medium inserted by someone else (an ISO from the
// API) is replaced by whatever the host drive holds at the next probe.
class HostCdrom : public MediaListener {
 public:
  struct Options {
    CdromBackendFactory backend_factory;
    // Receives failures nobody waits for: forwarded guest commands, and refreshes triggered by host
    // notifications. Called on the worker or the uevent thread. Optional.
    std::function<void(const absl::Status&)> on_error;
    // The host's eject button was pressed while the guest prevents removal (DISK_EJECT_REQUEST=1).
    // The API may tell the user or force an eject. Optional: without it the request is reported to
    // on_error. When the guest does not prevent removal the drive is simply opened.
    std::function<void()> on_eject_request;
  };

  struct Stats {
    uint64_t refreshes = 0;      // probe rounds (Refresh() and notification-driven)
    uint64_t probes = 0;         // commands that asked the drive (status, capacity)
    uint64_t medium_errors = 0;  // guest reads that failed as if the disc went away
    uint64_t changes_published = 0;
    uint64_t host_commands = 0;  // lock/eject/close forwarded to the drive
    uint64_t host_command_errors = 0;
  };

  // Registers as a listener of `media`, which must outlive the HostCdrom, and makes it follow the
  // drive (RemovableMedia::FollowHostDrive: the API cannot insert an image into it). Does not
  // probe: call Refresh() once to pick up the drive's current state.
  static absl::StatusOr<std::unique_ptr<HostCdrom>> Create(std::unique_ptr<CdromDevice> device,
                                                           RemovableMedia* media, Options options);
  ~HostCdrom() override;  // unregisters, finishes queued host commands, joins the worker

  HostCdrom(const HostCdrom&) = delete;
  HostCdrom& operator=(const HostCdrom&) = delete;

  // Probes the drive once and, if the host's state differs from RemovableMedia's, publishes it:
  //   disc OK      -> a medium (from the backend factory) in a closed tray
  //   tray open    -> no medium, tray open
  //   no disc      -> no medium, tray closed
  //   not ready    -> no change (transient: the kernel reports the media change when it is ready)
  //   no info      -> decided by the capacity: a readable disc has one
  // A disc already published is kept when its capacity is unchanged (Refresh() cannot tell two
  // discs of the same size apart; a host media-change notification can, see HandleUevent()).
  // Host changes override the guest's lock (forced eject): the disc is physically gone.
  absl::Status Refresh();

  // A kernel uevent for this drive (UeventMonitor::Watch(device().kernel_name(), ...)):
  //   DISK_MEDIA_CHANGE=1 -> Refresh(), and a disc found is published as a new medium even with an
  //                          unchanged capacity (the disc may have been swapped between two probes)
  //   DISK_EJECT_REQUEST=1 -> see Options::on_eject_request
  //   lost events          -> as a media change
  //   "remove"             -> the drive is gone: the medium is ejected
  // Errors go to on_error.
  void HandleUevent(const Uevent& event);

  // Watches `monitor` for this drive's events until the returned watch is destroyed (which must
  // happen before this HostCdrom is).
  class UeventWatch {
   public:
    UeventWatch(UeventMonitor* monitor, UeventMonitor::WatchId id) : monitor_(monitor), id_(id) {}
    ~UeventWatch() { monitor_->Unwatch(id_); }
    UeventWatch(const UeventWatch&) = delete;
    UeventWatch& operator=(const UeventWatch&) = delete;

   private:
    UeventMonitor* monitor_;
    UeventMonitor::WatchId id_;
  };
  std::unique_ptr<UeventWatch> WatchUevents(UeventMonitor* monitor);

  // Blocks until every guest command queued so far has been sent to the drive, or replaced by a
  // later one of its kind (for tests and for orderly shutdown).
  void WaitForHostCommands();

  // The last status the drive reported (kNoInfo before the first probe).
  HostDriveStatus last_host_status() const;
  Stats stats() const;
  const CdromDevice& device() const { return *device_; }

  // MediaListener: forwards the guest's lock and tray changes, and tray changes someone else made
  // (the API's eject and tray commands), to the drive (non-blocking; the latest state of each kind
  // wins). Changes HostCdrom itself publishes are not sent back.
  void OnMediaEvent(const MediaEvent& event) override;

  // Asks the worker to probe the drive soon (coalesced with any probe already asked for). The
  // backends this class publishes call it when a guest read fails in a way that says the disc went
  // away (ENOMEDIUM, EIO, ENXIO, ENODEV): the only probes besides start, uevents and tray commands.
  void RequestRefresh();

 private:
  enum class HostCommand { kLock, kUnlock, kEject, kCloseTray };

  HostCdrom(std::unique_ptr<CdromDevice> device, RemovableMedia* media, Options options);

  // One probe round; `media_changed` forces a disc found to be published as a new medium.
  absl::Status RefreshLocked(bool media_changed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mutex_);
  // Makes RemovableMedia show a disc from the backend factory, replacing any other medium.
  absl::Status PublishDisc(bool replace) ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mutex_);
  // Makes RemovableMedia show no medium and the tray in `tray_open`.
  absl::Status PublishEmpty(bool tray_open) ABSL_EXCLUSIVE_LOCKS_REQUIRED(refresh_mutex_);

  void ReportError(const absl::Status& status);
  void CountProbe();
  class OwnPublications;
  void Enqueue(HostCommand command);
  // Wraps a backend from the factory so that its failed reads call RequestRefresh().
  std::shared_ptr<BlockBackend> WatchForMediumLoss(std::shared_ptr<BlockBackend> backend);
  void WorkerLoop();
  absl::Status RunHostCommand(HostCommand command);

  const std::unique_ptr<CdromDevice> device_;
  RemovableMedia* const media_;
  const Options options_;

  // Serializes probe rounds and the media changes they make (HandleUevent and the API may race).
  absl::Mutex refresh_mutex_ ABSL_ACQUIRED_BEFORE(device_mutex_);
  // Serializes calls into the device: probes (refresh path) and commands (worker).
  absl::Mutex device_mutex_;

  mutable absl::Mutex state_mutex_;
  HostDriveStatus last_status_ ABSL_GUARDED_BY(state_mutex_) = HostDriveStatus::kNoInfo;
  Stats stats_ ABSL_GUARDED_BY(state_mutex_);

  // What the guest last asked of the drive and the worker has not sent yet: only the latest lock
  // state and the latest tray move, so a guest toggling its lock in a loop costs at most two host
  // commands per worker round, never a queue that grows (H12 of docs/security.md).
  struct PendingCommands {
    std::optional<bool> lock;         // kLock (true) / kUnlock (false)
    std::optional<HostCommand> tray;  // kEject / kCloseTray
    bool refresh = false;             // RequestRefresh()
    bool empty() const { return !lock && !tray && !refresh; }
  };
  absl::Mutex queue_mutex_;
  PendingCommands pending_ ABSL_GUARDED_BY(queue_mutex_);
  uint64_t commands_queued_ ABSL_GUARDED_BY(queue_mutex_) = 0;
  uint64_t commands_done_ ABSL_GUARDED_BY(queue_mutex_) = 0;
  bool stopping_ ABSL_GUARDED_BY(queue_mutex_) = false;
  // The thread publishing HostCdrom's own changes (set around them, under refresh_mutex_), so
  // OnMediaEvent can tell them from the API's.
  std::atomic<std::thread::id> publishing_thread_{};
  // Shared with the backends this class published (they may outlive it): their way to call
  // RequestRefresh() while this object exists.
  class MediumLossSignal;
  std::shared_ptr<MediumLossSignal> medium_loss_signal_;
  std::thread worker_;
};

}  // namespace block

#endif  // BLOCK_HOST_CDROM_H_

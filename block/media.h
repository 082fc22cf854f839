#ifndef BLOCK_MEDIA_H_
#define BLOCK_MEDIA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "block/backend.h"

namespace block {

// The state of a removable-media drive (a CD-ROM), as one immutable snapshot. The I/O path reads the
// current snapshot with one atomic load and never asks the host: QEMU's emulated CD-ROM lost two
// thirds of its throughput by probing the host drive on every request (qemu-devel, January 2019).
struct MediaState {
  // A medium is in the drive. (Independent of the tray: a guest may open the tray of a loaded drive;
  // an open tray makes the medium unreachable, and present && tray_open means "in the open tray".)
  bool present = false;
  bool tray_open = false;
  // The guest prevents removal (SCSI/MMC PREVENT ALLOW MEDIUM REMOVAL).
  bool locked = false;
  // Bumped by every change of medium (insert or eject), never by tray or lock changes alone. A
  // request holds the snapshot it started with, so it completes on the old medium or the new one,
  // never a mix; a device compares generations to raise UNIT ATTENTION (MEDIUM MAY HAVE CHANGED).
  uint64_t generation = 0;
  // The medium's backend; null when no medium is present.
  std::shared_ptr<BlockBackend> backend;
  // Host path or description of the medium, for status reports.
  std::string source;

  // The medium can be read: present and the tray closed.
  bool ready() const { return present && !tray_open && backend != nullptr; }
  uint64_t size_bytes() const { return backend ? backend->info().size_bytes : 0; }
};

enum class MediaEventType {
  kInserted,  // a medium was inserted (the API or a host notification)
  kRemoved,   // the medium was removed
  kTrayOpened,
  kTrayClosed,
  kLockChanged,     // the guest locked or unlocked the tray
  kEjectRequested,  // by the guest: it asked to eject (START STOP UNIT LoEj) while removal was
                    // prevented (the API may act on it); not by the guest: the API (or a host
                    // eject button) asked for an eject of a locked drive, and the drive tells the
                    // guest (an MMC EjectRequest media event)
};

struct MediaEvent {
  MediaEventType type;
  bool by_guest = false;                    // the guest caused it (vs the API or the host)
  std::shared_ptr<const MediaState> state;  // the state after the change
};

// Notified after every change, in order, on the thread that made it. Must not block, and must not
// change the media, nor add or remove listeners, from inside the callback (changes are serialized
// and listeners are called under a lock; either would deadlock).
class MediaListener {
 public:
  virtual ~MediaListener() = default;
  virtual void OnMediaEvent(const MediaEvent& event) = 0;
};

// The cached media state of one removable drive. Reads are lock-free; changes are serialized, each
// publishes a new snapshot and then tells the listeners.
class RemovableMedia {
 public:
  RemovableMedia();
  explicit RemovableMedia(std::shared_ptr<BlockBackend> initial, std::string source = "");

  // The current snapshot: one atomic load, no host access.
  std::shared_ptr<const MediaState> Current() const;

  // Inserts a medium and closes the tray. FailedPrecondition if a medium is present, or if the
  // drive follows a host drive (FollowHostDrive). Publishes one step at a time: kTrayOpened (if it
  // was closed), kInserted, kTrayClosed.
  absl::Status Insert(std::shared_ptr<BlockBackend> backend, std::string source);

  // A passthrough drive (block/host_cdrom.h): its medium is whatever the host drive `drive_path`
  // holds, so Insert() is refused from now on, with a status naming the drive; the HostCdrom that
  // follows the drive inserts with InsertFromHostDrive(). Eject and tray moves stay allowed (the
  // HostCdrom forwards them to the drive).
  void FollowHostDrive(std::string drive_path);
  absl::Status InsertFromHostDrive(std::shared_ptr<BlockBackend> backend, std::string source);
  // Removes the medium (if any) and leaves the tray open. Publishes kTrayOpened (if it was closed),
  // then kRemoved (if a medium was present). If the guest locked the drive and `force` is false,
  // nothing changes: the guest is asked to let go (kEjectRequested, not by the guest, which the
  // drive reports as an MMC EjectRequest event) and the answer is FailedPrecondition. A guest that
  // agrees unlocks and opens the tray itself (kTrayOpened by the guest); the caller then ejects
  // again.
  absl::Status Eject(bool force);
  // Opens or closes the tray without changing the medium. Opening a locked drive without force
  // asks the guest, as Eject does; closing is always allowed (the lock prevents removal only).
  absl::Status SetTrayOpen(bool open, bool force);
  // The guest's PREVENT ALLOW MEDIUM REMOVAL. kLockChanged only when the value changes.
  void SetLocked(bool locked, bool by_guest);
  // The guest's START STOP UNIT with LoEj: opens (eject) or closes (load) the tray; the medium
  // stays in the open tray. An eject is refused while locked (FailedPrecondition; the device
  // answers with the MMC error) and then reported to the listeners as kEjectRequested; a load is
  // never refused.
  absl::Status GuestLoadEject(bool eject);

  void AddListener(MediaListener* listener);
  void RemoveListener(MediaListener* listener);

 private:
  // Publishes `next` and notifies listeners of `type`.
  void Publish(std::shared_ptr<const MediaState> next, MediaEventType type, bool by_guest)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mutex_);
  void Notify(const MediaEvent& event);
  // Eject/SetTrayOpen on a drive the guest locked: tells the listeners (kEjectRequested) and
  // returns the FailedPrecondition that says so.
  absl::Status AskGuestToEject(const std::shared_ptr<const MediaState>& now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mutex_);

  std::atomic<std::shared_ptr<const MediaState>> current_;
  absl::Status InsertLocked(std::shared_ptr<BlockBackend> backend, std::string source)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(change_mutex_);

  absl::Mutex change_mutex_;  // serializes changes; never taken by the I/O path
  std::string host_drive_ ABSL_GUARDED_BY(change_mutex_);  // FollowHostDrive; empty: none
  absl::Mutex listeners_mutex_;
  std::vector<MediaListener*> listeners_ ABSL_GUARDED_BY(listeners_mutex_);
};

}  // namespace block

#endif  // BLOCK_MEDIA_H_

#include "block/media.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace block {
namespace {

// A note for ThreadSanitizer runs: libstdc++ 12 builds std::atomic<std::shared_ptr> on a spin lock
// in the low bit of the control-block pointer, unannotated (later releases annotate it), so TSan
// reports the pointer's read in load() against the next store() (google/sanitizers#1558). At -O2
// the read sits between the lock's `lock cmpxchg` and the `lock sub` that releases it, which x86-64
// orders; suppress "race:_Sp_atomic" (with -g) in TSan runs.
using Snapshot = std::shared_ptr<const MediaState>;

Snapshot Load(const std::atomic<Snapshot>& current) {
  return current.load(std::memory_order_acquire);
}

void Store(std::atomic<Snapshot>& current, Snapshot next) {
  current.store(std::move(next), std::memory_order_release);
}

std::shared_ptr<MediaState> CopyOf(const std::shared_ptr<const MediaState>& state) {
  return std::make_shared<MediaState>(*state);
}

}  // namespace

RemovableMedia::RemovableMedia() : current_(std::make_shared<const MediaState>()) {}

RemovableMedia::RemovableMedia(std::shared_ptr<BlockBackend> initial, std::string source) {
  auto state = std::make_shared<MediaState>();
  state->present = initial != nullptr;
  state->backend = std::move(initial);
  if (state->present) state->source = std::move(source);
  Store(current_, std::move(state));
}

std::shared_ptr<const MediaState> RemovableMedia::Current() const { return Load(current_); }

// The changes below follow what a person (or the drive's motor) does, one step per snapshot: the
// tray opens, a medium goes in or out, the tray closes. Each step is its own event, so a device can
// map them one to one onto MMC-6 media event notifications (GET EVENT STATUS NOTIFICATION, media
// class: NewMedia, MediaRemoval, EjectRequest) and its tray state, and the I/O path never sees a
// medium that is both new and reachable before the tray has closed.

absl::Status RemovableMedia::Insert(std::shared_ptr<BlockBackend> backend, std::string source) {
  absl::MutexLock lock(&change_mutex_);
  if (!host_drive_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("this drive passes through the host drive ", host_drive_,
                     ": change the disc in that drive (eject and tray commands reach it)"));
  }
  return InsertLocked(std::move(backend), std::move(source));
}

void RemovableMedia::FollowHostDrive(std::string drive_path) {
  absl::MutexLock lock(&change_mutex_);
  host_drive_ = std::move(drive_path);
}

absl::Status RemovableMedia::InsertFromHostDrive(std::shared_ptr<BlockBackend> backend,
                                                 std::string source) {
  absl::MutexLock lock(&change_mutex_);
  return InsertLocked(std::move(backend), std::move(source));
}

absl::Status RemovableMedia::InsertLocked(std::shared_ptr<BlockBackend> backend,
                                          std::string source) {
  if (backend == nullptr) return absl::InvalidArgumentError("no backend to insert");
  const std::shared_ptr<const MediaState> now = Load(current_);
  if (now->present) {
    return absl::FailedPreconditionError(
        absl::StrCat("a medium (", now->source, ") is already in the drive; eject it first"));
  }
  // The guest's lock prevents removal (MMC-6 PREVENT ALLOW MEDIUM REMOVAL); with no medium there
  // is nothing to protect, so an insertion goes ahead even into a locked drive.
  if (!now->tray_open) {
    auto opened = CopyOf(now);
    opened->tray_open = true;
    Publish(std::move(opened), MediaEventType::kTrayOpened, /*by_guest=*/false);
  }
  auto inserted = CopyOf(Load(current_));
  inserted->present = true;
  inserted->backend = std::move(backend);
  inserted->source = std::move(source);
  ++inserted->generation;
  Publish(inserted, MediaEventType::kInserted, /*by_guest=*/false);
  auto closed = CopyOf(inserted);
  closed->tray_open = false;
  Publish(std::move(closed), MediaEventType::kTrayClosed, /*by_guest=*/false);
  return absl::OkStatus();
}

absl::Status RemovableMedia::Eject(bool force) {
  absl::MutexLock lock(&change_mutex_);
  const std::shared_ptr<const MediaState> now = Load(current_);
  if (now->tray_open && !now->present) return absl::OkStatus();  // nothing to do
  // The lock keeps the tray shut; it cannot hold a disc in an open tray. Linux's sr locks the door
  // on every open, so a guest that ejected (udev, answering an eject request) may lock again with
  // the tray still open: the medium comes out all the same, as QEMU's eject does with an open tray.
  if (now->locked && !force && !now->tray_open) return AskGuestToEject(now);
  // A forced eject leaves the guest's lock as it was: the lock is the guest's state (it unlocks with
  // PREVENT ALLOW MEDIUM REMOVAL), as with QEMU's "eject -f".
  if (!now->tray_open) {
    auto opened = CopyOf(now);
    opened->tray_open = true;
    Publish(std::move(opened), MediaEventType::kTrayOpened, /*by_guest=*/false);
  }
  if (now->present) {
    auto removed = CopyOf(Load(current_));
    removed->present = false;
    removed->backend = nullptr;
    removed->source.clear();
    ++removed->generation;
    Publish(std::move(removed), MediaEventType::kRemoved, /*by_guest=*/false);
  }
  return absl::OkStatus();
}

absl::Status RemovableMedia::AskGuestToEject(const std::shared_ptr<const MediaState>& now) {
  // What a real drive's eject button does while the host prevents removal, and QEMU's eject
  // without force: the drive reports an EjectRequest media event (MMC-6 GET EVENT STATUS
  // NOTIFICATION, media class), which Linux's sr turns into a DISK_EJECT_REQUEST uevent; udev's
  // cdrom_id then unlocks the drive and opens the tray. The caller watches for kTrayOpened.
  Notify(MediaEvent{MediaEventType::kEjectRequested, /*by_guest=*/false, now});
  return absl::FailedPreconditionError(
      "the guest has locked the drive; it was asked to eject the medium, and the tray opens if "
      "it agrees (use force to eject now)");
}

absl::Status RemovableMedia::SetTrayOpen(bool open, bool force) {
  absl::MutexLock lock(&change_mutex_);
  const std::shared_ptr<const MediaState> now = Load(current_);
  if (now->tray_open == open) return absl::OkStatus();
  // Only opening is refused: closing removes nothing, and the lock prevents removal only.
  if (open && now->locked && !force) return AskGuestToEject(now);
  auto next = CopyOf(now);
  next->tray_open = open;
  Publish(std::move(next), open ? MediaEventType::kTrayOpened : MediaEventType::kTrayClosed,
          /*by_guest=*/false);
  return absl::OkStatus();
}

void RemovableMedia::SetLocked(bool locked, bool by_guest) {
  absl::MutexLock lock(&change_mutex_);
  const std::shared_ptr<const MediaState> now = Load(current_);
  // Guests repeat PREVENT ALLOW MEDIUM REMOVAL freely (Linux's sr on every open); only a change is
  // an event.
  if (now->locked == locked) return;
  auto next = CopyOf(now);
  next->locked = locked;
  Publish(std::move(next), MediaEventType::kLockChanged, by_guest);
}

absl::Status RemovableMedia::GuestLoadEject(bool eject) {
  absl::MutexLock lock(&change_mutex_);
  const std::shared_ptr<const MediaState> now = Load(current_);
  if (now->tray_open == eject) return absl::OkStatus();
  if (eject && now->locked) {
    // MMC-6 START STOP UNIT: an eject while removal is prevented fails (ILLEGAL REQUEST, MEDIUM
    // REMOVAL PREVENTED). The listeners hear of the request so the API can decide (e.g. force it).
    Notify(MediaEvent{MediaEventType::kEjectRequested, /*by_guest=*/true, now});
    return absl::FailedPreconditionError("the guest has locked the drive");
  }
  // A guest eject opens the tray and leaves the medium in it (present && tray_open): a later load
  // brings the same medium (same generation) back.
  auto next = CopyOf(now);
  next->tray_open = eject;
  Publish(std::move(next), eject ? MediaEventType::kTrayOpened : MediaEventType::kTrayClosed,
          /*by_guest=*/true);
  return absl::OkStatus();
}

void RemovableMedia::AddListener(MediaListener* listener) {
  absl::MutexLock lock(&listeners_mutex_);
  if (std::find(listeners_.begin(), listeners_.end(), listener) == listeners_.end()) {
    listeners_.push_back(listener);
  }
}

void RemovableMedia::RemoveListener(MediaListener* listener) {
  absl::MutexLock lock(&listeners_mutex_);
  listeners_.erase(std::remove(listeners_.begin(), listeners_.end(), listener), listeners_.end());
}

void RemovableMedia::Publish(std::shared_ptr<const MediaState> next, MediaEventType type,
                             bool by_guest) {
  Store(current_, next);
  Notify(MediaEvent{type, by_guest, std::move(next)});
}

void RemovableMedia::Notify(const MediaEvent& event) {
  // Held across the callbacks so that once RemoveListener() returns, the listener is never called
  // again and may be destroyed. (So a listener must not add or remove listeners from a callback.)
  absl::MutexLock lock(&listeners_mutex_);
  for (MediaListener* listener : listeners_) listener->OnMediaEvent(event);
}

}  // namespace block

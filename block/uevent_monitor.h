#ifndef BLOCK_UEVENT_MONITOR_H_
#define BLOCK_UEVENT_MONITOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block {

// One kernel uevent (a kobject event: lib/kobject_uevent.c in Linux). On the wire, as the kernel
// broadcasts it on NETLINK_KOBJECT_UEVENT multicast group 1, a message is
//
//   "<action>@<devpath>\0KEY=VALUE\0KEY=VALUE\0...\0"
//
// with ACTION, DEVPATH, SUBSYSTEM and SEQNUM always among the keys, DEVNAME and DEVTYPE for devices
// with a device node. For a removable block device, block/disk-events.c sends a "change" event
// carrying DISK_MEDIA_CHANGE=1 when the medium changed and DISK_EJECT_REQUEST=1 when the eject
// button was pressed while removal was prevented.
struct Uevent {
  std::string action;   // "add", "remove", "change", ...
  std::string devpath;  // "/devices/pci0000:00/.../block/sr0", relative to /sys
  std::map<std::string, std::string> vars;
  // Set only on the synthetic event UeventMonitor delivers to every watch when the kernel dropped
  // messages (the socket's receive buffer overflowed, recv() failed with ENOBUFS): whatever the
  // watcher was waiting for may have been lost, so it should re-probe.
  bool lost_events = false;

  // The value of `key`, or "" when absent.
  std::string Get(absl::string_view key) const;
  // The kernel's device name: DEVNAME ("sr0"; the kernel sends it without "/dev/"), or the last
  // component of the devpath when there is no DEVNAME.
  std::string DeviceName() const;
  bool IsBlockChange() const;
  bool IsMediaChange() const;   // change with DISK_MEDIA_CHANGE=1
  bool IsEjectRequest() const;  // change with DISK_EJECT_REQUEST=1
};

// Parses one uevent message exactly as received (NUL-separated, the trailing NUL optional).
// Rejects udev's re-broadcasts ("libudev" header, multicast group 2: we listen to the kernel only)
// and anything without the "action@devpath" header. A pure function, so it is tested on literal
// messages.
absl::StatusOr<Uevent> ParseUevent(absl::string_view message);

// Receives kernel uevents and dispatches them, by device name, to watchers. Designed for an event
// loop: poll fd() for readability, then call ProcessEvents(), which reads every pending message
// without blocking. UeventThread below runs that loop on a thread of its own.
//
// Thread-safety: Watch()/Unwatch() may be called from any thread, also while another thread is in
// ProcessEvents(); handlers run on the thread calling ProcessEvents(). Once Unwatch() returns, the
// handler is not running and will not run again (it waits for a dispatch in progress), so a handler
// must not call Unwatch() itself.
class UeventMonitor {
 public:
  using Handler = std::function<void(const Uevent& event)>;
  using WatchId = uint64_t;

  // Opens and binds a NETLINK_KOBJECT_UEVENT socket to the kernel's multicast group. Fails (with
  // Unavailable, naming the cause) where netlink is not allowed, e.g. in a sandbox or a network
  // namespace without uevents: callers then run without host notifications and rely on explicit
  // refreshes.
  static absl::StatusOr<std::unique_ptr<UeventMonitor>> Open();
  // Takes ownership of `fd` (a non-blocking datagram socket, one uevent per datagram) and accepts
  // messages from any sender. For tests, which feed literal messages through a socketpair.
  static std::unique_ptr<UeventMonitor> CreateForTesting(int fd);

  ~UeventMonitor();  // closes the socket
  UeventMonitor(const UeventMonitor&) = delete;
  UeventMonitor& operator=(const UeventMonitor&) = delete;

  // Pollable (readable when messages wait).
  int fd() const { return fd_.get(); }

  // Calls `handler` for every uevent about `device_name` ("sr0"), and for lost-event notices.
  WatchId Watch(std::string device_name, Handler handler);
  void Unwatch(WatchId id);

  // Reads and dispatches every pending message; returns once the socket would block. Malformed
  // messages and messages not sent by the kernel are skipped (counted). Errors only when the socket
  // itself fails.
  absl::Status ProcessEvents();

  // Dispatches one parsed event to the watches of its device name (a lost-events notice to all).
  void Dispatch(const Uevent& event);

  uint64_t messages_received() const;
  uint64_t messages_rejected() const;

 private:
  struct WatchEntry {
    std::string device_name;
    Handler handler;
  };

  UeventMonitor(sys_util::ScopedFd fd, bool require_kernel_sender);

  const sys_util::ScopedFd fd_;
  // Netlink sockets: accept only messages whose source port id is 0 (the kernel). Any root process
  // could otherwise multicast forged events to group 1.
  const bool require_kernel_sender_;

  // Held for the whole of a dispatch, so that Unwatch() can wait for a running handler.
  absl::Mutex dispatch_mutex_ ABSL_ACQUIRED_BEFORE(watches_mutex_);
  mutable absl::Mutex watches_mutex_;
  std::map<WatchId, WatchEntry> watches_ ABSL_GUARDED_BY(watches_mutex_);
  WatchId next_watch_id_ ABSL_GUARDED_BY(watches_mutex_) = 1;
  uint64_t received_ ABSL_GUARDED_BY(watches_mutex_) = 0;
  uint64_t rejected_ ABSL_GUARDED_BY(watches_mutex_) = 0;
};

// Runs ProcessEvents() on a thread of its own whenever the monitor's fd is readable, until
// destroyed. For callers with no event loop to put the fd in.
class UeventThread {
 public:
  // `on_error` (optional) receives a socket failure; the thread then stops.
  static absl::StatusOr<std::unique_ptr<UeventThread>> Start(
      UeventMonitor* monitor, std::function<void(const absl::Status&)> on_error = nullptr);
  ~UeventThread();  // stops and joins (waits for a ProcessEvents() in progress)

  UeventThread(const UeventThread&) = delete;
  UeventThread& operator=(const UeventThread&) = delete;

 private:
  UeventThread(UeventMonitor* monitor, sys_util::ScopedFd stop_fd,
               std::function<void(const absl::Status&)> on_error);
  void Run();

  UeventMonitor* const monitor_;
  // Written by the destructor to wake poll().
  const sys_util::ScopedFd stop_fd_;
  const std::function<void(const absl::Status&)> on_error_;
  std::thread thread_;
};

}  // namespace block

#endif  // BLOCK_UEVENT_MONITOR_H_

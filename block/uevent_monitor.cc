#include "block/uevent_monitor.h"

#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/thread.h"

namespace block {
namespace {

// The kernel's multicast group for uevents; udev re-broadcasts processed events on group 2
// (libudev's "monitor" netlink group names: "kernel" = 1, "udev" = 2).
constexpr uint32_t kKernelGroup = 1;
// UEVENT_BUFFER_SIZE in include/linux/kobject.h is 2048 bytes for the environment; the header
// ("action@devpath") comes on top. 8 KiB leaves ample room, and MSG_TRUNC tells if not.
constexpr size_t kMaxMessage = 8192;
// Events arrive in bursts (every device of a hotplugged controller, or a udev trigger); a larger
// receive buffer than the default makes ENOBUFS rarer. SO_RCVBUFFORCE needs CAP_NET_ADMIN.
constexpr int kReceiveBuffer = 1 << 20;

constexpr absl::string_view kUdevMagic("libudev\0", 8);

}  // namespace

std::string Uevent::Get(absl::string_view key) const {
  auto it = vars.find(std::string(key));
  return it == vars.end() ? std::string() : it->second;
}

std::string Uevent::DeviceName() const {
  std::string name = Get("DEVNAME");
  if (!name.empty()) {
    // The kernel sends the node name relative to /dev ("sr0", "bus/usb/001/002"); strip a "/dev/"
    // prefix anyway in case a synthetic event carries the full path.
    constexpr absl::string_view kDev = "/dev/";
    if (absl::string_view(name).substr(0, kDev.size()) == kDev) name.erase(0, kDev.size());
    return name;
  }
  size_t slash = devpath.find_last_of('/');
  return slash == std::string::npos ? devpath : devpath.substr(slash + 1);
}

bool Uevent::IsBlockChange() const { return action == "change" && Get("SUBSYSTEM") == "block"; }
bool Uevent::IsMediaChange() const { return IsBlockChange() && Get("DISK_MEDIA_CHANGE") == "1"; }
bool Uevent::IsEjectRequest() const { return IsBlockChange() && Get("DISK_EJECT_REQUEST") == "1"; }

absl::StatusOr<Uevent> ParseUevent(absl::string_view message) {
  if (message.substr(0, kUdevMagic.size()) == kUdevMagic) {
    return absl::InvalidArgumentError("a udev (libudev) message, not a kernel uevent");
  }
  std::vector<absl::string_view> fields = absl::StrSplit(message, '\0');
  if (fields.empty() || fields[0].empty()) {
    return absl::InvalidArgumentError("empty uevent message");
  }
  absl::string_view header = fields[0];
  size_t at = header.find('@');
  if (at == absl::string_view::npos || at == 0 || at + 1 == header.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("uevent header is not \"action@devpath\": \"", header, "\""));
  }
  Uevent event;
  event.action = std::string(header.substr(0, at));
  event.devpath = std::string(header.substr(at + 1));
  for (size_t i = 1; i < fields.size(); ++i) {
    absl::string_view field = fields[i];
    if (field.empty()) continue;  // the terminating NUL
    size_t eq = field.find('=');
    if (eq == absl::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("uevent field is not \"KEY=VALUE\": \"", field, "\""));
    }
    event.vars[std::string(field.substr(0, eq))] = std::string(field.substr(eq + 1));
  }
  // The kernel repeats the header in ACTION= and DEVPATH=; a disagreement means a forged or
  // corrupted message.
  auto action = event.vars.find("ACTION");
  auto devpath = event.vars.find("DEVPATH");
  if ((action != event.vars.end() && action->second != event.action) ||
      (devpath != event.vars.end() && devpath->second != event.devpath)) {
    return absl::InvalidArgumentError(
        absl::StrCat("uevent header \"", header, "\" disagrees with its ACTION/DEVPATH"));
  }
  return event;
}

UeventMonitor::UeventMonitor(sys_util::ScopedFd fd, bool require_kernel_sender)
    : fd_(std::move(fd)), require_kernel_sender_(require_kernel_sender) {}

UeventMonitor::~UeventMonitor() = default;

absl::StatusOr<std::unique_ptr<UeventMonitor>> UeventMonitor::Open() {
  sys_util::ScopedFd fd(
      ::socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_KOBJECT_UEVENT));
  if (fd.get() < 0) {
    return absl::UnavailableError(
        absl::StrCat("no host media notifications: socket(AF_NETLINK, NETLINK_KOBJECT_UEVENT): ",
                     std::strerror(errno)));
  }
  int size = kReceiveBuffer;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) != 0) {
    // Without CAP_NET_ADMIN: the request is capped by net.core.rmem_max, still better than default.
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  }
  sockaddr_nl address = {};
  address.nl_family = AF_NETLINK;
  address.nl_pid = 0;  // let the kernel pick a unique port id
  address.nl_groups = kKernelGroup;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return absl::UnavailableError(
        absl::StrCat("no host media notifications: bind(NETLINK_KOBJECT_UEVENT, group 1): ",
                     std::strerror(errno)));
  }
  return std::unique_ptr<UeventMonitor>(new UeventMonitor(std::move(fd), true));
}

std::unique_ptr<UeventMonitor> UeventMonitor::CreateForTesting(int fd) {
  return std::unique_ptr<UeventMonitor>(new UeventMonitor(sys_util::ScopedFd(fd), false));
}

UeventMonitor::WatchId UeventMonitor::Watch(std::string device_name, Handler handler) {
  absl::MutexLock lock(&watches_mutex_);
  WatchId id = next_watch_id_++;
  watches_.emplace(id, WatchEntry{std::move(device_name), std::move(handler)});
  return id;
}

void UeventMonitor::Unwatch(WatchId id) {
  // Taking dispatch_mutex_ first waits for a dispatch in progress, which may be running this very
  // handler: after we return, the watcher may be destroyed.
  absl::MutexLock dispatch_lock(&dispatch_mutex_);
  absl::MutexLock lock(&watches_mutex_);
  watches_.erase(id);
}

void UeventMonitor::Dispatch(const Uevent& event) {
  absl::MutexLock dispatch_lock(&dispatch_mutex_);
  std::vector<Handler> handlers;
  {
    absl::MutexLock lock(&watches_mutex_);
    std::string name = event.lost_events ? std::string() : event.DeviceName();
    for (const auto& [id, watch] : watches_) {
      if (event.lost_events || watch.device_name == name) handlers.push_back(watch.handler);
    }
  }
  // Handlers run without watches_mutex_ so they may Watch() more; dispatch_mutex_ stays held.
  for (Handler& handler : handlers) handler(event);
}

absl::Status UeventMonitor::ProcessEvents() {
  char buffer[kMaxMessage];
  while (true) {
    sockaddr_nl sender = {};
    iovec iov = {buffer, sizeof(buffer)};
    msghdr header = {};
    header.msg_name = &sender;
    header.msg_namelen = sizeof(sender);
    header.msg_iov = &iov;
    header.msg_iovlen = 1;
    ssize_t n = ::recvmsg(fd_.get(), &header, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return absl::OkStatus();
      if (errno == ENOBUFS) {
        // The kernel dropped messages for us (netlink_overrun): tell every watcher to re-probe.
        Uevent lost;
        lost.lost_events = true;
        Dispatch(lost);
        continue;
      }
      return sys_util::ErrnoStatus(errno, "recvmsg(uevent socket)");
    }
    if (n == 0) {
      // A closed stream socket (only possible with a test fd); nothing more will come.
      return absl::OkStatus();
    }
    bool kernel_sent = !require_kernel_sender_ ||
                       (header.msg_namelen >= sizeof(sockaddr_nl) && sender.nl_pid == 0);
    bool truncated = (header.msg_flags & MSG_TRUNC) != 0;
    absl::StatusOr<Uevent> event =
        kernel_sent && !truncated ? ParseUevent(absl::string_view(buffer, static_cast<size_t>(n)))
                                  : absl::StatusOr<Uevent>(absl::InvalidArgumentError("rejected"));
    {
      absl::MutexLock lock(&watches_mutex_);
      ++received_;
      if (!event.ok()) ++rejected_;
    }
    if (event.ok()) Dispatch(*event);
  }
}

uint64_t UeventMonitor::messages_received() const {
  absl::MutexLock lock(&watches_mutex_);
  return received_;
}

uint64_t UeventMonitor::messages_rejected() const {
  absl::MutexLock lock(&watches_mutex_);
  return rejected_;
}

UeventThread::UeventThread(UeventMonitor* monitor, sys_util::ScopedFd stop_fd,
                           std::function<void(const absl::Status&)> on_error)
    : monitor_(monitor), stop_fd_(std::move(stop_fd)), on_error_(std::move(on_error)) {}

absl::StatusOr<std::unique_ptr<UeventThread>> UeventThread::Start(
    UeventMonitor* monitor, std::function<void(const absl::Status&)> on_error) {
  ASSIGN_OR_RETURN(sys_util::ScopedFd stop_fd, sys_util::MakeEventFd());
  std::unique_ptr<UeventThread> thread(
      new UeventThread(monitor, std::move(stop_fd), std::move(on_error)));
  ASSIGN_OR_RETURN(thread->thread_,
                   sys_util::StartThread({.name = "uevent"}, [raw = thread.get()] { raw->Run(); }));
  return thread;
}

UeventThread::~UeventThread() {
  sys_util::SignalEventFd(stop_fd_.get());
  if (thread_.joinable()) thread_.join();
}

void UeventThread::Run() {
  while (true) {
    pollfd fds[2] = {{monitor_->fd(), POLLIN, 0}, {stop_fd_.get(), POLLIN, 0}};
    int ready = ::poll(fds, 2, -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      if (on_error_) on_error_(sys_util::ErrnoStatus(errno, "poll(uevent socket)"));
      return;
    }
    if (fds[1].revents != 0) return;
    if (fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) {
      // POLLERR on a netlink socket is the ENOBUFS overrun, which ProcessEvents() handles.
      if (fds[0].revents & POLLNVAL) {
        if (on_error_) on_error_(absl::InternalError("uevent socket closed"));
        return;
      }
    }
    if (fds[0].revents != 0) {
      absl::Status status = monitor_->ProcessEvents();
      if (!status.ok()) {
        if (on_error_) on_error_(status);
        return;
      }
      // A stream-type test socket reports POLLHUP forever once closed; stop instead of spinning.
      if ((fds[0].revents & POLLHUP) && !(fds[0].revents & POLLIN)) return;
    }
  }
}

}  // namespace block

#include "block/uevent_monitor.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace block {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the kernel sends when sr0's medium changes (block/disk-events.c, disk_event_uevent(), via
// kobject_uevent_env(): ACTION, DEVPATH, SUBSYSTEM, the extra DISK_* variable, then the device's
// own (MAJOR, MINOR, DEVNAME, DEVTYPE, DISKSEQ) and SEQNUM last), as udevadm monitor --kernel
// --property shows it.
constexpr char kSr0Devpath[] =
    "/devices/pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0";
constexpr char kMediaChangeBytes[] =
    "change@/devices/pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0\0"
    "ACTION=change\0"
    "DEVPATH=/devices/pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0\0"
    "SUBSYSTEM=block\0"
    "DISK_MEDIA_CHANGE=1\0"
    "MAJOR=11\0"
    "MINOR=0\0"
    "DEVNAME=sr0\0"
    "DEVTYPE=disk\0"
    "DISKSEQ=7\0"
    "SEQNUM=4711\0";
// Every field, the last included, ends in its NUL; drop only the literal's own terminator.
const std::string kMediaChange(kMediaChangeBytes, sizeof(kMediaChangeBytes) - 1);

// Builds "header\0k=v\0...\0" from pieces.
std::string Message(const std::vector<std::string>& fields) {
  std::string message;
  for (const std::string& field : fields) {
    message += field;
    message.push_back('\0');
  }
  return message;
}

std::string BlockChange(const std::string& name, const std::string& variable) {
  const std::string devpath = "/devices/virtual/block/" + name;
  return Message({"change@" + devpath, "ACTION=change", "DEVPATH=" + devpath, "SUBSYSTEM=block",
                  variable, "DEVNAME=" + name, "DEVTYPE=disk", "SEQNUM=1"});
}

TEST(ParseUeventTest, MediaChangeFromTheKernel) {
  auto event = ParseUevent(kMediaChange);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->action, "change");
  EXPECT_EQ(event->devpath, kSr0Devpath);
  EXPECT_EQ(event->Get("SUBSYSTEM"), "block");
  EXPECT_EQ(event->Get("SEQNUM"), "4711");
  EXPECT_EQ(event->Get("MAJOR"), "11");
  EXPECT_EQ(event->Get("NOT_THERE"), "");
  EXPECT_EQ(event->DeviceName(), "sr0");
  EXPECT_TRUE(event->IsBlockChange());
  EXPECT_TRUE(event->IsMediaChange());
  EXPECT_FALSE(event->IsEjectRequest());
  EXPECT_FALSE(event->lost_events);
}

TEST(ParseUeventTest, EjectRequest) {
  auto event = ParseUevent(BlockChange("sr1", "DISK_EJECT_REQUEST=1"));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_TRUE(event->IsEjectRequest());
  EXPECT_FALSE(event->IsMediaChange());
  EXPECT_EQ(event->DeviceName(), "sr1");
}

TEST(ParseUeventTest, TrailingNulIsOptional) {
  std::string message = kMediaChange;
  message.pop_back();
  auto event = ParseUevent(message);
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->Get("SEQNUM"), "4711");
}

TEST(ParseUeventTest, ValuesMayContainEqualsSigns) {
  auto event = ParseUevent(Message({"add@/module/x", "ACTION=add", "PARAMS=a=b"}));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->Get("PARAMS"), "a=b");
}

TEST(ParseUeventTest, DeviceNameFallsBackToTheDevpath) {
  auto event = ParseUevent(Message({"remove@/devices/virtual/block/loop3", "ACTION=remove"}));
  ASSERT_TRUE(event.ok()) << event.status();
  EXPECT_EQ(event->DeviceName(), "loop3");
  EXPECT_FALSE(event->IsBlockChange());
  // A "/dev/" prefix (never sent by the kernel) is stripped all the same.
  auto prefixed = ParseUevent(Message({"change@/x/sr0", "DEVNAME=/dev/sr0"}));
  ASSERT_TRUE(prefixed.ok());
  EXPECT_EQ(prefixed->DeviceName(), "sr0");
}

TEST(ParseUeventTest, NonBlockChangeIsNotAMediaChange) {
  auto event = ParseUevent(Message(
      {"change@/devices/x/net/eth0", "ACTION=change", "SUBSYSTEM=net", "DISK_MEDIA_CHANGE=1"}));
  ASSERT_TRUE(event.ok());
  EXPECT_FALSE(event->IsMediaChange());
}

TEST(ParseUeventTest, RejectsMalformedMessages) {
  EXPECT_FALSE(ParseUevent("").ok());
  EXPECT_FALSE(ParseUevent(std::string("\0ACTION=change\0", 15)).ok());
  EXPECT_FALSE(ParseUevent(Message({"change/devices/x", "ACTION=change"})).ok());  // no '@'
  EXPECT_FALSE(ParseUevent(Message({"@/devices/x"})).ok());                        // no action
  EXPECT_FALSE(ParseUevent(Message({"change@"})).ok());                            // no devpath
  auto no_equals = ParseUevent(Message({"change@/devices/x", "JUNK"}));
  ASSERT_FALSE(no_equals.ok());
  EXPECT_THAT(no_equals.status().message(), HasSubstr("JUNK"));
  EXPECT_FALSE(ParseUevent(Message({"change@/devices/x", "=value"})).ok());
  // Header and ACTION/DEVPATH must agree.
  EXPECT_FALSE(ParseUevent(Message({"change@/devices/x", "ACTION=add"})).ok());
  EXPECT_FALSE(ParseUevent(Message({"change@/devices/x", "DEVPATH=/devices/y"})).ok());
}

TEST(ParseUeventTest, RejectsUdevMessages) {
  // libudev's monitor messages start with "libudev\0" and a binary header (group 2).
  std::string udev("libudev\0\xfe\xed\xca\xfe", 12);
  udev += kMediaChange;
  auto event = ParseUevent(udev);
  ASSERT_FALSE(event.ok());
  EXPECT_THAT(event.status().message(), HasSubstr("udev"));
}

// A monitor reading literal messages from a socketpair.
class MonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    monitor_ = UeventMonitor::CreateForTesting(fds[0]);
    sender_ = fds[1];
  }
  void TearDown() override { ::close(sender_); }

  void Send(const std::string& message) {
    ASSERT_EQ(::send(sender_, message.data(), message.size(), 0),
              static_cast<ssize_t>(message.size()));
  }

  std::unique_ptr<UeventMonitor> monitor_;
  int sender_ = -1;
};

TEST_F(MonitorTest, DispatchesByDeviceName) {
  std::vector<std::string> sr0, sr1;
  monitor_->Watch("sr0", [&](const Uevent& e) { sr0.push_back(e.Get("SEQNUM")); });
  monitor_->Watch("sr1", [&](const Uevent& e) { sr1.push_back(e.Get("SEQNUM")); });

  pollfd p = {monitor_->fd(), POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0);
  Send(kMediaChange);
  Send(Message({"add@/devices/virtual/block/loop0", "ACTION=add", "DEVNAME=loop0", "SEQNUM=1"}));
  Send(BlockChange("sr1", "DISK_EJECT_REQUEST=1"));
  Send("garbage without header");
  EXPECT_EQ(::poll(&p, 1, 0), 1);

  ASSERT_TRUE(monitor_->ProcessEvents().ok());
  EXPECT_THAT(sr0, ElementsAre("4711"));
  EXPECT_THAT(sr1, ElementsAre("1"));
  EXPECT_EQ(monitor_->messages_received(), 4u);
  EXPECT_EQ(monitor_->messages_rejected(), 1u);
  EXPECT_EQ(::poll(&p, 1, 0), 0);               // drained
  ASSERT_TRUE(monitor_->ProcessEvents().ok());  // nothing pending: returns at once
}

TEST_F(MonitorTest, UnwatchStopsDispatch) {
  int calls = 0;
  auto id = monitor_->Watch("sr0", [&](const Uevent&) { ++calls; });
  Send(kMediaChange);
  ASSERT_TRUE(monitor_->ProcessEvents().ok());
  monitor_->Unwatch(id);
  Send(kMediaChange);
  ASSERT_TRUE(monitor_->ProcessEvents().ok());
  EXPECT_EQ(calls, 1);
}

TEST_F(MonitorTest, LostEventsReachEveryWatch) {
  std::vector<std::string> seen;
  monitor_->Watch("sr0", [&](const Uevent& e) { seen.push_back(e.lost_events ? "lost" : "sr0"); });
  monitor_->Watch("sr1", [&](const Uevent& e) { seen.push_back(e.lost_events ? "lost" : "sr1"); });
  Uevent lost;
  lost.lost_events = true;
  monitor_->Dispatch(lost);
  EXPECT_THAT(seen, ElementsAre("lost", "lost"));
}

TEST_F(MonitorTest, ThreadHelperRunsTheLoop) {
  absl::Notification seen;
  monitor_->Watch("sr0", [&](const Uevent& e) {
    if (e.IsMediaChange()) seen.Notify();
  });
  auto thread = UeventThread::Start(monitor_.get());
  ASSERT_TRUE(thread.ok()) << thread.status();
  Send(kMediaChange);
  EXPECT_TRUE(seen.WaitForNotificationWithTimeout(absl::Seconds(5)));
  thread->reset();  // stops and joins promptly
}

TEST(UeventMonitorOpenTest, OpensOrSaysWhyNot) {
  // Netlink may be refused in a sandbox; then the status says that notifications are off.
  auto monitor = UeventMonitor::Open();
  if (!monitor.ok()) {
    EXPECT_EQ(monitor.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(monitor.status().message(), HasSubstr("no host media notifications"));
    FAIL() << "netlink uevents unavailable here: " << monitor.status();
  }
  EXPECT_GE((*monitor)->fd(), 0);
  // Whatever is pending (probably nothing) is read without blocking.
  EXPECT_TRUE((*monitor)->ProcessEvents().ok());
}

TEST(UeventMonitorOpenTest, ReceivesARealKernelUevent) {
  // End to end through the kernel: a synthetic "change" uevent (Documentation/ABI/testing/
  // sysfs-uevent: "change <UUID>" written to a device's uevent file, as `udevadm trigger` does) on
  // the null device, which nothing reacts to beyond udev re-applying /dev/null's mode. Our UUID
  // picks our event out of whatever else the host broadcasts.
  auto monitor = UeventMonitor::Open();
  ASSERT_TRUE(monitor.ok()) << monitor.status();
  const std::string uuid = "4f1c9a52-6f7e-4c1e-9d0a-" + std::to_string(100000000000 + ::getpid());
  absl::Notification seen;
  Uevent received;
  (*monitor)->Watch("null", [&](const Uevent& event) {
    if (event.Get("SYNTH_UUID") == uuid && !seen.HasBeenNotified()) {
      received = event;
      seen.Notify();
    }
  });
  FILE* trigger = std::fopen("/sys/devices/virtual/mem/null/uevent", "w");
  ASSERT_NE(trigger, nullptr) << "cannot write /sys/devices/virtual/mem/null/uevent: "
                              << strerror(errno);
  const std::string command = "change " + uuid;
  const bool written = std::fputs(command.c_str(), trigger) >= 0;
  const bool closed = std::fclose(trigger) == 0;  // sysfs reports a bad write at flush
  ASSERT_TRUE(written && closed) << "the kernel refused a synthetic uevent";

  auto thread = UeventThread::Start(monitor->get());
  ASSERT_TRUE(thread.ok());
  if (!seen.WaitForNotificationWithTimeout(absl::Seconds(3))) {
    // Uevents reach only network namespaces of the initial user namespace (lib/kobject_uevent.c,
    // uevent_net_broadcast_untagged): Bazel's sandbox, which has a user namespace of its own,
    // would hear nothing, so the target is tagged no-sandbox.
    FAIL() << "no uevent arrived within 3 s";
  }
  thread->reset();
  EXPECT_EQ(received.action, "change");
  EXPECT_EQ(received.devpath, "/devices/virtual/mem/null");
  EXPECT_EQ(received.Get("SUBSYSTEM"), "mem");
  EXPECT_EQ(received.DeviceName(), "null");
  EXPECT_EQ((*monitor)->messages_rejected(), 0u);
}

}  // namespace
}  // namespace block

#include "vmm/sys_util/rate_limited_log.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace sys_util {
namespace {

struct Captured {
  std::vector<std::string> lines;
  absl::Time now = absl::UnixEpoch();
  LogOptions Options(uint32_t burst, LogLevel threshold = LogLevel::kInfo) {
    return {.threshold = threshold,
            .burst = burst,
            .interval = absl::Seconds(5),
            .sink = [this](absl::string_view line) { lines.emplace_back(line); },
            .clock = [this] { return now; }};
  }
};

TEST(RateLimitedLogTest, LinesNameTheSourceAndLevel) {
  Captured captured;
  RateLimitedLog log("virtio-scsi", captured.Options(10));
  log.Warning("queue %d needs reset: %s", 2, "loop");
  log.Error("gone");
  ASSERT_EQ(captured.lines.size(), 2u);
  EXPECT_EQ(captured.lines[0], "virtio-scsi: warning: queue 2 needs reset: loop\n");
  EXPECT_EQ(captured.lines[1], "virtio-scsi: error: gone\n");
}

TEST(RateLimitedLogTest, ABurstPerIntervalThenACountOfWhatWasDropped) {
  Captured captured;
  RateLimitedLog log("ide", captured.Options(3));
  for (int i = 0; i < 100; ++i) log.Warning("bad command %d", i);
  EXPECT_EQ(captured.lines.size(), 3u);
  EXPECT_EQ(log.suppressed(), 97u);
  captured.now += absl::Seconds(5);
  log.Warning("later");
  ASSERT_EQ(captured.lines.size(), 4u);
  EXPECT_EQ(captured.lines[3], "ide: warning: later (97 earlier message(s) suppressed)\n");
  log.Warning("and again");
  EXPECT_EQ(captured.lines[4], "ide: warning: and again\n");
}

TEST(RateLimitedLogTest, LessSevereThanTheThresholdIsDroppedUncounted) {
  Captured captured;
  RateLimitedLog log("vhost-user", captured.Options(10, LogLevel::kWarning));
  log.Info("connected");
  log.Log(LogLevel::kDebug, "ring %d", 0);
  log.Warning("reset");
  ASSERT_EQ(captured.lines.size(), 1u);
  EXPECT_EQ(log.suppressed(), 0u);
}

}  // namespace
}  // namespace sys_util

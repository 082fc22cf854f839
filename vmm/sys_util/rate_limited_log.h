#ifndef VMM_SYS_UTIL_RATE_LIMITED_LOG_H_
#define VMM_SYS_UTIL_RATE_LIMITED_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sys_util {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

absl::string_view LogLevelName(LogLevel level);

struct LogOptions {
  // Messages less severe than this are dropped (not counted as suppressed).
  LogLevel threshold = LogLevel::kInfo;
  // At most `burst` messages per `interval`; the rest are counted, and the count is printed with
  // the first message of a later interval. A guest can trigger device errors at will; without a
  // limit it could fill the host's disk through the VMM's stderr, or slow the VMM down writing.
  uint32_t burst = 10;
  absl::Duration interval = absl::Seconds(5);
  // Where lines go (default: stderr). Each call gets one whole line with its newline.
  std::function<void(absl::string_view line)> sink;
  // The time source (default absl::Now); tests step it.
  std::function<absl::Time()> clock;
};

// A levelled, rate-limited log for one source (a device, a queue, a server), owned by it: there is
// no process-wide logger to configure. Lines read "SOURCE: LEVEL: MESSAGE". Thread-safe.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(std::string source, LogOptions options = {});

  template <typename... Args>
  void Log(LogLevel level, const absl::FormatSpec<Args...>& format, const Args&... args) {
    if (level > options_.threshold) return;
    Write(level, absl::StrFormat(format, args...));
  }
  template <typename... Args>
  void Error(const absl::FormatSpec<Args...>& format, const Args&... args) {
    Log(LogLevel::kError, format, args...);
  }
  template <typename... Args>
  void Warning(const absl::FormatSpec<Args...>& format, const Args&... args) {
    Log(LogLevel::kWarning, format, args...);
  }
  template <typename... Args>
  void Info(const absl::FormatSpec<Args...>& format, const Args&... args) {
    Log(LogLevel::kInfo, format, args...);
  }

  // Messages dropped by the rate limit so far.
  uint64_t suppressed() const;

 private:
  void Write(LogLevel level, const std::string& message);

  const std::string source_;
  const LogOptions options_;
  mutable absl::Mutex mutex_;
  absl::Time window_start_ ABSL_GUARDED_BY(mutex_) = absl::InfinitePast();
  uint32_t written_in_window_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t suppressed_since_last_line_ ABSL_GUARDED_BY(mutex_) = 0;
  uint64_t suppressed_total_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace sys_util

#endif  // VMM_SYS_UTIL_RATE_LIMITED_LOG_H_

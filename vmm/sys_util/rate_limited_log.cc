#include "vmm/sys_util/rate_limited_log.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sys_util {

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kError:
      return "error";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kDebug:
      return "debug";
  }
  return "?";
}

RateLimitedLog::RateLimitedLog(std::string source, LogOptions options)
    : source_(std::move(source)), options_(std::move(options)) {}

uint64_t RateLimitedLog::suppressed() const {
  absl::MutexLock lock(&mutex_);
  return suppressed_total_;
}

void RateLimitedLog::Write(LogLevel level, const std::string& message) {
  const absl::Time now = options_.clock ? options_.clock() : absl::Now();
  std::string line;
  {
    absl::MutexLock lock(&mutex_);
    if (now - window_start_ >= options_.interval) {
      window_start_ = now;
      written_in_window_ = 0;
    }
    if (written_in_window_ >= options_.burst) {
      ++suppressed_since_last_line_;
      ++suppressed_total_;
      return;
    }
    ++written_in_window_;
    line = absl::StrCat(source_, ": ", LogLevelName(level), ": ", message);
    if (suppressed_since_last_line_ != 0) {
      absl::StrAppend(&line, " (", suppressed_since_last_line_, " earlier message(s) suppressed)");
      suppressed_since_last_line_ = 0;
    }
    line += '\n';
  }
  if (options_.sink) {
    options_.sink(line);
  } else {
    std::fwrite(line.data(), 1, line.size(), stderr);
  }
}

}  // namespace sys_util

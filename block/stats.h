#ifndef BLOCK_STATS_H_
#define BLOCK_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "block/request.h"

namespace block {

// Latency buckets, log2 of microseconds: bucket 0 holds [0, 1) µs, bucket k (1..24) holds
// [2^(k-1), 2^k) µs, and the last bucket everything from 2^24 µs (about 16.8 s) up.
inline constexpr int kLatencyBuckets = 26;

struct LatencyHistogram {
  std::array<uint64_t, kLatencyBuckets> buckets{};
  uint64_t count = 0;   // sum of buckets (taken from them, so a snapshot is self-consistent)
  uint64_t sum_us = 0;  // for the mean
  uint64_t max_us = 0;

  // The bucket a latency of `us` microseconds falls in.
  static int BucketFor(uint64_t us);
  // The exclusive upper bound of bucket `bucket` in microseconds (the last bucket has none: UINT64_MAX).
  static uint64_t BucketUpperBoundUs(int bucket);

  // An upper bound for the `percentile` (0..100) latency in microseconds: the upper bound of the
  // bucket holding that rank, capped at the largest latency seen. 0 when empty. A log2 histogram
  // cannot say more than "within a factor of two"; the bound errs on the slow side.
  uint64_t PercentileUs(double percentile) const;
  double MeanUs() const { return count == 0 ? 0.0 : static_cast<double>(sum_us) / count; }
};

// A copy of a drive's counters. Each field was read atomically, but not all at one instant: fields
// may disagree by the requests that completed while the snapshot was taken.
struct StatsSnapshot {
  // Requests completed successfully, by type, and their bytes (as the guest asked: a FUA emulated
  // as write + flush counts as one write).
  uint64_t read_requests = 0;
  uint64_t read_bytes = 0;
  uint64_t write_requests = 0;
  uint64_t write_bytes = 0;
  uint64_t flush_requests = 0;
  uint64_t discard_requests = 0;
  uint64_t discard_bytes = 0;
  // Requests that completed with an error, whether rejected by the drive or failed by the host.
  uint64_t errors = 0;
  // Successful writes made durable before completing (guest FUA, or every write in writethrough and
  // directsync): by one write with RWF_DSYNC, or by write then flush.
  uint64_t fua_native = 0;
  uint64_t fua_emulated = 0;
  // cache=unsafe: guest flushes acknowledged without host I/O, and FUA bits dropped.
  uint64_t flushes_ignored = 0;
  uint64_t fua_ignored = 0;
  // I/O limits (block/throttle.h): requests that waited for their budget, and for how long in all.
  uint64_t throttled_requests = 0;
  uint64_t throttled_us = 0;
  // Of every successful request, from Enqueue() to its completion handler.
  LatencyHistogram latency;
};

// The counters of one drive. Updated on iothreads (possibly several queues of the same drive at
// once) with relaxed atomic increments: no lock on the I/O path, and nothing orders these counters
// against the I/O itself. Read with Snapshot() from any thread.
class Stats {
 public:
  Stats() = default;
  Stats(const Stats&) = delete;
  Stats& operator=(const Stats&) = delete;

  // A request completed: `bytes` is its length (0 for flushes), `error` 0 or an errno,
  // `latency_ns` the time since it was enqueued.
  void RecordCompletion(RequestType type, uint64_t bytes, int error, uint64_t latency_ns);
  void RecordFuaNative() { Add(fua_native_); }
  void RecordFuaEmulated() { Add(fua_emulated_); }
  void RecordFlushIgnored() { Add(flushes_ignored_); }
  void RecordFuaIgnored() { Add(fua_ignored_); }
  void RecordThrottled(uint64_t waited_us) {
    Add(throttled_requests_);
    Add(throttled_us_, waited_us);
  }

  StatsSnapshot Snapshot() const;

 private:
  static void Add(std::atomic<uint64_t>& counter, uint64_t value = 1) {
    counter.fetch_add(value, std::memory_order_relaxed);
  }

  std::atomic<uint64_t> read_requests_{0};
  std::atomic<uint64_t> read_bytes_{0};
  std::atomic<uint64_t> write_requests_{0};
  std::atomic<uint64_t> write_bytes_{0};
  std::atomic<uint64_t> flush_requests_{0};
  std::atomic<uint64_t> discard_requests_{0};
  std::atomic<uint64_t> discard_bytes_{0};
  std::atomic<uint64_t> errors_{0};
  std::atomic<uint64_t> fua_native_{0};
  std::atomic<uint64_t> fua_emulated_{0};
  std::atomic<uint64_t> flushes_ignored_{0};
  std::atomic<uint64_t> fua_ignored_{0};
  std::atomic<uint64_t> throttled_requests_{0};
  std::atomic<uint64_t> throttled_us_{0};
  std::array<std::atomic<uint64_t>, kLatencyBuckets> latency_buckets_{};
  std::atomic<uint64_t> latency_sum_us_{0};
  std::atomic<uint64_t> latency_max_us_{0};
};

// Plain text, one "key value" pair per line, prefixed with `name` (the drive's name) when not
// empty: "disk0.read_requests 12". Latency lines give count, mean, p50, p90, p99, p99.9 and max in
// microseconds, then the non-empty buckets as "latency_us_lt_<bound> <count>" (the last one as
// "latency_us_ge_16777216").
std::string FormatStats(const StatsSnapshot& stats, absl::string_view name = "");

}  // namespace block

#endif  // BLOCK_STATS_H_

#include "block/stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace block {

int LatencyHistogram::BucketFor(uint64_t us) {
  // std::bit_width(us) is 0 for 0, k for [2^(k-1), 2^k).
  return std::min(static_cast<int>(std::bit_width(us)), kLatencyBuckets - 1);
}

uint64_t LatencyHistogram::BucketUpperBoundUs(int bucket) {
  if (bucket >= kLatencyBuckets - 1) return std::numeric_limits<uint64_t>::max();
  return uint64_t{1} << bucket;
}

uint64_t LatencyHistogram::PercentileUs(double percentile) const {
  if (count == 0) return 0;
  percentile = std::clamp(percentile, 0.0, 100.0);
  // The nearest-rank definition: the smallest latency with at least `percentile`% at or below it.
  uint64_t rank = static_cast<uint64_t>(std::ceil(percentile / 100.0 * static_cast<double>(count)));
  rank = std::clamp<uint64_t>(rank, 1, count);
  uint64_t seen = 0;
  for (int bucket = 0; bucket < kLatencyBuckets; ++bucket) {
    seen += buckets[bucket];
    if (seen >= rank) return std::min(BucketUpperBoundUs(bucket), max_us);
  }
  return max_us;
}

void Stats::RecordCompletion(RequestType type, uint64_t bytes, int error, uint64_t latency_ns) {
  if (error != 0) {
    Add(errors_);
    return;
  }
  switch (type) {
    case RequestType::kRead:
      Add(read_requests_);
      Add(read_bytes_, bytes);
      break;
    case RequestType::kWrite:
      Add(write_requests_);
      Add(write_bytes_, bytes);
      break;
    case RequestType::kFlush:
      Add(flush_requests_);
      break;
    case RequestType::kDiscard:
      Add(discard_requests_);
      Add(discard_bytes_, bytes);
      break;
  }
  const uint64_t us = latency_ns / 1000;
  Add(latency_buckets_[LatencyHistogram::BucketFor(us)]);
  Add(latency_sum_us_, us);
  // A relaxed maximum: retry only while ours is still larger.
  uint64_t max = latency_max_us_.load(std::memory_order_relaxed);
  while (us > max && !latency_max_us_.compare_exchange_weak(max, us, std::memory_order_relaxed)) {
  }
}

StatsSnapshot Stats::Snapshot() const {
  auto get = [](const std::atomic<uint64_t>& counter) {
    return counter.load(std::memory_order_relaxed);
  };
  StatsSnapshot s;
  s.read_requests = get(read_requests_);
  s.read_bytes = get(read_bytes_);
  s.write_requests = get(write_requests_);
  s.write_bytes = get(write_bytes_);
  s.flush_requests = get(flush_requests_);
  s.discard_requests = get(discard_requests_);
  s.discard_bytes = get(discard_bytes_);
  s.errors = get(errors_);
  s.fua_native = get(fua_native_);
  s.fua_emulated = get(fua_emulated_);
  s.flushes_ignored = get(flushes_ignored_);
  s.fua_ignored = get(fua_ignored_);
  s.throttled_requests = get(throttled_requests_);
  s.throttled_us = get(throttled_us_);
  for (int i = 0; i < kLatencyBuckets; ++i) {
    s.latency.buckets[i] = get(latency_buckets_[i]);
    s.latency.count += s.latency.buckets[i];
  }
  s.latency.sum_us = get(latency_sum_us_);
  s.latency.max_us = get(latency_max_us_);
  return s;
}

std::string FormatStats(const StatsSnapshot& s, absl::string_view name) {
  const std::string prefix = name.empty() ? "" : absl::StrCat(name, ".");
  std::string out;
  auto line = [&](absl::string_view key, uint64_t value) {
    absl::StrAppend(&out, prefix, key, " ", value, "\n");
  };
  line("read_requests", s.read_requests);
  line("read_bytes", s.read_bytes);
  line("write_requests", s.write_requests);
  line("write_bytes", s.write_bytes);
  line("flush_requests", s.flush_requests);
  line("discard_requests", s.discard_requests);
  line("discard_bytes", s.discard_bytes);
  line("errors", s.errors);
  line("fua_native", s.fua_native);
  line("fua_emulated", s.fua_emulated);
  line("flushes_ignored", s.flushes_ignored);
  line("fua_ignored", s.fua_ignored);
  line("throttled_requests", s.throttled_requests);
  line("throttled_us", s.throttled_us);
  line("latency_count", s.latency.count);
  absl::StrAppend(&out, prefix, "latency_mean_us ", absl::StrFormat("%.1f", s.latency.MeanUs()),
                  "\n");
  line("latency_p50_us", s.latency.PercentileUs(50));
  line("latency_p90_us", s.latency.PercentileUs(90));
  line("latency_p99_us", s.latency.PercentileUs(99));
  line("latency_p99.9_us", s.latency.PercentileUs(99.9));
  line("latency_max_us", s.latency.max_us);
  for (int i = 0; i < kLatencyBuckets; ++i) {
    if (s.latency.buckets[i] == 0) continue;
    if (i == kLatencyBuckets - 1) {
      line(absl::StrCat("latency_us_ge_", LatencyHistogram::BucketUpperBoundUs(i - 1)),
           s.latency.buckets[i]);
    } else {
      line(absl::StrCat("latency_us_lt_", LatencyHistogram::BucketUpperBoundUs(i)),
           s.latency.buckets[i]);
    }
  }
  return out;
}

}  // namespace block

#include "block/stats.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace block {
namespace {

constexpr uint64_t kUs = 1000;  // ns

TEST(LatencyHistogramTest, Log2BucketsOfMicroseconds) {
  EXPECT_EQ(LatencyHistogram::BucketFor(0), 0);
  EXPECT_EQ(LatencyHistogram::BucketFor(1), 1);
  EXPECT_EQ(LatencyHistogram::BucketFor(2), 2);
  EXPECT_EQ(LatencyHistogram::BucketFor(3), 2);
  EXPECT_EQ(LatencyHistogram::BucketFor(4), 3);
  EXPECT_EQ(LatencyHistogram::BucketFor(1023), 10);
  EXPECT_EQ(LatencyHistogram::BucketFor(1024), 11);
  EXPECT_EQ(LatencyHistogram::BucketFor((uint64_t{1} << 24) - 1), 24);
  EXPECT_EQ(LatencyHistogram::BucketFor(uint64_t{1} << 24), kLatencyBuckets - 1);
  EXPECT_EQ(LatencyHistogram::BucketFor(~uint64_t{0}), kLatencyBuckets - 1);
  EXPECT_EQ(LatencyHistogram::BucketUpperBoundUs(0), 1u);
  EXPECT_EQ(LatencyHistogram::BucketUpperBoundUs(11), 2048u);
  EXPECT_EQ(LatencyHistogram::BucketUpperBoundUs(kLatencyBuckets - 1), ~uint64_t{0});
}

TEST(LatencyHistogramTest, PercentilesAreBucketUpperBoundsCappedAtTheMaximum) {
  Stats stats;
  // 90 requests of 100 µs (bucket [64, 128)), 9 of 1000 µs ([512, 1024)), 1 of 5000 µs.
  for (int i = 0; i < 90; ++i) stats.RecordCompletion(RequestType::kRead, 4096, 0, 100 * kUs);
  for (int i = 0; i < 9; ++i) stats.RecordCompletion(RequestType::kRead, 4096, 0, 1000 * kUs);
  stats.RecordCompletion(RequestType::kRead, 4096, 0, 5000 * kUs);
  const LatencyHistogram h = stats.Snapshot().latency;
  EXPECT_EQ(h.count, 100u);
  EXPECT_EQ(h.buckets[LatencyHistogram::BucketFor(100)], 90u);
  EXPECT_EQ(h.max_us, 5000u);
  EXPECT_EQ(h.sum_us, 90u * 100 + 9 * 1000 + 5000);
  EXPECT_DOUBLE_EQ(h.MeanUs(), 230.0);
  EXPECT_EQ(h.PercentileUs(0), 128u);
  EXPECT_EQ(h.PercentileUs(50), 128u);
  EXPECT_EQ(h.PercentileUs(90), 128u);
  EXPECT_EQ(h.PercentileUs(91), 1024u);
  EXPECT_EQ(h.PercentileUs(99), 1024u);
  // The top bucket is [4096, 8192): capped at the largest latency seen.
  EXPECT_EQ(h.PercentileUs(99.9), 5000u);
  EXPECT_EQ(h.PercentileUs(100), 5000u);
}

TEST(LatencyHistogramTest, EmptyAndOverflow) {
  EXPECT_EQ(LatencyHistogram{}.PercentileUs(50), 0u);
  EXPECT_EQ(LatencyHistogram{}.MeanUs(), 0.0);
  Stats stats;
  stats.RecordCompletion(RequestType::kFlush, 0, 0, uint64_t{40} * 1000 * 1000 * 1000);  // 40 s
  const LatencyHistogram h = stats.Snapshot().latency;
  EXPECT_EQ(h.buckets[kLatencyBuckets - 1], 1u);
  EXPECT_EQ(h.PercentileUs(50), 40u * 1000 * 1000);
}

TEST(StatsTest, CountsSuccessesByTypeAndErrorsApart) {
  Stats stats;
  stats.RecordCompletion(RequestType::kRead, 512, 0, kUs);
  stats.RecordCompletion(RequestType::kRead, 1024, 0, kUs);
  stats.RecordCompletion(RequestType::kWrite, 4096, 0, kUs);
  stats.RecordCompletion(RequestType::kFlush, 0, 0, kUs);
  stats.RecordCompletion(RequestType::kDiscard, 1 << 20, 0, kUs);
  stats.RecordCompletion(RequestType::kWrite, 4096, EIO, kUs);
  stats.RecordFuaNative();
  stats.RecordFuaEmulated();
  stats.RecordFuaEmulated();
  stats.RecordFlushIgnored();
  stats.RecordFuaIgnored();
  const StatsSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.read_requests, 2u);
  EXPECT_EQ(s.read_bytes, 1536u);
  EXPECT_EQ(s.write_requests, 1u);
  EXPECT_EQ(s.write_bytes, 4096u);
  EXPECT_EQ(s.flush_requests, 1u);
  EXPECT_EQ(s.discard_requests, 1u);
  EXPECT_EQ(s.discard_bytes, 1u << 20);
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.fua_native, 1u);
  EXPECT_EQ(s.fua_emulated, 2u);
  EXPECT_EQ(s.flushes_ignored, 1u);
  EXPECT_EQ(s.fua_ignored, 1u);
  EXPECT_EQ(s.latency.count, 5u);  // failed requests are not in the histogram
}

TEST(StatsTest, ConcurrentUpdatersLoseNothing) {
  Stats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats, t] {
      for (int i = 0; i < 10000; ++i) {
        stats.RecordCompletion(RequestType::kWrite, 512, 0, (t * 10000 + i) * kUs);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const StatsSnapshot s = stats.Snapshot();
  EXPECT_EQ(s.write_requests, 40000u);
  EXPECT_EQ(s.write_bytes, 40000u * 512);
  EXPECT_EQ(s.latency.count, 40000u);
  EXPECT_EQ(s.latency.max_us, 39999u);
}

TEST(StatsTest, FormatsPlainText) {
  Stats stats;
  stats.RecordCompletion(RequestType::kRead, 4096, 0, 3 * kUs);
  stats.RecordCompletion(RequestType::kWrite, 512, EIO, 3 * kUs);
  const std::string text = FormatStats(stats.Snapshot(), "disk0");
  EXPECT_NE(text.find("disk0.read_requests 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("disk0.read_bytes 4096\n"), std::string::npos) << text;
  EXPECT_NE(text.find("disk0.errors 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("disk0.latency_p50_us 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("disk0.latency_mean_us 3.0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("disk0.latency_us_lt_4 1\n"), std::string::npos) << text;
  EXPECT_EQ(FormatStats(StatsSnapshot{}).find("read_requests 0\n"), 0u);
}

}  // namespace
}  // namespace block

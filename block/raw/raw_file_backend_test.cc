#include "block/raw/raw_file_backend.h"

#include <fcntl.h>
#include <linux/io_uring.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "block/backend.h"
#include "block/cache_mode.h"
#include "block/raw/aligned_buffer.h"
#include "block/raw/recording_ring.h"
#include "block/raw/uring_ops.h"
#include "block/request.h"
#include "gtest/gtest.h"
#include "vmm/sys_util/scoped_fd.h"

namespace block::raw {
namespace {

constexpr uint64_t kFileSize = 1 << 20;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// A file of `size` bytes whose byte at offset i is Pattern(i, seed).
uint8_t Pattern(uint64_t offset, uint8_t seed) {
  return static_cast<uint8_t>((offset * 131 + offset / 4096 * 7 + seed) & 0xff);
}

std::string MakeFile(const std::string& name, uint64_t size, uint8_t seed = 1) {
  const std::string path = TempPath(name);
  sys_util::ScopedFd fd(open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  EXPECT_TRUE(fd.valid()) << path;
  std::vector<uint8_t> data(size);
  for (uint64_t i = 0; i < size; ++i) data[i] = Pattern(i, seed);
  EXPECT_EQ(pwrite(fd.get(), data.data(), size, 0), static_cast<ssize_t>(size));
  EXPECT_EQ(fsync(fd.get()), 0);
  return path;
}

std::vector<uint8_t> ReadFile(const std::string& path, uint64_t offset, uint64_t length) {
  sys_util::ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  std::vector<uint8_t> data(length);
  EXPECT_EQ(pread(fd.get(), data.data(), length, offset), static_cast<ssize_t>(length));
  return data;
}

// A page-aligned buffer (so O_DIRECT takes it as it is unless a test offsets into it).
AlignedBuffer Buffer(size_t size, uint8_t fill) {
  AlignedBuffer buffer = AlignedBuffer::Allocate(size, 4096);
  std::memset(buffer.data(), fill, size);
  return buffer;
}

// A backend, one queue (through a RecordingRing unless `real_ring`) and the completions it
// reported.
class Harness {
 public:
  explicit Harness(const std::string& path, RawFileOptions options = {}, bool real_ring = false) {
    absl::StatusOr<std::shared_ptr<RawFileBackend>> backend = RawFileBackend::Open(path, options);
    EXPECT_TRUE(backend.ok()) << backend.status();
    backend_ = *backend;
    auto handler = [this](uint64_t cookie, Completion completion) {
      EXPECT_EQ(results_.count(cookie), 0u) << "completed twice: " << cookie;
      results_[cookie] = completion.error;
      order_.push_back(cookie);
      if (on_completion_) on_completion_(cookie, completion);
    };
    absl::StatusOr<std::unique_ptr<BlockQueue>> queue;
    if (real_ring) {
      queue = backend_->CreateQueue(handler);
    } else {
      absl::StatusOr<std::unique_ptr<UringOps>> inner =
          CreateLockedDownRing(options.ring_entries, backend_->fd());
      EXPECT_TRUE(inner.ok()) << inner.status();
      auto ring = std::make_unique<RecordingRing>(*std::move(inner));
      ring_ = ring.get();
      queue = backend_->CreateQueueWithRing(handler, std::move(ring));
    }
    EXPECT_TRUE(queue.ok()) << queue.status();
    queue_ = *std::move(queue);
  }

  RawFileBackend& backend() { return *backend_; }
  BlockQueue& queue() { return *queue_; }
  RecordingRing& ring() { return *ring_; }
  const std::map<uint64_t, int>& results() const { return results_; }
  const std::vector<uint64_t>& order() const { return order_; }
  int result(uint64_t cookie) const {
    auto it = results_.find(cookie);
    return it == results_.end() ? -1 : it->second;
  }
  void set_on_completion(std::function<void(uint64_t, Completion)> callback) {
    on_completion_ = std::move(callback);
  }

  // The caller's loop: wait on completion_fd() with poll(2), then ProcessCompletions(), until
  // nothing is in flight. False on a 10 s stall.
  bool Drain() {
    while (queue_->in_flight() > 0) {
      pollfd pfd = {queue_->completion_fd(), POLLIN, 0};
      if (poll(&pfd, 1, 10000) != 1) return false;
      queue_->ProcessCompletions();
    }
    return true;
  }

  // Enqueue, Submit, Drain; the completion's errno.
  int Run(const Request& request, uint64_t cookie) {
    queue_->Enqueue(request, cookie);
    queue_->Submit();
    EXPECT_TRUE(Drain());
    return result(cookie);
  }

  int Write(uint64_t offset, std::span<const iovec> buffers, uint64_t cookie, bool fua = false) {
    Request request;
    request.type = RequestType::kWrite;
    request.offset = offset;
    request.buffers = buffers;
    request.fua = fua;
    return Run(request, cookie);
  }
  int Read(uint64_t offset, std::span<const iovec> buffers, uint64_t cookie) {
    Request request;
    request.type = RequestType::kRead;
    request.offset = offset;
    request.buffers = buffers;
    return Run(request, cookie);
  }

  int CountOps(UringOpcode opcode) const {
    int count = 0;
    for (const SqeRecord& record : ring_->records()) count += record.opcode == opcode;
    return count;
  }

 private:
  std::shared_ptr<RawFileBackend> backend_;
  RecordingRing* ring_ = nullptr;  // owned by queue_
  std::map<uint64_t, int> results_;
  std::vector<uint64_t> order_;
  std::function<void(uint64_t, Completion)> on_completion_;
  std::unique_ptr<BlockQueue> queue_;  // last: destroyed first, before what the handler touches
};

Request MakeRead(uint64_t offset, std::span<const iovec> buffers) {
  Request request;
  request.type = RequestType::kRead;
  request.offset = offset;
  request.buffers = buffers;
  return request;
}

Request MakeWrite(uint64_t offset, std::span<const iovec> buffers, bool fua = false) {
  Request request = MakeRead(offset, buffers);
  request.type = RequestType::kWrite;
  request.fua = fua;
  return request;
}

// --- Data path in every cache mode -----------------------------------------------------------

class CacheModeTest : public testing::TestWithParam<CacheMode> {};

TEST_P(CacheModeTest, ScatterGatherWriteIsReadBack) {
  const std::string path = MakeFile("sg_" + CacheModeName(GetParam()) + ".img", kFileSize);
  RawFileOptions options;
  options.cache_mode = GetParam();
  Harness h(path, options);
  ASSERT_EQ(h.backend().direct_io(), UsesDirectIo(GetParam()));
  const int flags = fcntl(h.backend().fd(), F_GETFL);
  EXPECT_EQ((flags & O_DIRECT) != 0, UsesDirectIo(GetParam()));
  EXPECT_EQ(flags & O_ACCMODE, O_RDWR);
  EXPECT_EQ(h.backend().info().size_bytes, kFileSize);
  EXPECT_EQ(h.backend().info().logical_block_size, 512u);

  // Three aligned segments (4096 + 8192 + 512 bytes), written at 64 KiB + 512.
  AlignedBuffer a = Buffer(4096, 0xa1), b = Buffer(8192, 0xb2), c = Buffer(512, 0xc3);
  const iovec write_iov[] = {{a.data(), 4096}, {b.data(), 8192}, {c.data(), 512}};
  const uint64_t offset = 65536 + 512;
  EXPECT_EQ(h.Write(offset, write_iov, 1), 0);

  // Read back split differently: 512 + 12288, plus one 1024 read of the bytes around the end.
  AlignedBuffer r1 = Buffer(512, 0), r2 = Buffer(12288, 0);
  const iovec read_iov[] = {{r1.data(), 512}, {r2.data(), 12288}};
  EXPECT_EQ(h.Read(offset, read_iov, 2), 0);
  std::vector<uint8_t> expected(4096, 0xa1);
  expected.insert(expected.end(), 8192, 0xb2);
  expected.insert(expected.end(), 512, 0xc3);
  std::vector<uint8_t> got(r1.data(), r1.data() + 512);
  got.insert(got.end(), r2.data(), r2.data() + 12288);
  EXPECT_EQ(got, expected);

  AlignedBuffer edge = Buffer(1024, 0);
  const iovec edge_iov[] = {{edge.data(), 1024}};
  EXPECT_EQ(h.Read(offset + 12288, edge_iov, 3), 0);
  for (int i = 0; i < 512; ++i) ASSERT_EQ(static_cast<uint8_t>(edge.data()[i]), 0xc3);
  for (int i = 512; i < 1024; ++i) {
    ASSERT_EQ(static_cast<uint8_t>(edge.data()[i]), Pattern(offset + 12288 + i, 1)) << i;
  }
  // And the file really holds it (another fd, through the page cache).
  EXPECT_EQ(ReadFile(path, offset, expected.size()), expected);
  EXPECT_EQ(h.queue().in_flight(), 0u);
}

INSTANTIATE_TEST_SUITE_P(AllModes, CacheModeTest,
                         testing::Values(CacheMode::kNone, CacheMode::kWriteback,
                                         CacheMode::kWritethrough, CacheMode::kDirectsync,
                                         CacheMode::kUnsafe),
                         [](const testing::TestParamInfo<CacheMode>& info) {
                           return CacheModeName(info.param);
                         });

// --- What reaches the ring ---------------------------------------------------------------------

TEST(RawFileBackendTest, FuaWriteIsOneRwfDsyncWriteWithoutFsync) {
  const std::string path = MakeFile("fua.img", kFileSize);
  Harness h(path);
  EXPECT_TRUE(h.backend().info().native_fua);
  AlignedBuffer data = Buffer(4096, 0x5a);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Write(8192, iov, 1, /*fua=*/true), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  const SqeRecord& record = h.ring().records()[0];
  EXPECT_EQ(record.opcode, UringOpcode::kWritev);
  EXPECT_EQ(record.rw_flags, RWF_DSYNC);
  EXPECT_EQ(record.offset, 8192u);
  EXPECT_EQ(record.length, 4096u);
  EXPECT_EQ(h.CountOps(UringOpcode::kFsync), 0);

  h.ring().ClearRecords();
  EXPECT_EQ(h.Write(8192, iov, 2, /*fua=*/false), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].opcode, UringOpcode::kWritev);
  EXPECT_EQ(h.ring().records()[0].rw_flags & RWF_DSYNC, 0);
}

TEST(RawFileBackendTest, EmulatedFuaIsNotNative) {
  const std::string path = MakeFile("fua_emulate.img", kFileSize);
  RawFileOptions options;
  options.fua_mode = FuaMode::kEmulate;
  Harness h(path, options);
  EXPECT_FALSE(h.backend().info().native_fua);
  // The drive layer emulates FUA; the backend does not double it.
  AlignedBuffer data = Buffer(4096, 0x5a);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Write(0, iov, 1, /*fua=*/true), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].rw_flags, 0);
}

TEST(RawFileBackendTest, FlushIsDatasyncFsync) {
  const std::string path = MakeFile("flush.img", kFileSize);
  Harness h(path);
  Request flush;
  flush.type = RequestType::kFlush;
  EXPECT_EQ(h.Run(flush, 7), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].opcode, UringOpcode::kFsync);
  EXPECT_EQ(h.ring().records()[0].fsync_flags, IORING_FSYNC_DATASYNC);
}

TEST(RawFileBackendTest, OneSubmitPerBatch) {
  const std::string path = MakeFile("batch.img", kFileSize);
  Harness h(path);
  constexpr int kRequests = 16;
  std::vector<AlignedBuffer> buffers;
  std::vector<iovec> iovs(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    buffers.push_back(Buffer(4096, static_cast<uint8_t>(i)));
    iovs[i] = {buffers.back().data(), 4096};
  }
  for (int i = 0; i < kRequests; ++i) {
    const bool write = i % 2 == 0;
    Request request =
        write ? MakeWrite(i * 4096, {&iovs[i], 1}) : MakeRead(i * 4096, {&iovs[i], 1});
    h.queue().Enqueue(request, i);
  }
  // Enqueue only records.
  EXPECT_EQ(h.ring().records().size(), 0u);
  EXPECT_EQ(h.ring().submit_calls(), 0);
  EXPECT_EQ(h.queue().in_flight(), static_cast<size_t>(kRequests));
  h.queue().Submit();
  EXPECT_EQ(h.ring().submit_calls(), 1);
  EXPECT_EQ(h.ring().records().size(), static_cast<size_t>(kRequests));
  ASSERT_TRUE(h.Drain());
  EXPECT_EQ(h.ring().submit_calls(), 1);
  ASSERT_EQ(h.results().size(), static_cast<size_t>(kRequests));
  for (const auto& [cookie, error] : h.results()) EXPECT_EQ(error, 0) << cookie;
  // An empty Submit() is no system call.
  h.queue().Submit();
  EXPECT_EQ(h.ring().submit_calls(), 1);
}

// --- Robustness ------------------------------------------------------------------------------

TEST(RawFileBackendTest, ShortWriteAndReadAreResubmitted) {
  const std::string path = MakeFile("short.img", kFileSize);
  Harness h(path);
  // Two segments; the short transfer (1500 bytes) ends inside the second one.
  AlignedBuffer a = Buffer(1000, 0x11), b = Buffer(3096, 0x22);
  iovec iov[] = {{a.data(), 1000}, {b.data(), 3096}};
  const iovec original[] = {iov[0], iov[1]};
  RingFault fault;
  fault.opcode = UringOpcode::kWritev;
  fault.short_transfer = true;
  fault.short_bytes = 1500;
  h.ring().AddFault(fault);
  EXPECT_EQ(h.Write(4096, iov, 1), 0);
  ASSERT_EQ(h.CountOps(UringOpcode::kWritev), 2);
  EXPECT_EQ(h.ring().records()[1].offset, 4096u + 1500);
  EXPECT_EQ(h.ring().records()[1].length, 4096u - 1500);
  EXPECT_EQ(h.ring().records()[1].iovec_count, 1u);
  // The caller's iovec array is untouched.
  EXPECT_EQ(iov[0].iov_base, original[0].iov_base);
  EXPECT_EQ(iov[0].iov_len, original[0].iov_len);
  EXPECT_EQ(iov[1].iov_base, original[1].iov_base);
  EXPECT_EQ(iov[1].iov_len, original[1].iov_len);
  std::vector<uint8_t> expected(1000, 0x11);
  expected.insert(expected.end(), 3096, 0x22);
  EXPECT_EQ(ReadFile(path, 4096, 4096), expected);

  // A read cut in half (2048 bytes, default), twice over.
  h.ring().ClearRecords();
  fault.opcode = UringOpcode::kReadv;
  fault.short_bytes = 0;
  fault.times = 2;
  h.ring().AddFault(fault);
  AlignedBuffer r1 = Buffer(3000, 0), r2 = Buffer(1096, 0);
  const iovec read_iov[] = {{r1.data(), 3000}, {r2.data(), 1096}};
  EXPECT_EQ(h.Read(4096, read_iov, 2), 0);
  EXPECT_EQ(h.CountOps(UringOpcode::kReadv), 3);
  std::vector<uint8_t> got(r1.data(), r1.data() + 3000);
  got.insert(got.end(), r2.data(), r2.data() + 1096);
  EXPECT_EQ(got, expected);
}

// Without O_DIRECT a failed flush may have lost data the page cache held, and Linux reports that
// once: a later fdatasync would succeed over it. So every later flush and FUA write fails with the
// first error, on every queue of the file, without reaching the kernel; plain reads and writes go
// on (RawFileBackend::lost_writeback_error).
TEST(RawFileBackendTest, AFailedFlushOnThePageCacheFailsEveryLaterFlushAndFuaWrite) {
  const std::string path = MakeFile("lost_writeback.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kWriteback;
  Harness h(path, options);
  AlignedBuffer data = Buffer(4096, 0x5a);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Write(0, iov, 1), 0);
  RingFault fault;
  fault.opcode = UringOpcode::kFsync;
  fault.error = EIO;
  h.ring().AddFault(fault);
  Request flush;
  flush.type = RequestType::kFlush;
  EXPECT_EQ(h.Run(flush, 2), EIO);
  EXPECT_EQ(h.backend().lost_writeback_error(), EIO);
  h.ring().ClearRecords();
  EXPECT_EQ(h.Run(flush, 3), EIO);
  EXPECT_EQ(h.Write(4096, iov, 4, /*fua=*/true), EIO);
  EXPECT_EQ(h.CountOps(UringOpcode::kFsync), 0);
  EXPECT_EQ(h.CountOps(UringOpcode::kWritev), 0);
  // Plain writes and reads still work.
  EXPECT_EQ(h.Write(8192, iov, 5), 0);
  AlignedBuffer back = Buffer(4096, 0);
  const iovec read_iov[] = {{back.data(), 4096}};
  EXPECT_EQ(h.Read(8192, read_iov, 6), 0);
  EXPECT_EQ(std::memcmp(back.data(), data.data(), 4096), 0);
  // Another queue of the same file shares the verdict.
  std::map<uint64_t, int> other_results;
  auto other = h.backend().CreateQueue([&other_results](uint64_t cookie, Completion completion) {
    other_results[cookie] = completion.error;
  });
  ASSERT_TRUE(other.ok()) << other.status();
  (*other)->Enqueue(flush, 7);
  (*other)->Submit();
  while ((*other)->in_flight() > 0) {
    pollfd pfd = {(*other)->completion_fd(), POLLIN, 0};
    ASSERT_EQ(poll(&pfd, 1, 10000), 1);
    (*other)->ProcessCompletions();
  }
  EXPECT_EQ(other_results[7], EIO);
  EXPECT_EQ(h.queue().in_flight(), 0u);
}

// A native FUA write (RWF_DSYNC) that fails with EIO failed in its writeback, as a flush would;
// one that fails with ENOSPC dirtied nothing and leaves later flushes alone.
TEST(RawFileBackendTest, AFuaWriteThatFailsInWritebackCountsAsAFailedFlush) {
  const std::string path = MakeFile("lost_fua.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kWriteback;
  Harness h(path, options);
  AlignedBuffer data = Buffer(4096, 0x3c);
  const iovec iov[] = {{data.data(), 4096}};
  RingFault fault;
  fault.opcode = UringOpcode::kWritev;
  fault.error = ENOSPC;
  h.ring().AddFault(fault);
  EXPECT_EQ(h.Write(0, iov, 1, /*fua=*/true), ENOSPC);
  EXPECT_EQ(h.backend().lost_writeback_error(), 0);
  Request flush;
  flush.type = RequestType::kFlush;
  EXPECT_EQ(h.Run(flush, 2), 0);
  fault.error = EIO;
  h.ring().AddFault(fault);
  EXPECT_EQ(h.Write(0, iov, 3, /*fua=*/true), EIO);
  EXPECT_EQ(h.backend().lost_writeback_error(), EIO);
  EXPECT_EQ(h.Run(flush, 4), EIO);
}

// With a pool (the product's way, RawFileOptions::ring_pool) the backend takes its rings from it,
// serves I/O through them, and gives them back when it goes; an empty pool fails the open with
// ResourceExhausted rather than making a ring.
TEST(RawFileBackendTest, RingsComeFromThePoolAndGoBackToIt) {
  auto pool = RingPool::Create(3, 16);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const std::string path = MakeFile("pooled.img", kFileSize);
  RawFileOptions options;
  options.ring_pool = *pool;
  options.prepared_rings = 2;
  {
    Harness h(path, options, /*real_ring=*/true);
    EXPECT_EQ((*pool)->available(), 1u);  // two prepared, one of them the queue's now
    AlignedBuffer data = Buffer(4096, 0x42);
    const iovec iov[] = {{data.data(), 4096}};
    EXPECT_EQ(h.Write(0, iov, 1, /*fua=*/true), 0);
    EXPECT_EQ(ReadFile(path, 0, 4096), std::vector<uint8_t>(4096, 0x42));
    const std::string other = MakeFile("pooled-other.img", kFileSize);
    auto exhausted = RawFileBackend::Open(other, options);
    ASSERT_FALSE(exhausted.ok());
    EXPECT_EQ(exhausted.status().code(), absl::StatusCode::kResourceExhausted)
        << exhausted.status();
    EXPECT_EQ((*pool)->available(), 1u);  // the one it took went back
  }
  EXPECT_EQ((*pool)->available(), 3u);
  // Back in the pool, the rings serve the next file.
  const std::string next = MakeFile("pooled-next.img", kFileSize);
  RawFileOptions next_options = options;
  next_options.prepared_rings = 1;
  Harness h(next, next_options, /*real_ring=*/true);
  AlignedBuffer data = Buffer(4096, 0x24);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Write(8192, iov, 1), 0);
  EXPECT_EQ(ReadFile(next, 8192, 4096), std::vector<uint8_t>(4096, 0x24));
}

TEST(RawFileBackendTest, EagainAndEintrAreRetried) {
  const std::string path = MakeFile("eagain.img", kFileSize);
  Harness h(path);
  RingFault fault;
  fault.opcode = UringOpcode::kReadv;
  fault.error = EAGAIN;
  fault.times = 3;
  h.ring().AddFault(fault);
  fault.error = EINTR;
  fault.times = 1;
  h.ring().AddFault(fault);
  AlignedBuffer data = Buffer(4096, 0);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Read(0, iov, 1), 0);
  EXPECT_EQ(h.CountOps(UringOpcode::kReadv), 5);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(static_cast<uint8_t>(data.data()[i]), Pattern(i, 1));
}

// With O_DIRECT (cache=none) a failed flush is that flush's error alone: nothing of the guest's
// waited in the page cache, and the next flush may succeed.
TEST(RawFileBackendTest, ErrorsSurfaceAndTheQueueKeepsWorking) {
  const std::string path = MakeFile("errors.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  Harness h(path, options);
  AlignedBuffer data = Buffer(4096, 0x77);
  const iovec iov[] = {{data.data(), 4096}};
  RingFault fault;
  fault.opcode = UringOpcode::kWritev;
  fault.error = EIO;
  h.ring().AddFault(fault);
  fault.error = ENOSPC;
  h.ring().AddFault(fault);
  EXPECT_EQ(h.Write(0, iov, 1), EIO);
  EXPECT_EQ(h.Write(0, iov, 2), ENOSPC);
  fault.opcode = UringOpcode::kFsync;
  fault.error = EIO;
  h.ring().AddFault(fault);
  Request flush;
  flush.type = RequestType::kFlush;
  EXPECT_EQ(h.Run(flush, 3), EIO);
  // Nothing was written; now it works.
  EXPECT_NE(ReadFile(path, 0, 1)[0], 0x77);
  EXPECT_EQ(h.Write(0, iov, 4), 0);
  EXPECT_EQ(h.Run(flush, 5), 0);
  EXPECT_EQ(ReadFile(path, 0, 4096), std::vector<uint8_t>(4096, 0x77));
  EXPECT_EQ(h.queue().in_flight(), 0u);
}

TEST(RawFileBackendTest, PersistentEagainFailsWithEio) {
  const std::string path = MakeFile("eagain_forever.img", kFileSize);
  Harness h(path);
  RingFault fault;
  fault.opcode = UringOpcode::kReadv;
  fault.error = EAGAIN;
  fault.times = 1 << 30;
  h.ring().AddFault(fault);
  AlignedBuffer data = Buffer(512, 0);
  const iovec iov[] = {{data.data(), 512}};
  EXPECT_EQ(h.Read(0, iov, 1), EIO);
}

TEST(RawFileBackendTest, RingFullRequestsWaitAndAllComplete) {
  const std::string path = MakeFile("ring_full.img", kFileSize);
  RawFileOptions options;
  options.ring_entries = 4;
  options.cache_mode = CacheMode::kNone;  // slow enough that the ring really fills
  Harness h(path, options);
  constexpr int kRequests = 64;
  std::vector<AlignedBuffer> buffers;
  std::vector<iovec> iovs(kRequests);
  for (int i = 0; i < kRequests; ++i) {
    buffers.push_back(Buffer(4096, static_cast<uint8_t>(i + 1)));
    iovs[i] = {buffers.back().data(), 4096};
    h.queue().Enqueue(MakeWrite(i * 8192, {&iovs[i], 1}), i);
  }
  h.queue().Submit();
  EXPECT_EQ(h.ring().submit_calls(), 1);
  EXPECT_EQ(h.ring().records().size(), 4u);  // the rest wait for room
  ASSERT_TRUE(h.Drain());
  ASSERT_EQ(h.results().size(), static_cast<size_t>(kRequests));
  for (const auto& [cookie, error] : h.results()) EXPECT_EQ(error, 0) << cookie;
  EXPECT_EQ(h.CountOps(UringOpcode::kWritev), kRequests);
  // The FIFO kept order: requests went to the ring in the order they were enqueued.
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(h.ring().records()[i].offset, i * 8192u);

  // Read all 64 back in one batch too.
  std::vector<AlignedBuffer> back;
  for (int i = 0; i < kRequests; ++i) {
    back.push_back(Buffer(4096, 0));
    iovs[i] = {back.back().data(), 4096};
    h.queue().Enqueue(MakeRead(i * 8192, {&iovs[i], 1}), 100 + i);
  }
  h.queue().Submit();
  ASSERT_TRUE(h.Drain());
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(h.result(100 + i), 0);
    EXPECT_EQ(std::memcmp(back[i].data(), buffers[i].data(), 4096), 0) << i;
  }
}

TEST(RawFileBackendTest, ReadPastEndOfTruncatedFileIsZeroFilled) {
  const std::string path = MakeFile("eof.img", 65536);
  Harness h(path);
  ASSERT_EQ(truncate(path.c_str(), 32768), 0);  // behind the backend's back
  AlignedBuffer data = Buffer(16384, 0xee);
  const iovec iov[] = {{data.data(), 16384}};
  EXPECT_EQ(h.Read(24576, iov, 1), 0);
  for (int i = 0; i < 8192; ++i) {
    ASSERT_EQ(static_cast<uint8_t>(data.data()[i]), Pattern(24576 + i, 1)) << i;
  }
  for (int i = 8192; i < 16384; ++i) ASSERT_EQ(data.data()[i], 0) << i;
}

// The fadvise hints a queue has submitted, as [offset, end) ranges in order.
std::vector<std::pair<uint64_t, uint64_t>> Hints(const RecordingRing& ring) {
  std::vector<std::pair<uint64_t, uint64_t>> hints;
  for (const SqeRecord& record : ring.records()) {
    if (record.opcode == UringOpcode::kFadvise) {
      hints.push_back({record.offset, record.offset + record.length});
    }
  }
  return hints;
}

// A medium read front to back (a CD): each queue asks the kernel for what lies up to 1 MiB
// beyond a stream of reads, each byte once and at least 256 KiB at a time, never past the end;
// a read elsewhere starts a new stream with no hint until reads follow on from it again. The
// hints report nothing to the caller and the data read is the file's.
TEST(RawFileBackendTest, ASequentialMediumIsReadAheadOfItsStream) {
  constexpr uint64_t kChunk = 128 << 10;
  const std::string path = MakeFile("read-ahead.img", 4 << 20);
  RawFileOptions options;
  options.read_only = true;
  options.sequential = true;
  Harness h(path, options);
  EXPECT_TRUE(h.backend().reads_ahead());
  AlignedBuffer data = Buffer(kChunk, 0);
  const iovec iov[] = {{data.data(), kChunk}};
  for (uint64_t i = 0; i < 8; ++i) {
    ASSERT_EQ(h.Read(i * kChunk, iov, i), 0);
    for (uint64_t at = 0; at < kChunk; at += 4093) {
      ASSERT_EQ(static_cast<uint8_t>(data.data()[at]), Pattern(i * kChunk + at, 1))
          << i << " " << at;
    }
  }
  const auto hints = Hints(h.ring());
  ASSERT_FALSE(hints.empty());
  EXPECT_EQ(hints.front().first, kChunk);  // from the end of the first read
  for (size_t i = 0; i < hints.size(); ++i) {
    EXPECT_GE(hints[i].second - hints[i].first, 256u << 10) << i;
    if (i > 0) {
      EXPECT_EQ(hints[i].first, hints[i - 1].second) << "each byte once";
    }
  }
  // Up to 1 MiB beyond the last read, less than one step short of it.
  EXPECT_LE(hints.back().second, 8 * kChunk + (1 << 20));
  EXPECT_GT(hints.back().second, 8 * kChunk + (1 << 20) - (256 << 10));
  EXPECT_EQ(h.results().size(), 8u);  // the hints reported nothing

  // A jump: no hint; the next read that follows on asks again, up to the medium's end.
  h.ring().ClearRecords();
  const uint64_t jump = (4 << 20) - 4 * kChunk;
  ASSERT_EQ(h.Read(jump, iov, 100), 0);
  EXPECT_TRUE(Hints(h.ring()).empty());
  ASSERT_EQ(h.Read(jump + kChunk, iov, 101), 0);
  EXPECT_EQ(Hints(h.ring()),
            (std::vector<std::pair<uint64_t, uint64_t>>{{jump + 2 * kChunk, uint64_t{4} << 20}}));
  ASSERT_EQ(h.Read(jump + 2 * kChunk, iov, 102), 0);
  EXPECT_EQ(Hints(h.ring()).size(), 1u) << "nothing left to ask for";
}

TEST(RawFileBackendTest, OnlyASequentialMediumThroughThePageCacheIsReadAhead) {
  const std::string path = MakeFile("no-read-ahead.img", 1 << 20);
  AlignedBuffer data = Buffer(65536, 0);
  const iovec iov[] = {{data.data(), 65536}};
  RawFileOptions plain;
  RawFileOptions direct;
  direct.sequential = true;
  direct.cache_mode = CacheMode::kNone;
  for (const RawFileOptions& options : {plain, direct}) {
    Harness h(path, options);
    EXPECT_FALSE(h.backend().reads_ahead());
    for (uint64_t i = 0; i < 8; ++i) ASSERT_EQ(h.Read(i * 65536, iov, i), 0);
    EXPECT_EQ(h.CountOps(UringOpcode::kFadvise), 0);
  }
}

TEST(RawFileBackendTest, MoreThanIovMaxSegmentsAreBounced) {
  const std::string path = MakeFile("iovmax.img", kFileSize);
  Harness h(path);
  constexpr int kSegments = 1100;  // IOV_MAX is 1024
  std::vector<uint8_t> out(kSegments * 16), in(kSegments * 16, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7);
  std::vector<iovec> write_iov(kSegments), read_iov(kSegments);
  for (int i = 0; i < kSegments; ++i) {
    write_iov[i] = {out.data() + i * 16, 16};
    read_iov[i] = {in.data() + i * 16, 16};
  }
  EXPECT_EQ(h.Write(1024, write_iov, 1), 0);
  EXPECT_EQ(h.Read(1024, read_iov, 2), 0);
  EXPECT_EQ(in, out);
  for (const SqeRecord& record : h.ring().records()) EXPECT_EQ(record.iovec_count, 1u);
}

TEST(RawFileBackendTest, HandlerMayEnqueueAndSubmit) {
  const std::string path = MakeFile("reentrant.img", kFileSize);
  Harness h(path);
  AlignedBuffer data = Buffer(4096, 0x42);
  const iovec iov[] = {{data.data(), 4096}};
  // Emulated FUA as the drive layer does it: the write's completion issues the flush.
  h.set_on_completion([&h](uint64_t cookie, Completion completion) {
    if (cookie != 1) return;
    EXPECT_TRUE(completion.ok());
    Request flush;
    flush.type = RequestType::kFlush;
    h.queue().Enqueue(flush, 2);
    h.queue().Submit();
  });
  h.queue().Enqueue(MakeWrite(0, iov), 1);
  h.queue().Submit();
  ASSERT_TRUE(h.Drain());
  EXPECT_EQ(h.order(), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(h.result(2), 0);
  EXPECT_EQ(h.CountOps(UringOpcode::kFsync), 1);
}

// --- O_DIRECT --------------------------------------------------------------------------------

TEST(RawFileBackendTest, DirectIoBouncesMisalignedBuffers) {
  const std::string path = MakeFile("direct_bounce.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  Harness h(path, options);
  ASSERT_TRUE(h.backend().direct_io());
  EXPECT_GE(h.backend().memory_alignment(), 2u);
  // An address one byte off, and segment lengths that are not multiples of 512 (100 + 412 + 3584).
  AlignedBuffer storage = Buffer(8192, 0);
  char* base = storage.data() + 1;
  for (int i = 0; i < 4096; ++i) base[i] = static_cast<char>(i * 3 + 1);
  const iovec write_iov[] = {{base, 100}, {base + 100, 412}, {base + 512, 3584}};
  EXPECT_EQ(h.Write(4096, write_iov, 1), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].iovec_count, 1u);  // the bounce buffer
  std::vector<uint8_t> expected(base, base + 4096);
  EXPECT_EQ(ReadFile(path, 4096, 4096), expected);

  AlignedBuffer back_storage = Buffer(8192, 0);
  char* back = back_storage.data() + 3;
  const iovec read_iov[] = {{back, 1000}, {back + 1000, 3096}};
  EXPECT_EQ(h.Read(4096, read_iov, 2), 0);
  EXPECT_EQ(std::vector<uint8_t>(back, back + 4096), expected);

  // Aligned buffers go straight to the kernel.
  h.ring().ClearRecords();
  AlignedBuffer aligned = Buffer(4096, 0);
  const iovec aligned_iov[] = {{aligned.data(), 2048}, {aligned.data() + 2048, 2048}};
  EXPECT_EQ(h.Read(4096, aligned_iov, 3), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].iovec_count, 2u);
  EXPECT_EQ(std::vector<uint8_t>(aligned.data(), aligned.data() + 4096), expected);
}

// A guest's flood of large misaligned writes (H6 of docs/security.md): bounce memory is
// budgeted per queue, so only as many go to the kernel at once as the budget (16 MiB) holds; the
// rest wait their turn, in order, and every one completes with its data.
TEST(RawFileBackendTest, BounceBuffersHaveABudget) {
  constexpr uint64_t kChunk = 2 << 20;
  constexpr int kWrites = 32;  // 64 MiB of bounce memory if nothing waited
  const std::string path = MakeFile("bounce_flood.img", kChunk * kWrites);
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  Harness h(path, options);
  AlignedBuffer storage = Buffer(kChunk + 4096, 0);
  char* source = storage.data() + 1;  // misaligned: every write needs a bounce buffer
  std::vector<iovec> iovs(kWrites);
  for (int i = 0; i < kChunk; ++i) source[i] = static_cast<char>(i * 7 + 3);
  for (int i = 0; i < kWrites; ++i) iovs[i] = iovec{source, kChunk};
  for (int i = 0; i < kWrites; ++i) {
    h.queue().Enqueue(MakeWrite(uint64_t{kChunk} * i, std::span<const iovec>(&iovs[i], 1)), i);
  }
  h.queue().Submit();
  EXPECT_LE(h.ring().records().size(), 8u);  // 16 MiB of 2 MiB writes
  EXPECT_GE(h.ring().records().size(), 1u);
  ASSERT_TRUE(h.Drain());
  EXPECT_EQ(h.ring().records().size(), static_cast<size_t>(kWrites));
  for (int i = 0; i < kWrites; ++i) EXPECT_EQ(h.result(i), 0) << i;
  // In order: the waiting writes were started as earlier ones completed.
  for (size_t r = 1; r < h.ring().records().size(); ++r) {
    EXPECT_LT(h.ring().records()[r - 1].offset, h.ring().records()[r].offset);
  }
  const std::vector<uint8_t> tail = ReadFile(path, uint64_t{kChunk} * (kWrites - 1) + 100, 100);
  EXPECT_EQ(tail, std::vector<uint8_t>(source + 100, source + 200));
}

// A misaligned request larger than the bounce arena (16 MiB) goes through it in chunks: no bounce
// memory beyond the arena, ever (H6 of docs/security.md), and the data round-trips
// across the chunk boundaries, reads and writes, with scattered caller buffers.
TEST(RawFileBackendTest, RequestsLargerThanTheBounceArenaGoInChunks) {
  constexpr uint64_t kLength = uint64_t{40} << 20;  // 16 + 16 + 8 MiB
  const std::string path = MakeFile("bounce_large.img", kLength + (1 << 20));
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  Harness h(path, options);
  AlignedBuffer storage = Buffer(kLength + 8192, 0);
  char* source = storage.data() + 1;  // misaligned: bounced
  for (uint64_t i = 0; i < kLength; ++i) source[i] = static_cast<char>(i * 13 + i / 4096);
  // Three caller segments whose edges fall inside chunks.
  const iovec write_iov[] = {{source, 5 << 20},
                             {source + (5 << 20), 20 << 20},
                             {source + (25 << 20), kLength - (25 << 20)}};
  h.queue().Enqueue(MakeWrite(4096, write_iov), 1);
  h.queue().Submit();
  ASSERT_TRUE(h.Drain());
  EXPECT_EQ(h.result(1), 0);
  ASSERT_EQ(h.ring().records().size(), 3u);
  for (const SqeRecord& record : h.ring().records()) EXPECT_LE(record.length, uint64_t{16} << 20);
  EXPECT_EQ(h.ring().records()[1].offset, 4096 + (uint64_t{16} << 20));
  EXPECT_EQ(ReadFile(path, 4096 + (uint64_t{16} << 20) - 50, 100),
            std::vector<uint8_t>(source + (16 << 20) - 50, source + (16 << 20) + 50));

  AlignedBuffer back_storage = Buffer(kLength + 8192, 0);
  char* back = back_storage.data() + 3;
  const iovec read_iov[] = {{back, 17 << 20}, {back + (17 << 20), kLength - (17 << 20)}};
  h.ring().ClearRecords();
  h.queue().Enqueue(MakeRead(4096, read_iov), 2);
  h.queue().Submit();
  ASSERT_TRUE(h.Drain());
  EXPECT_EQ(h.result(2), 0);
  EXPECT_EQ(h.ring().records().size(), 3u);
  EXPECT_EQ(std::memcmp(back, source, kLength), 0);
}

TEST(RawFileBackendTest, DirectIoRejectsMisalignedRanges) {
  const std::string path = MakeFile("direct_range.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kDirectsync;
  Harness h(path, options);
  AlignedBuffer data = Buffer(4096, 0);
  const iovec iov[] = {{data.data(), 4096}};
  const iovec short_iov[] = {{data.data(), 100}};
  EXPECT_EQ(h.Read(100, iov, 1), EINVAL);
  EXPECT_EQ(h.Write(4096 + 256, iov, 2), EINVAL);
  EXPECT_EQ(h.Read(0, short_iov, 3), EINVAL);
  EXPECT_EQ(h.ring().records().size(), 0u);
  EXPECT_EQ(h.Read(512, iov, 4), 0);
}

TEST(RawFileBackendTest, DirectIoShortTransfersAreResubmitted) {
  const std::string path = MakeFile("direct_short.img", kFileSize);
  RawFileOptions options;
  options.cache_mode = CacheMode::kNone;
  Harness h(path, options);
  AlignedBuffer data = Buffer(8192, 0x3c);
  const iovec iov[] = {{data.data(), 8192}};
  RingFault fault;
  fault.short_transfer = true;  // half: 4096
  h.ring().AddFault(fault);
  EXPECT_EQ(h.Write(0, iov, 1), 0);
  EXPECT_EQ(h.CountOps(UringOpcode::kWritev), 2);
  EXPECT_EQ(ReadFile(path, 0, 8192), std::vector<uint8_t>(8192, 0x3c));
}

// --- Read-only, ranges, opening --------------------------------------------------------------

TEST(RawFileBackendTest, ReadOnlyRejectsWritesAndDiscards) {
  const std::string path = MakeFile("read_only.img", kFileSize);
  RawFileOptions options;
  options.read_only = true;
  Harness h(path, options);
  EXPECT_TRUE(h.backend().info().read_only);
  EXPECT_EQ(fcntl(h.backend().fd(), F_GETFL) & O_ACCMODE, O_RDONLY);
  AlignedBuffer data = Buffer(4096, 0);
  const iovec iov[] = {{data.data(), 4096}};
  EXPECT_EQ(h.Write(0, iov, 1), EROFS);
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.discard_length = 4096;
  EXPECT_EQ(h.Run(discard, 2), EROFS);
  Request flush;
  flush.type = RequestType::kFlush;
  EXPECT_EQ(h.Run(flush, 3), 0);
  EXPECT_EQ(h.ring().records().size(), 0u);
  EXPECT_EQ(h.Read(0, iov, 4), 0);
  EXPECT_EQ(static_cast<uint8_t>(data.data()[1]), Pattern(1, 1));
}

TEST(RawFileBackendTest, OutOfRangeIsErangeWithoutIo) {
  const std::string path = MakeFile("range.img", kFileSize);
  Harness h(path);
  AlignedBuffer data = Buffer(4096, 0);
  const iovec iov[] = {{data.data(), 1024}};
  EXPECT_EQ(h.Read(kFileSize - 512, iov, 1), ERANGE);
  EXPECT_EQ(h.Write(kFileSize, iov, 2), ERANGE);
  EXPECT_EQ(h.Read(~uint64_t{0} - 100, iov, 3), ERANGE);  // offset + length wraps
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.offset = 4096;
  discard.discard_length = kFileSize;
  EXPECT_EQ(h.Run(discard, 4), ERANGE);
  EXPECT_EQ(h.ring().records().size(), 0u);
  // The last block is in range.
  EXPECT_EQ(h.Read(kFileSize - 1024, iov, 5), 0);
}

TEST(RawFileBackendTest, RequestsWithoutIoCompleteThroughProcessCompletions) {
  const std::string path = MakeFile("trivial.img", kFileSize);
  Harness h(path);
  Request empty_read = MakeRead(0, {});
  h.queue().Enqueue(empty_read, 1);
  EXPECT_TRUE(h.results().empty());  // never from inside Enqueue()
  h.queue().Submit();
  EXPECT_TRUE(h.results().empty());
  pollfd pfd = {h.queue().completion_fd(), POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 1000), 1);  // the loop is woken for it
  h.queue().ProcessCompletions();
  EXPECT_EQ(h.result(1), 0);
  EXPECT_EQ(h.queue().in_flight(), 0u);
  EXPECT_EQ(h.ring().submit_calls(), 0);
}

TEST(RawFileBackendTest, OpenErrors) {
  const std::string missing = TempPath("does_not_exist.img");
  absl::StatusOr<std::shared_ptr<RawFileBackend>> backend = RawFileBackend::Open(missing, {});
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(backend.status().message().find(missing), absl::string_view::npos) << backend.status();

  const std::string dir = TempPath("a_directory");
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  for (const bool read_only : {false, true}) {
    RawFileOptions options;
    options.read_only = read_only;
    backend = RawFileBackend::Open(dir, options);
    ASSERT_FALSE(backend.ok());
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
    EXPECT_NE(backend.status().message().find("directory"), absl::string_view::npos);
    EXPECT_NE(backend.status().message().find(dir), absl::string_view::npos);
  }

  RawFileOptions read_only;
  read_only.read_only = true;
  backend = RawFileBackend::Open("/dev/null", read_only);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();

  // A FIFO is refused at once, for reading and for writing (H2 of docs/security.md: a path
  // swapped to a FIFO after the API's check used to block open() forever).
  const std::string fifo = TempPath("a_fifo");
  ASSERT_TRUE(mkfifo(fifo.c_str(), 0600) == 0 || errno == EEXIST);
  backend = RawFileBackend::Open(fifo, read_only);
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  backend = RawFileBackend::Open(fifo, {});
  ASSERT_FALSE(backend.ok());  // ENXIO (no reader) or the type check: never a hang

  RawFileOptions no_ring;
  no_ring.ring_entries = 0;
  backend = RawFileBackend::Open(MakeFile("no_ring.img", 4096), no_ring);
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kInvalidArgument);
}

// Two VMMs on one image (H14 of docs/security.md): the second writer is refused, readers share,
// a reader beside a writer is refused, and the lock goes with the backend. OFD locks conflict
// between open files of one process just as between processes, so one process shows it.
TEST(RawFileBackendTest, WritableImageHasOneUser) {
  const std::string path = MakeFile("locked.img", 4096);
  RawFileOptions writable;
  RawFileOptions read_only;
  read_only.read_only = true;
  {
    auto first = RawFileBackend::Open(path, writable);
    ASSERT_TRUE(first.ok()) << first.status();
    for (const RawFileOptions& options : {writable, read_only}) {
      auto second = RawFileBackend::Open(path, options);
      ASSERT_FALSE(second.ok());
      EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition) << second.status();
      EXPECT_NE(second.status().message().find(path), absl::string_view::npos);
      EXPECT_NE(second.status().message().find("in use"), absl::string_view::npos);
    }
  }
  {
    auto reader_a = RawFileBackend::Open(path, read_only);
    auto reader_b = RawFileBackend::Open(path, read_only);
    ASSERT_TRUE(reader_a.ok()) << reader_a.status();
    ASSERT_TRUE(reader_b.ok()) << reader_b.status();
    EXPECT_FALSE(RawFileBackend::Open(path, writable).ok());
  }
  EXPECT_TRUE(RawFileBackend::Open(path, writable).ok());
}

// A process that is not us (QEMU, say) holding a byte of the image: we see it.
TEST(RawFileBackendTest, AnotherProcessLockIsSeen) {
  const std::string path = MakeFile("locked_by_child.img", 4096);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = open(path.c_str(), O_RDWR);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = 100;  // one byte, where QEMU keeps a permission lock
    lock.l_len = 1;
    const char ok = (fd >= 0 && fcntl(fd, F_OFD_SETLK, &lock) == 0) ? 1 : 0;
    (void)!write(ready[1], &ok, 1);
    pause();
    _exit(0);
  }
  char ok = 0;
  ASSERT_EQ(read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  auto backend = RawFileBackend::Open(path, {});
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition) << backend.status();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  EXPECT_TRUE(RawFileBackend::Open(path, {}).ok());
}

// QEMU itself (the host's qemu-system-x86_64, as tools/setup installs it), paused (-S) with the
// image as a virtio-scsi disk or CD, so that it takes its permission locks and then waits.
class PausedQemu {
 public:
  // Starts it; running() says whether it got its locks (false: it exited, with stderr()).
  PausedQemu(const std::string& path, bool read_only) {
    stderr_path_ = TempPath("qemu-stderr.txt");
    stdout_path_ = TempPath("qemu-stdout.txt");
    unlink(stdout_path_.c_str());
    int input[2];
    EXPECT_EQ(pipe2(input, O_CLOEXEC), 0);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(input[0], STDIN_FILENO);
      const int err = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(err, STDERR_FILENO);
      const int out = open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, STDOUT_FILENO);
      const std::string drive =
          "file=" + path + ",if=none,id=d0,format=raw" + (read_only ? ",readonly=on" : "");
      const std::string device = std::string(read_only ? "scsi-cd" : "scsi-hd") + ",drive=d0";
      execlp("qemu-system-x86_64", "qemu-system-x86_64", "-S", "-M", "pc", "-accel", "tcg",
             "-nodefaults", "-no-user-config", "-display", "none", "-serial", "none", "-monitor",
             "stdio", "-device", "virtio-scsi-pci", "-drive", drive.c_str(), "-device",
             device.c_str(), nullptr);
      _exit(127);
    }
    close(input[0]);
    monitor_ = input[1];
    // Running, or gone. The monitor answers commands only from QEMU's main loop, which starts
    // once every device (the drive's, with its locks) is set up: "info block" naming d0 means
    // running. (Its banner and prompt come earlier, before the devices.)
    (void)!write(monitor_, "info block\n", 11);
    for (int i = 0; i < 400; ++i) {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::ifstream out(stdout_path_);
      if (std::string(std::istreambuf_iterator<char>(out), {}).find("d0 (#block") !=
          std::string::npos) {
        return;
      }
      usleep(50 * 1000);
    }
    ADD_FAILURE() << "QEMU neither came up nor exited in 20 s";
  }
  ~PausedQemu() {
    if (pid_ > 0) {
      (void)!write(monitor_, "quit\n", 5);
      waitpid(pid_, &status_, 0);
    }
    close(monitor_);
  }
  bool running() const { return pid_ > 0; }
  std::string stderr_text() const {
    std::ifstream in(stderr_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  pid_t pid_ = -1;
  int monitor_ = -1;
  int status_ = 0;
  std::string stderr_path_;
  std::string stdout_path_;
};

// Image locks interoperate with QEMU in both directions, as two QEMUs would (QEMU's permission
// bytes): a writer excludes every other user, readers share.
TEST(RawFileBackendTest, LocksInteroperateWithQemu) {
  const std::string path = MakeFile("shared_with_qemu.img", 1 << 20);
  RawFileOptions writable;
  RawFileOptions read_only;
  read_only.read_only = true;
  {
    auto ours = RawFileBackend::Open(path, writable);
    ASSERT_TRUE(ours.ok()) << ours.status();
    PausedQemu qemu_writer(path, /*read_only=*/false);
    EXPECT_FALSE(qemu_writer.running());
    EXPECT_NE(qemu_writer.stderr_text().find("Failed to get \"write\" lock"), std::string::npos)
        << qemu_writer.stderr_text();
    PausedQemu qemu_reader(path, /*read_only=*/true);
    EXPECT_FALSE(qemu_reader.running());
    EXPECT_NE(qemu_reader.stderr_text().find("Failed to get shared \"write\" lock"),
              std::string::npos)
        << qemu_reader.stderr_text();
  }
  {
    auto ours = RawFileBackend::Open(path, read_only);
    ASSERT_TRUE(ours.ok()) << ours.status();
    PausedQemu qemu_reader(path, /*read_only=*/true);
    EXPECT_TRUE(qemu_reader.running()) << qemu_reader.stderr_text();
    PausedQemu qemu_writer(path, /*read_only=*/false);
    EXPECT_FALSE(qemu_writer.running());
  }
  {
    PausedQemu qemu_writer(path, /*read_only=*/false);
    ASSERT_TRUE(qemu_writer.running()) << qemu_writer.stderr_text();
    for (const RawFileOptions& options : {writable, read_only}) {
      auto ours = RawFileBackend::Open(path, options);
      EXPECT_EQ(ours.status().code(), absl::StatusCode::kFailedPrecondition) << ours.status();
      EXPECT_NE(ours.status().message().find("\"write\" permission"), absl::string_view::npos)
          << ours.status();
    }
  }
  {
    PausedQemu qemu_reader(path, /*read_only=*/true);
    ASSERT_TRUE(qemu_reader.running()) << qemu_reader.stderr_text();
    EXPECT_TRUE(RawFileBackend::Open(path, read_only).ok());
    auto writer = RawFileBackend::Open(path, writable);
    EXPECT_EQ(writer.status().code(), absl::StatusCode::kFailedPrecondition) << writer.status();
  }
}

// H1 of docs/security.md: media from one directory only. Inside it, a file opens; "..", an
// absolute path, a symlink out and a /proc magic link are refused alike (PermissionDenied, for
// what exists and what does not), and a missing file inside is NotFound.
TEST(RawFileBackendTest, OpenBeneathStaysInItsDirectory) {
  const std::string dir = TempPath("media_dir");
  ASSERT_TRUE(mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST);
  const std::string inside = dir + "/disc.iso";
  { std::ofstream(inside) << std::string(4096, 'd'); }
  const std::string outside = MakeFile("outside.img", 4096);
  (void)unlink((dir + "/escape").c_str());
  ASSERT_EQ(symlink(outside.c_str(), (dir + "/escape").c_str()), 0);
  sys_util::ScopedFd dir_fd(open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(dir_fd.valid());
  RawFileOptions read_only;
  read_only.read_only = true;
  auto ok = RawFileBackend::OpenBeneath(dir_fd.get(), "disc.iso", "disc.iso", read_only);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ((*ok)->info().size_bytes, 4096u);
  for (const std::string& path :
       {std::string("../outside.img"), std::string("../no-such-file"), outside,
        std::string("/etc/passwd"), std::string("escape"), std::string("/proc/self/fd/0")}) {
    auto refused = RawFileBackend::OpenBeneath(dir_fd.get(), path, path, read_only);
    ASSERT_FALSE(refused.ok()) << path;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied)
        << path << ": " << refused.status();
  }
  auto missing = RawFileBackend::OpenBeneath(dir_fd.get(), "nope.iso", "nope.iso", read_only);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound) << missing.status();
}

// --- Discard ---------------------------------------------------------------------------------

TEST(RawFileBackendTest, DiscardPunchesAHole) {
  const std::string path = MakeFile("discard.img", kFileSize);
  Harness h(path);
  EXPECT_TRUE(h.backend().info().discard);
  struct stat before {};
  ASSERT_EQ(stat(path.c_str(), &before), 0);
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.offset = 256 * 1024;
  discard.discard_length = 256 * 1024;
  EXPECT_EQ(h.Run(discard, 1), 0);
  ASSERT_EQ(h.ring().records().size(), 1u);
  EXPECT_EQ(h.ring().records()[0].opcode, UringOpcode::kFallocate);
  EXPECT_EQ(h.ring().records()[0].fallocate_mode, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE);
  struct stat after {};
  ASSERT_EQ(stat(path.c_str(), &after), 0);
  EXPECT_EQ(after.st_size, before.st_size);
  // st_blocks counts 512-byte units: 256 KiB is 512 of them.
  EXPECT_LE(after.st_blocks, before.st_blocks - 512)
      << before.st_blocks << " -> " << after.st_blocks;

  AlignedBuffer data = Buffer(512 * 1024, 0xff);
  const iovec iov[] = {{data.data(), 512 * 1024}};
  EXPECT_EQ(h.Read(0, iov, 2), 0);
  for (int i = 0; i < 256 * 1024; ++i) {
    ASSERT_EQ(static_cast<uint8_t>(data.data()[i]), Pattern(i, 1)) << i;
  }
  for (int i = 256 * 1024; i < 512 * 1024; ++i) ASSERT_EQ(data.data()[i], 0) << i;
}

TEST(RawFileBackendTest, UnsupportedDiscardSucceeds) {
  const std::string path = MakeFile("discard_unsupported.img", kFileSize);
  Harness h(path);
  RingFault fault;
  fault.opcode = UringOpcode::kFallocate;
  fault.error = EOPNOTSUPP;
  h.ring().AddFault(fault);
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.discard_length = 4096;
  EXPECT_EQ(h.Run(discard, 1), 0);
}

// --- The real ring, no seam ----------------------------------------------------------------------

TEST(RawFileBackendTest, RealRingSmoke) {
  const std::string path = MakeFile("smoke.img", kFileSize);
  for (const CacheMode mode : {CacheMode::kWriteback, CacheMode::kNone}) {
    RawFileOptions options;
    options.cache_mode = mode;
    Harness h(path, options, /*real_ring=*/true);
    AlignedBuffer out = Buffer(8192, 0x99), in = Buffer(8192, 0);
    const iovec write_iov[] = {{out.data(), 8192}};
    const iovec read_iov[] = {{in.data(), 4096}, {in.data() + 4096, 4096}};
    h.queue().Enqueue(MakeWrite(16384, write_iov, /*fua=*/true), 1);
    h.queue().Submit();
    // poll(2) on the eventfd until the write is done, then read it back the same way.
    while (h.results().count(1) == 0) {
      pollfd pfd = {h.queue().completion_fd(), POLLIN, 0};
      ASSERT_EQ(poll(&pfd, 1, 10000), 1);
      h.queue().ProcessCompletions();
    }
    EXPECT_EQ(h.result(1), 0);
    Request flush;
    flush.type = RequestType::kFlush;
    h.queue().Enqueue(MakeRead(16384, read_iov), 2);
    h.queue().Enqueue(flush, 3);
    h.queue().Submit();
    ASSERT_TRUE(h.Drain());
    EXPECT_EQ(h.result(2), 0);
    EXPECT_EQ(h.result(3), 0);
    EXPECT_EQ(std::memcmp(in.data(), out.data(), 8192), 0);
    // Readiness was cleared by ProcessCompletions().
    pollfd pfd = {h.queue().completion_fd(), POLLIN, 0};
    EXPECT_EQ(poll(&pfd, 1, 0), 0);
  }
}

TEST(RawFileBackendTest, DestroyingAQueueWaitsForItsIo) {
  const std::string path = MakeFile("destroy.img", kFileSize);
  auto backend = RawFileBackend::Open(path, {});
  ASSERT_TRUE(backend.ok());
  std::vector<AlignedBuffer> buffers;
  std::vector<iovec> iovs(32);
  {
    auto queue = (*backend)->CreateQueue(
        [](uint64_t, Completion) { ADD_FAILURE() << "no completion after destruction"; });
    ASSERT_TRUE(queue.ok());
    for (int i = 0; i < 32; ++i) {
      buffers.push_back(Buffer(16384, 0));
      iovs[i] = {buffers.back().data(), 16384};
      (*queue)->Enqueue(MakeRead(i * 16384, {&iovs[i], 1}), i);
    }
    (*queue)->Submit();
  }  // destroyed with I/O in flight and unreaped
  // The backend outlives its queues or not, in either order.
  backend->reset();
}

// Rings are made when the file is opened (an iothread cannot make one), used by the queues and
// given back when a queue goes (a device reset, then the next activation), drained.
TEST(RawFileBackendTest, QueuesUseTheRingsMadeAtOpenAndGiveThemBack) {
  const std::string path = MakeFile("rings.img", kFileSize);
  RawFileOptions options;
  options.prepared_rings = 2;
  auto backend = RawFileBackend::Open(path, options);
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->idle_rings(), 2u);
  for (int activation = 0; activation < 3; ++activation) {
    int done = 0;
    auto on_done = [&done](uint64_t, Completion completion) {
      EXPECT_EQ(completion.error, 0);
      ++done;
    };
    auto first = (*backend)->CreateQueue(on_done);
    auto second = (*backend)->CreateQueue(on_done);
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ((*backend)->idle_rings(), 0u);
    AlignedBuffer in = Buffer(4096, 0);
    const iovec read_iov[] = {{in.data(), 4096}};
    (*first)->Enqueue(MakeRead(4096 * activation, read_iov), 1);
    (*first)->Submit();
    while (done == 0) {
      pollfd pfd = {(*first)->completion_fd(), POLLIN, 0};
      ASSERT_EQ(poll(&pfd, 1, 10000), 1);
      (*first)->ProcessCompletions();
    }
    EXPECT_EQ(in.data()[0], Pattern(4096 * activation, 1));
    // One more read left in flight: the queue waits for it before it gives its ring back.
    (*second)->Enqueue(MakeRead(0, read_iov), 2);
    (*second)->Submit();
    first->reset();
    second->reset();
    EXPECT_EQ((*backend)->idle_rings(), 2u) << "activation " << activation;
  }
  // Beyond what was prepared, a thread that may make rings (this one) gets a new one.
  std::vector<std::unique_ptr<BlockQueue>> queues;
  for (int i = 0; i < 3; ++i) {
    auto queue = (*backend)->CreateQueue([](uint64_t, Completion) {});
    ASSERT_TRUE(queue.ok()) << queue.status();
    queues.push_back(*std::move(queue));
  }
  queues.clear();
  EXPECT_EQ((*backend)->idle_rings(), 3u);
}

// Online resize: growing adds a hole; shrinking is refused while data lies past the new end;
// with no size, the file's size as the host made it is taken.
TEST(RawFileBackendTest, ResizeGrowsShrinksOnlyEmptyTailsAndTakesTheHostSize) {
  const std::string path = MakeFile("resize.img", kFileSize);
  auto backend = RawFileBackend::Open(path, {});
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->size_bytes(), kFileSize);
  auto grown = (*backend)->Resize(4 * kFileSize);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(*grown, 4 * kFileSize);
  EXPECT_EQ((*backend)->size_bytes(), 4 * kFileSize);
  EXPECT_EQ((*backend)->info().size_bytes, kFileSize);  // the size at open
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kFileSize);
  // Back to the first MiB: what was added is a hole, so it may go.
  ASSERT_TRUE((*backend)->Resize(kFileSize).ok());
  // Not below the data.
  const auto shrink = (*backend)->Resize(kFileSize / 2);
  EXPECT_EQ(shrink.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(shrink.status().message().find("cut it off"), std::string::npos) << shrink.status();
  EXPECT_EQ((*backend)->size_bytes(), kFileSize);
  EXPECT_EQ((*backend)->Resize(1000).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*backend)->Resize(0).status().code(), absl::StatusCode::kInvalidArgument);
  // The host grows the file: a resize without a size takes it, rounded down to whole blocks.
  ASSERT_EQ(truncate(path.c_str(), 3 * kFileSize + 100), 0);
  auto taken = (*backend)->Resize(std::nullopt);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 3 * kFileSize);
  backend->reset();  // its lock would keep a reader out
  auto read_only = RawFileBackend::Open(path, {.read_only = true});
  ASSERT_TRUE(read_only.ok());
  EXPECT_EQ((*read_only)->Resize(2 * kFileSize).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace block::raw

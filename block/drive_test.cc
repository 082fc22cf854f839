#include "block/drive.h"

#include <poll.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "block/fault_injection.h"
#include "block/memory_backend.h"
#include "gtest/gtest.h"

namespace block {
namespace {

using Op = RecordedOperation;
constexpr RequestType kRead = RequestType::kRead;
constexpr RequestType kWrite = RequestType::kWrite;
constexpr RequestType kFlush = RequestType::kFlush;
constexpr RequestType kDiscard = RequestType::kDiscard;

bool Readable(int fd, int timeout_ms = 0) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

// Forwards to a backend and counts everything the drive asks of it outside a queue: the proof that
// the I/O path does not go to the host (or the backend's metadata) per request.
class CountingBackend : public BlockBackend {
 public:
  explicit CountingBackend(std::shared_ptr<BlockBackend> inner) : inner_(std::move(inner)) {}
  const BackendInfo& info() const override {
    info_calls.fetch_add(1);
    return inner_->info();
  }
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) override {
    create_queue_calls.fetch_add(1);
    return inner_->CreateQueue(std::move(handler));
  }
  mutable std::atomic<int> info_calls{0};
  std::atomic<int> create_queue_calls{0};

 private:
  std::shared_ptr<BlockBackend> inner_;
};

// A data buffer and the iovec describing it, kept at a stable address until its request completes.
struct Buffer {
  explicit Buffer(size_t size, uint8_t fill = 0) : data(size, fill), iov{data.data(), size} {}
  std::vector<uint8_t> data;
  iovec iov;
};

Request ReadOf(uint64_t offset, Buffer& buffer) {
  Request r;
  r.type = kRead;
  r.offset = offset;
  r.buffers = std::span<const iovec>(&buffer.iov, 1);
  return r;
}

Request WriteOf(uint64_t offset, Buffer& buffer, bool fua = false) {
  Request r = ReadOf(offset, buffer);
  r.type = kWrite;
  r.fua = fua;
  return r;
}

Request FlushRequest() {
  Request r;
  r.type = kFlush;
  return r;
}

Request DiscardOf(uint64_t offset, uint64_t length) {
  Request r;
  r.type = kDiscard;
  r.offset = offset;
  r.discard_length = length;
  return r;
}

std::shared_ptr<MemoryBackend> Memory(MemoryBackendOptions options = {}) {
  return std::make_shared<MemoryBackend>(options);
}

class DriveTest : public ::testing::Test {
 protected:
  void Fixed(DriveOptions options, std::shared_ptr<BlockBackend> backend) {
    queue_.reset();
    auto drive = Drive::CreateFixed(std::move(options), std::move(backend));
    ASSERT_TRUE(drive.ok()) << drive.status();
    drive_ = *std::move(drive);
    MakeQueue();
  }

  void Removable(DriveOptions options, std::shared_ptr<RemovableMedia> media) {
    queue_.reset();
    auto drive = Drive::CreateRemovable(std::move(options), std::move(media));
    ASSERT_TRUE(drive.ok()) << drive.status();
    drive_ = *std::move(drive);
    MakeQueue();
  }

  void MakeQueue() {
    auto queue = drive_->CreateQueue([this](uint64_t cookie, Completion completion) {
      completions_.push_back({cookie, completion.error});
    });
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_ = *std::move(queue);
  }

  // Waits on completion_fd() with poll(2), as a device's epoll would, until nothing is in flight.
  // (Not then checked for "not readable": on a removable drive a media change may wake it.)
  void Drain() {
    while (queue_->in_flight() > 0) {
      ASSERT_TRUE(Readable(queue_->completion_fd(), 5000)) << "in flight but never readable";
      queue_->ProcessCompletions();
    }
  }

  // Delivers what is done now (the backend's immediate completions), without waiting for more.
  void ProcessReady() {
    if (Readable(queue_->completion_fd(), 1000)) queue_->ProcessCompletions();
  }

  // Runs one request to completion and returns its error.
  int Run(const Request& request) {
    const size_t before = completions_.size();
    queue_->Enqueue(request, next_cookie_);
    queue_->Submit();
    Drain();
    if (completions_.size() != before + 1) {
      ADD_FAILURE() << "expected one completion";
      return -1;
    }
    EXPECT_EQ(completions_.back().first, next_cookie_);
    ++next_cookie_;
    return completions_.back().second;
  }

  std::unique_ptr<Drive> drive_;
  std::unique_ptr<BlockQueue> queue_;
  std::vector<std::pair<uint64_t, int>> completions_;  // cookie, error
  uint64_t next_cookie_ = 100;
};

TEST_F(DriveTest, WriteReadRoundTrip) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  Buffer out(8192);
  for (size_t i = 0; i < out.data.size(); ++i) out.data[i] = static_cast<uint8_t>(i * 13);
  EXPECT_EQ(Run(WriteOf(4096, out)), 0);
  Buffer in(8192);
  EXPECT_EQ(Run(ReadOf(4096, in)), 0);
  EXPECT_EQ(in.data, out.data);
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 4096, 8192, false}, {kRead, 4096, 8192, false}}));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.write_requests, 1u);
  EXPECT_EQ(s.write_bytes, 8192u);
  EXPECT_EQ(s.read_requests, 1u);
  EXPECT_EQ(s.read_bytes, 8192u);
  EXPECT_EQ(s.errors, 0u);
}

TEST_F(DriveTest, InfoForTheDevice) {
  auto backend = Memory(
      {.size_bytes = 1 << 30, .logical_block_size = 4096, .native_fua = true, .discard = true});
  Fixed({.cache_mode = CacheMode::kNone, .name = "disk0"}, backend);
  DriveInfo info = drive_->info();
  EXPECT_EQ(info.size_bytes, 1u << 30);
  EXPECT_EQ(info.logical_block_size, 4096u);
  EXPECT_FALSE(info.read_only);
  EXPECT_TRUE(info.write_cache_enabled);
  EXPECT_FALSE(info.removable);
  EXPECT_TRUE(info.discard);
  EXPECT_EQ(drive_->name(), "disk0");
  EXPECT_EQ(drive_->media(), nullptr);

  Fixed({.cache_mode = CacheMode::kDirectsync}, Memory({.read_only = true}));
  info = drive_->info();
  EXPECT_FALSE(info.write_cache_enabled);
  EXPECT_TRUE(info.read_only);  // from the backend

  auto media = std::make_shared<RemovableMedia>();
  Removable({.read_only = true}, media);
  info = drive_->info();
  EXPECT_TRUE(info.removable);
  EXPECT_TRUE(info.read_only);
  EXPECT_EQ(info.size_bytes, 0u);
  EXPECT_EQ(drive_->media(), media.get());
  ASSERT_TRUE(
      media->Insert(Memory({.size_bytes = 2048 * 10, .logical_block_size = 2048}), "a").ok());
  EXPECT_EQ(drive_->info().size_bytes, 2048u * 10);
  EXPECT_EQ(drive_->info().logical_block_size, 2048u);
  EXPECT_EQ(drive_->InfoFor(MediaState{}).size_bytes, 0u);
}

TEST_F(DriveTest, CreationErrors) {
  EXPECT_EQ(Drive::CreateFixed({}, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Drive::CreateRemovable({}, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Drive::CreateFixed({}, Memory({.logical_block_size = 520})).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto backend = Memory();
  backend->FailCreateQueue(absl::ResourceExhaustedError("no rings"));
  auto drive = Drive::CreateFixed({}, backend);
  ASSERT_TRUE(drive.ok());
  EXPECT_EQ((*drive)->CreateQueue([](uint64_t, Completion) {}).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(DriveTest, ReadOnlyDriveRefusesWritesAndDiscardsWithoutIo) {
  auto backend = Memory();
  Fixed({.read_only = true}, backend);
  Buffer buffer(512);
  EXPECT_EQ(Run(WriteOf(0, buffer)), EROFS);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), EROFS);
  EXPECT_EQ(Run(DiscardOf(0, 512)), EROFS);
  EXPECT_EQ(Run(FlushRequest()), 0);  // nothing to make durable: no host I/O either
  EXPECT_TRUE(backend->operations().empty());
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kRead, 0, 512, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().errors, 3u);

  // A read-only backend makes a read-only drive.
  backend = Memory({.read_only = true});
  Fixed({}, backend);
  EXPECT_EQ(Run(WriteOf(0, buffer)), EROFS);
  EXPECT_TRUE(backend->operations().empty());
}

TEST_F(DriveTest, OutOfRangeIsRejectedWithoutIo) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({}, backend);
  Buffer buffer(1024);
  EXPECT_EQ(Run(ReadOf((1 << 20) - 512, buffer)), ERANGE);
  EXPECT_EQ(Run(WriteOf(1 << 20, buffer)), ERANGE);
  // offset + length wraps around 2^64 and would pass a naive `offset + length <= size`.
  const uint64_t wrapping = std::numeric_limits<uint64_t>::max() - 511;
  EXPECT_EQ(Run(ReadOf(wrapping, buffer)), ERANGE);
  EXPECT_EQ(Run(WriteOf(wrapping, buffer)), ERANGE);
  EXPECT_EQ(Run(DiscardOf(512, std::numeric_limits<uint64_t>::max() - 511)), ERANGE);
  // Zero length is fine at the end of the medium, but still range-checked beyond it.
  Buffer empty(0);
  EXPECT_EQ(Run(ReadOf(1 << 20, empty)), 0);
  EXPECT_EQ(Run(ReadOf((1 << 20) + 512, empty)), ERANGE);
  EXPECT_TRUE(backend->operations().empty());
  // The last block is in range.
  EXPECT_EQ(Run(ReadOf((1 << 20) - 1024, buffer)), 0);
  EXPECT_EQ(backend->operation_count(), 1u);
}

TEST_F(DriveTest, MisalignedRequestsAreInvalid) {
  auto backend = Memory({.logical_block_size = 4096});
  Fixed({}, backend);
  Buffer block(4096), half(2048);
  EXPECT_EQ(Run(ReadOf(512, block)), EINVAL);
  EXPECT_EQ(Run(WriteOf(0, half)), EINVAL);
  EXPECT_EQ(Run(DiscardOf(4096, 100)), EINVAL);
  EXPECT_TRUE(backend->operations().empty());
  EXPECT_EQ(Run(ReadOf(4096, block)), 0);
}

TEST_F(DriveTest, ZeroLengthRequestsCompleteWithoutIo) {
  auto backend = Memory();
  Fixed({}, backend);
  Buffer empty(0);
  EXPECT_EQ(Run(ReadOf(0, empty)), 0);
  EXPECT_EQ(Run(WriteOf(512, empty)), 0);
  EXPECT_EQ(Run(WriteOf(512, empty, /*fua=*/true)), 0);
  EXPECT_EQ(Run(DiscardOf(512, 0)), 0);
  Request no_buffers;  // a read with no iovecs at all
  EXPECT_EQ(Run(no_buffers), 0);
  EXPECT_TRUE(backend->operations().empty());
}

TEST_F(DriveTest, DiscardWithoutBackendSupportIsAnAdvisoryNoOp) {
  auto backend = Memory({.discard = false});
  Fixed({}, backend);
  ASSERT_TRUE(backend->WriteData(0, std::vector<uint8_t>(4096, 7)).ok());
  EXPECT_FALSE(drive_->info().discard);
  EXPECT_EQ(Run(DiscardOf(0, 4096)), 0);
  EXPECT_TRUE(backend->operations().empty());
  EXPECT_EQ((*backend->ReadData(0, 1))[0], 7);  // the old data: allowed after a discard
  EXPECT_EQ(drive_->stats().Snapshot().discard_requests, 1u);

  backend = Memory({.discard = true});
  Fixed({}, backend);
  EXPECT_EQ(Run(DiscardOf(0, 4096)), 0);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kDiscard, 0, 4096, false}}));
}

TEST_F(DriveTest, CompletionFdIsReadableForDriveAndBackendCompletions) {
  auto backend = Memory();
  Fixed({}, backend);
  const int fd = queue_->completion_fd();
  EXPECT_FALSE(Readable(fd));

  // A completion the drive makes itself (a rejection): readable after Submit().
  Buffer buffer(512);
  queue_->Enqueue(ReadOf(1 << 30, buffer), 1);
  EXPECT_EQ(queue_->in_flight(), 1u);
  queue_->Submit();
  EXPECT_TRUE(Readable(fd));
  queue_->ProcessCompletions();
  EXPECT_FALSE(Readable(fd));
  ASSERT_EQ(completions_.size(), 1u);
  EXPECT_EQ(completions_[0], std::make_pair(uint64_t{1}, ERANGE));
  EXPECT_EQ(queue_->in_flight(), 0u);

  // A backend completion: the backend queue's eventfd, seen through the drive's epoll fd.
  queue_->Enqueue(ReadOf(0, buffer), 2);
  queue_->Submit();
  EXPECT_TRUE(Readable(fd));
  queue_->ProcessCompletions();
  EXPECT_FALSE(Readable(fd));
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_EQ(completions_[1], std::make_pair(uint64_t{2}, 0));

  // Both at once, in one device epoll set.
  queue_->Enqueue(ReadOf(0, buffer), 3);
  queue_->Enqueue(ReadOf(1 << 30, buffer), 4);
  queue_->Submit();
  EXPECT_TRUE(Readable(fd));
  queue_->ProcessCompletions();
  EXPECT_FALSE(Readable(fd));
  EXPECT_EQ(completions_.size(), 4u);
}

TEST_F(DriveTest, NativeFuaIsOneWriteWithFua) {
  auto backend = Memory({.native_fua = true});
  Fixed({.fua_mode = FuaMode::kNative}, backend);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), 0);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, true}}));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.fua_native, 1u);
  EXPECT_EQ(s.fua_emulated, 0u);
  EXPECT_EQ(s.write_requests, 1u);
  EXPECT_EQ(s.flush_requests, 0u);
}

// fua=auto: a FUA write alone goes down natively; writes submitted together, or while another is
// in flight, share a flush; once the queue has no durable write in flight the next goes natively
// again.
TEST_F(DriveTest, AutoFuaIsNativeAloneAndSharesFlushesAtDepth) {
  auto backend = Memory({.native_fua = true});
  Fixed({.fua_mode = FuaMode::kAuto}, backend);
  Buffer a(512, 1), b(512, 2), c(512, 3), d(512, 4), e(512, 5), f(512, 6);
  queue_->Enqueue(WriteOf(0, a, true), 1);  // three in one batch: one shared flush
  queue_->Enqueue(WriteOf(512, b, true), 2);
  queue_->Enqueue(WriteOf(1024, c, true), 3);
  queue_->Submit();
  Drain();
  ASSERT_EQ(completions_.size(), 3u);
  EXPECT_EQ(Run(WriteOf(1536, d, true)), 0);   // alone: native
  queue_->Enqueue(WriteOf(2048, e, true), 5);  // alone when submitted: native
  queue_->Submit();
  queue_->Enqueue(WriteOf(2560, f, true), 6);  // e is in flight: shared flush
  queue_->Submit();
  Drain();
  ASSERT_EQ(completions_.size(), 6u);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, false},
                                                    {kWrite, 512, 512, false},
                                                    {kWrite, 1024, 512, false},
                                                    {kFlush, 0, 0, false},
                                                    {kWrite, 1536, 512, true},
                                                    {kWrite, 2048, 512, true},
                                                    {kWrite, 2560, 512, false},
                                                    {kFlush, 0, 0, false}}));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.fua_native, 2u);
  EXPECT_EQ(s.fua_emulated, 4u);
  EXPECT_EQ(s.flush_requests, 0u);  // the guest sent none
}

// fua=auto on a backend without native FUA: every FUA write is emulated.
TEST_F(DriveTest, AutoFuaWithoutNativeFuaEmulates) {
  auto backend = Memory({.native_fua = false});
  Fixed({.fua_mode = FuaMode::kAuto}, backend);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, true)), 0);
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 0, 512, false}, {kFlush, 0, 0, false}}));
}

// Emulation: the write goes without FUA, the flush only after the write completed, and the guest's
// completion only after the flush.
TEST_F(DriveTest, EmulatedFuaIsWriteThenFlushThenCompletion) {
  auto backend = Memory({.native_fua = true});
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  Buffer buffer(1024, 1);
  queue_->Enqueue(WriteOf(512, buffer, /*fua=*/true), 9);
  queue_->Submit();
  EXPECT_TRUE(backend->operations().empty());

  ASSERT_TRUE(Readable(queue_->completion_fd()));
  queue_->ProcessCompletions();  // the write completes in the backend; the flush is issued
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 512, 1024, false}}));
  EXPECT_TRUE(completions_.empty()) << "completed before the flush";
  EXPECT_EQ(queue_->in_flight(), 1u);

  ASSERT_TRUE(Readable(queue_->completion_fd()));  // the flush is in the backend
  queue_->ProcessCompletions();
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 512, 1024, false}, {kFlush, 0, 0, false}}));
  ASSERT_EQ(completions_.size(), 1u);
  EXPECT_EQ(completions_[0], std::make_pair(uint64_t{9}, 0));
  EXPECT_EQ(queue_->in_flight(), 0u);
  EXPECT_FALSE(Readable(queue_->completion_fd()));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.fua_emulated, 1u);
  EXPECT_EQ(s.fua_native, 0u);
  EXPECT_EQ(s.write_requests, 1u);
  EXPECT_EQ(s.flush_requests, 0u);  // the flush was ours, not the guest's
}

TEST_F(DriveTest, NativeModeEmulatesOnABackendWithoutNativeFua) {
  auto backend = Memory({.native_fua = false});
  Fixed({.fua_mode = FuaMode::kNative}, backend);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), 0);
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 0, 512, false}, {kFlush, 0, 0, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().fua_emulated, 1u);
}

TEST_F(DriveTest, EmulatedFuaWriteFailureCompletesWithoutFlush) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  backend->FailOperation(0, EIO);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), EIO);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, false}}));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.write_requests, 0u);
  EXPECT_EQ(s.fua_emulated, 0u);
}

TEST_F(DriveTest, EmulatedFuaFlushFailureFailsTheWrite) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  backend->FailOperation(1, ENOSPC);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), ENOSPC);
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 0, 512, false}, {kFlush, 0, 0, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().errors, 1u);
}

// Several emulated FUA writes in one batch: the writes that are done share one flush, and one
// write's failure does not affect the others.
TEST_F(DriveTest, EmulatedFuaBatch) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  backend->FailOperation(1, EIO);  // the second write
  Buffer a(512, 1), b(512, 2), c(512, 3);
  queue_->Enqueue(WriteOf(0, a, true), 1);
  queue_->Enqueue(WriteOf(512, b, true), 2);
  queue_->Enqueue(WriteOf(1024, c, true), 3);
  queue_->Submit();
  queue_->ProcessCompletions();
  ASSERT_EQ(completions_.size(), 1u);
  EXPECT_EQ(completions_[0], std::make_pair(uint64_t{2}, EIO));
  Drain();
  ASSERT_EQ(completions_.size(), 3u);
  EXPECT_EQ(completions_[1], std::make_pair(uint64_t{1}, 0));
  EXPECT_EQ(completions_[2], std::make_pair(uint64_t{3}, 0));
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, false},
                                                    {kWrite, 512, 512, false},
                                                    {kWrite, 1024, 512, false},
                                                    {kFlush, 0, 0, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().fua_emulated, 2u);
}

// A shared flush that fails fails every request it covered: none of their data may be durable.
TEST_F(DriveTest, ASharedFlushThatFailsFailsEveryRequestItCovered) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  backend->FailOperation(2, EIO);  // the flush after both writes
  Buffer a(512, 1), b(512, 2);
  queue_->Enqueue(WriteOf(0, a, true), 1);
  queue_->Enqueue(WriteOf(512, b, true), 2);
  queue_->Submit();
  Drain();
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_EQ(completions_[0], std::make_pair(uint64_t{1}, EIO));
  EXPECT_EQ(completions_[1], std::make_pair(uint64_t{2}, EIO));
  EXPECT_EQ(backend->operations().size(), 3u);
}

// A write that completes after a flush started is not made durable by that flush: it waits for
// the next one (a flush covers only what completed before it started).
TEST_F(DriveTest, AWriteDoneAfterAFlushStartedWaitsForTheNext) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  Buffer a(512, 1), b(512, 2);
  queue_->Enqueue(WriteOf(0, a, true), 1);
  queue_->Submit();
  ProcessReady();  // a's write is done: its flush is submitted
  EXPECT_TRUE(completions_.empty());
  queue_->Enqueue(WriteOf(512, b, true), 2);
  queue_->Submit();  // b's write runs after that flush
  ProcessReady();
  ASSERT_EQ(completions_.size(), 1u);
  EXPECT_EQ(completions_[0], std::make_pair(uint64_t{1}, 0));
  Drain();
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_EQ(completions_[1], std::make_pair(uint64_t{2}, 0));
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, false},
                                                    {kFlush, 0, 0, false},
                                                    {kWrite, 512, 512, false},
                                                    {kFlush, 0, 0, false}}));
}

// The same with completions out of step, as a slow fdatasync makes them: every flush's completion
// held back, so a FUA write, and a plain write the guest saw complete followed by a guest flush,
// all finish their data while the first shared flush still runs. That flush covers only `a`;
// the others complete after a second one, which starts after their data was done.
TEST_F(DriveTest, WhatCompletesWhileAFlushRunsWaitsForTheNextEvenWhenItIsSlow) {
  auto memory = Memory();
  auto faulty = std::make_shared<FaultInjectingBackend>(memory);
  faulty->AddRule(FaultRule::DelayEvery(1, absl::Seconds(1)).OnlyFor(RequestType::kFlush));
  Fixed({.fua_mode = FuaMode::kEmulate}, faulty);
  Buffer a(512, 1), b(512, 2), c(512, 3);
  queue_->Enqueue(WriteOf(0, a, true), 1);
  queue_->Submit();
  // a's write is done: the shared flush goes down, its completion held.
  for (int i = 0; i < 50 && memory->operations().size() < 2; ++i) ProcessReady();
  ASSERT_EQ(memory->operations().size(), 2u);
  EXPECT_TRUE(completions_.empty());
  queue_->Enqueue(WriteOf(512, b, true), 2);
  queue_->Enqueue(WriteOf(1024, c, false), 3);
  queue_->Submit();
  while (completions_.empty() || completions_.back().first != 3) {
    ASSERT_TRUE(Readable(queue_->completion_fd(), 5000));
    queue_->ProcessCompletions();
  }
  // c (no FUA) is the guest's to see complete; a and b wait for flushes.
  ASSERT_EQ(completions_.size(), 1u);
  queue_->Enqueue(FlushRequest(), 4);  // the guest's flush, after it saw c complete
  queue_->Submit();
  // The first flush ends: only a was written before it started.
  while (completions_.size() < 2) {
    ASSERT_TRUE(Readable(queue_->completion_fd(), 5000));
    queue_->ProcessCompletions();
  }
  EXPECT_EQ(completions_[1], std::make_pair(uint64_t{1}, 0));
  EXPECT_EQ(completions_.size(), 2u) << "b or the guest's flush was covered by a flush that "
                                        "started before their data was done";
  Drain();
  ASSERT_EQ(completions_.size(), 4u);
  EXPECT_EQ(completions_[2].second, 0);
  EXPECT_EQ(completions_[3].second, 0);
  const std::vector<Op>& ops = memory->operations();
  ASSERT_EQ(ops.size(), 5u);
  EXPECT_EQ(ops[4].type, kFlush) << "no second flush after b's and c's data";
}

// Guest flushes join the shared flush: two that arrive together cost one host flush, and one
// that arrives while a flush runs waits for the next (that flush may have started before writes
// the guest saw complete).
TEST_F(DriveTest, GuestFlushesShareAFlush) {
  auto backend = Memory();
  Fixed({.fua_mode = FuaMode::kEmulate}, backend);
  queue_->Enqueue(FlushRequest(), 1);
  queue_->Enqueue(FlushRequest(), 2);
  queue_->Submit();
  Drain();
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kFlush, 0, 0, false}}));

  Buffer a(512, 1);
  queue_->Enqueue(WriteOf(0, a, true), 3);
  queue_->Submit();
  ProcessReady();  // the write is done: a flush is submitted for it
  queue_->Enqueue(FlushRequest(), 4);
  queue_->Submit();
  ProcessReady();
  ASSERT_EQ(completions_.size(), 3u);
  EXPECT_EQ(completions_[2], std::make_pair(uint64_t{3}, 0));
  Drain();
  ASSERT_EQ(completions_.size(), 4u);
  EXPECT_EQ(completions_[3], std::make_pair(uint64_t{4}, 0));
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kFlush, 0, 0, false},
                                                    {kWrite, 0, 512, false},
                                                    {kFlush, 0, 0, false},
                                                    {kFlush, 0, 0, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().flush_requests, 3u);
}

TEST_F(DriveTest, WritethroughMakesEveryWriteDurable) {
  for (CacheMode mode : {CacheMode::kWritethrough, CacheMode::kDirectsync}) {
    SCOPED_TRACE(CacheModeName(mode));
    auto native = Memory({.native_fua = true});
    Fixed({.cache_mode = mode}, native);
    EXPECT_FALSE(drive_->info().write_cache_enabled);
    Buffer buffer(512, 1);
    EXPECT_EQ(Run(WriteOf(0, buffer)), 0);
    EXPECT_EQ(native->operations(), (std::vector<Op>{{kWrite, 0, 512, true}}));
    EXPECT_EQ(drive_->stats().Snapshot().fua_native, 1u);

    auto emulated = Memory({.native_fua = false});
    Fixed({.cache_mode = mode}, emulated);
    EXPECT_EQ(Run(WriteOf(0, buffer)), 0);
    EXPECT_EQ(emulated->operations(),
              (std::vector<Op>{{kWrite, 0, 512, false}, {kFlush, 0, 0, false}}));
    // Guest flushes are still honoured.
    EXPECT_EQ(Run(FlushRequest()), 0);
    EXPECT_EQ(emulated->operation_count(), 3u);
  }
}

TEST_F(DriveTest, WritebackHonoursFlushAndSendsPlainWritesPlain) {
  auto backend = Memory({.native_fua = true});
  Fixed({.cache_mode = CacheMode::kWriteback}, backend);
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer)), 0);
  EXPECT_EQ(Run(FlushRequest()), 0);
  EXPECT_EQ(backend->operations(),
            (std::vector<Op>{{kWrite, 0, 512, false}, {kFlush, 0, 0, false}}));
  EXPECT_EQ(drive_->stats().Snapshot().flush_requests, 1u);
}

TEST_F(DriveTest, UnsafeIgnoresFlushAndFua) {
  auto backend = Memory({.native_fua = true});
  Fixed({.cache_mode = CacheMode::kUnsafe, .fua_mode = FuaMode::kEmulate}, backend);
  EXPECT_TRUE(drive_->info().write_cache_enabled);
  EXPECT_EQ(Run(FlushRequest()), 0);
  EXPECT_TRUE(backend->operations().empty());
  Buffer buffer(512, 1);
  EXPECT_EQ(Run(WriteOf(0, buffer, /*fua=*/true)), 0);
  EXPECT_EQ(backend->operations(), (std::vector<Op>{{kWrite, 0, 512, false}}));
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.flush_requests, 1u);
  EXPECT_EQ(s.flushes_ignored, 1u);
  EXPECT_EQ(s.fua_ignored, 1u);
  EXPECT_EQ(s.fua_native + s.fua_emulated, 0u);
}

TEST_F(DriveTest, FlushErrorsReachTheGuest) {
  auto backend = Memory();
  Fixed({}, backend);
  backend->FailOperation(0, EIO);
  EXPECT_EQ(Run(FlushRequest()), EIO);
}

TEST_F(DriveTest, HandlerMayEnqueueAndSubmit) {
  auto backend = Memory();
  auto drive = Drive::CreateFixed({}, backend);
  ASSERT_TRUE(drive.ok());
  std::unique_ptr<BlockQueue> queue;
  Buffer buffer(512);
  std::vector<uint64_t> done;
  auto created = (*drive)->CreateQueue([&](uint64_t cookie, Completion completion) {
    EXPECT_TRUE(completion.ok());
    done.push_back(cookie);
    if (cookie < 5) {
      queue->Enqueue(ReadOf(0, buffer), cookie + 1);
      queue->Submit();
      queue->ProcessCompletions();  // ignored: the outer call is still delivering
    }
  });
  ASSERT_TRUE(created.ok());
  queue = *std::move(created);
  queue->Enqueue(ReadOf(0, buffer), 1);
  queue->Submit();
  while (queue->in_flight() > 0) {
    ASSERT_TRUE(Readable(queue->completion_fd(), 5000));
    queue->ProcessCompletions();
  }
  EXPECT_EQ(done, (std::vector<uint64_t>{1, 2, 3, 4, 5}));
}

TEST_F(DriveTest, StatsCountEverythingWithLatency) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  Buffer buffer(4096, 5);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Run(WriteOf(i * 4096, buffer)), 0);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Run(ReadOf(i * 4096, buffer)), 0);
  EXPECT_EQ(Run(FlushRequest()), 0);
  EXPECT_EQ(Run(DiscardOf(0, 8192)), 0);
  EXPECT_EQ(Run(ReadOf(1 << 20, buffer)), ERANGE);
  backend->FailOperation(backend->operation_count(), EIO);
  EXPECT_EQ(Run(ReadOf(0, buffer)), EIO);
  const StatsSnapshot s = drive_->stats().Snapshot();
  EXPECT_EQ(s.write_requests, 10u);
  EXPECT_EQ(s.write_bytes, 40960u);
  EXPECT_EQ(s.read_requests, 20u);
  EXPECT_EQ(s.read_bytes, 81920u);
  EXPECT_EQ(s.flush_requests, 1u);
  EXPECT_EQ(s.discard_requests, 1u);
  EXPECT_EQ(s.discard_bytes, 8192u);
  EXPECT_EQ(s.errors, 2u);
  EXPECT_EQ(s.latency.count, 32u);
  EXPECT_GT(s.latency.sum_us + s.latency.buckets[0], 0u);
  EXPECT_LE(s.latency.PercentileUs(50), s.latency.PercentileUs(99));
  EXPECT_LE(s.latency.PercentileUs(99), s.latency.max_us);
  EXPECT_LT(s.latency.max_us, 5'000'000u);
  const std::string text = FormatStats(s, drive_->name());
  EXPECT_NE(text.find("disk0.read_requests 20\n"), std::string::npos) << text;
}

TEST_F(DriveTest, QueuesOnSeveralIothreadsShareStats) {
  auto backend = Memory({.size_bytes = 4 << 20});
  Fixed({.name = "disk0"}, backend);
  static constexpr int kThreads = 3;
  static constexpr int kWrites = 300;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      int done = 0;
      auto queue = drive_->CreateQueue([&done](uint64_t, Completion c) {
        EXPECT_TRUE(c.ok());
        ++done;
      });
      ASSERT_TRUE(queue.ok());
      Buffer buffer(512, static_cast<uint8_t>(t));
      for (int i = 0; i < kWrites; ++i) {
        (*queue)->Enqueue(WriteOf((t * kWrites + i) * 512, buffer), i);
        (*queue)->Submit();
        while ((*queue)->in_flight() > 0) {
          ASSERT_TRUE(Readable((*queue)->completion_fd(), 5000));
          (*queue)->ProcessCompletions();
        }
      }
      EXPECT_EQ(done, kWrites);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(drive_->stats().Snapshot().write_requests, uint64_t{kThreads} * kWrites);
  EXPECT_EQ(backend->operation_count(), uint64_t{kThreads} * kWrites);
}

TEST_F(DriveTest, QueueOutlivesTheDrive) {
  auto backend = Memory();
  Fixed({}, backend);
  drive_.reset();
  Buffer buffer(512);
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
}

// --- Removable media ---

std::shared_ptr<MemoryBackend> Disc(uint8_t fill, uint64_t blocks = 16) {
  auto disc = Memory({.size_bytes = 2048 * blocks,
                      .logical_block_size = 2048,
                      .read_only = true,
                      .discard = false});
  EXPECT_TRUE(disc->WriteData(0, std::vector<uint8_t>(2048 * blocks, fill)).ok());
  return disc;
}

TEST_F(DriveTest, NoMediumMeansEnomedium) {
  auto media = std::make_shared<RemovableMedia>();
  Removable({.read_only = true, .name = "cd0"}, media);
  Buffer buffer(2048);
  EXPECT_EQ(Run(ReadOf(0, buffer)), ENOMEDIUM);
  EXPECT_EQ(Run(FlushRequest()), ENOMEDIUM);

  // A medium in an open tray cannot be read either, and is not touched.
  auto disc = std::make_shared<CountingBackend>(Disc(1));
  ASSERT_TRUE(media->Insert(disc, "a.iso").ok());
  ASSERT_TRUE(media->SetTrayOpen(true, false).ok());
  EXPECT_EQ(Run(ReadOf(0, buffer)), ENOMEDIUM);
  EXPECT_EQ(disc->create_queue_calls.load(), 0);
  ASSERT_TRUE(media->SetTrayOpen(false, false).ok());
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(buffer.data[0], 1);
  EXPECT_EQ(drive_->stats().Snapshot().errors, 3u);
}

TEST_F(DriveTest, SwappedMediumChangesWhatTheNextReadReturns) {
  auto a = Disc(0xaa);
  auto b = Disc(0xbb, 32);
  auto media = std::make_shared<RemovableMedia>(a, "a.iso");
  Removable({.read_only = true}, media);
  Buffer buffer(2048);
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(buffer.data[0], 0xaa);
  EXPECT_EQ(Run(ReadOf(2048 * 20, buffer)), ERANGE);  // past the end of disc a

  ASSERT_TRUE(media->Eject(false).ok());
  EXPECT_EQ(Run(ReadOf(0, buffer)), ENOMEDIUM);
  ASSERT_TRUE(media->Insert(b, "b.iso").ok());
  EXPECT_EQ(Run(ReadOf(2048 * 20, buffer)), 0);  // disc b is larger
  EXPECT_EQ(buffer.data[0], 0xbb);
  EXPECT_EQ(a->operations().size(), 1u);
  EXPECT_EQ(b->operations().size(), 1u);
  // The old medium's queue is gone once idle; the new one's stays.
  EXPECT_EQ(a->live_queues(), 0u);
  EXPECT_EQ(b->live_queues(), 1u);
}

TEST_F(DriveTest, RequestStartedBeforeTheSwapCompletesOnTheOldMedium) {
  auto a = Disc(0xaa);
  auto b = Disc(0xbb);
  auto media = std::make_shared<RemovableMedia>(a, "a.iso");
  Removable({.read_only = true}, media);
  Buffer before(2048), after(2048);
  queue_->Enqueue(ReadOf(0, before), 1);
  queue_->Submit();
  // The swap happens while the read is in the old medium's queue.
  ASSERT_TRUE(media->Eject(/*force=*/true).ok());
  ASSERT_TRUE(media->Insert(b, "b.iso").ok());
  queue_->Enqueue(ReadOf(0, after), 2);
  queue_->Submit();
  EXPECT_EQ(a->live_queues(), 1u);  // still busy with request 1
  EXPECT_EQ(b->live_queues(), 1u);
  Drain();
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_EQ(completions_[0].second, 0);
  EXPECT_EQ(completions_[1].second, 0);
  EXPECT_EQ(before.data[0], 0xaa);
  EXPECT_EQ(after.data[0], 0xbb);
  EXPECT_EQ(a->operations(), (std::vector<Op>{{kRead, 0, 2048, false}}));
  EXPECT_EQ(b->operations(), (std::vector<Op>{{kRead, 0, 2048, false}}));
  EXPECT_EQ(a->live_queues(), 0u);  // destroyed once its last request finished
}

// An eject with no request in flight still releases the old medium: the media listener wakes the
// queue's completion fd, and ProcessCompletions() drops the backend queue and the backend.
TEST_F(DriveTest, EjectReleasesAnIdleMedium) {
  auto a = Disc(0xaa);
  auto media = std::make_shared<RemovableMedia>(a, "a.iso");
  Removable({.read_only = true}, media);
  Buffer buffer(2048);
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(a->live_queues(), 1u);
  ASSERT_TRUE(media->Eject(false).ok());
  ASSERT_TRUE(Readable(queue_->completion_fd()));
  queue_->ProcessCompletions();
  EXPECT_FALSE(Readable(queue_->completion_fd()));
  EXPECT_EQ(a->live_queues(), 0u);
  EXPECT_EQ(a.use_count(), 1);  // nobody else holds the ejected medium
  EXPECT_TRUE(completions_.size() == 1);
}

// The I/O path asks nothing of the backend beyond its queue: no info() and no queue creation per
// request (QEMU's CD-ROM lost most of its throughput probing the host per request). It reads the
// medium's info once, when it first sees the medium.
TEST_F(DriveTest, IoPathNeverProbes) {
  auto disc = std::make_shared<CountingBackend>(Disc(1, 64));
  auto media = std::make_shared<RemovableMedia>(disc, "a.iso");
  Removable({.read_only = true}, media);
  Buffer buffer(2048);
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  const int info_calls = disc->info_calls.load();
  EXPECT_LE(info_calls, 1);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(Run(ReadOf((i % 64) * 2048, buffer)), 0);
  EXPECT_EQ(Run(FlushRequest()), 0);
  EXPECT_EQ(Run(ReadOf(2048 * 64, buffer)), ERANGE);
  EXPECT_EQ(disc->info_calls.load(), info_calls);
  EXPECT_EQ(disc->create_queue_calls.load(), 1);

  // Likewise for a disk: its info is read when the drive is created.
  auto disk = std::make_shared<CountingBackend>(Memory());
  Fixed({}, disk);
  const int disk_info_calls = disk->info_calls.load();
  for (int i = 0; i < 100; ++i) ASSERT_EQ(Run(WriteOf(0, buffer, i % 2 == 0)), 0);
  EXPECT_EQ(disk->info_calls.load(), disk_info_calls);
  EXPECT_EQ(disk->create_queue_calls.load(), 1);
}

TEST_F(DriveTest, NewMediumWhoseQueueCannotBeCreatedFailsWithEioWithoutRetrying) {
  auto inner = Disc(1);
  inner->FailCreateQueue(absl::ResourceExhaustedError("no rings"));
  auto disc = std::make_shared<CountingBackend>(inner);
  auto media = std::make_shared<RemovableMedia>(disc, "a.iso");
  Removable({.read_only = true}, media);
  Buffer buffer(2048);
  EXPECT_EQ(Run(ReadOf(0, buffer)), EIO);
  EXPECT_EQ(Run(ReadOf(0, buffer)), EIO);
  EXPECT_EQ(disc->create_queue_calls.load(), 1);
  // A new medium gets a new chance.
  ASSERT_TRUE(media->Eject(false).ok());
  ASSERT_TRUE(media->Insert(Disc(2), "b.iso").ok());
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(buffer.data[0], 2);
}

// Media swaps on another thread while the iothread reads: every read completes whole on one medium
// (all its bytes from the same disc) or fails with ENOMEDIUM.
TEST_F(DriveTest, ConcurrentSwapsNeverMixMedia) {
  auto media = std::make_shared<RemovableMedia>(Disc(1), "1");
  Removable({.read_only = true}, media);
  std::atomic<bool> stop{false};
  std::atomic<int> swaps{0};
  std::atomic<int> last_fill{1};
  std::thread swapper([&] {
    for (int i = 2; !stop.load(); ++i) {
      const uint8_t fill = static_cast<uint8_t>(i % 250 + 1);
      ASSERT_TRUE(media->Eject(true).ok());
      ASSERT_TRUE(media->Insert(Disc(fill), std::to_string(i)).ok());
      last_fill = fill;
      ++swaps;
    }
  });
  while (swaps.load() == 0) std::this_thread::yield();
  int ok = 0;
  int no_medium = 0;
  Buffer buffer(2048 * 4);
  for (int i = 0; i < 2000; ++i) {
    const int error = Run(ReadOf(0, buffer));
    if (error == ENOMEDIUM) {
      ++no_medium;
      continue;
    }
    ASSERT_EQ(error, 0);
    ++ok;
    for (uint8_t byte : buffer.data) ASSERT_EQ(byte, buffer.data[0]);
  }
  stop = true;
  swapper.join();
  EXPECT_EQ(ok + no_medium, 2000);
  EXPECT_EQ(Run(ReadOf(0, buffer)), 0);
  EXPECT_EQ(buffer.data[0], last_fill.load());
}

}  // namespace
}  // namespace block

namespace block {
namespace {

// I/O limits: a limited request waits in the drive's queue (the backend does not see it) while
// the queue's completion fd stays the one thing its device polls; the timer in that fd's set lets
// it go in order. No timing is asserted: only what waits, what goes, and in which order.
TEST_F(DriveTest, LimitedRequestsWaitInTheDriveQueueAndGoInOrder) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  ASSERT_TRUE(drive_->SetLimits({.iops = 20, .iops_burst = 1}).ok());
  EXPECT_EQ(drive_->limits().iops, 20u);
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int i = 0; i < 3; ++i) {
    buffers.push_back(std::make_unique<Buffer>(4096));
    queue_->Enqueue(ReadOf(4096 * i, *buffers.back()), 100 + i);
  }
  queue_->Enqueue(FlushRequest(), 103);  // behind them, though it takes no budget
  queue_->Submit();
  // The bucket held one operation: one read reached the backend, the rest wait in the queue.
  ProcessReady();
  EXPECT_EQ(backend->operations().size(), 1u);
  EXPECT_EQ(queue_->in_flight(), 3u);
  Drain();
  ASSERT_EQ(completions_.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(completions_[i].first, 100u + i);
  EXPECT_EQ(backend->operations().size(), 4u);
  const StatsSnapshot stats = drive_->stats().Snapshot();
  EXPECT_EQ(stats.throttled_requests, 3u);
  EXPECT_GT(stats.throttled_us, 0u);
  EXPECT_EQ(drive_->SetLimits({.iops_burst = 3}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DriveTest, LiftingTheLimitsReleasesWhatWaitsAtOnce) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  // One operation an hour: without the change nothing more would go within the test.
  ASSERT_TRUE(drive_->SetLimits({.iops = 1, .iops_burst = 1}).ok());
  Buffer first(4096), second(4096);
  queue_->Enqueue(ReadOf(0, first), 1);
  queue_->Enqueue(ReadOf(4096, second), 2);
  queue_->Submit();
  ProcessReady();
  EXPECT_EQ(backend->operations().size(), 1u);
  ASSERT_TRUE(drive_->SetLimits({}).ok());
  Drain();
  EXPECT_EQ(completions_.size(), 2u);
  EXPECT_EQ(backend->operations().size(), 2u);
}

TEST_F(DriveTest, AnUnlimitedDriveOnTheSameThreadDoesNotWait) {
  auto slow_backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "slow"}, slow_backend);
  ASSERT_TRUE(drive_->SetLimits({.iops = 1, .iops_burst = 1}).ok());
  Buffer a(4096), b(4096);
  queue_->Enqueue(ReadOf(0, a), 1);
  queue_->Enqueue(ReadOf(4096, b), 2);
  queue_->Submit();
  ProcessReady();
  // Another drive served by this thread: its requests go at once while the slow one's wait.
  auto fast_drive = Drive::CreateFixed({.name = "fast"}, Memory({.size_bytes = 1 << 20}));
  ASSERT_TRUE(fast_drive.ok());
  int fast_done = 0;
  auto fast_queue = (*fast_drive)->CreateQueue([&](uint64_t, Completion) { ++fast_done; });
  ASSERT_TRUE(fast_queue.ok());
  std::vector<std::unique_ptr<Buffer>> buffers;
  for (int i = 0; i < 50; ++i) {
    buffers.push_back(std::make_unique<Buffer>(4096));
    (*fast_queue)->Enqueue(ReadOf(4096 * i, *buffers.back()), i);
  }
  (*fast_queue)->Submit();
  while ((*fast_queue)->in_flight() > 0) {
    ASSERT_TRUE(Readable((*fast_queue)->completion_fd(), 5000));
    (*fast_queue)->ProcessCompletions();
  }
  EXPECT_EQ(fast_done, 50);
  EXPECT_EQ(slow_backend->operations().size(), 1u);
  EXPECT_EQ(queue_->in_flight(), 1u);
  ASSERT_TRUE(drive_->SetLimits({}).ok());
  Drain();
}

TEST_F(DriveTest, DrivesInAGroupShareItsBudget) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  auto group = std::make_shared<Throttle>("tenant", IoLimits{.iops = 1, .iops_burst = 2});
  auto other = Drive::CreateFixed({.name = "disk1"}, Memory({.size_bytes = 1 << 20}));
  ASSERT_TRUE(other.ok());
  drive_->SetGroup(group);
  (*other)->SetGroup(group);
  EXPECT_EQ(drive_->group(), group);
  std::vector<uint64_t> other_done;
  auto other_queue =
      (*other)->CreateQueue([&](uint64_t cookie, Completion) { other_done.push_back(cookie); });
  ASSERT_TRUE(other_queue.ok());
  Buffer a(4096), b(4096), c(4096);
  queue_->Enqueue(ReadOf(0, a), 1);
  queue_->Enqueue(ReadOf(4096, b), 2);
  queue_->Submit();
  (*other_queue)->Enqueue(ReadOf(0, c), 3);
  (*other_queue)->Submit();
  ProcessReady();
  if (Readable((*other_queue)->completion_fd(), 100)) (*other_queue)->ProcessCompletions();
  // The group's two operations went to disk0; disk1's read waits for the group.
  EXPECT_EQ(backend->operations().size(), 2u);
  EXPECT_EQ((*other_queue)->in_flight(), 1u);
  // Out of the group, disk1 goes at once.
  (*other)->SetGroup(nullptr);
  ASSERT_TRUE(Readable((*other_queue)->completion_fd(), 5000));
  while ((*other_queue)->in_flight() > 0) {
    ASSERT_TRUE(Readable((*other_queue)->completion_fd(), 5000));
    (*other_queue)->ProcessCompletions();
  }
  EXPECT_EQ(other_done, std::vector<uint64_t>{3});
  Drain();
}

// The real time, counting how often a throttle asks for it: each ask is one try to admit.
class CountingClock final : public Clock {
 public:
  absl::Time Now() const override {
    reads_.fetch_add(1);
    return absl::Now();
  }
  int reads() const { return reads_.load(); }

 private:
  mutable std::atomic<int> reads_{0};
};

// The iothread calls ProcessCompletions for every queue it serves whenever any has work (its
// poller does on every loop): a queue whose requests wait for their time must not try them again
// each time (the throttles' locks, a timerfd_settime), only once its timer fires.
TEST_F(DriveTest, AWaitingQueueTriesAgainOnlyWhenItsTimerFires) {
  CountingClock clock;
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0", .limits_clock = &clock}, backend);
  // One byte a second: the first read goes (then the bucket is 4,095 bytes in debt), the second
  // waits over an hour.
  ASSERT_TRUE(drive_->SetLimits({.bytes_per_second = 1, .bytes_burst = 1}).ok());
  Buffer first(4096), second(4096);
  queue_->Enqueue(ReadOf(0, first), 1);
  queue_->Enqueue(ReadOf(4096, second), 2);
  queue_->Submit();
  ProcessReady();
  ASSERT_EQ(completions_.size(), 1u);
  ASSERT_EQ(queue_->in_flight(), 1u);
  const int reads = clock.reads();
  for (int i = 0; i < 100; ++i) queue_->ProcessCompletions();
  EXPECT_EQ(clock.reads(), reads) << "the waiting request was tried while its timer had not fired";
  EXPECT_EQ(backend->operations().size(), 1u);
  // Lifting the limits wakes it through the same timer.
  ASSERT_TRUE(drive_->SetLimits({}).ok());
  Drain();
  EXPECT_EQ(completions_.size(), 2u);
  // The queue and the drive ask the clock until they are gone: before the clock.
  queue_.reset();
  drive_.reset();
}

// Requests let go at once because the limits were lifted never took their turn in the
// throttle's line: the queue must leave it then, or it stays first in line for good, and when
// limits come back another queue of the same drive waits behind it for ever. Nor may its
// timer be left fired and unread (the completion fd would stay readable with nothing to do).
TEST_F(DriveTest, AQueueReleasedByLiftedLimitsLeavesTheLine) {
  auto backend = Memory({.size_bytes = 1 << 20});
  Fixed({.name = "disk0"}, backend);
  ASSERT_TRUE(drive_->SetLimits({.iops = 1, .iops_burst = 1}).ok());
  Buffer a(4096), b(4096), c(4096);
  queue_->Enqueue(ReadOf(0, a), 1);
  queue_->Enqueue(ReadOf(4096, b), 2);  // waits in line, first
  queue_->Submit();
  ProcessReady();
  ASSERT_EQ(queue_->in_flight(), 1u);
  ASSERT_TRUE(drive_->SetLimits({}).ok());
  Drain();
  ASSERT_EQ(completions_.size(), 2u);
  EXPECT_FALSE(Readable(queue_->completion_fd(), 100)) << "readable with nothing to deliver";
  // Limits again: a second queue's first read goes on the full bucket, behind nobody.
  ASSERT_TRUE(drive_->SetLimits({.iops = 1, .iops_burst = 1}).ok());
  EXPECT_FALSE(Readable(queue_->completion_fd(), 100)) << "the first queue was woken again";
  int other_done = 0;
  auto other = drive_->CreateQueue([&](uint64_t, Completion) { ++other_done; });
  ASSERT_TRUE(other.ok());
  (*other)->Enqueue(ReadOf(8192, c), 3);
  (*other)->Submit();
  ASSERT_TRUE(Readable((*other)->completion_fd(), 2000))
      << "the second queue waits behind the first";
  (*other)->ProcessCompletions();
  EXPECT_EQ(other_done, 1);
}

}  // namespace
}  // namespace block

#include "block/memory_backend.h"

#include <poll.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace block {
namespace {

bool Readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

struct Completed {
  uint64_t cookie;
  int error;
};

class MemoryBackendTest : public ::testing::Test {
 protected:
  void SetUp() override { Open({}); }

  void Open(MemoryBackendOptions options) {
    queue_.reset();
    backend_ = std::make_shared<MemoryBackend>(options);
    auto queue = backend_->CreateQueue([this](uint64_t cookie, Completion c) {
      completed_.push_back({cookie, c.error});
    });
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_ = *std::move(queue);
  }

  static Request Rw(RequestType type, uint64_t offset, iovec* iov, size_t count, bool fua = false) {
    Request r;
    r.type = type;
    r.offset = offset;
    r.buffers = std::span<const iovec>(iov, count);
    r.fua = fua;
    return r;
  }

  std::shared_ptr<MemoryBackend> backend_;
  std::unique_ptr<BlockQueue> queue_;
  std::vector<Completed> completed_;
};

TEST_F(MemoryBackendTest, CompletesOnlyInProcessCompletionsAfterSubmit) {
  std::vector<uint8_t> data(1024, 0xab);
  iovec iov{data.data(), data.size()};
  queue_->Enqueue(Rw(RequestType::kWrite, 512, &iov, 1), 7);
  EXPECT_EQ(queue_->in_flight(), 1u);
  EXPECT_FALSE(Readable(queue_->completion_fd()));
  queue_->ProcessCompletions();  // not submitted yet
  EXPECT_TRUE(completed_.empty());
  EXPECT_TRUE(backend_->operations().empty());
  queue_->Submit();
  EXPECT_TRUE(Readable(queue_->completion_fd()));
  EXPECT_TRUE(backend_->operations().empty());  // due, not yet executed
  queue_->ProcessCompletions();
  EXPECT_FALSE(Readable(queue_->completion_fd()));
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0].cookie, 7u);
  EXPECT_EQ(completed_[0].error, 0);
  EXPECT_EQ(queue_->in_flight(), 0u);
  EXPECT_EQ(backend_->operations(),
            (std::vector<RecordedOperation>{{RequestType::kWrite, 512, 1024, false}}));
  auto stored = backend_->ReadData(0, 2048);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)[511], 0);
  EXPECT_EQ((*stored)[512], 0xab);
  EXPECT_EQ((*stored)[1535], 0xab);
  EXPECT_EQ((*stored)[1536], 0);
}

TEST_F(MemoryBackendTest, ScatterGatherAcrossChunks) {
  Open({.size_bytes = 1 << 20});
  // 3 buffers spanning the 64 KiB chunk boundary.
  std::vector<uint8_t> a(1000), b(70000), c(536);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7);
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<uint8_t>(i * 3);
  iovec out[3] = {{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}};
  queue_->Enqueue(Rw(RequestType::kWrite, 60000 - 512 * 17, out, 3, /*fua=*/true), 1);
  std::vector<uint8_t> back(a.size() + b.size() + c.size());
  iovec in{back.data(), back.size()};
  queue_->Enqueue(Rw(RequestType::kRead, 60000 - 512 * 17, &in, 1), 2);
  queue_->Submit();
  queue_->ProcessCompletions();
  ASSERT_EQ(completed_.size(), 2u);
  EXPECT_EQ(completed_[1].error, 0);
  EXPECT_EQ(0, std::memcmp(back.data(), a.data(), a.size()));
  EXPECT_EQ(0, std::memcmp(back.data() + a.size(), b.data(), b.size()));
  EXPECT_EQ(0, std::memcmp(back.data() + a.size() + b.size(), c.data(), c.size()));
  EXPECT_TRUE(backend_->operations()[0].fua);
}

TEST_F(MemoryBackendTest, DiscardReadsBackZeros) {
  std::vector<uint8_t> ones(200000, 1);
  ASSERT_TRUE(backend_->WriteData(0, ones).ok());
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.offset = 4096;
  discard.discard_length = 131072 + 512;
  queue_->Enqueue(discard, 1);
  queue_->Submit();
  queue_->ProcessCompletions();
  ASSERT_EQ(completed_.size(), 1u);
  EXPECT_EQ(completed_[0].error, 0);
  auto data = backend_->ReadData(0, 200000);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ((*data)[4095], 1);
  EXPECT_EQ((*data)[4096], 0);
  EXPECT_EQ((*data)[4096 + 131072 + 511], 0);
  EXPECT_EQ((*data)[4096 + 131072 + 512], 1);
}

TEST_F(MemoryBackendTest, FailsTheChosenOperationOnly) {
  backend_->FailOperation(1, ENOSPC);
  std::vector<uint8_t> data(512, 9);
  iovec iov{data.data(), data.size()};
  for (uint64_t i = 0; i < 3; ++i) queue_->Enqueue(Rw(RequestType::kWrite, i * 512, &iov, 1), i);
  queue_->Submit();
  queue_->ProcessCompletions();
  ASSERT_EQ(completed_.size(), 3u);
  EXPECT_EQ(completed_[0].error, 0);
  EXPECT_EQ(completed_[1].error, ENOSPC);
  EXPECT_EQ(completed_[2].error, 0);
  EXPECT_EQ(backend_->operation_count(), 3u);  // the failed one is logged too
  auto stored = backend_->ReadData(512, 512);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)[0], 0);  // and did not write
}

TEST_F(MemoryBackendTest, BackendChecksOfItsOwn) {
  Open({.size_bytes = 4096, .read_only = true, .discard = false});
  std::vector<uint8_t> data(512);
  iovec iov{data.data(), data.size()};
  queue_->Enqueue(Rw(RequestType::kRead, 4096 - 256, &iov, 1), 1);
  queue_->Enqueue(Rw(RequestType::kWrite, 0, &iov, 1), 2);
  Request discard;
  discard.type = RequestType::kDiscard;
  discard.discard_length = 512;
  queue_->Enqueue(discard, 3);
  Request flush;
  flush.type = RequestType::kFlush;
  queue_->Enqueue(flush, 4);
  queue_->Submit();
  queue_->ProcessCompletions();
  ASSERT_EQ(completed_.size(), 4u);
  EXPECT_EQ(completed_[0].error, ERANGE);
  EXPECT_EQ(completed_[1].error, EROFS);
  EXPECT_EQ(completed_[2].error, EROFS);
  EXPECT_EQ(completed_[3].error, 0);
  EXPECT_FALSE(backend_->WriteData(4000, data).ok());
}

TEST_F(MemoryBackendTest, RequestsFromAHandlerWaitForTheNextSubmit) {
  std::vector<uint8_t> data(512);
  iovec iov{data.data(), data.size()};
  std::unique_ptr<BlockQueue> queue;
  std::vector<uint64_t> order;
  auto created = backend_->CreateQueue([&](uint64_t cookie, Completion) {
    order.push_back(cookie);
    if (cookie == 1) {
      queue->Enqueue(Rw(RequestType::kRead, 0, &iov, 1), 2);
      queue->Submit();
    }
  });
  ASSERT_TRUE(created.ok());
  queue = *std::move(created);
  queue->Enqueue(Rw(RequestType::kRead, 0, &iov, 1), 1);
  queue->Submit();
  queue->ProcessCompletions();
  EXPECT_EQ(order, std::vector<uint64_t>{1});
  EXPECT_TRUE(Readable(queue->completion_fd()));
  queue->ProcessCompletions();
  EXPECT_EQ(order, (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(Readable(queue->completion_fd()));
}

TEST_F(MemoryBackendTest, CountsInfoCallsAndQueues) {
  EXPECT_EQ(backend_->queues_created(), 1u);
  EXPECT_EQ(backend_->live_queues(), 1u);
  const uint64_t before = backend_->info_calls();
  EXPECT_EQ(backend_->info().size_bytes, 1u << 20);
  EXPECT_EQ(backend_->info_calls(), before + 1);
  queue_.reset();
  EXPECT_EQ(backend_->live_queues(), 0u);
  backend_->FailCreateQueue(absl::ResourceExhaustedError("no rings"));
  EXPECT_EQ(backend_->CreateQueue([](uint64_t, Completion) {}).status().code(),
            absl::StatusCode::kResourceExhausted);
  backend_->FailCreateQueue(absl::OkStatus());
  EXPECT_TRUE(backend_->CreateQueue([](uint64_t, Completion) {}).ok());
}

TEST_F(MemoryBackendTest, QueuesOnSeveralThreadsShareTheStore) {
  static constexpr int kThreads = 4;
  static constexpr int kWrites = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([this, t] {
      int done = 0;
      auto queue = backend_->CreateQueue([&done](uint64_t, Completion c) {
        EXPECT_EQ(c.error, 0);
        ++done;
      });
      ASSERT_TRUE(queue.ok());
      std::vector<uint8_t> data(512, static_cast<uint8_t>(t + 1));
      iovec iov{data.data(), data.size()};
      for (int i = 0; i < kWrites; ++i) {
        Request r;
        r.type = RequestType::kWrite;
        r.offset = (t * kWrites + i) * 512;
        r.buffers = std::span<const iovec>(&iov, 1);
        (*queue)->Enqueue(r, i);
        (*queue)->Submit();
        (*queue)->ProcessCompletions();
      }
      EXPECT_EQ(done, kWrites);
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(backend_->operation_count(), uint64_t{kThreads} * kWrites);
  for (int t = 0; t < kThreads; ++t) {
    auto data = backend_->ReadData(t * kWrites * 512, kWrites * 512);
    ASSERT_TRUE(data.ok());
    for (uint8_t byte : *data) ASSERT_EQ(byte, t + 1);
  }
}

}  // namespace
}  // namespace block

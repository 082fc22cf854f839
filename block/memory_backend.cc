#include "block/memory_backend.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "vmm/sys_util/eventfd.h"
#include "vmm/sys_util/status_macros.h"

namespace block {
namespace {

constexpr uint64_t kChunkSize = 64 * 1024;

}  // namespace

struct MemoryBackend::State {
  explicit State(const BackendInfo& info) : info(info) {}

  // Runs one operation against the store and logs it; returns 0 or an errno.
  int Execute(const Request& request) {
    absl::MutexLock lock(&mutex);
    const uint64_t index = log.size();
    const uint64_t length = request.length();
    log.push_back({request.type, request.offset, length, request.fua});
    if (auto it = failures.find(index); it != failures.end()) {
      const int error = it->second;
      failures.erase(it);
      return error;
    }
    // The drive layer rejects all of these first; a backend checks anyway, as a real one would.
    if (request.type == RequestType::kFlush) return 0;
    if (request.offset > info.size_bytes || length > info.size_bytes - request.offset) {
      return ERANGE;
    }
    switch (request.type) {
      case RequestType::kRead: {
        uint64_t position = request.offset;
        for (const iovec& buffer : request.buffers) {
          CopyOut(position, static_cast<uint8_t*>(buffer.iov_base), buffer.iov_len);
          position += buffer.iov_len;
        }
        return 0;
      }
      case RequestType::kWrite: {
        if (info.read_only) return EROFS;
        uint64_t position = request.offset;
        for (const iovec& buffer : request.buffers) {
          CopyIn(position, static_cast<const uint8_t*>(buffer.iov_base), buffer.iov_len);
          position += buffer.iov_len;
        }
        return 0;
      }
      case RequestType::kDiscard:
        if (info.read_only) return EROFS;
        if (!info.discard) return EINVAL;
        Zero(request.offset, length);
        return 0;
      case RequestType::kFlush:
        break;
    }
    return EINVAL;
  }

  void CopyOut(uint64_t position, uint8_t* out, uint64_t length) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    while (length > 0) {
      const uint64_t in_chunk = position % kChunkSize;
      const uint64_t n = std::min(length, kChunkSize - in_chunk);
      if (auto it = chunks.find(position / kChunkSize); it != chunks.end()) {
        std::memcpy(out, it->second.data() + in_chunk, n);
      } else {
        std::memset(out, 0, n);
      }
      position += n;
      out += n;
      length -= n;
    }
  }

  void CopyIn(uint64_t position, const uint8_t* in, uint64_t length)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    while (length > 0) {
      const uint64_t in_chunk = position % kChunkSize;
      const uint64_t n = std::min(length, kChunkSize - in_chunk);
      std::vector<uint8_t>& chunk = chunks[position / kChunkSize];
      if (chunk.empty()) chunk.resize(kChunkSize);
      std::memcpy(chunk.data() + in_chunk, in, n);
      position += n;
      in += n;
      length -= n;
    }
  }

  void Zero(uint64_t position, uint64_t length) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) {
    while (length > 0) {
      const uint64_t in_chunk = position % kChunkSize;
      const uint64_t n = std::min(length, kChunkSize - in_chunk);
      if (auto it = chunks.find(position / kChunkSize); it != chunks.end()) {
        if (n == kChunkSize) {
          chunks.erase(it);  // deallocated, as a discard on a sparse file would
        } else {
          std::memset(it->second.data() + in_chunk, 0, n);
        }
      }
      position += n;
      length -= n;
    }
  }

  const BackendInfo info;
  mutable absl::Mutex mutex;
  absl::flat_hash_map<uint64_t, std::vector<uint8_t>> chunks ABSL_GUARDED_BY(mutex);
  std::vector<RecordedOperation> log ABSL_GUARDED_BY(mutex);
  absl::flat_hash_map<uint64_t, int> failures ABSL_GUARDED_BY(mutex);
  absl::Status create_queue_status ABSL_GUARDED_BY(mutex);
  mutable std::atomic<uint64_t> info_calls{0};
  std::atomic<uint64_t> queues_created{0};
  std::atomic<uint64_t> live_queues{0};
};

class MemoryBackend::Queue : public BlockQueue {
 public:
  Queue(std::shared_ptr<State> state, CompletionHandler handler, int event_fd)
      : state_(std::move(state)), handler_(std::move(handler)), event_fd_(event_fd) {
    state_->queues_created.fetch_add(1, std::memory_order_relaxed);
    state_->live_queues.fetch_add(1, std::memory_order_relaxed);
  }
  ~Queue() override {
    ::close(event_fd_);
    state_->live_queues.fetch_sub(1, std::memory_order_relaxed);
  }

  void Enqueue(const Request& request, uint64_t cookie) override {
    pending_.push_back({request, cookie});
    ++in_flight_;
  }

  void Submit() override {
    if (pending_.empty()) return;
    for (Pending& p : pending_) due_.push_back(p);
    pending_.clear();
    sys_util::SignalEventFd(event_fd_);
  }

  int completion_fd() const override { return event_fd_; }

  void ProcessCompletions() override {
    // Clear readiness before running handlers: a Submit() from inside a handler signals again.
    sys_util::DrainEventFd(event_fd_);
    // Only what was due on entry: requests submitted by handlers wait for the next call, like
    // completions that arrive after a real backend has reaped its ring.
    size_t due = due_.size();
    while (due-- > 0) {
      Pending p = due_.front();
      due_.pop_front();
      const int error = state_->Execute(p.request);
      --in_flight_;
      handler_(p.cookie, Completion{error});
    }
  }

  size_t in_flight() const override { return in_flight_; }

 private:
  struct Pending {
    Request request;
    uint64_t cookie;
  };

  const std::shared_ptr<State> state_;
  CompletionHandler handler_;
  const int event_fd_;
  std::vector<Pending> pending_;  // enqueued, not yet submitted
  std::deque<Pending> due_;       // submitted, not yet executed
  size_t in_flight_ = 0;
};

MemoryBackend::MemoryBackend(MemoryBackendOptions options) {
  info_.size_bytes = options.size_bytes;
  info_.logical_block_size = options.logical_block_size;
  info_.read_only = options.read_only;
  info_.native_fua = options.native_fua;
  info_.discard = options.discard;
  state_ = std::make_shared<State>(info_);
}

MemoryBackend::~MemoryBackend() = default;

const BackendInfo& MemoryBackend::info() const {
  state_->info_calls.fetch_add(1, std::memory_order_relaxed);
  return info_;
}

absl::StatusOr<std::unique_ptr<BlockQueue>> MemoryBackend::CreateQueue(CompletionHandler handler) {
  {
    absl::MutexLock lock(&state_->mutex);
    RETURN_IF_ERROR(state_->create_queue_status);
  }
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, "eventfd");
  return std::make_unique<Queue>(state_, std::move(handler), fd);
}

absl::Status MemoryBackend::WriteData(uint64_t offset, std::span<const uint8_t> data) {
  if (offset > info_.size_bytes || data.size() > info_.size_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat("write of ", data.size(), " bytes at ", offset,
                                              " past the end (", info_.size_bytes, ")"));
  }
  absl::MutexLock lock(&state_->mutex);
  state_->CopyIn(offset, data.data(), data.size());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint8_t>> MemoryBackend::ReadData(uint64_t offset,
                                                             uint64_t length) const {
  if (offset > info_.size_bytes || length > info_.size_bytes - offset) {
    return absl::OutOfRangeError(absl::StrCat("read of ", length, " bytes at ", offset,
                                              " past the end (", info_.size_bytes, ")"));
  }
  std::vector<uint8_t> data(length);
  absl::MutexLock lock(&state_->mutex);
  state_->CopyOut(offset, data.data(), length);
  return data;
}

std::vector<RecordedOperation> MemoryBackend::operations() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->log;
}

uint64_t MemoryBackend::operation_count() const {
  absl::MutexLock lock(&state_->mutex);
  return state_->log.size();
}

void MemoryBackend::FailOperation(uint64_t index, int error) {
  absl::MutexLock lock(&state_->mutex);
  state_->failures[index] = error;
}

void MemoryBackend::FailCreateQueue(absl::Status status) {
  absl::MutexLock lock(&state_->mutex);
  state_->create_queue_status = std::move(status);
}

uint64_t MemoryBackend::info_calls() const {
  return state_->info_calls.load(std::memory_order_relaxed);
}

uint64_t MemoryBackend::queues_created() const {
  return state_->queues_created.load(std::memory_order_relaxed);
}

uint64_t MemoryBackend::live_queues() const {
  return state_->live_queues.load(std::memory_order_relaxed);
}

}  // namespace block

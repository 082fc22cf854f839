#ifndef BLOCK_BACKEND_H_
#define BLOCK_BACKEND_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "block/request.h"

namespace block {

// Called once per request, on the thread that owns the queue, from ProcessCompletions().
// `cookie` is the caller's tag from Enqueue().
using CompletionHandler = absl::AnyInvocable<void(uint64_t cookie, Completion completion)>;

// The per-thread half of a backend: one per iothread (for io_uring, one ring). Not thread-safe: all
// calls come from the thread that created it, so the hot path takes no lock. The caller's loop is:
// Enqueue() any number of requests, Submit() once (one system call for the batch), wait for
// completion_fd() to become readable (epoll), then ProcessCompletions().
class BlockQueue {
 public:
  virtual ~BlockQueue() = default;

  // Queues `request` for the next Submit(). Never blocks and never fails here: a request that cannot
  // be issued (ring full, bad range) completes, or is issued later, through the handler.
  virtual void Enqueue(const Request& request, uint64_t cookie) = 0;
  // Issues everything queued since the last call.
  virtual void Submit() = 0;
  // An fd (eventfd) that becomes readable when completions may be waiting.
  virtual int completion_fd() const = 0;
  // Reaps finished I/O (retrying short transfers, resubmitting what waited for room) and calls the
  // handler for each request that is done. Clears completion_fd()'s readiness.
  virtual void ProcessCompletions() = 0;
  // Requests enqueued and not yet completed.
  virtual size_t in_flight() const = 0;
};

// What a backend is and can do. Fixed for the backend's lifetime, but for the size of one that
// was resized (BlockBackend::size_bytes()).
struct BackendInfo {
  uint64_t size_bytes = 0;  // at open
  uint32_t logical_block_size = 512;
  bool read_only = false;
  // Writes with Request::fua set are made durable by the write itself (RWF_DSYNC), with no separate
  // flush. Without it the drive layer emulates FUA as write, then flush.
  bool native_fua = false;
  bool discard = false;
};

// A storage backend (a raw file on io_uring, a host CD-ROM, a test fake). Thread-safe: queues for
// several iothreads may be created and used at once.
class BlockBackend {
 public:
  virtual ~BlockBackend() = default;
  virtual const BackendInfo& info() const = 0;
  // The size now: info().size_bytes unless Resize() changed it. One atomic load.
  virtual uint64_t size_bytes() const { return info().size_bytes; }
  // Online resize: to `new_size` bytes (a multiple of the logical block size), or with none to
  // the size the host gives the file or device now (a file grown or a volume extended on the
  // host), rounded down to the logical block size. Returns the new size. Unimplemented where the
  // backend has a fixed size.
  virtual absl::StatusOr<uint64_t> Resize(std::optional<uint64_t> new_size) {
    return absl::UnimplementedError("this backend cannot be resized");
  }
  // A queue for the calling thread; its completions run `handler` on that thread.
  virtual absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) = 0;
};

}  // namespace block

#endif  // BLOCK_BACKEND_H_

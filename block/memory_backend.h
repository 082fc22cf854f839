#ifndef BLOCK_MEMORY_BACKEND_H_
#define BLOCK_MEMORY_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "block/backend.h"
#include "block/request.h"

namespace block {

struct MemoryBackendOptions {
  uint64_t size_bytes = 1 << 20;
  uint32_t logical_block_size = 512;
  bool read_only = false;
  bool native_fua = false;
  bool discard = true;
};

// One operation as the backend saw it, in the order it executed.
struct RecordedOperation {
  RequestType type = RequestType::kRead;
  uint64_t offset = 0;
  uint64_t length = 0;
  bool fua = false;

  friend bool operator==(const RecordedOperation&, const RecordedOperation&) = default;
};

// An in-memory BlockBackend for tests of the block layer and of devices. The data is sparse (64 KiB
// chunks allocated on first write; unwritten and discarded ranges read as zeros), so a "large" disk
// costs only what is written.
//
// Its queues complete requests only in ProcessCompletions(): Enqueue() holds a request, Submit()
// makes it due and signals the queue's eventfd, ProcessCompletions() executes every due request in
// order against the store, records it, and calls the handler. A test therefore controls exactly
// when each request finishes, and requests enqueued from inside a handler wait for the next
// Submit() like any others.
//
// The store, the log and the injected failures are shared by all queues and guarded by a mutex, so
// queues on several threads may run at once. Queues keep the store alive by themselves.
class MemoryBackend : public BlockBackend {
 public:
  explicit MemoryBackend(MemoryBackendOptions options = {});
  ~MemoryBackend() override;

  // Counts calls (see info_calls()): a test can prove a path asks the backend nothing per request.
  const BackendInfo& info() const override;
  absl::StatusOr<std::unique_ptr<BlockQueue>> CreateQueue(CompletionHandler handler) override;

  // Direct access to the data, bypassing queues and the log. OutOfRange past the end.
  absl::Status WriteData(uint64_t offset, std::span<const uint8_t> data);
  absl::StatusOr<std::vector<uint8_t>> ReadData(uint64_t offset, uint64_t length) const;

  // Every operation executed so far, in order (failed ones included).
  std::vector<RecordedOperation> operations() const;
  uint64_t operation_count() const;
  // The operation that will be operations()[index] completes with `error` (a positive errno) and
  // without touching the data. Index operation_count() is the next one.
  void FailOperation(uint64_t index, int error);
  // The next CreateQueue() calls return `status` (OkStatus() to stop).
  void FailCreateQueue(absl::Status status);

  uint64_t info_calls() const;
  uint64_t queues_created() const;
  // Queues created and not yet destroyed.
  uint64_t live_queues() const;

 private:
  struct State;
  class Queue;

  BackendInfo info_;
  std::shared_ptr<State> state_;
};

}  // namespace block

#endif  // BLOCK_MEMORY_BACKEND_H_

#ifndef BLOCK_RAW_RAW_FILE_QUEUE_H_
#define BLOCK_RAW_RAW_FILE_QUEUE_H_

#include <memory>

#include "block/backend.h"
#include "block/raw/raw_file_backend.h"
#include "block/raw/uring_ops.h"

namespace block::raw {

// The queue of one RawFileBackend on one thread, driving `ring` (raw_file_queue.cc: requests
// through io_uring, bounce buffers for misaligned O_DIRECT, retries, FUA as RWF_DSYNC). Made by
// RawFileBackend::CreateQueue; not for use outside //block/raw.
std::unique_ptr<BlockQueue> MakeRawFileQueue(std::shared_ptr<const RawFileBackend> backend,
                                             std::unique_ptr<UringOps> ring,
                                             CompletionHandler handler);

}  // namespace block::raw

#endif  // BLOCK_RAW_RAW_FILE_QUEUE_H_

#ifndef BLOCK_RAW_BOUNCE_ARENA_H_
#define BLOCK_RAW_BOUNCE_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace block::raw {

// The bounce memory of one queue: a single anonymous mapping of `capacity` bytes, made the first
// time a request needs it and kept until the queue goes, handed out in `unit`-sized pieces
// (first fit). Never the heap: a guest that sends large misaligned requests drives the heap to
// grow and fragment for good (H6 of docs/security.md: 0.7-0.9 GB of peak RSS for a
// 32 MiB guest), while this mapping bounds what bouncing can ever make resident to `capacity`.
// Page-aligned, so every piece meets O_DIRECT's memory alignment when `unit` is a multiple of it.
// One thread only (the queue's).
class BounceArena {
 public:
  // `unit` a power of two, at least the page size; `capacity` a multiple of it.
  BounceArena(size_t capacity, size_t unit);
  ~BounceArena();
  BounceArena(const BounceArena&) = delete;
  BounceArena& operator=(const BounceArena&) = delete;

  // `bytes` (at most capacity()) of contiguous memory, or nullopt when no such run is free now
  // (or the mapping cannot be made). Returns the piece's offset in the arena.
  std::optional<size_t> Allocate(size_t bytes);
  // Gives back a piece Allocate() returned, with the size asked for.
  void Free(size_t offset, size_t bytes);
  char* at(size_t offset) const { return base_ + offset; }

  size_t capacity() const { return capacity_; }
  size_t bytes_in_use() const { return used_units_ * unit_; }

 private:
  size_t Units(size_t bytes) const { return (bytes + unit_ - 1) / unit_; }

  const size_t capacity_;
  const size_t unit_;
  char* base_ = nullptr;      // mapped on first use
  std::vector<bool> in_use_;  // per unit
  size_t used_units_ = 0;
};

}  // namespace block::raw

#endif  // BLOCK_RAW_BOUNCE_ARENA_H_

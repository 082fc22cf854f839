#include "block/raw/bounce_arena.h"

#include <sys/mman.h>

#include <algorithm>

namespace block::raw {

BounceArena::BounceArena(size_t capacity, size_t unit)
    : capacity_(capacity / unit * unit), unit_(unit), in_use_(capacity / unit, false) {}

BounceArena::~BounceArena() {
  if (base_ != nullptr) munmap(base_, capacity_);
}

std::optional<size_t> BounceArena::Allocate(size_t bytes) {
  const size_t units = Units(std::max<size_t>(bytes, 1));
  if (units > in_use_.size()) return std::nullopt;
  if (base_ == nullptr) {
    // MAP_NORESERVE: pages become resident only as requests touch them.
    void* mapped = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapped == MAP_FAILED) return std::nullopt;
    base_ = static_cast<char*>(mapped);
  }
  size_t run = 0;
  for (size_t i = 0; i < in_use_.size(); ++i) {
    run = in_use_[i] ? 0 : run + 1;
    if (run == units) {
      const size_t first = i + 1 - units;
      std::fill(in_use_.begin() + first, in_use_.begin() + i + 1, true);
      used_units_ += units;
      return first * unit_;
    }
  }
  return std::nullopt;
}

void BounceArena::Free(size_t offset, size_t bytes) {
  const size_t first = offset / unit_;
  const size_t units = Units(std::max<size_t>(bytes, 1));
  std::fill(in_use_.begin() + first, in_use_.begin() + first + units, false);
  used_units_ -= units;
}

}  // namespace block::raw

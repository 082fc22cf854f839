#include "devices/ide/prd.h"

#include <algorithm>
#include <array>

#include "devices/ide/ata.h"

namespace devices::ide {

PrdWalk WalkPrdTable(const vmm::GuestMemory& memory, uint32_t table, uint64_t limit,
                     uint32_t max_entries) {
  PrdWalk walk;
  if (limit == 0) return walk;  // nothing to transfer: nothing is fetched
  const uint64_t base = table & ~uint32_t{3};
  for (uint32_t i = 0; i < max_entries; ++i) {
    std::array<uint8_t, bm::kPrdEntrySize> entry{};
    if (!memory.Read(vmm::GuestAddress(base + uint64_t{i} * bm::kPrdEntrySize), entry).ok()) {
      walk.end = PrdEnd::kTableOutside;
      return walk;
    }
    ++walk.entries;
    const uint32_t address = (uint32_t{entry[0]} | uint32_t{entry[1]} << 8 |
                              uint32_t{entry[2]} << 16 | uint32_t{entry[3]} << 24) &
                             ~uint32_t{1};
    const uint32_t control = uint32_t{entry[4]} | uint32_t{entry[5]} << 8 |
                             uint32_t{entry[6]} << 16 | uint32_t{entry[7]} << 24;
    uint32_t count = control & 0xfffe;
    if (count == 0) count = 0x10000;
    const bool eot = (control & bm::kPrdEndOfTable) != 0;

    const uint64_t take = std::min<uint64_t>(count, limit - walk.total);
    absl::StatusOr<std::span<uint8_t>> span = memory.GetHostSpan(vmm::GuestAddress(address), take);
    if (!span.ok()) {
      walk.end = PrdEnd::kRegionOutside;
      return walk;
    }
    if (!walk.iov.empty() &&
        static_cast<uint8_t*>(walk.iov.back().iov_base) + walk.iov.back().iov_len == span->data()) {
      walk.iov.back().iov_len += take;
    } else {
      walk.iov.push_back(iovec{span->data(), static_cast<size_t>(take)});
    }
    walk.total += take;
    if (walk.total == limit) {
      walk.end = PrdEnd::kLimit;
      walk.exhausted = eot && take == count;
      return walk;
    }
    if (eot) {
      walk.end = PrdEnd::kEndOfTable;
      walk.exhausted = true;
      return walk;
    }
  }
  walk.end = PrdEnd::kNoEndOfTable;
  return walk;
}

}  // namespace devices::ide

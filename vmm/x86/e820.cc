#include "vmm/x86/e820.h"

#include <algorithm>

#include "vmm/machine/layout.h"

namespace vmm::x86 {

std::vector<E820Entry> BuildE820Map(const GuestMemory& memory) {
  std::vector<E820Entry> map;
  for (const auto& region : memory.regions()) {
    uint64_t start = region->start().value();
    const uint64_t end = region->end().value();
    if (start < kEbdaStart) {
      // Real firmware reserves the EBDA and the legacy ROM/VGA area; Linux expects that hole and we
      // keep the MP table there.
      map.push_back({start, std::min(end, kEbdaStart) - start, E820Type::kRam});
      if (end > kEbdaStart) {
        map.push_back(
            {kEbdaStart, std::min(end, kHighMemoryStart) - kEbdaStart, E820Type::kReserved});
      }
      start = kHighMemoryStart;
    }
    if (end > start) map.push_back({start, end - start, E820Type::kRam});
  }
  return map;
}

}  // namespace vmm::x86

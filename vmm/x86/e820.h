#ifndef VMM_X86_E820_H_
#define VMM_X86_E820_H_

#include <cstdint>
#include <vector>

#include "vmm/machine/guest_memory.h"

namespace vmm::x86 {

// Memory map entry types as the BIOS e820 call reports them (ACPI spec, "Address Range Types").
enum class E820Type : uint32_t {
  kRam = 1,
  kReserved = 2,
};

struct E820Entry {
  uint64_t address;
  uint64_t size;
  E820Type type;
};

// The guest's memory map: low RAM up to the EBDA, the EBDA/ROM hole reserved, RAM from 1 MiB, and
// RAM above 4 GiB when present (docs/machine.md). Sorted by address, non-overlapping.
std::vector<E820Entry> BuildE820Map(const GuestMemory& memory);

}  // namespace vmm::x86

#endif  // VMM_X86_E820_H_

#ifndef DEVICES_IDE_PRD_H_
#define DEVICES_IDE_PRD_H_

#include <sys/uio.h>

#include <cstdint>
#include <vector>

#include "vmm/machine/guest_memory.h"

namespace devices::ide {

// How a walk of a Physical Region Descriptor table ended (SFF-8038i 2.x "Physical Region
// Descriptor"; Intel PIIX3 datasheet "Bus Master IDE Function").
enum class PrdEnd {
  kLimit,          // the walk collected `limit` bytes (the transfer is covered)
  kEndOfTable,     // an entry with EOT ended the table before `limit`
  kTableOutside,   // a descriptor lies outside guest RAM
  kRegionOutside,  // a descriptor's memory region lies outside guest RAM (or spans regions)
  kNoEndOfTable,   // `max_entries` descriptors without EOT and without reaching `limit`
};

// The memory regions of a PRD table, as host buffers.
struct PrdWalk {
  // In table order; adjacent regions are merged. Every byte is inside guest RAM.
  std::vector<iovec> iov;
  uint64_t total = 0;  // bytes in `iov`
  PrdEnd end = PrdEnd::kLimit;
  // The table holds no room beyond `total`: the last descriptor used had EOT and was used whole.
  // SFF-8038i: the bus master then clears Active when the transfer ends (Active=0, Interrupt=1);
  // otherwise Active stays set (a table larger than the transfer is a valid completion).
  bool exhausted = false;
  // Descriptors read.
  uint32_t entries = 0;

  // The table covered `limit` bytes.
  bool covered() const { return end == PrdEnd::kLimit; }
  // The walk stopped at something the guest got wrong (not at the transfer's end or the EOT).
  bool faulted() const {
    return end == PrdEnd::kTableOutside || end == PrdEnd::kRegionOutside ||
           end == PrdEnd::kNoEndOfTable;
  }
};

// The bound on a walk: one 4 KiB page of descriptors (512 of them, 32 MiB of regions at 64 KiB
// each: the largest ATA transfer, 65536 sectors, fits). A table without EOT ends here; QEMU's
// bound is the same page.
inline constexpr uint32_t kMaxPrdEntries = 512;

// Walks the table at guest address `table` (the PRD table pointer: bits 1:0 are ignored),
// collecting regions until `limit` bytes are covered, the EOT entry has been used, an entry is
// invalid, or `max_entries` entries were read. Each entry: a 32-bit region base (bit 0 reserved,
// ignored), a 16-bit byte count (bit 0 reserved, ignored; 0 means 64 KiB) and EOT in bit 31 of the
// second dword. Never touches memory outside guest RAM; never reads more than `max_entries`.
PrdWalk WalkPrdTable(const vmm::GuestMemory& memory, uint32_t table, uint64_t limit,
                     uint32_t max_entries = kMaxPrdEntries);

}  // namespace devices::ide

#endif  // DEVICES_IDE_PRD_H_

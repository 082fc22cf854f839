#ifndef VMM_MACHINE_LEGACY_BIOS_AREA_H_
#define VMM_MACHINE_LEGACY_BIOS_AREA_H_

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/bus.h"

namespace vmm {

// The PC's legacy BIOS area, 0xc0000-0xfffff, as the i440FX's Programmable Attribute Map routes it
// (Intel 82441FX PMC datasheet, 3.2.18 "PAM"): thirteen segments (twelve of 16 KiB, then the
// 64 KiB 0xf0000 segment) whose reads go to the shadow RAM below them or to the "PCI side", and
// whose writes do too, independently. On the PCI side of 0xe0000-0xfffff is the firmware ROM's
// last 128 KiB (the ISA BIOS alias of the flash at the top of 4 GiB); nothing answers on the PCI
// side of 0xc0000-0xdffff on this machine (no option ROM is mapped there): reads see all-ones and
// writes go nowhere.
//
// At power-on every segment routes to the PCI side, so the vCPU fetches the firmware from its ROM.
// SeaBIOS then enables shadow RAM (PAM 0x33/0x30), copies itself down from the high flash, and at
// the end of POST write-protects what it keeps there (0x11 for its segments, 0x10 for 0xf0000):
// from then on a write to the BIOS is dropped, as on the real chipset and under QEMU.
//
// The hypervisor serves most accesses from a memory map this class plans (Mappings(), one slot
// per segment: shadow RAM, shadow RAM read-only, or the ROM alias read-only); the accesses that
// map cannot serve (a write to a read-only slot, anything where no slot is mapped) exit to Read()
// and Write() here, which apply the same routing. No dependency on the hypervisor: the assembly
// applies the plan.
class LegacyBiosArea : public BusDevice {
 public:
  static constexpr uint64_t kStart = 0xc0000;
  static constexpr uint64_t kEnd = 0x100000;
  static constexpr uint64_t kSize = kEnd - kStart;
  static constexpr size_t kSegments = 13;
  // The ROM alias ends at 1 MiB and is at most this long (0xe0000-0xfffff).
  static constexpr uint64_t kMaxRomAliasSize = 128 * 1024;

  // How a segment routes (the two enables of its PAM nibble: bit 0 reads, bit 1 writes).
  struct Route {
    bool read_ram = false;
    bool write_ram = false;
    bool operator==(const Route&) const = default;
  };

  // What backs one segment in the hypervisor's memory map. Accesses it cannot serve exit to
  // Read()/Write().
  struct Mapping {
    size_t segment = 0;
    uint64_t guest_address = 0;
    uint64_t size = 0;
    uint8_t* host_address = nullptr;  // nullptr: nothing is mapped; every access exits
    bool read_only = false;
    bool operator==(const Mapping&) const = default;
  };

  // `shadow_ram`: the kSize bytes of RAM at kStart. `rom_alias`: the firmware's last bytes that
  // appear just below 1 MiB (at most kMaxRomAliasSize; empty for none). Both outlive the area.
  static absl::StatusOr<std::unique_ptr<LegacyBiosArea>> Create(std::span<uint8_t> shadow_ram,
                                                                std::span<uint8_t> rom_alias);

  // Segment `index`'s guest range: 0xc0000 + 16 KiB * index for the first twelve, then 0xf0000.
  static uint64_t SegmentStart(size_t index);
  static uint64_t SegmentSize(size_t index);

  // Sets every segment's route and returns the mappings that changed, which the hypervisor's map
  // must now follow (the caller applies them before the guest runs on).
  std::vector<Mapping> SetRoutes(const std::array<Route, kSegments>& routes);
  // Every segment's mapping: the map to start from.
  std::vector<Mapping> Mappings() const;

  // `offset` is relative to kStart. Accesses may span segments; each byte follows its own.
  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

 private:
  LegacyBiosArea(std::span<uint8_t> shadow_ram, std::span<uint8_t> rom_alias)
      : shadow_ram_(shadow_ram), rom_alias_(rom_alias) {}
  Mapping MappingFor(size_t segment, Route route) const;
  static size_t SegmentOf(uint64_t offset);
  // The ROM byte at `offset` (from kStart) seen on the PCI side, if the alias covers it.
  uint8_t* RomByte(uint64_t offset) const;

  const std::span<uint8_t> shadow_ram_;
  const std::span<uint8_t> rom_alias_;
  mutable absl::Mutex mutex_;
  std::array<Route, kSegments> routes_ ABSL_GUARDED_BY(mutex_){};
};

}  // namespace vmm

#endif  // VMM_MACHINE_LEGACY_BIOS_AREA_H_

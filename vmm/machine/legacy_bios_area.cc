#include "vmm/machine/legacy_bios_area.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace vmm {
namespace {

constexpr uint64_t kSmallSegmentSize = 16 * 1024;
constexpr uint64_t kBiosSegmentStart = 0xf0000;

}  // namespace

absl::StatusOr<std::unique_ptr<LegacyBiosArea>> LegacyBiosArea::Create(
    std::span<uint8_t> shadow_ram, std::span<uint8_t> rom_alias) {
  if (shadow_ram.size() != kSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the shadow RAM under the legacy BIOS area is %u bytes, not %u", shadow_ram.size(), kSize));
  }
  if (rom_alias.size() > kMaxRomAliasSize) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a ROM alias of %u bytes does not fit below 1 MiB (at most %u)",
                        rom_alias.size(), kMaxRomAliasSize));
  }
  return std::unique_ptr<LegacyBiosArea>(new LegacyBiosArea(shadow_ram, rom_alias));
}

uint64_t LegacyBiosArea::SegmentStart(size_t index) {
  return index + 1 < kSegments ? kStart + index * kSmallSegmentSize : kBiosSegmentStart;
}

uint64_t LegacyBiosArea::SegmentSize(size_t index) {
  return index + 1 < kSegments ? kSmallSegmentSize : kEnd - kBiosSegmentStart;
}

size_t LegacyBiosArea::SegmentOf(uint64_t offset) {
  return std::min<size_t>(offset / kSmallSegmentSize, kSegments - 1);
}

uint8_t* LegacyBiosArea::RomByte(uint64_t offset) const {
  const uint64_t alias_offset = kSize - rom_alias_.size();
  if (offset < alias_offset || offset >= kSize) return nullptr;
  return &rom_alias_[offset - alias_offset];
}

LegacyBiosArea::Mapping LegacyBiosArea::MappingFor(size_t segment, Route route) const {
  Mapping mapping;
  mapping.segment = segment;
  mapping.guest_address = SegmentStart(segment);
  mapping.size = SegmentSize(segment);
  const uint64_t offset = mapping.guest_address - kStart;
  if (route.read_ram) {
    // Writes to a read-only shadow exit and are dropped (Write below): a write-protected BIOS.
    mapping.host_address = &shadow_ram_[offset];
    mapping.read_only = !route.write_ram;
  } else if (uint8_t* rom = RomByte(offset); rom != nullptr) {
    // Reads see the ROM; every write exits, to the shadow RAM where writes are enabled (how
    // firmware fills a shadow it still runs from the ROM beside).
    mapping.host_address = rom;
    mapping.read_only = true;
  }
  // Otherwise the PCI side, where nothing answers: no mapping, every access exits.
  return mapping;
}

std::vector<LegacyBiosArea::Mapping> LegacyBiosArea::SetRoutes(
    const std::array<Route, kSegments>& routes) {
  absl::MutexLock lock(&mutex_);
  std::vector<Mapping> changed;
  for (size_t i = 0; i < kSegments; ++i) {
    const Mapping before = MappingFor(i, routes_[i]);
    routes_[i] = routes[i];
    const Mapping after = MappingFor(i, routes_[i]);
    if (after != before) changed.push_back(after);
  }
  return changed;
}

std::vector<LegacyBiosArea::Mapping> LegacyBiosArea::Mappings() const {
  absl::MutexLock lock(&mutex_);
  std::vector<Mapping> mappings;
  for (size_t i = 0; i < kSegments; ++i) mappings.push_back(MappingFor(i, routes_[i]));
  return mappings;
}

void LegacyBiosArea::Read(uint64_t offset, std::span<uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    if (at >= kSize) {
      data[i] = 0xff;
    } else if (routes_[SegmentOf(at)].read_ram) {
      data[i] = shadow_ram_[at];
    } else {
      const uint8_t* rom = RomByte(at);
      data[i] = rom != nullptr ? *rom : 0xff;
    }
  }
}

void LegacyBiosArea::Write(uint64_t offset, std::span<const uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < data.size(); ++i) {
    const uint64_t at = offset + i;
    // A write the PAM does not route to RAM reaches the ROM (or nothing), which ignores it.
    if (at < kSize && routes_[SegmentOf(at)].write_ram) shadow_ram_[at] = data[i];
  }
}

}  // namespace vmm

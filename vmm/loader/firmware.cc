#include "vmm/loader/firmware.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::loader {

absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> LoadFirmwareRom(const ImageFile& image) {
  const uint64_t size = image.size();
  if (size < kFirmwareAlignment || size > kMaxFirmwareSize || size % kFirmwareAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: %u bytes is not a firmware image (a multiple of 64 KiB, up to 256 KiB)", image.path(),
        size));
  }
  constexpr uint64_t k4GiB = uint64_t{1} << 32;
  ASSIGN_OR_RETURN(std::unique_ptr<GuestMemoryRegion> rom,
                   GuestMemoryRegion::Create(GuestAddress(k4GiB - size), size));
  RETURN_IF_ERROR(image.ReadAt(0, std::span<uint8_t>(rom->host_address(), size)));
  return rom;
}

absl::Status CopyLegacyBiosArea(const GuestMemoryRegion& rom, const GuestMemory& ram) {
  const uint64_t length = std::min(rom.size(), kLegacyBiosAreaSize);
  const std::span<const uint8_t> tail(rom.host_address() + rom.size() - length, length);
  absl::Status written = ram.Write(GuestAddress(kLegacyBiosAreaEnd - length), tail);
  if (!written.ok()) {
    return absl::OutOfRangeError(
        absl::StrFormat("the legacy BIOS area below 1 MiB is not RAM: %s", written.message()));
  }
  return absl::OkStatus();
}

}  // namespace vmm::loader

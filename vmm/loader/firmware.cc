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

std::span<uint8_t> LegacyBiosAlias(const GuestMemoryRegion& rom) {
  const uint64_t length = std::min(rom.size(), kLegacyBiosAliasSize);
  return std::span<uint8_t>(rom.host_address() + rom.size() - length, length);
}

}  // namespace vmm::loader

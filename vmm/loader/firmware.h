#ifndef VMM_LOADER_FIRMWARE_H_
#define VMM_LOADER_FIRMWARE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/guest_memory.h"

// A PC firmware image (SeaBIOS's bios.bin or bios-256k.bin) where the processor finds it at reset:
// the whole image as ROM ending at 4 GiB, so the first instruction at 0xfffffff0 is its reset
// vector, and its last 128 KiB also in the legacy BIOS area below 1 MiB (0xe0000-0xfffff), where
// the reset vector's far jump into the F segment lands and where the firmware then runs from.
namespace vmm::loader {

inline constexpr uint64_t kFirmwareAlignment = 64 * 1024;
// At most 256 KiB, SeaBIOS's largest build: the ROM then ends at 4 GiB and starts at 0xfffc0000,
// just above the pages the VMM gives KVM for its real-mode TSS and identity map (0xfffbc000,
// vmm/vm.cc), which no memory slot may cover.
inline constexpr uint64_t kMaxFirmwareSize = 256 * 1024;
// The legacy BIOS area's size and end (1 MiB).
inline constexpr uint64_t kLegacyBiosAreaSize = 128 * 1024;
inline constexpr uint64_t kLegacyBiosAreaEnd = 1024 * 1024;

// The image read into a new memory region at 4 GiB - its size, for the VMM to map read-only.
// InvalidArgument unless the size is a multiple of 64 KiB from 64 KiB to 256 KiB (what SeaBIOS's
// images are; anything else is not one this machine can map).
absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> LoadFirmwareRom(const ImageFile& image);

// Copies the ROM's last 128 KiB (all of a smaller one) into RAM just below 1 MiB: the shadow copy
// a chipset at power-on would show there (the machine's RAM covers that area). OutOfRange when RAM
// does not.
absl::Status CopyLegacyBiosArea(const GuestMemoryRegion& rom, const GuestMemory& ram);

}  // namespace vmm::loader

#endif  // VMM_LOADER_FIRMWARE_H_

#ifndef VMM_LOADER_FIRMWARE_H_
#define VMM_LOADER_FIRMWARE_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/guest_memory.h"

// A PC firmware image (SeaBIOS's bios.bin or bios-256k.bin) where the processor finds it at reset:
// the whole image as ROM ending at 4 GiB, so the first instruction at 0xfffffff0 is its reset
// vector, and its last 128 KiB also in the legacy BIOS area below 1 MiB (0xe0000-0xfffff), where
// the reset vector's far jump into the F segment lands: the chipset shows the ROM there until the
// firmware turns on shadow RAM (vmm/machine/legacy_bios_area.h).
namespace vmm::loader {

inline constexpr uint64_t kFirmwareAlignment = 64 * 1024;
// At most 256 KiB, SeaBIOS's largest build: the ROM then ends at 4 GiB and starts at 0xfffc0000,
// just above the pages the VMM gives KVM for its real-mode TSS and identity map (0xfffbc000,
// vmm/vm.cc), which no memory slot may cover.
inline constexpr uint64_t kMaxFirmwareSize = 256 * 1024;
// How much of the ROM's end also appears just below 1 MiB (the ISA BIOS alias).
inline constexpr uint64_t kLegacyBiosAliasSize = 128 * 1024;

// The image read into a new memory region at 4 GiB - its size, for the VMM to map read-only.
// InvalidArgument unless the size is a multiple of 64 KiB from 64 KiB to 256 KiB (what SeaBIOS's
// images are; anything else is not one this machine can map).
absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> LoadFirmwareRom(const ImageFile& image);

// The ROM's last 128 KiB (all of a smaller one): what appears just below 1 MiB where the chipset
// routes reads to the ROM.
std::span<uint8_t> LegacyBiosAlias(const GuestMemoryRegion& rom);

}  // namespace vmm::loader

#endif  // VMM_LOADER_FIRMWARE_H_

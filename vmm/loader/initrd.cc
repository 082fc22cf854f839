#include "vmm/loader/initrd.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "vmm/loader/boot_util.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::loader {

absl::StatusOr<InitrdPlacement> LoadInitrd(const GuestMemory& memory, const std::string& path,
                                           const LoadedKernel& kernel) {
  ASSIGN_OR_RETURN(ImageFile file, ImageFile::Open(path));
  return LoadInitrd(memory, file, kernel);
}

absl::StatusOr<InitrdPlacement> LoadInitrd(const GuestMemory& memory, const ImageFile& file,
                                           const LoadedKernel& kernel) {
  const std::string& path = file.path();
  const uint64_t size = file.size();
  if (size == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: initrd is empty", path));
  }
  ASSIGN_OR_RETURN(const uint64_t low_end, LowRamEnd(memory));

  // boot.rst, initrd_addr_max: "The maximum address that may be occupied by the initial ramdisk
  // contents", i.e. the last byte, hence + 1 for the exclusive end.
  const uint64_t limit = std::min(low_end, uint64_t{kernel.initrd_addr_max} + 1);
  const uint64_t floor =
      AlignUp(std::max(kernel.reserved_end.value(), kHighMemoryStart), kPageSize);
  if (limit <= floor || size > limit - floor || AlignDown(limit - size, kPageSize) < floor) {
    const uint64_t room = limit > floor ? AlignDown(limit - floor, kPageSize) : 0;
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s: initrd of %u bytes (%u MiB) does not fit in guest RAM: between the kernel's end "
        "(0x%x) and the initrd limit 0x%x (initrd_addr_max 0x%x, RAM below 3 GiB ends at 0x%x) "
        "there are only %u bytes (%u MiB)",
        path, size, size >> 20, floor, limit, kernel.initrd_addr_max, low_end, room, room >> 20));
  }
  const uint64_t address = AlignDown(limit - size, kPageSize);
  RETURN_IF_ERROR(file.ReadIntoGuest(memory, 0, size, GuestAddress(address)));
  return InitrdPlacement{GuestAddress(address), size};
}

}  // namespace vmm::loader

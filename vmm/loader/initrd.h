#ifndef VMM_LOADER_INITRD_H_
#define VMM_LOADER_INITRD_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "vmm/loader/image_file.h"
#include "vmm/loader/kernel_loader.h"
#include "vmm/machine/guest_memory.h"

namespace vmm::loader {

// Where an initial ramdisk was put in guest RAM.
struct InitrdPlacement {
  GuestAddress address;  // Page aligned.
  uint64_t size = 0;     // The file's size in bytes.
};

// Reads the initrd at `path` into guest RAM as high as possible (as GRUB and QEMU do: that keeps it
// clear of where the kernel decompresses and of early allocations above it): page-aligned, ending at
// or below min(kernel.initrd_addr_max + 1, the end of RAM below 3 GiB), and starting at or above
// the page after kernel.reserved_end. NotFound / PermissionDenied for the file, InvalidArgument if it
// is empty, ResourceExhausted (with the sizes) if it does not fit.
absl::StatusOr<InitrdPlacement> LoadInitrd(const GuestMemory& memory, const std::string& path,
                                           const LoadedKernel& kernel);
// The same from a file opened before (see LoadKernel's ImageFile overload).
absl::StatusOr<InitrdPlacement> LoadInitrd(const GuestMemory& memory, const ImageFile& file,
                                           const LoadedKernel& kernel);

}  // namespace vmm::loader

#endif  // VMM_LOADER_INITRD_H_

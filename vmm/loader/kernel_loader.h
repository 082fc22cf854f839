#ifndef VMM_LOADER_KERNEL_LOADER_H_
#define VMM_LOADER_KERNEL_LOADER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vmm/loader/image_file.h"
#include "vmm/machine/guest_memory.h"

namespace vmm::loader {

// A kernel image placed in guest RAM, and what the VMM needs to enter it (docs/machine.md "Entry").
struct LoadedKernel {
  enum class EntryKind {
    // ELF with a XEN_ELFNOTE_PHYS32_ENTRY note: 32-bit protected mode, paging off, EBX = the
    // hvm_start_info address (Xen PVH boot ABI). Write it with WritePvhStartInfo().
    kPvh,
    // bzImage: the boot protocol's 64-bit entry (boot.rst "64-bit BOOT PROTOCOL"), RSI = boot_params.
    // Write boot_params with WriteLinuxBootParams().
    kLinux64,
    // ELF without a PVH note, e.g. a vmlinux: entered at e_entry in 64-bit long mode with RSI =
    // boot_params, as Firecracker boots vmlinux. Write boot_params with WriteLinuxBootParams().
    kElf64,
  };

  EntryKind kind = EntryKind::kElf64;
  // Guest-physical address of the first instruction.
  GuestAddress entry;
  // Lowest guest address loaded and highest byte loaded + 1.
  GuestAddress image_start;
  GuestAddress image_end;
  // End of all the memory the kernel claims while it boots, >= image_end. For a bzImage this covers
  // the init_size area it decompresses into, which starts at pref_address (LOAD_PHYSICAL_ADDR) or
  // above, not at the load address (arch/x86/boot/compressed/head_64.S). Anything else the VMM puts
  // in RAM (the initrd) goes above it.
  GuestAddress reserved_end;
  // bzImage only: the setup header as the file has it, from offset 0x1f1 up to 0x202 + the byte at
  // 0x201 (boot.rst), capped at the 2.15 header size. WriteLinuxBootParams() copies it into
  // boot_params.
  std::optional<std::vector<uint8_t>> bzimage_setup_header;
  // bzImage only: the header's protocol version (0x0206 for 2.06); 0 for ELF.
  uint16_t boot_protocol_version = 0;
  // Highest address the initrd may occupy (inclusive, as boot.rst defines initrd_addr_max). From the
  // bzImage header; 0x37ffffff for protocols before 2.03; 0xffffffff for ELF kernels, which have no
  // such limit beyond the 4 GiB the entry modes can address (the initrd is still kept below 3 GiB).
  uint32_t initrd_addr_max = 0xffffffff;
};

// Loads the kernel image at `path` into guest RAM. The format is detected from the file's magic:
//   - ELF64 (x86-64, ET_EXEC): every PT_LOAD segment at its p_paddr (p_filesz bytes copied, the rest
//     of p_memsz zeroed). Each segment must lie in RAM at or above 1 MiB, below 3 GiB: below 1 MiB
//     are the VMM's boot structures and the legacy BIOS area (docs/machine.md). A PT_NOTE holding a
//     "Xen" XEN_ELFNOTE_PHYS32_ENTRY note makes it a kPvh kernel entered there; otherwise kElf64 at
//     e_entry. The entry must lie inside a loaded segment.
//   - bzImage (boot protocol >= 2.06 with XLF_KERNEL_64, so >= 2.12 in practice): the protected-mode
//     kernel (file offset (setup_sects + 1) * 512 to the end) loaded at pref_address when the kernel
//     is relocatable and pref_address is suitably aligned, else at 1 MiB; kLinux64 entry at
//     load address + 0x200.
// Errors: NotFound (no such file), PermissionDenied (unreadable), InvalidArgument (not a kernel,
// truncated, unsupported ELF class/machine/type, malformed headers, too old a boot protocol, a
// segment or entry in the wrong place), ResourceExhausted (the kernel needs more RAM than the guest
// has below 3 GiB), OutOfRange (a segment beyond 3 GiB, where the low RAM region never reaches).
// Every message names the file.
absl::StatusOr<LoadedKernel> LoadKernel(const GuestMemory& memory, const std::string& path);
// The same from a file opened before (a VM that restarts its guest reloads the kernel from the
// descriptor it kept: inside a jail the path may no longer resolve).
absl::StatusOr<LoadedKernel> LoadKernel(const GuestMemory& memory, const ImageFile& file);

}  // namespace vmm::loader

#endif  // VMM_LOADER_KERNEL_LOADER_H_

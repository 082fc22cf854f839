#ifndef VMM_X86_BOOT_CPU_H_
#define VMM_X86_BOOT_CPU_H_

#include <cstdint>

#include "absl/status/status.h"
#include "vmm/kvm/kvm.h"
#include "vmm/machine/guest_memory.h"

// The CPU state a kernel expects at its entry point, and the tables that state refers to.
namespace vmm::x86 {

enum class BootEntryMode {
  // Xen PVH: 32-bit protected mode, paging off, EBX = hvm_start_info.
  kPvh32,
  // Linux 64-bit boot protocol: long mode on identity page tables, RSI = boot_params.
  kLinux64,
};

// GDT selectors of the boot GDT (docs/machine.md).
inline constexpr uint16_t kCode64Selector = 0x08;
inline constexpr uint16_t kData64Selector = 0x10;
inline constexpr uint16_t kTssSelector = 0x18;
inline constexpr uint16_t kCode32Selector = 0x20;
inline constexpr uint16_t kData32Selector = 0x28;

// Writes the boot GDT (and an empty IDT after it) into low guest memory.
absl::Status WriteBootGdt(const GuestMemory& memory);
// Writes page tables identity-mapping 0-4 GiB with 2 MiB pages (the 64-bit boot protocol needs the
// kernel, boot_params and command line mapped 1:1).
absl::Status WriteIdentityPageTables(const GuestMemory& memory);

// Loads the boot vCPU with the state `mode` specifies, entering at `entry` with `boot_info` (the
// start_info or boot_params address) in EBX or RSI.
absl::Status ConfigureBootVcpu(VcpuFd& vcpu, BootEntryMode mode, uint64_t entry,
                               uint64_t boot_info);

// State every vCPU needs whatever the entry: FPU defaults, the boot MSRs, and the local APIC's LINT0
// as ExtINT (the 8259 PIC's output) and LINT1 as NMI, as the MP specification's virtual-wire mode and
// firmware set them.
absl::Status ConfigureCommonVcpuState(VcpuFd& vcpu);

// Encodes a GDT descriptor (Intel SDM Vol. 3A, 3.4.5). `flags` holds the access byte in bits 0-7 and
// the G/DB/L/AVL nibble in bits 12-15.
uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit);
// The kvm_segment KVM needs for a descriptor loaded with `selector`.
kvm_segment SegmentFromGdtEntry(uint64_t entry, uint16_t selector);

}  // namespace vmm::x86

#endif  // VMM_X86_BOOT_CPU_H_

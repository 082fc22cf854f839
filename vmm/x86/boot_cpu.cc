#include "vmm/x86/boot_cpu.h"

#include <array>

#include "absl/strings/str_format.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::x86 {
namespace {

// Control register and EFER bits (Intel SDM Vol. 3A, 2.5 and 2.2.1).
constexpr uint64_t kCr0ProtectionEnable = 1ull << 0;
constexpr uint64_t kCr0ExtensionType = 1ull << 4;
constexpr uint64_t kCr0Paging = 1ull << 31;
constexpr uint64_t kCr4Pae = 1ull << 5;
constexpr uint64_t kEferLongModeEnable = 1ull << 8;
constexpr uint64_t kEferLongModeActive = 1ull << 10;

// Descriptor flags: access byte | (G, D/B, L nibble << 12).
constexpr uint16_t kCode64Flags = 0xa09b;  // G, L, present, DPL0, code, execute/read, accessed
constexpr uint16_t kDataFlags = 0xc093;    // G, B, present, DPL0, data, read/write, accessed
constexpr uint16_t kTssFlags = 0x808b;     // G, present, 64-bit TSS (busy)
constexpr uint16_t kCode32Flags = 0xc09b;  // G, D, present, DPL0, code, execute/read, accessed

constexpr uint64_t kPagePresent = 1ull << 0;
constexpr uint64_t kPageWritable = 1ull << 1;
constexpr uint64_t kPageSize2M = 1ull << 7;

// MSRs set at boot (Intel SDM Vol. 4).
constexpr uint32_t kMsrIa32MiscEnable = 0x1a0;
constexpr uint64_t kMiscEnableFastStrings = 1ull << 0;
constexpr uint32_t kMsrMtrrDefType = 0x2ff;
constexpr uint64_t kMtrrEnableWriteBack = (1ull << 11) | 6;  // MTRRs on, default type write-back

// Local APIC register offsets and LVT delivery modes (Intel SDM Vol. 3A, 10.5.1).
constexpr size_t kApicLvtLint0 = 0x350;
constexpr size_t kApicLvtLint1 = 0x360;
constexpr uint32_t kDeliveryModeNmi = 4;
constexpr uint32_t kDeliveryModeExtInt = 7;

std::array<uint64_t, 6> BootGdt() {
  return {
      0,                                   // null
      GdtEntry(kCode64Flags, 0, 0xfffff),  // 0x08
      GdtEntry(kDataFlags, 0, 0xfffff),    // 0x10
      GdtEntry(kTssFlags, 0, 0xfffff),     // 0x18
      GdtEntry(kCode32Flags, 0, 0xfffff),  // 0x20
      GdtEntry(kDataFlags, 0, 0xfffff),    // 0x28
  };
}

uint32_t ReadLapicRegister(const kvm_lapic_state& lapic, size_t offset) {
  uint32_t value;
  std::memcpy(&value, &lapic.regs[offset], sizeof(value));
  return value;
}

void WriteLapicRegister(kvm_lapic_state& lapic, size_t offset, uint32_t value) {
  std::memcpy(&lapic.regs[offset], &value, sizeof(value));
}

uint32_t WithDeliveryMode(uint32_t lvt, uint32_t mode) { return (lvt & ~0x700u) | (mode << 8); }

}  // namespace

uint64_t GdtEntry(uint16_t flags, uint32_t base, uint32_t limit) {
  return ((static_cast<uint64_t>(base) & 0xff000000ull) << 32) |
         ((static_cast<uint64_t>(base) & 0x00ffffffull) << 16) |
         (static_cast<uint64_t>(limit) & 0x0000ffffull) |
         ((static_cast<uint64_t>(limit) & 0x000f0000ull) << 32) |
         ((static_cast<uint64_t>(flags) & 0xf0ffull) << 40);
}

kvm_segment SegmentFromGdtEntry(uint64_t entry, uint16_t selector) {
  kvm_segment segment{};
  segment.base = static_cast<uint64_t>(((entry >> 16) & 0x00ffffff) | ((entry >> 32) & 0xff000000));
  uint32_t limit = static_cast<uint32_t>((entry & 0xffff) | ((entry >> 32) & 0xf0000));
  segment.g = (entry >> 55) & 1;
  // With G set the limit counts 4 KiB pages; KVM wants it in bytes.
  if (segment.g) limit = (limit << 12) | 0xfff;
  segment.limit = limit;
  segment.selector = selector;
  segment.type = (entry >> 40) & 0xf;
  segment.s = (entry >> 44) & 1;
  segment.dpl = (entry >> 45) & 3;
  segment.present = (entry >> 47) & 1;
  segment.avl = (entry >> 52) & 1;
  segment.l = (entry >> 53) & 1;
  segment.db = (entry >> 54) & 1;
  segment.unusable = segment.present ? 0 : 1;
  return segment;
}

absl::Status WriteBootGdt(const GuestMemory& memory) {
  const auto gdt = BootGdt();
  RETURN_IF_ERROR(memory.WriteObject(GuestAddress(kBootGdtAddress), gdt));
  // An empty IDT right after the GDT: a fault before the kernel installs its own triple-faults,
  // which the VMM reports, rather than jumping through garbage.
  return memory.WriteObject<uint64_t>(GuestAddress(kBootGdtAddress + sizeof(gdt)), 0);
}

absl::Status WriteIdentityPageTables(const GuestMemory& memory) {
  RETURN_IF_ERROR(memory.WriteObject<uint64_t>(GuestAddress(kPml4Address),
                                               kPdptAddress | kPagePresent | kPageWritable));
  for (uint64_t gib = 0; gib < 4; ++gib) {
    const uint64_t directory = kPageDirectoryAddress + gib * kPageSize;
    RETURN_IF_ERROR(memory.WriteObject<uint64_t>(GuestAddress(kPdptAddress + gib * 8),
                                                 directory | kPagePresent | kPageWritable));
    std::array<uint64_t, 512> entries;
    for (uint64_t i = 0; i < entries.size(); ++i) {
      entries[i] = ((gib << 30) + (i << 21)) | kPagePresent | kPageWritable | kPageSize2M;
    }
    RETURN_IF_ERROR(memory.WriteObject(GuestAddress(directory), entries));
  }
  return absl::OkStatus();
}

absl::Status ConfigureBootVcpu(VcpuFd& vcpu, BootEntryMode mode, uint64_t entry,
                               uint64_t boot_info) {
  ASSIGN_OR_RETURN(auto sregs, vcpu.GetSregs());
  const auto gdt = BootGdt();
  sregs.gdt.base = kBootGdtAddress;
  sregs.gdt.limit = sizeof(gdt) - 1;
  sregs.idt.base = kBootGdtAddress + sizeof(gdt);
  sregs.idt.limit = 0;
  sregs.tr = SegmentFromGdtEntry(gdt[kTssSelector / 8], kTssSelector);

  kvm_regs regs{};
  regs.rflags = 0x2;  // Bit 1 is reserved and always set.
  regs.rip = entry;
  if (mode == BootEntryMode::kLinux64) {
    const kvm_segment code = SegmentFromGdtEntry(gdt[kCode64Selector / 8], kCode64Selector);
    const kvm_segment data = SegmentFromGdtEntry(gdt[kData64Selector / 8], kData64Selector);
    sregs.cs = code;
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
    sregs.cr3 = kPml4Address;
    sregs.cr4 |= kCr4Pae;
    sregs.cr0 |= kCr0ProtectionEnable | kCr0ExtensionType | kCr0Paging;
    sregs.efer |= kEferLongModeEnable | kEferLongModeActive;
    regs.rsi = boot_info;
    regs.rsp = regs.rbp = kBootStackTop;
  } else {
    // Xen PVH ABI (docs/misc/pvh.pandoc): flat 32-bit segments, CR0.PE, paging off, EBX = start_info.
    const kvm_segment code = SegmentFromGdtEntry(gdt[kCode32Selector / 8], kCode32Selector);
    const kvm_segment data = SegmentFromGdtEntry(gdt[kData32Selector / 8], kData32Selector);
    sregs.cs = code;
    sregs.ds = sregs.es = sregs.fs = sregs.gs = sregs.ss = data;
    sregs.cr0 = kCr0ProtectionEnable | kCr0ExtensionType;
    sregs.cr4 = 0;
    sregs.efer = 0;
    regs.rbx = boot_info;
  }
  RETURN_IF_ERROR(vcpu.SetSregs(sregs));
  return vcpu.SetRegs(regs);
}

absl::Status ConfigureCommonVcpuState(VcpuFd& vcpu) {
  kvm_fpu fpu{};
  fpu.fcw = 0x37f;     // FNINIT's control word
  fpu.mxcsr = 0x1f80;  // all SSE exceptions masked
  RETURN_IF_ERROR(vcpu.SetFpu(fpu));
  std::vector<kvm_msr_entry> msrs(2);
  msrs[0].index = kMsrIa32MiscEnable;
  msrs[0].data = kMiscEnableFastStrings;
  msrs[1].index = kMsrMtrrDefType;
  msrs[1].data = kMtrrEnableWriteBack;
  RETURN_IF_ERROR(vcpu.SetMsrs(msrs));
  ASSIGN_OR_RETURN(auto lapic, vcpu.GetLapic());
  WriteLapicRegister(
      lapic, kApicLvtLint0,
      WithDeliveryMode(ReadLapicRegister(lapic, kApicLvtLint0), kDeliveryModeExtInt));
  WriteLapicRegister(lapic, kApicLvtLint1,
                     WithDeliveryMode(ReadLapicRegister(lapic, kApicLvtLint1), kDeliveryModeNmi));
  return vcpu.SetLapic(lapic);
}

}  // namespace vmm::x86

#ifndef VMM_X86_CPUID_H_
#define VMM_X86_CPUID_H_

#include <linux/kvm.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// CPUID shaping for guests: pure functions over the entry list KVM_GET_SUPPORTED_CPUID returns and
// KVM_SET_CPUID2 takes. Nothing here touches /dev/kvm. Leaf and bit positions are from the Intel
// SDM Vol. 2A, "CPUID-CPU Identification", and the AMD64 APM Vol. 3, appendix E.
namespace vmm::x86 {

enum class CpuidRegister { kEax, kEbx, kEcx, kEdx };

// One feature flag: CPUID.(EAX=function, ECX=index).register[bit].
struct CpuFeature {
  std::string_view name;  // Linux's /proc/cpuinfo spelling, lowercase, e.g. "sse4_1".
  uint32_t function;
  uint32_t index;
  CpuidRegister reg;
  uint32_t bit;
};

// Every feature --cpu-features can name.
std::span<const CpuFeature> KnownCpuFeatures();

// Looks a feature up by name: case-insensitive, '-' and '.' read as '_' ("sse4.1", "tsc-deadline"),
// plus a few aliases ("pni", "sha_ni", "tsc_deadline_timer", "3dnowprefetch", "lzcnt").
// nullptr if unknown.
const CpuFeature* FindCpuFeature(std::string_view name);

// A parsed --cpu-features value.
struct CpuFeatureMask {
  std::vector<CpuFeature> removed;   // "-name": hide from the guest (with dependent features).
  std::vector<CpuFeature> required;  // "+name": must be offered by KVM; the VMM fails otherwise.
  bool empty() const { return removed.empty() && required.empty(); }
};

// Parses a comma-separated list such as "-xsave,-cx16,+x2apic". Whitespace around items is
// ignored; an empty string is an empty mask. InvalidArgument, naming the offending item, for an
// unknown feature, an item without '+' or '-', an empty item, or a feature both added and removed.
absl::StatusOr<CpuFeatureMask> ParseCpuFeatures(std::string_view spec);

// Shapes KVM's supported CPUID (`entries`) into the CPUID every vCPU of the VM shares: the one
// place where VM-wide CPUID is normalised (FilterCpuidForVcpu then adds per-vCPU topology).
//  1. Leaf 1 ECX[31] (hypervisor) is set.
//  2. `mask` is applied. Removing a feature also removes every feature that depends on it, the way
//     Linux's arch/x86/kernel/cpu/cpuid-deps.c would disable them anyway:
//       xsave  -> osxsave, avx (and all that depends on it), pku/ospke, mpx, amx_*;
//       avx    -> avx2, fma, f16c, vaes, vpclmulqdq, avx_vnni, xop, fma4, avx512f (and so avx512*);
//       avx512f-> every other avx512* feature; pku -> ospke; amx_tile -> amx_bf16, amx_int8.
//     Other features (cx16, x2apic, ...) are removed alone. A leaf-1 EDX feature is also cleared
//     from its AMD copy in 80000001H EDX (fpu, tsc, msr, pae, cx8, apic, cmov, mmx, fxsr, ...).
//     Features KVM offers without a feature they depend on (avx2 without avx, ...) are removed
//     the same way.
//  3. Leaf 0xD (XSAVE state enumeration) is made consistent with the features kept, as Linux 6.1
//     checks it (arch/x86/kernel/fpu/xstate.c fpu__init_system_xstate):
//       subleaf 0 EAX/EDX = the XCR0 bits whose feature survives: x87|SSE always, YMM iff avx,
//         BNDREGS|BNDCSR iff mpx, opmask|ZMM_Hi256|Hi16_ZMM iff avx512f, PKRU iff pku,
//         XTILECFG|XTILEDATA iff amx_tile; other (unknown) components are dropped;
//       subleaf 0 ECX = standard-format size for all of them (max offset+size, at least 576);
//       subleaf 0 EBX = size for XCR0 = x87|SSE (576); KVM recomputes it from the vCPU's XCR0;
//       subleaf 1: XSAVEOPT/XSAVEC/XGETBV1/XSAVES as KVM offers them, XFD only with AMX, no
//         supervisor (IA32_XSS) components, EBX = compacted size for x87|SSE (0 without
//         XSAVEC/XSAVES);
//       component subleaves of dropped or supervisor components zeroed.
//     A component whose subleaf is missing, has the wrong size (SDM Vol. 1 Table 13-1), is marked
//     supervisor, starts inside the legacy area/header or overlaps its predecessor loses its
//     feature (with dependents), so feature flags and XCR0 bits always agree. Without xsave
//     (removed, or leaf 0xD missing) every leaf 0xD subleaf is zeroed.
//  4. Leaf 0x40000001 EDX (KVM hints) is cleared: no KVM_HINTS_REALTIME.
// Errors: FailedPrecondition if a required feature is not in `entries` (KVM lacks it or one it
// depends on, or leaf 0xD cannot back it); InvalidArgument if a removal takes a required feature
// with it (e.g. "-xsave,+avx"). `entries` is unchanged on error.
absl::Status ApplyCpuFeatureMask(const CpuFeatureMask& mask,
                                 std::vector<kvm_cpuid_entry2>& entries);

// Sets leaf 01H ECX[24] (TSC-deadline timer): KVM emulates that mode of the local APIC timer when
// it reports KVM_CAP_TSC_DEADLINE_TIMER, but leaves the bit out of KVM_GET_SUPPORTED_CPUID for
// the VMM to set (Documentation/virt/kvm/api.rst, KVM_GET_SUPPORTED_CPUID; QEMU and Firecracker
// do). Without it Linux calibrates the APIC timer against the PIT at boot, 100 ms of spinning
// (arch/x86/kernel/apic/apic.c calibrate_APIC_clock). Call before ApplyCpuFeatureMask, so that
// "-tsc_deadline" can still hide it.
void AddTscDeadlineTimer(std::vector<kvm_cpuid_entry2>& entries);

// Makes `entries` describe the vCPU with local APIC id `apic_id` in a machine of `num_cpus`
// (>= 1) vCPUs. Topology: one socket (package) of num_cpus cores, one thread per core, APIC ids
// 0..num_cpus-1, so a core's APIC id is its core number.
//   leaf 1:          EBX[31:24] initial APIC id, EBX[23:16] logical processors in the package
//                    (num_cpus), EBX[15:0] kept; EDX[28] HTT set iff num_cpus > 1.
//   leaf 4:          per cache: EAX[31:26] = num_cpus - 1 (cores in the package),
//                    EAX[25:14] = threads sharing it - 1 (0 for L1/L2, num_cpus - 1 for L3).
//   leaf 0xB (and 0x1F if present): rewritten as subleaf 0 = SMT level (shift 0, 1 thread),
//                    subleaf 1 = core level (shift ceil(log2 num_cpus), num_cpus threads),
//                    subleaf 2 = invalid (terminator); EDX = apic_id on each. Added when leaf 0
//                    reports a maximum basic leaf >= 0xB even if KVM left it out.
//   AMD 0x80000001:  ECX[1] CmpLegacy set iff num_cpus > 1 (leaf 1's count is cores, no SMT);
//                    ECX[22] TOPOEXT cleared unless leaf 0x8000001E is reported (and in range).
//   AMD 0x80000008:  ECX[7:0] NC = num_cpus - 1, ECX[15:12] ApicIdCoreIdSize = ceil(log2 num_cpus).
//   AMD 0x8000001E:  if present: EAX extended APIC id, EBX core id = apic_id with 1 thread per
//                    core, ECX node 0 of 1.
// Every other leaf (6, 7, 0xD, ...) is left alone. 0x80000001 is touched only when the vendor
// (leaf 0) is AMD or Hygon: on Intel its ECX bits 1 and 22 are reserved.
void FilterCpuidForVcpu(std::vector<kvm_cpuid_entry2>& entries, uint32_t apic_id,
                        uint32_t num_cpus);

// The XCR0 value to load into each vCPU before it first runs (KVM_SET_XCRS): every user state
// component leaf 0xD enumerates (EDX:EAX of subleaf 0), or nullopt without XSAVE. Architecturally
// XCR0 is x87-only at reset, and a guest OS sets its own value with XSETBV; every XSAVE-enabled OS
// (Linux: fpu__init_cpu_xstate) enables all the components CPUID enumerates and it supports, so
// starting there changes nothing for it. It matters where the guest's XSETBV is not intercepted
// (AMD SVM as emulated by QEMU TCG 7.2 has no XSETBV intercept): KVM then never learns the
// guest's XCR0, keeps reporting CPUID.(0DH,0):EBX for its reset value (576 bytes) and reloads
// that XCR0 on every VM entry, so Linux finds EBX disagreeing with the component offsets
// ("XSAVE consistency problem", fpu/xstate.c:606) and boots with XSAVE (and AVX) disabled.
std::optional<uint64_t> BootXcr0(const std::vector<kvm_cpuid_entry2>& entries);

// The entry CPUID.(EAX=function, ECX=index) would return: one with that function and, if KVM
// marks its index significant, that index. nullptr if none.
kvm_cpuid_entry2* FindCpuidEntry(std::vector<kvm_cpuid_entry2>& entries, uint32_t function,
                                 uint32_t index);
const kvm_cpuid_entry2* FindCpuidEntry(const std::vector<kvm_cpuid_entry2>& entries,
                                       uint32_t function, uint32_t index);

}  // namespace vmm::x86

#endif  // VMM_X86_CPUID_H_

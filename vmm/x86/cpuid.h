#ifndef VMM_X86_CPUID_H_
#define VMM_X86_CPUID_H_

#include <linux/kvm.h>

#include <cstdint>
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

// Applies `mask` to `entries` (KVM's supported CPUID, about to become a vCPU's CPUID).
// Removing a feature also removes every feature that depends on it, the way Linux's
// arch/x86/kernel/cpu/cpuid-deps.c would disable them anyway:
//   xsave  -> osxsave, avx (and all that depends on it), pku/ospke, mpx, amx_*; leaf 0xD (XSAVE
//             state enumeration) is zeroed, so the guest sees no XSAVE state components;
//   avx    -> avx2, fma, f16c, vaes, vpclmulqdq, avx_vnni, xop, fma4, avx512f (and so avx512*);
//   avx512f-> every other avx512* feature; pku -> ospke; amx_tile -> amx_bf16, amx_int8.
// Other features (cx16, x2apic, ...) are removed alone.
// Errors: FailedPrecondition if a required feature is not in `entries` (KVM lacks it);
// InvalidArgument if a removal takes a required feature with it (e.g. "-xsave,+avx").
// `entries` is unchanged on error.
absl::Status ApplyCpuFeatureMask(const CpuFeatureMask& mask,
                                 std::vector<kvm_cpuid_entry2>& entries);

// Makes `entries` describe the vCPU with local APIC id `apic_id` in a machine of `num_cpus`
// (>= 1) vCPUs. Topology: one socket (package) of num_cpus cores, one thread per core, APIC ids
// 0..num_cpus-1, so a core's APIC id is its core number.
//   leaf 1:          EBX[31:24] initial APIC id, EBX[23:16] logical processors in the package
//                    (num_cpus), EBX[15:0] kept; EDX[28] HTT set iff num_cpus > 1;
//                    ECX[31] hypervisor set.
//   leaf 4:          per cache: EAX[31:26] = num_cpus - 1 (cores in the package),
//                    EAX[25:14] = threads sharing it - 1 (0 for L1/L2, num_cpus - 1 for L3).
//   leaf 0xB (and 0x1F if present): rewritten as subleaf 0 = SMT level (shift 0, 1 thread),
//                    subleaf 1 = core level (shift ceil(log2 num_cpus), num_cpus threads),
//                    subleaf 2 = invalid (terminator); EDX = apic_id on each. Added when leaf 0
//                    reports a maximum basic leaf >= 0xB even if KVM left it out.
//   AMD 0x80000008:  ECX[7:0] NC = num_cpus - 1, ECX[15:12] ApicIdCoreIdSize = ceil(log2 num_cpus).
//   AMD 0x8000001E:  if present: EAX extended APIC id, EBX core id = apic_id with 1 thread per
//                    core, ECX node 0 of 1.
// Every other leaf (6, 7, 0xD, ...) is left alone.
void FilterCpuidForVcpu(std::vector<kvm_cpuid_entry2>& entries, uint32_t apic_id,
                        uint32_t num_cpus);

// The entry CPUID.(EAX=function, ECX=index) would return: one with that function and, if KVM
// marks its index significant, that index. nullptr if none.
kvm_cpuid_entry2* FindCpuidEntry(std::vector<kvm_cpuid_entry2>& entries, uint32_t function,
                                 uint32_t index);
const kvm_cpuid_entry2* FindCpuidEntry(const std::vector<kvm_cpuid_entry2>& entries,
                                       uint32_t function, uint32_t index);

}  // namespace vmm::x86

#endif  // VMM_X86_CPUID_H_

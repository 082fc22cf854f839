#include "vmm/x86/cpuid.h"

#include <algorithm>
#include <array>
#include <bit>
#include <optional>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace vmm::x86 {
namespace {

using R = CpuidRegister;

// Leaves (SDM Vol. 2A, CPUID, Table 3-8).
constexpr uint32_t kLeafVendor = 0x0;
constexpr uint32_t kLeafFeatures = 0x1;
constexpr uint32_t kLeafCacheParameters = 0x4;
constexpr uint32_t kLeafX2ApicTopology = 0xb;
constexpr uint32_t kLeafXsaveState = 0xd;
constexpr uint32_t kLeafV2Topology = 0x1f;
constexpr uint32_t kLeafAmdFeatures = 0x80000001;
constexpr uint32_t kLeafAmdSizeIdentifiers = 0x80000008;
constexpr uint32_t kLeafAmdExtendedApicId = 0x8000001e;
constexpr uint32_t kLeafKvmFeatures = 0x40000001;

// XSAVE area layout (SDM Vol. 1 13.4): the legacy FXSAVE region (512 bytes) and the XSAVE header
// (64 bytes) come first; component 2 and up start at or after byte 576.
constexpr uint32_t kXsaveLegacyAndHeaderSize = 576;
constexpr uint64_t kXcr0X87Sse = 0x3;  // XCR0 bits 0 (x87) and 1 (SSE): XCR0 at reset is x87 only,
                                       // but x87|SSE is what every XSAVE area holds.

// clang-format off
constexpr CpuFeature kFeatures[] = {
    // CPUID.01H:ECX (SDM Vol. 2A Table 3-10).
    {"sse3", 1, 0, R::kEcx, 0},       {"pclmulqdq", 1, 0, R::kEcx, 1},
    {"monitor", 1, 0, R::kEcx, 3},    {"vmx", 1, 0, R::kEcx, 5},
    {"ssse3", 1, 0, R::kEcx, 9},      {"fma", 1, 0, R::kEcx, 12},
    {"cx16", 1, 0, R::kEcx, 13},      {"pcid", 1, 0, R::kEcx, 17},
    {"sse4_1", 1, 0, R::kEcx, 19},    {"sse4_2", 1, 0, R::kEcx, 20},
    {"x2apic", 1, 0, R::kEcx, 21},    {"movbe", 1, 0, R::kEcx, 22},
    {"popcnt", 1, 0, R::kEcx, 23},    {"tsc_deadline", 1, 0, R::kEcx, 24},
    {"aes", 1, 0, R::kEcx, 25},       {"xsave", 1, 0, R::kEcx, 26},
    {"osxsave", 1, 0, R::kEcx, 27},   {"avx", 1, 0, R::kEcx, 28},
    {"f16c", 1, 0, R::kEcx, 29},      {"rdrand", 1, 0, R::kEcx, 30},
    {"hypervisor", 1, 0, R::kEcx, 31},
    // CPUID.01H:EDX (Table 3-11).
    {"fpu", 1, 0, R::kEdx, 0},        {"tsc", 1, 0, R::kEdx, 4},
    {"msr", 1, 0, R::kEdx, 5},        {"pae", 1, 0, R::kEdx, 6},
    {"mce", 1, 0, R::kEdx, 7},        {"cx8", 1, 0, R::kEdx, 8},
    {"apic", 1, 0, R::kEdx, 9},       {"sep", 1, 0, R::kEdx, 11},
    {"mtrr", 1, 0, R::kEdx, 12},      {"pge", 1, 0, R::kEdx, 13},
    {"mca", 1, 0, R::kEdx, 14},       {"cmov", 1, 0, R::kEdx, 15},
    {"pat", 1, 0, R::kEdx, 16},       {"pse36", 1, 0, R::kEdx, 17},
    {"clflush", 1, 0, R::kEdx, 19},   {"mmx", 1, 0, R::kEdx, 23},
    {"fxsr", 1, 0, R::kEdx, 24},      {"sse", 1, 0, R::kEdx, 25},
    {"sse2", 1, 0, R::kEdx, 26},      {"ht", 1, 0, R::kEdx, 28},
    // CPUID.(EAX=07H,ECX=0):EBX.
    {"fsgsbase", 7, 0, R::kEbx, 0},   {"bmi1", 7, 0, R::kEbx, 3},
    {"hle", 7, 0, R::kEbx, 4},        {"avx2", 7, 0, R::kEbx, 5},
    {"smep", 7, 0, R::kEbx, 7},       {"bmi2", 7, 0, R::kEbx, 8},
    {"erms", 7, 0, R::kEbx, 9},       {"invpcid", 7, 0, R::kEbx, 10},
    {"rtm", 7, 0, R::kEbx, 11},       {"mpx", 7, 0, R::kEbx, 14},
    {"avx512f", 7, 0, R::kEbx, 16},   {"avx512dq", 7, 0, R::kEbx, 17},
    {"rdseed", 7, 0, R::kEbx, 18},    {"adx", 7, 0, R::kEbx, 19},
    {"smap", 7, 0, R::kEbx, 20},      {"avx512ifma", 7, 0, R::kEbx, 21},
    {"clflushopt", 7, 0, R::kEbx, 23}, {"clwb", 7, 0, R::kEbx, 24},
    {"avx512pf", 7, 0, R::kEbx, 26},  {"avx512er", 7, 0, R::kEbx, 27},
    {"avx512cd", 7, 0, R::kEbx, 28},  {"sha", 7, 0, R::kEbx, 29},
    {"avx512bw", 7, 0, R::kEbx, 30},  {"avx512vl", 7, 0, R::kEbx, 31},
    // CPUID.(EAX=07H,ECX=0):ECX.
    {"avx512vbmi", 7, 0, R::kEcx, 1}, {"umip", 7, 0, R::kEcx, 2},
    {"pku", 7, 0, R::kEcx, 3},        {"ospke", 7, 0, R::kEcx, 4},
    {"avx512_vbmi2", 7, 0, R::kEcx, 6}, {"gfni", 7, 0, R::kEcx, 8},
    {"vaes", 7, 0, R::kEcx, 9},       {"vpclmulqdq", 7, 0, R::kEcx, 10},
    {"avx512_vnni", 7, 0, R::kEcx, 11}, {"avx512_bitalg", 7, 0, R::kEcx, 12},
    {"avx512_vpopcntdq", 7, 0, R::kEcx, 14}, {"la57", 7, 0, R::kEcx, 16},
    {"rdpid", 7, 0, R::kEcx, 22},
    // CPUID.(EAX=07H,ECX=0):EDX.
    {"avx512_4vnniw", 7, 0, R::kEdx, 2}, {"avx512_4fmaps", 7, 0, R::kEdx, 3},
    {"avx512_vp2intersect", 7, 0, R::kEdx, 8}, {"md_clear", 7, 0, R::kEdx, 10},
    {"amx_bf16", 7, 0, R::kEdx, 22},  {"avx512_fp16", 7, 0, R::kEdx, 23},
    {"amx_tile", 7, 0, R::kEdx, 24},  {"amx_int8", 7, 0, R::kEdx, 25},
    // CPUID.(EAX=07H,ECX=1):EAX.
    {"avx_vnni", 7, 1, R::kEax, 4},   {"avx512_bf16", 7, 1, R::kEax, 5},
    // CPUID.80000001H:ECX (SDM Table 3-8; AMD APM Vol. 3 E.4.2).
    {"lahf_lm", 0x80000001, 0, R::kEcx, 0}, {"svm", 0x80000001, 0, R::kEcx, 2},
    {"abm", 0x80000001, 0, R::kEcx, 5},     {"sse4a", 0x80000001, 0, R::kEcx, 6},
    {"prefetchw", 0x80000001, 0, R::kEcx, 8}, {"xop", 0x80000001, 0, R::kEcx, 11},
    {"fma4", 0x80000001, 0, R::kEcx, 16},
    // CPUID.80000001H:EDX.
    {"syscall", 0x80000001, 0, R::kEdx, 11}, {"nx", 0x80000001, 0, R::kEdx, 20},
    {"pdpe1gb", 0x80000001, 0, R::kEdx, 26}, {"rdtscp", 0x80000001, 0, R::kEdx, 27},
    {"lm", 0x80000001, 0, R::kEdx, 29},
};
// clang-format on

// Other spellings users bring from Linux (/proc/cpuinfo) or QEMU (-cpu).
constexpr std::pair<std::string_view, std::string_view> kAliases[] = {
    {"pni", "sse3"},   {"tsc_deadline_timer", "tsc_deadline"},
    {"sha_ni", "sha"}, {"3dnowprefetch", "prefetchw"},
    {"lzcnt", "abm"},
};

// `feature` requires `depends_on`: without it the feature cannot work, so removing `depends_on`
// removes `feature` too. After Linux's arch/x86/kernel/cpu/cpuid-deps.c; the XSAVE-managed
// register files (SDM Vol. 1 13.1: AVX, AVX-512, PKRU, MPX, AMX state are XSAVE components) and
// the VEX/EVEX-encoded extensions of AVX.
constexpr std::pair<std::string_view, std::string_view> kDependencies[] = {
    {"osxsave", "xsave"},
    {"avx", "xsave"},
    {"pku", "xsave"},
    {"mpx", "xsave"},
    {"amx_tile", "xsave"},
    {"ospke", "pku"},
    {"amx_bf16", "amx_tile"},
    {"amx_int8", "amx_tile"},
    {"fma", "avx"},
    {"f16c", "avx"},
    {"avx2", "avx"},
    {"vaes", "avx"},
    {"vpclmulqdq", "avx"},
    {"avx_vnni", "avx"},
    {"xop", "avx"},
    {"fma4", "avx"},
    {"avx512f", "avx"},
    {"avx512dq", "avx512f"},
    {"avx512ifma", "avx512f"},
    {"avx512pf", "avx512f"},
    {"avx512er", "avx512f"},
    {"avx512cd", "avx512f"},
    {"avx512bw", "avx512f"},
    {"avx512vl", "avx512f"},
    {"avx512vbmi", "avx512f"},
    {"avx512_vbmi2", "avx512f"},
    {"avx512_vnni", "avx512f"},
    {"avx512_bitalg", "avx512f"},
    {"avx512_vpopcntdq", "avx512f"},
    {"avx512_4vnniw", "avx512f"},
    {"avx512_4fmaps", "avx512f"},
    {"avx512_vp2intersect", "avx512f"},
    {"avx512_fp16", "avx512f"},
    {"avx512_bf16", "avx512f"},
};

// Debian's Abseil is built with its own string_view (ABSL_OPTION_USE_STD_STRING_VIEW 0), so
// StrCat does not take std::string_view directly.
absl::string_view AsAbsl(std::string_view s) { return absl::string_view(s.data(), s.size()); }

bool SameFeature(const CpuFeature& a, const CpuFeature& b) { return a.name == b.name; }

bool Contains(const std::vector<CpuFeature>& features, const CpuFeature& feature) {
  return std::any_of(features.begin(), features.end(),
                     [&](const CpuFeature& f) { return SameFeature(f, feature); });
}

uint32_t kvm_cpuid_entry2::*RegisterField(CpuidRegister reg) {
  switch (reg) {
    case R::kEax:
      return &kvm_cpuid_entry2::eax;
    case R::kEbx:
      return &kvm_cpuid_entry2::ebx;
    case R::kEcx:
      return &kvm_cpuid_entry2::ecx;
    case R::kEdx:
      break;
  }
  return &kvm_cpuid_entry2::edx;
}

bool IsPresent(const std::vector<kvm_cpuid_entry2>& entries, const CpuFeature& feature) {
  const kvm_cpuid_entry2* entry = FindCpuidEntry(entries, feature.function, feature.index);
  return entry != nullptr && ((entry->*RegisterField(feature.reg) >> feature.bit) & 1);
}

// `removed` plus, transitively, everything that depends on it.
std::vector<CpuFeature> RemovalClosure(const std::vector<CpuFeature>& removed) {
  std::vector<CpuFeature> closure = removed;
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& [feature, depends_on] : kDependencies) {
      const CpuFeature* f = FindCpuFeature(feature);
      const CpuFeature* d = FindCpuFeature(depends_on);
      if (Contains(closure, *d) && !Contains(closure, *f)) {
        closure.push_back(*f);
        grew = true;
      }
    }
  }
  return closure;
}

// ceil(log2(n)) for n >= 1: the APIC id bits needed to number n cores.
uint32_t CountOrder(uint32_t n) { return n <= 1 ? 0 : std::bit_width(n - 1); }

kvm_cpuid_entry2 MakeEntry(uint32_t function, uint32_t index, uint32_t eax, uint32_t ebx,
                           uint32_t ecx, uint32_t edx) {
  kvm_cpuid_entry2 entry{};
  entry.function = function;
  entry.index = index;
  entry.flags = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;
  entry.eax = eax;
  entry.ebx = ebx;
  entry.ecx = ecx;
  entry.edx = edx;
  return entry;
}

// SDM Vol. 2A, CPUID leaf 0BH / 1FH: level types in ECX[15:8].
constexpr uint32_t kLevelTypeInvalid = 0;
constexpr uint32_t kLevelTypeSmt = 1;
constexpr uint32_t kLevelTypeCore = 2;

// Replaces every `function` entry with the topology: SMT level (1 thread per core), core level
// (num_cpus cores in the one package), then an invalid level that ends enumeration. Each subleaf
// reports the vCPU's x2APIC id in EDX.
void WriteTopologyLeaf(std::vector<kvm_cpuid_entry2>& entries, uint32_t function, uint32_t apic_id,
                       uint32_t num_cpus) {
  std::erase_if(entries, [&](const kvm_cpuid_entry2& e) { return e.function == function; });
  // EAX[4:0]: bits to shift the x2APIC id right to get the next level's id. EBX[15:0]: logical
  // processors at this level. ECX[7:0]: the subleaf (level number); ECX[15:8]: level type.
  entries.push_back(MakeEntry(function, 0, /*eax=*/0, /*ebx=*/1,
                              /*ecx=*/0 | (kLevelTypeSmt << 8), apic_id));
  entries.push_back(MakeEntry(function, 1, CountOrder(num_cpus), num_cpus & 0xffff,
                              /*ecx=*/1 | (kLevelTypeCore << 8), apic_id));
  entries.push_back(MakeEntry(function, 2, 0, 0, /*ecx=*/2 | (kLevelTypeInvalid << 8), apic_id));
}

uint32_t SetField(uint32_t value, int low_bit, int width, uint32_t field) {
  const uint32_t mask = (width == 32 ? ~0u : ((1u << width) - 1)) << low_bit;
  return (value & ~mask) | ((field << low_bit) & mask);
}

// The user-state XSAVE components the VMM passes on (SDM Vol. 1 Table 13-1), each with the CPUID
// feature that makes it usable and its architectural size (0: implementation-defined). Components
// that share a feature form one group that XCR0 enables all-or-nothing (SDM Vol. 1 13.3: MPX's two,
// AVX-512's three, AMX's two). These are the components Linux 6.1 knows a layout for
// (arch/x86/kernel/fpu/xstate.c check_xstate_against_struct); any other is dropped, as Linux
// would warn about it.
struct XsaveComponent {
  uint32_t bit;
  std::string_view feature;
  uint32_t size;
};
constexpr XsaveComponent kXsaveComponents[] = {
    {2, "avx", 256},                                                  // YMM_Hi128
    {3, "mpx", 64},       {4, "mpx", 64},                             // BNDREGS, BNDCSR
    {5, "avx512f", 64},   {6, "avx512f", 512}, {7, "avx512f", 1024},  // opmask, ZMM_Hi256, Hi16_ZMM
    {9, "pku", 8},                                                    // PKRU
    {17, "amx_tile", 64}, {18, "amx_tile", 0},                        // XTILECFG, XTILEDATA
};

// CPUID.(EAX=0DH,ECX=1):EAX (SDM Vol. 2A Table 3-8).
constexpr uint32_t kXsaveOpt = 1u << 0;
constexpr uint32_t kXsaveC = 1u << 1;
constexpr uint32_t kXgetbv1 = 1u << 2;
constexpr uint32_t kXsaveS = 1u << 3;
constexpr uint32_t kXfd = 1u << 4;

uint64_t EnumeratedXcr0(const kvm_cpuid_entry2& subleaf0) {
  return subleaf0.eax | (static_cast<uint64_t>(subleaf0.edx) << 32);
}

// Whether CPUID.(0DH, component.bit) describes a user state component of the expected size that
// starts after the legacy area and header. `size`/`offset` get its layout.
bool ComponentSubleafValid(const std::vector<kvm_cpuid_entry2>& entries,
                           const XsaveComponent& component, uint32_t* size, uint32_t* offset) {
  const kvm_cpuid_entry2* sub = FindCpuidEntry(entries, kLeafXsaveState, component.bit);
  if (sub == nullptr || sub->index != component.bit) return false;
  *size = sub->eax;
  *offset = sub->ebx;
  // ECX[0] set marks a supervisor (IA32_XSS) component: these bits are XCR0 ones.
  if (sub->ecx & 1) return false;
  if (*size == 0 || (component.size != 0 && *size != component.size)) return false;
  // Bounded so offset + size cannot wrap: real areas are a few KiB (AMX: about 11 KiB).
  if (*offset < kXsaveLegacyAndHeaderSize || *offset > (1u << 20) || *size > (1u << 20)) {
    return false;
  }
  return true;
}

// Compacted-format size (SDM Vol. 1 13.4.3) of an area holding the components in `xcr0`: each
// component follows the previous one, 64-byte aligned when CPUID.(0DH,i):ECX[1] says so.
uint32_t CompactedXsaveSize(const std::vector<kvm_cpuid_entry2>& entries, uint64_t xcr0) {
  uint32_t size = kXsaveLegacyAndHeaderSize;
  for (uint32_t bit = 2; bit < 64; ++bit) {
    if (!((xcr0 >> bit) & 1)) continue;
    const kvm_cpuid_entry2* sub = FindCpuidEntry(entries, kLeafXsaveState, bit);
    if (sub == nullptr) continue;
    if (sub->ecx & 2) size = (size + 63) & ~63u;
    size += sub->eax;
  }
  return size;
}

void ZeroRegisters(kvm_cpuid_entry2& entry) { entry.eax = entry.ebx = entry.ecx = entry.edx = 0; }

// AMD APM Vol. 3 E.4.2: CPUID 80000001H EDX bits 0-9, 12-17, 23 and 24 repeat CPUID 1 EDX (fpu,
// vme, de, pse, tsc, msr, pae, mce, cx8, apic, mtrr, pge, mca, cmov, pat, pse36, mmx, fxsr).
// Intel leaves them reserved (0), so clearing them is harmless there.
constexpr uint32_t kAmdMirroredLeaf1Edx = 0x3ffu | (0x3fu << 12) | (1u << 23) | (1u << 24);

void ClearFeatures(const std::vector<CpuFeature>& features,
                   std::vector<kvm_cpuid_entry2>& entries) {
  for (const CpuFeature& feature : features) {
    // A leaf KVM does not report is already all zeros for the guest.
    if (kvm_cpuid_entry2* entry = FindCpuidEntry(entries, feature.function, feature.index)) {
      entry->*RegisterField(feature.reg) &= ~(1u << feature.bit);
    }
    if (feature.function == kLeafFeatures && feature.reg == R::kEdx &&
        ((kAmdMirroredLeaf1Edx >> feature.bit) & 1)) {
      if (kvm_cpuid_entry2* amd = FindCpuidEntry(entries, kLeafAmdFeatures, 0)) {
        amd->edx &= ~(1u << feature.bit);
      }
    }
  }
}

// Makes leaf 0DH agree with the feature flags and with itself, so that a guest kernel's checks
// (Linux 6.1 fpu__init_system_xstate / paranoid_xstate_size_valid) pass:
//   - no XSAVE (leaf 1 ECX[26] clear, or no subleaf 0): every subleaf zeroed, XSAVE users gone;
//   - a component survives only if its feature flag is set, its whole group is enumerated with
//     the architectural sizes, and the offsets ascend without overlap after byte 576; otherwise
//     its feature (and everything depending on it) is removed, so flags and XCR0 bits agree;
//   - subleaf 0: EAX/EDX the surviving XCR0 bits (x87|SSE always), ECX the standard-format size
//     for all of them, EBX the size for XCR0 = x87|SSE (KVM recomputes EBX from the vCPU's XCR0
//     at run time, arch/x86/kvm/cpuid.c kvm_update_cpuid_runtime);
//   - subleaf 1: XSAVEOPT/XSAVEC/XGETBV1/XSAVES kept as KVM offers them, XFD only with AMX,
//     no supervisor (IA32_XSS) components (Linux 6.1 supports none a VMM guest can use);
//   - every other subleaf (dropped or supervisor components) zeroed.
void NormalizeXsaveLeaf(std::vector<kvm_cpuid_entry2>& entries) {
  const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, kLeafFeatures, 0);
  kvm_cpuid_entry2* subleaf0 = FindCpuidEntry(entries, kLeafXsaveState, 0);
  const bool xsave = leaf1 != nullptr && ((leaf1->ecx >> 26) & 1) && subleaf0 != nullptr &&
                     (EnumeratedXcr0(*subleaf0) & kXcr0X87Sse) == kXcr0X87Sse;
  if (!xsave) {
    ClearFeatures(RemovalClosure({*FindCpuFeature("xsave")}), entries);
    for (kvm_cpuid_entry2& entry : entries) {
      if (entry.function == kLeafXsaveState) ZeroRegisters(entry);
    }
    return;
  }

  // Drop invalid components' features until every remaining component checks out. Each round
  // removes at least one feature, so this ends.
  uint64_t xcr0 = kXcr0X87Sse;
  uint32_t standard_size = kXsaveLegacyAndHeaderSize;
  for (bool changed = true; changed;) {
    changed = false;
    const uint64_t enumerated = EnumeratedXcr0(*subleaf0);
    xcr0 = kXcr0X87Sse;
    standard_size = kXsaveLegacyAndHeaderSize;
    uint32_t previous_end = kXsaveLegacyAndHeaderSize;
    for (const XsaveComponent& component : kXsaveComponents) {
      const CpuFeature* feature = FindCpuFeature(component.feature);
      if (!IsPresent(entries, *feature)) continue;
      uint32_t size = 0, offset = 0;
      const bool valid = ((enumerated >> component.bit) & 1) &&
                         ComponentSubleafValid(entries, component, &size, &offset) &&
                         offset >= previous_end;
      if (!valid) {
        ClearFeatures(RemovalClosure({*feature}), entries);
        changed = true;
        break;
      }
      xcr0 |= uint64_t{1} << component.bit;
      previous_end = offset + size;
      standard_size = std::max(standard_size, previous_end);
    }
    // A group enumerated only in part (e.g. BNDREGS without BNDCSR) was caught above: the
    // missing member is not enumerated, so its feature went.
  }

  subleaf0->eax = static_cast<uint32_t>(xcr0);
  subleaf0->edx = static_cast<uint32_t>(xcr0 >> 32);
  subleaf0->ecx = standard_size;
  subleaf0->ebx = kXsaveLegacyAndHeaderSize;
  const bool amx = (xcr0 >> 18) & 1;
  for (kvm_cpuid_entry2& entry : entries) {
    if (entry.function != kLeafXsaveState || entry.index == 0) continue;
    if (entry.index == 1) {
      entry.eax &= kXsaveOpt | kXsaveC | kXgetbv1 | kXsaveS | (amx ? kXfd : 0);
      entry.ebx = (entry.eax & (kXsaveC | kXsaveS)) ? CompactedXsaveSize(entries, kXcr0X87Sse) : 0;
      entry.ecx = entry.edx = 0;
      continue;
    }
    if (entry.index >= 64 || !((xcr0 >> entry.index) & 1)) ZeroRegisters(entry);
  }
}

bool IsAmdVendor(const std::vector<kvm_cpuid_entry2>& entries) {
  const kvm_cpuid_entry2* vendor = FindCpuidEntry(entries, kLeafVendor, 0);
  if (vendor == nullptr) return false;
  // "AuthenticAMD" and Hygon's "HygonGenuine" (AMD's topology leaves) in EBX, EDX, ECX order.
  return (vendor->ebx == 0x68747541 && vendor->edx == 0x69746e65 && vendor->ecx == 0x444d4163) ||
         (vendor->ebx == 0x6f677948 && vendor->edx == 0x6e65476e && vendor->ecx == 0x656e6975);
}

}  // namespace

std::span<const CpuFeature> KnownCpuFeatures() { return kFeatures; }

const CpuFeature* FindCpuFeature(std::string_view name) {
  std::string normalized = absl::AsciiStrToLower(AsAbsl(name));
  std::replace(normalized.begin(), normalized.end(), '-', '_');
  std::replace(normalized.begin(), normalized.end(), '.', '_');
  std::string_view canonical = normalized;
  for (const auto& [alias, target] : kAliases) {
    if (canonical == alias) canonical = target;
  }
  for (const CpuFeature& feature : kFeatures) {
    if (feature.name == canonical) return &feature;
  }
  return nullptr;
}

absl::StatusOr<CpuFeatureMask> ParseCpuFeatures(std::string_view spec) {
  const absl::string_view text = absl::StripAsciiWhitespace(AsAbsl(spec));
  CpuFeatureMask mask;
  if (text.empty()) return mask;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpu-features: empty item in \"", text, "\""));
    }
    if (item[0] != '+' && item[0] != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          "--cpu-features: \"", item, "\" must start with '+' (require) or '-' (remove)"));
    }
    const absl::string_view name = absl::StripAsciiWhitespace(item.substr(1));
    const CpuFeature* feature = FindCpuFeature(std::string_view(name.data(), name.size()));
    if (feature == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cpu-features: unknown CPU feature \"", name, "\""));
    }
    const bool remove = item[0] == '-';
    std::vector<CpuFeature>& same = remove ? mask.removed : mask.required;
    const std::vector<CpuFeature>& other = remove ? mask.required : mask.removed;
    if (Contains(other, *feature)) {
      return absl::InvalidArgumentError(absl::StrCat("--cpu-features: \"", AsAbsl(feature->name),
                                                     "\" is both required and removed"));
    }
    if (!Contains(same, *feature)) same.push_back(*feature);
  }
  return mask;
}

void AddTscDeadlineTimer(std::vector<kvm_cpuid_entry2>& entries) {
  if (kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, kLeafFeatures, 0)) leaf1->ecx |= 1u << 24;
}

absl::Status ApplyCpuFeatureMask(const CpuFeatureMask& mask,
                                 std::vector<kvm_cpuid_entry2>& entries) {
  // Shaped on a copy so `entries` is unchanged on error.
  std::vector<kvm_cpuid_entry2> shaped = entries;
  // SDM Vol. 2A Table 3-10, leaf 01H ECX[31]: reserved for hypervisor use; set so guests know they
  // are virtualized (KVM leaves it to the VMM). Before the mask, so "-hypervisor" can hide it.
  if (kvm_cpuid_entry2* leaf1 = FindCpuidEntry(shaped, kLeafFeatures, 0)) leaf1->ecx |= 1u << 31;

  // '+' asserts the host can offer the feature; it never invents one KVM cannot virtualize.
  for (const CpuFeature& feature : mask.required) {
    if (!IsPresent(shaped, feature)) {
      return absl::FailedPreconditionError(
          absl::StrCat("CPU feature \"", AsAbsl(feature.name), "\" is required (+",
                       AsAbsl(feature.name), ") but KVM does not offer it on this host"));
    }
  }
  const std::vector<CpuFeature> closure = RemovalClosure(mask.removed);
  for (const CpuFeature& feature : mask.required) {
    if (Contains(closure, feature)) {
      return absl::InvalidArgumentError(
          absl::StrCat("CPU feature \"", AsAbsl(feature.name),
                       "\" is required but removing another feature it "
                       "depends on removes it too"));
    }
  }
  ClearFeatures(closure, shaped);
  // Features KVM offers without one they depend on (e.g. avx512f without avx) go too: the guest
  // could not use them, and XCR0 could not enable their state (SDM Vol. 1 13.3).
  std::vector<CpuFeature> absent;
  for (const CpuFeature& feature : kFeatures) {
    if (!IsPresent(shaped, feature)) absent.push_back(feature);
  }
  ClearFeatures(RemovalClosure(absent), shaped);
  NormalizeXsaveLeaf(shaped);
  for (const CpuFeature& feature : mask.required) {
    if (!IsPresent(shaped, feature)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "CPU feature \"", AsAbsl(feature.name),
          "\" is required but KVM does not offer a feature it depends on, or its XSAVE state in "
          "CPUID leaf 0xD"));
    }
  }
  // KVM paravirtual features (Documentation/virt/kvm/x86/cpuid.rst): EDX holds hints, and
  // KVM_HINTS_REALTIME promises vCPUs that are never preempted, which a VMM sharing host cores
  // with others cannot keep; KVM offers it as "may be set", so it stays clear.
  if (kvm_cpuid_entry2* kvm = FindCpuidEntry(shaped, kLeafKvmFeatures, 0)) kvm->edx = 0;
  entries = std::move(shaped);
  return absl::OkStatus();
}

std::optional<uint64_t> BootXcr0(const std::vector<kvm_cpuid_entry2>& entries) {
  const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, kLeafFeatures, 0);
  const kvm_cpuid_entry2* subleaf0 = FindCpuidEntry(entries, kLeafXsaveState, 0);
  if (leaf1 == nullptr || !((leaf1->ecx >> 26) & 1) || subleaf0 == nullptr) return std::nullopt;
  const uint64_t xcr0 = EnumeratedXcr0(*subleaf0);
  if ((xcr0 & kXcr0X87Sse) != kXcr0X87Sse) return std::nullopt;
  return xcr0;
}

void FilterCpuidForVcpu(std::vector<kvm_cpuid_entry2>& entries, uint32_t apic_id,
                        uint32_t num_cpus) {
  num_cpus = std::max<uint32_t>(num_cpus, 1);
  const kvm_cpuid_entry2* vendor = FindCpuidEntry(entries, kLeafVendor, 0);
  const uint32_t max_basic_leaf = vendor != nullptr ? vendor->eax : 0;
  const bool amd = IsAmdVendor(entries);
  const kvm_cpuid_entry2* max_extended = FindCpuidEntry(entries, 0x80000000, 0);
  const bool has_8000001e = FindCpuidEntry(entries, kLeafAmdExtendedApicId, 0) != nullptr &&
                            max_extended != nullptr && max_extended->eax >= kLeafAmdExtendedApicId;

  for (kvm_cpuid_entry2& entry : entries) {
    switch (entry.function) {
      case kLeafFeatures:
        // SDM Table 3-8, leaf 01H EBX: [31:24] initial APIC id, [23:16] maximum number of
        // addressable ids for logical processors in the package; [15:8] CLFLUSH line size and
        // [7:0] brand index are the host's.
        entry.ebx = SetField(entry.ebx, 24, 8, apic_id & 0xff);
        entry.ebx = SetField(entry.ebx, 16, 8, std::min<uint32_t>(num_cpus, 0xff));
        // EDX[28] HTT: the EBX[23:16] field is valid (more than one logical processor).
        entry.edx = SetField(entry.edx, 28, 1, num_cpus > 1 ? 1 : 0);
        break;
      case kLeafAmdFeatures:
        if (!amd) break;
        // AMD APM Vol. 3 E.4.2, 80000001H ECX[1] CmpLegacy: the logical processors leaf 1 EBX
        // counts are cores, not SMT threads (Linux then skips its HT sibling detection,
        // arch/x86/kernel/cpu/common.c detect_ht_early). ECX[22] TopologyExtensions: leaf
        // 8000001EH is valid; kept only if KVM reports that leaf, which is filled in below.
        entry.ecx = SetField(entry.ecx, 1, 1, num_cpus > 1 ? 1 : 0);
        if (!has_8000001e) entry.ecx = SetField(entry.ecx, 22, 1, 0);
        break;
      case kLeafCacheParameters: {
        // Leaf 04H subleafs describe one cache each until EAX[4:0] (type) is 0.
        if ((entry.eax & 0x1f) == 0) break;
        const uint32_t level = (entry.eax >> 5) & 0x7;
        // EAX[31:26]: cores in the package - 1. EAX[25:14]: logical processors sharing the
        // cache - 1: a core's own (L1, L2) serve its one thread, the L3 the whole package.
        entry.eax = SetField(entry.eax, 26, 6, std::min<uint32_t>(num_cpus, 64) - 1);
        entry.eax =
            SetField(entry.eax, 14, 12, level >= 3 ? std::min<uint32_t>(num_cpus, 4096) - 1 : 0);
        break;
      }
      case kLeafAmdSizeIdentifiers:
        // AMD APM Vol. 3 E.4.7, 80000008H ECX: [7:0] NC = cores - 1; [15:12] ApicIdCoreIdSize =
        // APIC id bits that number the core.
        entry.ecx = SetField(entry.ecx, 0, 8, std::min<uint32_t>(num_cpus, 256) - 1);
        entry.ecx = SetField(entry.ecx, 12, 4, CountOrder(num_cpus));
        break;
      case kLeafAmdExtendedApicId:
        // AMD APM Vol. 3 E.4.14, 8000001EH: EAX extended APIC id; EBX[15:8] threads per core - 1
        // (0), EBX[7:0] core id; ECX[10:8] nodes per processor - 1 (0), ECX[7:0] node id (0).
        entry.eax = apic_id;
        entry.ebx = apic_id & 0xff;
        entry.ecx = 0;
        entry.edx = 0;
        break;
      default:
        break;
    }
  }

  // Leaf 0BH (x2APIC topology) and its successor 1FH. KVM reports them empty (it has no topology to
  // offer), so the VMM must supply the levels.
  const bool has_0b = FindCpuidEntry(entries, kLeafX2ApicTopology, 0) != nullptr;
  if (has_0b || max_basic_leaf >= kLeafX2ApicTopology) {
    WriteTopologyLeaf(entries, kLeafX2ApicTopology, apic_id, num_cpus);
  }
  if (FindCpuidEntry(entries, kLeafV2Topology, 0) != nullptr) {
    WriteTopologyLeaf(entries, kLeafV2Topology, apic_id, num_cpus);
  }
}

const kvm_cpuid_entry2* FindCpuidEntry(const std::vector<kvm_cpuid_entry2>& entries,
                                       uint32_t function, uint32_t index) {
  for (const kvm_cpuid_entry2& entry : entries) {
    if (entry.function != function) continue;
    // KVM sets this flag on leaves whose ECX input selects a subleaf (4, 7, 0xB, 0xD, ...).
    if ((entry.flags & KVM_CPUID_FLAG_SIGNIFCANT_INDEX) && entry.index != index) continue;
    return &entry;
  }
  return nullptr;
}

kvm_cpuid_entry2* FindCpuidEntry(std::vector<kvm_cpuid_entry2>& entries, uint32_t function,
                                 uint32_t index) {
  const auto& const_entries = entries;
  return const_cast<kvm_cpuid_entry2*>(FindCpuidEntry(const_entries, function, index));
}

}  // namespace vmm::x86

#include "vmm/x86/cpuid.h"

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vmm::x86 {
namespace {

using ::testing::HasSubstr;

constexpr uint32_t kSignificant = KVM_CPUID_FLAG_SIGNIFCANT_INDEX;

kvm_cpuid_entry2 Entry(uint32_t function, uint32_t index, uint32_t flags, uint32_t eax,
                       uint32_t ebx, uint32_t ecx, uint32_t edx) {
  kvm_cpuid_entry2 e{};
  e.function = function;
  e.index = index;
  e.flags = flags;
  e.eax = eax;
  e.ebx = ebx;
  e.ecx = ecx;
  e.edx = edx;
  return e;
}

constexpr uint32_t Bit(int n) { return 1u << n; }

// Cache descriptor for leaf 4: type (1 data, 2 instruction, 3 unified) and level, with the host's
// sharing fields filled in with junk the filter must replace.
uint32_t Cache(uint32_t type, uint32_t level) {
  return type | (level << 5) | (1u << 8) /* self-initializing */ | (7u << 14) | (15u << 26);
}

// Roughly what KVM_GET_SUPPORTED_CPUID reports on a host with AVX-512 (values synthetic).
std::vector<kvm_cpuid_entry2> SampleEntries() {
  const uint32_t leaf1_ecx = Bit(0) | Bit(9) | Bit(12) | Bit(13) | Bit(19) | Bit(20) | Bit(21) |
                             Bit(23) | Bit(26) | Bit(27) | Bit(28) | Bit(29) | Bit(30);
  const uint32_t leaf1_edx =
      Bit(0) | Bit(4) | Bit(9) | Bit(15) | Bit(19) | Bit(24) | Bit(25) | Bit(26) | Bit(28);
  const uint32_t leaf7_ebx =
      Bit(0) | Bit(3) | Bit(5) | Bit(8) | Bit(16) | Bit(17) | Bit(30) | Bit(31);
  const uint32_t leaf7_ecx = Bit(1) | Bit(3) | Bit(9) | Bit(10) | Bit(11);
  return {
      Entry(0x0, 0, 0, /*max leaf*/ 0xd, 0x756e6547, 0x6c65746e, 0x49656e69),
      // Host APIC id 0x2a and 0x40 logical processors in EBX must be replaced; CLFLUSH 8 kept.
      Entry(0x1, 0, 0, 0x000906ea, (0x2au << 24) | (0x40u << 16) | (8u << 8) | 0x01, leaf1_ecx,
            leaf1_edx),
      Entry(0x4, 0, kSignificant, Cache(1, 1), 0x01c0003f, 0x3f, 0),
      Entry(0x4, 1, kSignificant, Cache(2, 1), 0x01c0003f, 0x3f, 0),
      Entry(0x4, 2, kSignificant, Cache(3, 2), 0x01c0003f, 0x3ff, 0),
      Entry(0x4, 3, kSignificant, Cache(3, 3), 0x03c0003f, 0x3fff, 0x6),
      Entry(0x4, 4, kSignificant, 0, 0, 0, 0),
      Entry(0x6, 0, 0, 0x4, 0, 0, 0),
      Entry(0x7, 0, kSignificant, 1, leaf7_ebx, leaf7_ecx, Bit(10)),
      Entry(0x7, 1, kSignificant, Bit(4) | Bit(5), 0, 0, 0),
      // KVM reports leaf 0xB with no topology.
      Entry(0xb, 0, kSignificant, 0, 0, 0, 0x2a),
      // x87, SSE, YMM, AVX-512 (opmask, ZMM_Hi256, Hi16_ZMM), PKRU in the standard layout (SDM
      // Vol. 1 Table 13-1); EBX as KVM reports it for the full XCR0.
      Entry(0xd, 0, kSignificant, 0x2e7, 0xa88, 0xa88, 0),
      Entry(0xd, 1, kSignificant, 0xf, 0xa88, 0, 0),
      Entry(0xd, 2, kSignificant, 0x100, 0x240, 0, 0),
      Entry(0xd, 5, kSignificant, 0x40, 0x440, 0, 0),
      Entry(0xd, 6, kSignificant, 0x200, 0x480, 0, 0),
      Entry(0xd, 7, kSignificant, 0x400, 0x680, 0, 0),
      Entry(0xd, 9, kSignificant, 0x8, 0xa80, 0, 0),
      Entry(0x80000000, 0, 0, 0x80000008, 0, 0, 0),
      Entry(0x80000001, 0, 0, 0, 0, Bit(0) | Bit(5) | Bit(8),
            Bit(11) | Bit(20) | Bit(27) | Bit(29)),
      Entry(0x80000008, 0, 0, 0x3027, 0, 0x7007 /* junk NC and size */ | (1u << 16), 0),
  };
}

bool Has(const std::vector<kvm_cpuid_entry2>& entries, std::string_view name) {
  const CpuFeature* f = FindCpuFeature(name);
  EXPECT_NE(f, nullptr) << name;
  if (f == nullptr) return false;
  const kvm_cpuid_entry2* e = FindCpuidEntry(entries, f->function, f->index);
  if (e == nullptr) return false;
  const uint32_t regs[] = {e->eax, e->ebx, e->ecx, e->edx};
  return (regs[static_cast<int>(f->reg)] >> f->bit) & 1;
}

std::vector<std::string> Names(const std::vector<CpuFeature>& features) {
  std::vector<std::string> names;
  for (const CpuFeature& f : features) names.emplace_back(f.name);
  return names;
}

// Entries compared field by field, ignoring padding.
bool SameEntries(const std::vector<kvm_cpuid_entry2>& a, const std::vector<kvm_cpuid_entry2>& b,
                 std::string* diff) {
  if (a.size() != b.size()) {
    *diff = "size";
    return false;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].function != b[i].function || a[i].index != b[i].index || a[i].eax != b[i].eax ||
        a[i].ebx != b[i].ebx || a[i].ecx != b[i].ecx || a[i].edx != b[i].edx) {
      *diff = "entry " + std::to_string(i) + " (leaf " + std::to_string(a[i].function) + ")";
      return false;
    }
  }
  return true;
}

// --- ParseCpuFeatures ---------------------------------------------------------------------------

TEST(ParseCpuFeaturesTest, Valid) {
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures("-xsave,-cx16,+x2apic");
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_THAT(Names(mask->removed), ::testing::ElementsAre("xsave", "cx16"));
  EXPECT_THAT(Names(mask->required), ::testing::ElementsAre("x2apic"));
  const CpuFeature& xsave = mask->removed[0];
  EXPECT_EQ(xsave.function, 1u);
  EXPECT_EQ(xsave.reg, CpuidRegister::kEcx);
  EXPECT_EQ(xsave.bit, 26u);
}

TEST(ParseCpuFeaturesTest, SpellingsWhitespaceAndDuplicates) {
  absl::StatusOr<CpuFeatureMask> mask =
      ParseCpuFeatures(" -SSE4.1 , -tsc-deadline,-sha_ni,-avx2,-avx2 ");
  ASSERT_TRUE(mask.ok()) << mask.status();
  EXPECT_THAT(Names(mask->removed),
              ::testing::ElementsAre("sse4_1", "tsc_deadline", "sha", "avx2"));
}

TEST(ParseCpuFeaturesTest, EmptyIsNoChange) {
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures("");
  ASSERT_TRUE(mask.ok());
  EXPECT_TRUE(mask->empty());
}

TEST(ParseCpuFeaturesTest, EveryBriefFeatureIsKnown) {
  for (const char* name :
       {"sse3",     "pclmulqdq", "ssse3",      "fma",        "cx16",         "pcid",    "sse4_1",
        "sse4_2",   "x2apic",    "movbe",      "popcnt",     "tsc_deadline", "aes",     "xsave",
        "avx",      "f16c",      "rdrand",     "hypervisor", "fpu",          "tsc",     "msr",
        "pae",      "mce",       "cx8",        "apic",       "sep",          "mtrr",    "pge",
        "mca",      "cmov",      "pat",        "pse36",      "clflush",      "mmx",     "fxsr",
        "sse",      "sse2",      "ht",         "fsgsbase",   "bmi1",         "hle",     "avx2",
        "smep",     "bmi2",      "erms",       "invpcid",    "rtm",          "avx512f", "rdseed",
        "adx",      "smap",      "clflushopt", "clwb",       "sha",          "umip",    "pku",
        "md_clear", "lahf_lm",   "abm",        "sse4a",      "prefetchw",    "syscall", "nx",
        "pdpe1gb",  "rdtscp",    "lm"}) {
    EXPECT_NE(FindCpuFeature(name), nullptr) << name;
  }
  // Names are unique.
  for (const CpuFeature& a : KnownCpuFeatures()) {
    int count = 0;
    for (const CpuFeature& b : KnownCpuFeatures()) count += a.name == b.name;
    EXPECT_EQ(count, 1) << a.name;
  }
}

TEST(ParseCpuFeaturesTest, UnknownFeatureIsNamed) {
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures("-xsave,-warpdrive");
  EXPECT_EQ(mask.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mask.status().message(), HasSubstr("\"warpdrive\""));
}

TEST(ParseCpuFeaturesTest, Malformed) {
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures("-xsave,cx16");
  EXPECT_EQ(mask.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mask.status().message(), HasSubstr("\"cx16\""));
  EXPECT_EQ(ParseCpuFeatures("-xsave,,-cx16").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCpuFeatures("-xsave,").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCpuFeatures("-").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseCpuFeatures("*avx").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CpuFeatureMask> both = ParseCpuFeatures("+avx,-avx");
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(), HasSubstr("avx"));
}

// --- ApplyCpuFeatureMask ------------------------------------------------------------------------

std::vector<kvm_cpuid_entry2> Applied(std::string_view spec) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures(spec);
  EXPECT_TRUE(mask.ok()) << mask.status();
  absl::Status status = ApplyCpuFeatureMask(*mask, entries);
  EXPECT_TRUE(status.ok()) << status;
  return entries;
}

TEST(ApplyCpuFeatureMaskTest, RemovingXsaveRemovesEverythingBuiltOnIt) {
  const std::vector<kvm_cpuid_entry2> entries = Applied("-xsave");
  for (const char* gone : {"xsave", "osxsave", "avx", "avx2", "fma", "f16c", "avx512f", "avx512dq",
                           "avx512bw", "avx512vl", "avx512vbmi", "avx512_vnni", "vaes",
                           "vpclmulqdq", "pku", "avx_vnni", "avx512_bf16"}) {
    EXPECT_FALSE(Has(entries, gone)) << gone;
  }
  for (const char* kept : {"sse3", "ssse3", "cx16", "sse4_1", "sse4_2", "x2apic", "popcnt",
                           "rdrand", "fsgsbase", "bmi1", "bmi2", "md_clear", "lm", "nx"}) {
    EXPECT_TRUE(Has(entries, kept)) << kept;
  }
  for (const kvm_cpuid_entry2& e : entries) {
    if (e.function != 0xd) continue;
    EXPECT_EQ(e.eax | e.ebx | e.ecx | e.edx, 0u) << "leaf 0xd subleaf " << e.index;
  }
  EXPECT_EQ(entries.size(), SampleEntries().size());
}

TEST(ApplyCpuFeatureMaskTest, RemovingAvxKeepsXsave) {
  const std::vector<kvm_cpuid_entry2> entries = Applied("-avx");
  for (const char* gone : {"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
                           "avx512vbmi", "vaes", "avx_vnni", "avx512_bf16"}) {
    EXPECT_FALSE(Has(entries, gone)) << gone;
  }
  EXPECT_TRUE(Has(entries, "xsave"));
  EXPECT_TRUE(Has(entries, "osxsave"));
  EXPECT_TRUE(Has(entries, "pku"));
  // YMM and the AVX-512 components leave XCR0's enumeration with their features; PKRU stays.
  EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->eax, 0x203u);
  EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->ecx, 0xa88u) << "PKRU still ends at 2696";
  for (uint32_t index : {2u, 5u, 6u, 7u}) {
    const kvm_cpuid_entry2* sub = FindCpuidEntry(entries, 0xd, index);
    EXPECT_EQ(sub->eax | sub->ebx | sub->ecx | sub->edx, 0u) << "subleaf " << index;
  }
}

TEST(ApplyCpuFeatureMaskTest, Cx16AndX2apicAreRemovedAlone) {
  for (const auto& [spec, bit] : {std::pair<std::string_view, int>{"-cx16", 13}, {"-x2apic", 21}}) {
    const std::vector<kvm_cpuid_entry2> entries = Applied(spec);
    std::vector<kvm_cpuid_entry2> expected = Applied("");
    FindCpuidEntry(expected, 1, 0)->ecx &= ~Bit(bit);
    std::string diff;
    EXPECT_TRUE(SameEntries(entries, expected, &diff)) << spec << ": " << diff;
  }
}

TEST(ApplyCpuFeatureMaskTest, XsaveAndCx16TogetherAsThePlatformNeeds) {
  const std::vector<kvm_cpuid_entry2> entries = Applied("-xsave,-cx16");
  EXPECT_FALSE(Has(entries, "xsave"));
  EXPECT_FALSE(Has(entries, "cx16"));
  EXPECT_TRUE(Has(entries, "sse4_2"));
}

TEST(ApplyCpuFeatureMaskTest, RequiredFeatureMustBeSupported) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  ASSERT_TRUE(ApplyCpuFeatureMask(*ParseCpuFeatures("+x2apic,+avx512f"), entries).ok());

  absl::Status status = ApplyCpuFeatureMask(*ParseCpuFeatures("-cx16,+rdseed"), entries);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("rdseed"));
  EXPECT_TRUE(Has(entries, "cx16")) << "unchanged on error";

  // A leaf KVM does not report at all (0x80000001 EDX bit 26 is clear; leaf 0x14 is absent).
  EXPECT_FALSE(ApplyCpuFeatureMask(*ParseCpuFeatures("+pdpe1gb"), entries).ok());
}

TEST(ApplyCpuFeatureMaskTest, RequiredFeatureRemovedByADependency) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  absl::Status status = ApplyCpuFeatureMask(*ParseCpuFeatures("-xsave,+avx2"), entries);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("avx2"));
  EXPECT_TRUE(Has(entries, "xsave")) << "unchanged on error";
}

TEST(ApplyCpuFeatureMaskTest, RemovingAFeatureOfAMissingLeafIsHarmless) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  std::erase_if(entries, [](const kvm_cpuid_entry2& e) { return e.function == 7; });
  EXPECT_TRUE(ApplyCpuFeatureMask(*ParseCpuFeatures("-avx2,-md_clear"), entries).ok());
}

// --- FilterCpuidForVcpu -------------------------------------------------------------------------

std::vector<kvm_cpuid_entry2> Filtered(uint32_t apic_id, uint32_t num_cpus) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  FilterCpuidForVcpu(entries, apic_id, num_cpus);
  return entries;
}

TEST(FilterCpuidForVcpuTest, Leaf1) {
  for (uint32_t apic_id : {0u, 3u}) {
    const std::vector<kvm_cpuid_entry2> entries = Filtered(apic_id, 4);
    const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, 1, 0);
    ASSERT_NE(leaf1, nullptr);
    EXPECT_EQ(leaf1->ebx >> 24, apic_id);
    EXPECT_EQ((leaf1->ebx >> 16) & 0xff, 4u);
    EXPECT_EQ((leaf1->ebx >> 8) & 0xff, 8u) << "CLFLUSH line size kept";
    EXPECT_EQ(leaf1->ebx & 0xff, 1u) << "brand index kept";
    EXPECT_TRUE(leaf1->edx & Bit(28)) << "HTT";
    EXPECT_EQ(leaf1->eax, 0x000906eau);
    // Features untouched (the hypervisor bit is ApplyCpuFeatureMask's).
    EXPECT_EQ(leaf1->ecx, SampleEntries()[1].ecx);
  }
}

TEST(FilterCpuidForVcpuTest, SingleCpuHasNoHtt) {
  const std::vector<kvm_cpuid_entry2> entries = Filtered(0, 1);
  const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, 1, 0);
  EXPECT_FALSE(leaf1->edx & Bit(28));
  EXPECT_EQ((leaf1->ebx >> 16) & 0xff, 1u);
  const kvm_cpuid_entry2* core = FindCpuidEntry(entries, 0xb, 1);
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->eax & 0x1f, 0u);
  EXPECT_EQ(core->ebx & 0xffff, 1u);
}

TEST(FilterCpuidForVcpuTest, Leaf0B) {
  for (uint32_t apic_id : {0u, 3u}) {
    const std::vector<kvm_cpuid_entry2> entries = Filtered(apic_id, 4);
    int count = 0;
    for (const kvm_cpuid_entry2& e : entries) count += e.function == 0xb;
    EXPECT_EQ(count, 3);

    const kvm_cpuid_entry2* smt = FindCpuidEntry(entries, 0xb, 0);
    ASSERT_NE(smt, nullptr);
    EXPECT_TRUE(smt->flags & kSignificant);
    EXPECT_EQ(smt->eax & 0x1f, 0u) << "one thread per core: no SMT id bits";
    EXPECT_EQ(smt->ebx & 0xffff, 1u);
    EXPECT_EQ(smt->ecx & 0xff, 0u);
    EXPECT_EQ((smt->ecx >> 8) & 0xff, 1u) << "SMT level type";
    EXPECT_EQ(smt->edx, apic_id);

    const kvm_cpuid_entry2* core = FindCpuidEntry(entries, 0xb, 1);
    ASSERT_NE(core, nullptr);
    EXPECT_EQ(core->eax & 0x1f, 2u) << "4 cores: 2 id bits";
    EXPECT_EQ(core->ebx & 0xffff, 4u);
    EXPECT_EQ(core->ecx & 0xff, 1u);
    EXPECT_EQ((core->ecx >> 8) & 0xff, 2u) << "core level type";
    EXPECT_EQ(core->edx, apic_id);
    // The package id (x2APIC id >> shift) is 0 for every vCPU: one socket.
    EXPECT_EQ(apic_id >> (core->eax & 0x1f), 0u);

    const kvm_cpuid_entry2* end = FindCpuidEntry(entries, 0xb, 2);
    ASSERT_NE(end, nullptr);
    EXPECT_EQ(end->eax, 0u);
    EXPECT_EQ(end->ebx, 0u);
    EXPECT_EQ(end->ecx, 2u) << "invalid level type, level number echoed";
    EXPECT_EQ(end->edx, apic_id);
    EXPECT_EQ(FindCpuidEntry(entries, 0x1f, 0), nullptr) << "0x1f not added when absent";
  }
}

TEST(FilterCpuidForVcpuTest, Leaf1FWhenPresent) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  entries.push_back(Entry(0x1f, 0, kSignificant, 0, 0, 0, 0));
  FilterCpuidForVcpu(entries, 3, 4);
  const kvm_cpuid_entry2* core = FindCpuidEntry(entries, 0x1f, 1);
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->ebx & 0xffff, 4u);
  EXPECT_EQ((core->ecx >> 8) & 0xff, 2u);
  EXPECT_EQ(core->edx, 3u);
}

TEST(FilterCpuidForVcpuTest, Leaf0BAddedWhenMissingButInRange) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  std::erase_if(entries, [](const kvm_cpuid_entry2& e) { return e.function == 0xb; });
  FilterCpuidForVcpu(entries, 2, 4);
  ASSERT_NE(FindCpuidEntry(entries, 0xb, 1), nullptr);
  EXPECT_EQ(FindCpuidEntry(entries, 0xb, 1)->edx, 2u);

  // Not added when the maximum basic leaf is below 0xB.
  entries = SampleEntries();
  std::erase_if(entries, [](const kvm_cpuid_entry2& e) { return e.function == 0xb; });
  FindCpuidEntry(entries, 0, 0)->eax = 0xa;
  FilterCpuidForVcpu(entries, 2, 4);
  EXPECT_EQ(FindCpuidEntry(entries, 0xb, 0), nullptr);
}

TEST(FilterCpuidForVcpuTest, Leaf4) {
  for (uint32_t apic_id : {0u, 3u}) {
    const std::vector<kvm_cpuid_entry2> entries = Filtered(apic_id, 4);
    for (uint32_t index = 0; index < 4; ++index) {
      const kvm_cpuid_entry2* cache = FindCpuidEntry(entries, 4, index);
      ASSERT_NE(cache, nullptr);
      EXPECT_EQ(cache->eax >> 26, 3u) << "cores per package - 1, subleaf " << index;
      const uint32_t level = (cache->eax >> 5) & 7;
      EXPECT_EQ((cache->eax >> 14) & 0xfff, level == 3 ? 3u : 0u) << "sharing, subleaf " << index;
      EXPECT_EQ(cache->eax & 0x3fff, SampleEntries()[2 + index].eax & 0x3fff) << "type/level kept";
      EXPECT_EQ(cache->ebx, SampleEntries()[2 + index].ebx);
    }
    EXPECT_EQ(FindCpuidEntry(entries, 4, 4)->eax, 0u) << "terminating subleaf untouched";
  }
}

TEST(FilterCpuidForVcpuTest, AmdLeavesAndUntouchedLeaves) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  entries.push_back(Entry(0x8000001e, 0, 0, 0x99, 0x99, 0x99, 0x99));
  FilterCpuidForVcpu(entries, 3, 4);
  const kvm_cpuid_entry2* sizes = FindCpuidEntry(entries, 0x80000008, 0);
  EXPECT_EQ(sizes->ecx & 0xff, 3u) << "NC";
  EXPECT_EQ((sizes->ecx >> 12) & 0xf, 2u) << "ApicIdCoreIdSize";
  EXPECT_EQ(sizes->ecx & (3u << 16), 1u << 16) << "other fields kept";
  EXPECT_EQ(sizes->eax, 0x3027u);
  const kvm_cpuid_entry2* ext = FindCpuidEntry(entries, 0x8000001e, 0);
  EXPECT_EQ(ext->eax, 3u);
  EXPECT_EQ(ext->ebx, 3u);
  EXPECT_EQ(ext->ecx, 0u);

  const std::vector<kvm_cpuid_entry2> original = SampleEntries();
  for (uint32_t leaf : {0x0u, 0x6u, 0x7u, 0xdu, 0x80000001u}) {
    const kvm_cpuid_entry2* a = FindCpuidEntry(entries, leaf, 0);
    const kvm_cpuid_entry2* b = FindCpuidEntry(original, leaf, 0);
    EXPECT_TRUE(a->eax == b->eax && a->ebx == b->ebx && a->ecx == b->ecx && a->edx == b->edx)
        << "leaf " << leaf;
  }
}

TEST(FindCpuidEntryTest, HonoursSignificantIndex) {
  std::vector<kvm_cpuid_entry2> entries = SampleEntries();
  EXPECT_EQ(FindCpuidEntry(entries, 1, 5)->function, 1u) << "leaf 1 ignores the index";
  EXPECT_EQ(FindCpuidEntry(entries, 7, 1)->eax, Bit(4) | Bit(5));
  EXPECT_EQ(FindCpuidEntry(entries, 7, 2), nullptr);
  EXPECT_EQ(FindCpuidEntry(entries, 0x14, 0), nullptr);
}

// --- Captured KVM_GET_SUPPORTED_CPUID tables (vmm/x86/testdata/) ---------------------------------

// Reads a tools/dump-kvm-cpuid table: "function index flags eax ebx ecx edx" in hex, '#' comments.
std::vector<kvm_cpuid_entry2> LoadFixture(const std::string& name) {
  const std::string relative = "vmm/x86/testdata/" + name;
  std::ifstream in(relative);
  if (!in && std::getenv("TEST_SRCDIR") != nullptr) {
    const char* workspace = std::getenv("TEST_WORKSPACE");
    in.open(std::string(std::getenv("TEST_SRCDIR")) + "/" + (workspace ? workspace : "") + "/" +
            relative);
  }
  EXPECT_TRUE(in.good()) << "cannot open " << relative;
  std::vector<kvm_cpuid_entry2> entries;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string f[7];
    for (std::string& field : f) fields >> field;
    EXPECT_FALSE(f[6].empty()) << line;
    auto hex = [](const std::string& text) {
      return static_cast<uint32_t>(std::strtoul(text.c_str(), nullptr, 16));
    };
    entries.push_back(
        Entry(hex(f[0]), hex(f[1]), hex(f[2]), hex(f[3]), hex(f[4]), hex(f[5]), hex(f[6])));
  }
  EXPECT_FALSE(entries.empty()) << name;
  return entries;
}

constexpr const char* kL1Fixture = "l1_tcg_svm_kvm61.txt";               // captured, AMD (TCG SVM)
constexpr const char* kIntelFixture = "synthetic_intel_avx512_amx.txt";  // synthetic, Intel
constexpr const char* kFixtures[] = {kL1Fixture, kIntelFixture};

// What the vCPU with `apic_id` of `num_cpus` gets: the VM-wide shaping, then its topology.
std::vector<kvm_cpuid_entry2> VcpuCpuid(std::vector<kvm_cpuid_entry2> entries,
                                        std::string_view spec, uint32_t apic_id,
                                        uint32_t num_cpus) {
  absl::StatusOr<CpuFeatureMask> mask = ParseCpuFeatures(spec);
  EXPECT_TRUE(mask.ok()) << mask.status();
  const absl::Status status = ApplyCpuFeatureMask(*mask, entries);
  EXPECT_TRUE(status.ok()) << status;
  FilterCpuidForVcpu(entries, apic_id, num_cpus);
  return entries;
}

// --- The leaf 0xD checks a Linux 6.1 guest makes -----------------------------------------------

uint32_t Subleaf(const std::vector<kvm_cpuid_entry2>& entries, uint32_t index, int reg) {
  const kvm_cpuid_entry2* e = FindCpuidEntry(entries, 0xd, index);
  if (e == nullptr) return 0;
  const uint32_t regs[] = {e->eax, e->ebx, e->ecx, e->edx};
  return regs[reg];
}

// KVM's xstate_required_size (arch/x86/kvm/cpuid.c): the XSAVE area size for `xcr0`, which KVM
// writes into CPUID.(0DH,0):EBX (standard) or (0DH,1):EBX (compacted) for the vCPU's XCR0.
uint32_t KvmRequiredSize(const std::vector<kvm_cpuid_entry2>& entries, uint64_t xcr0,
                         bool compacted) {
  uint32_t size = 576;
  for (uint32_t bit = 2; bit < 64; ++bit) {
    if (!((xcr0 >> bit) & 1)) continue;
    const uint32_t offset = compacted ? ((Subleaf(entries, bit, 2) & 2) ? (size + 63) & ~63u : size)
                                      : Subleaf(entries, bit, 1);
    size = std::max(size, offset + Subleaf(entries, bit, 0));
  }
  return size;
}

// The problems Linux 6.1's fpu__init_system_xstate would report (each one a WARNING, most of them
// followed by booting with XSAVE disabled), plus flag/XCR0 disagreements, for a guest whose CPUID
// is `entries` and whose XCR0, as far as KVM knows, is `kvm_xcr0` (nullopt: KVM intercepts XSETBV
// and so knows the value Linux writes). Empty when Linux is content.
std::vector<std::string> LinuxXstateProblems(const std::vector<kvm_cpuid_entry2>& entries,
                                             std::optional<uint64_t> kvm_xcr0) {
  std::vector<std::string> problems;
  auto problem = [&](const std::string& text) { problems.push_back(text); };
  const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, 1, 0);
  if (leaf1 == nullptr || !(leaf1->ecx & Bit(26))) {
    // No XSAVE: Linux uses FXSAVE; leaf 0xD must not advertise anything either.
    for (const kvm_cpuid_entry2& e : entries) {
      if (e.function == 0xd && (e.eax | e.ebx | e.ecx | e.edx)) problem("leaf 0xd without xsave");
    }
    return problems;
  }
  if (FindCpuidEntry(entries, 0, 0)->eax < 0xd) problem("cpuid_level < 0xd");
  uint64_t max_features = Subleaf(entries, 0, 0) | (uint64_t{Subleaf(entries, 0, 3)} << 32) |
                          Subleaf(entries, 1, 2) | (uint64_t{Subleaf(entries, 1, 3)} << 32);
  if ((max_features & 3) != 3) problem("FP/SSE not among the xstate features");

  // xsave_cpuid_features[]: a component whose feature flag is off is dropped by Linux; we also
  // insist the other way round (a flag without its state would #UD in the guest).
  const std::pair<uint32_t, const char*> gates[] = {
      {2, "avx"},     {3, "mpx"}, {4, "mpx"},       {5, "avx512f"},  {6, "avx512f"},
      {7, "avx512f"}, {9, "pku"}, {17, "amx_tile"}, {18, "amx_tile"}};
  for (const auto& [bit, feature] : gates) {
    const bool enumerated = (max_features >> bit) & 1;
    if (enumerated != Has(entries, feature)) {
      problem("XCR0 bit " + std::to_string(bit) + (enumerated ? " without " : " missing for ") +
              feature);
    }
    if (!Has(entries, feature)) max_features &= ~(uint64_t{1} << bit);
  }
  const uint32_t sub1_eax = Subleaf(entries, 1, 0);
  const bool xsaves = sub1_eax & Bit(3);
  const bool compacted = xsaves || (sub1_eax & Bit(1));
  if (!(sub1_eax & Bit(4))) max_features &= ~(uint64_t{1} << 18);  // no XFD: no AMX tile data
  // XFEATURE_MASK_USER_SUPPORTED (| SUPERVISOR_SUPPORTED = PASID with XSAVES).
  max_features &= 0x602ffull | (xsaves ? (1ull << 10) : 0);
  const uint64_t user_features = max_features & 0x602ffull;

  // check_xstate_against_struct, the supervisor check and setup_xstate_cache's ordering check.
  const std::pair<uint32_t, uint32_t> struct_sizes[] = {
      {2, 256}, {3, 64}, {4, 64}, {5, 64}, {6, 512}, {7, 1024}, {9, 8}, {10, 8}, {17, 64}};
  uint32_t last_offset = 576;
  for (uint32_t bit = 2; bit < 64; ++bit) {
    if (!((max_features >> bit) & 1)) continue;
    const uint32_t size = Subleaf(entries, bit, 0);
    for (const auto& [nr, expected] : struct_sizes) {
      if (nr == bit && size != expected) {
        problem("xstate " + std::to_string(bit) + ": size " + std::to_string(size));
      }
    }
    if (bit == 18 && (size == 0 || size % 1024 != 0)) problem("tile data size");
    const bool supervisor = Subleaf(entries, bit, 2) & 1;
    if (supervisor && !xsaves) problem("supervisor xstate without XSAVES");
    if (supervisor) continue;
    const uint32_t offset = Subleaf(entries, bit, 1);
    if (offset < last_offset) problem("misordered xstate " + std::to_string(bit));
    last_offset = offset;
  }

  // XSETBV / KVM_SET_XCRS accept only a well-formed XCR0 (SDM Vol. 1 13.3; KVM's __kvm_set_xcr).
  auto check_xcr0 = [&](const char* who, uint64_t value) {
    const bool ymm = value & 4, mpx_regs = value & 8, mpx_csr = value & 16;
    const uint64_t avx512 = value & 0xe0, tiles = value & (3ull << 17);
    if (!(value & 1) || (ymm && !(value & 2)) || mpx_regs != mpx_csr ||
        (avx512 && (avx512 != 0xe0 || !ymm)) || (tiles && tiles != (3ull << 17))) {
      problem(std::string("invalid XCR0 for ") + who);
    }
  };
  check_xcr0("the guest", user_features);
  if (kvm_xcr0) check_xcr0("KVM", *kvm_xcr0);

  // paranoid_xstate_size_valid: the size Linux computes for its features must equal the size
  // CPUID reports once Linux has written XCR0 = its user features.
  const uint64_t xcr0 = kvm_xcr0.value_or(user_features);
  const uint32_t top = std::bit_width(max_features) - 1;
  uint32_t computed = 576;
  if (top > 1) {
    computed = compacted ? KvmRequiredSize(entries, max_features, true)
                         : Subleaf(entries, top, 1) + Subleaf(entries, top, 0);
  }
  const uint32_t kernel_size =
      compacted ? KvmRequiredSize(entries, xcr0, true) : KvmRequiredSize(entries, xcr0, false);
  if (computed != kernel_size) {
    problem("XSAVE consistency problem: size " + std::to_string(computed) + " != kernel_size " +
            std::to_string(kernel_size));
  }
  // The maximum size (ECX) covers every enumerated component.
  if (Subleaf(entries, 0, 2) < KvmRequiredSize(entries, user_features, false)) {
    problem("subleaf 0 ECX smaller than the area");
  }
  return problems;
}

TEST(CpuidFixtureTest, LoadsCapturedTables) {
  const std::vector<kvm_cpuid_entry2> l1 = LoadFixture(kL1Fixture);
  EXPECT_EQ(l1.size(), 30u);
  EXPECT_EQ(FindCpuidEntry(l1, 0xd, 0)->eax, 0x207u);
  EXPECT_TRUE(FindCpuidEntry(l1, 0xd, 9)->flags & kSignificant);
  EXPECT_NE(LoadFixture(kIntelFixture).size(), 0u);
}

// The failure seen in L2 under QEMU TCG's SVM: KVM never sees the guest's XSETBV, so it reports
// CPUID.(0DH,0):EBX for its reset XCR0 (x87 only, 576 bytes) and Linux finds 2696 != 576.
TEST(LeafXsaveTest, ReproducesTheNestedTcgWarningWithoutBootXcr0) {
  const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(kL1Fixture), "", 0, 2);
  EXPECT_THAT(LinuxXstateProblems(entries, /*kvm_xcr0=*/0x1),
              ::testing::ElementsAre("XSAVE consistency problem: size 2696 != kernel_size 576"));
  // With XCR0 loaded as BootXcr0 says, the sizes agree even though XSETBV is not intercepted.
  EXPECT_THAT(LinuxXstateProblems(entries, BootXcr0(entries)), ::testing::IsEmpty());
}

TEST(LeafXsaveTest, FixturesPassLinuxChecks) {
  for (const char* fixture : kFixtures) {
    for (uint32_t num_cpus : {1u, 2u, 4u}) {
      for (uint32_t apic_id = 0; apic_id < num_cpus; ++apic_id) {
        const std::vector<kvm_cpuid_entry2> entries =
            VcpuCpuid(LoadFixture(fixture), "", apic_id, num_cpus);
        EXPECT_THAT(LinuxXstateProblems(entries, std::nullopt), ::testing::IsEmpty()) << fixture;
        EXPECT_THAT(LinuxXstateProblems(entries, BootXcr0(entries)), ::testing::IsEmpty())
            << fixture;
      }
    }
  }
}

TEST(LeafXsaveTest, L1FixtureValues) {
  const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(kL1Fixture), "", 0, 2);
  const kvm_cpuid_entry2* sub0 = FindCpuidEntry(entries, 0xd, 0);
  EXPECT_EQ(sub0->eax, 0x207u) << "x87, SSE, YMM, PKRU";
  EXPECT_EQ(sub0->ebx, 576u);
  EXPECT_EQ(sub0->ecx, 2696u);
  EXPECT_EQ(sub0->edx, 0u);
  const kvm_cpuid_entry2* sub1 = FindCpuidEntry(entries, 0xd, 1);
  EXPECT_EQ(sub1->eax, 0x5u) << "XSAVEOPT, XGETBV1";
  EXPECT_EQ(sub1->ebx | sub1->ecx | sub1->edx, 0u);
  EXPECT_EQ(FindCpuidEntry(entries, 0xd, 2)->ebx, 576u);
  EXPECT_EQ(FindCpuidEntry(entries, 0xd, 9)->ebx, 2688u);
  EXPECT_EQ(BootXcr0(entries), 0x207u);
}

TEST(LeafXsaveTest, IntelFixtureValues) {
  const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(kIntelFixture), "", 0, 2);
  const kvm_cpuid_entry2* sub0 = FindCpuidEntry(entries, 0xd, 0);
  EXPECT_EQ(sub0->eax, 0x602e7u);
  EXPECT_EQ(sub0->ecx, 11008u);
  EXPECT_EQ(sub0->ebx, 576u);
  const kvm_cpuid_entry2* sub1 = FindCpuidEntry(entries, 0xd, 1);
  EXPECT_EQ(sub1->eax, 0x1fu) << "XFD kept with AMX";
  EXPECT_EQ(sub1->ebx, 576u) << "compacted size for x87|SSE";
  EXPECT_EQ(BootXcr0(entries), 0x602e7u);
}

TEST(LeafXsaveTest, FeatureRemovalsShrinkXcr0) {
  const struct {
    const char* spec;
    uint32_t xcr0;
    uint32_t size;
    std::vector<const char*> gone;
  } cases[] = {
      {"-avx", 0x60203, 11008, {"avx", "avx2", "avx512f", "avx512bw", "fma"}},
      {"-avx512f", 0x60207, 11008, {"avx512f", "avx512vl"}},
      {"-pku", 0x602e7 & ~0x200u, 11008, {"pku", "ospke"}},
      {"-amx_tile", 0x2e7, 2696, {"amx_tile", "amx_bf16", "amx_int8"}},
      {"-amx_tile,-pku", 0xe7, 2688, {"amx_tile", "pku"}},
  };
  for (const auto& c : cases) {
    const std::vector<kvm_cpuid_entry2> entries =
        VcpuCpuid(LoadFixture(kIntelFixture), c.spec, 0, 2);
    EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->eax, c.xcr0) << c.spec;
    EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->ecx, c.size) << c.spec;
    for (const char* feature : c.gone) EXPECT_FALSE(Has(entries, feature)) << c.spec << feature;
    EXPECT_TRUE(Has(entries, "xsave")) << c.spec;
    EXPECT_THAT(LinuxXstateProblems(entries, std::nullopt), ::testing::IsEmpty()) << c.spec;
    EXPECT_THAT(LinuxXstateProblems(entries, BootXcr0(entries)), ::testing::IsEmpty()) << c.spec;
  }
  const std::vector<kvm_cpuid_entry2> no_amx =
      VcpuCpuid(LoadFixture(kIntelFixture), "-amx_tile", 0, 2);
  EXPECT_EQ(FindCpuidEntry(no_amx, 0xd, 1)->eax, 0xfu) << "XFD goes with AMX";
  EXPECT_EQ(FindCpuidEntry(no_amx, 0xd, 0x12)->eax, 0u);
}

TEST(LeafXsaveTest, NoXsaveZeroesLeafAndBootXcr0) {
  for (const char* fixture : kFixtures) {
    const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(fixture), "-xsave", 0, 2);
    EXPECT_EQ(BootXcr0(entries), std::nullopt);
    EXPECT_FALSE(Has(entries, "avx"));
    EXPECT_THAT(LinuxXstateProblems(entries, std::nullopt), ::testing::IsEmpty()) << fixture;
  }
  // KVM reports XSAVE but no leaf 0xD: XSAVE is withdrawn.
  std::vector<kvm_cpuid_entry2> entries = LoadFixture(kL1Fixture);
  std::erase_if(entries, [](const kvm_cpuid_entry2& e) { return e.function == 0xd; });
  entries = VcpuCpuid(entries, "", 0, 1);
  EXPECT_FALSE(Has(entries, "xsave"));
  EXPECT_FALSE(Has(entries, "avx"));
}

// Leaf 0xD tables a buggy or unusual host could report: each inconsistency costs the affected
// component (and its feature), never XSAVE as a whole, and Linux's checks pass afterwards.
TEST(LeafXsaveTest, InconsistentSubleavesAreRepaired) {
  const struct {
    const char* what;
    void (*corrupt)(std::vector<kvm_cpuid_entry2>&);
    uint32_t xcr0;
    std::vector<const char*> gone;
  } cases[] = {
      {"YMM size 0",
       [](auto& e) { FindCpuidEntry(e, 0xd, 2)->eax = 0; },
       0x60203,
       {"avx", "avx512f"}},
      {"opmask inside the legacy area",
       [](auto& e) { FindCpuidEntry(e, 0xd, 5)->ebx = 0x100; },
       0x60207,
       {"avx512f"}},
      {"ZMM_Hi256 overlapping opmask",
       [](auto& e) { FindCpuidEntry(e, 0xd, 6)->ebx = 0x450; },
       0x60207,
       {"avx512f"}},
      {"Hi16_ZMM missing",
       [](auto& e) {
         std::erase_if(e,
                       [](const kvm_cpuid_entry2& x) { return x.function == 0xd && x.index == 7; });
       },
       0x60207,
       {"avx512f"}},
      {"PKRU wrong size", [](auto& e) { FindCpuidEntry(e, 0xd, 9)->eax = 16; }, 0x600e7, {"pku"}},
      {"PKRU marked supervisor",
       [](auto& e) { FindCpuidEntry(e, 0xd, 9)->ecx = 1; },
       0x600e7,
       {"pku"}},
      {"PKRU not enumerated",
       [](auto& e) { FindCpuidEntry(e, 0xd, 0)->eax &= ~0x200u; },
       0x600e7,
       {"pku"}},
      {"tile data before tile config",
       [](auto& e) { FindCpuidEntry(e, 0xd, 0x12)->ebx = 0xa80; },
       0x2e7,
       {"amx_tile"}},
      {"YMM enumerated without avx",
       [](auto& e) { FindCpuidEntry(e, 1, 0)->ecx &= ~Bit(28); },
       0x60203,
       {"avx", "avx512f"}},
      {"unknown and supervisor components",
       [](auto& e) {
         FindCpuidEntry(e, 0xd, 0)->eax |= 1u << 19;
         FindCpuidEntry(e, 0xd, 1)->ecx = 1u << 10;  // PASID in IA32_XSS
         e.push_back(Entry(0xd, 10, kSignificant, 8, 0, 1, 0));
         e.push_back(Entry(0xd, 19, kSignificant, 64, 0x2b00, 0, 0));
       },
       0x602e7,
       {}},
  };
  for (const auto& c : cases) {
    std::vector<kvm_cpuid_entry2> entries = LoadFixture(kIntelFixture);
    c.corrupt(entries);
    entries = VcpuCpuid(entries, "", 0, 2);
    EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->eax, c.xcr0) << c.what;
    EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->edx, 0u) << c.what;
    for (const char* feature : c.gone) EXPECT_FALSE(Has(entries, feature)) << c.what << feature;
    EXPECT_TRUE(Has(entries, "xsave")) << c.what;
    EXPECT_EQ(FindCpuidEntry(entries, 0xd, 1)->ecx, 0u) << c.what << ": no IA32_XSS components";
    for (const kvm_cpuid_entry2& e : entries) {
      if (e.function == 0xd && e.index >= 2 && !((c.xcr0 >> e.index) & 1)) {
        EXPECT_EQ(e.eax | e.ebx | e.ecx | e.edx, 0u) << c.what << ": subleaf " << e.index;
      }
    }
    EXPECT_THAT(LinuxXstateProblems(entries, std::nullopt), ::testing::IsEmpty()) << c.what;
    EXPECT_THAT(LinuxXstateProblems(entries, BootXcr0(entries)), ::testing::IsEmpty()) << c.what;
  }
}

TEST(LeafXsaveTest, RequiredFeatureLeafXsaveCannotBack) {
  std::vector<kvm_cpuid_entry2> entries = LoadFixture(kIntelFixture);
  FindCpuidEntry(entries, 0xd, 2)->eax = 0;
  const std::vector<kvm_cpuid_entry2> before = entries;
  const absl::Status status = ApplyCpuFeatureMask(*ParseCpuFeatures("+avx2"), entries);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("avx2"));
  std::string diff;
  EXPECT_TRUE(SameEntries(entries, before, &diff)) << "unchanged on error: " << diff;
}

// --- Feature mask applied everywhere a feature is mirrored; KVM leaves --------------------------

TEST(ApplyCpuFeatureMaskTest, AmdMirrorsOfLeaf1EdxAreCleared) {
  for (const auto& [spec, bit] : {std::pair<const char*, int>{"-cmov", 15},
                                  {"-pae", 6},
                                  {"-fxsr", 24},
                                  {"-mmx", 23},
                                  {"-apic", 9}}) {
    const std::vector<kvm_cpuid_entry2> original = LoadFixture(kL1Fixture);
    ASSERT_TRUE(FindCpuidEntry(original, 0x80000001, 0)->edx & Bit(bit)) << spec;
    const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(original, spec, 0, 1);
    EXPECT_FALSE(FindCpuidEntry(entries, 1, 0)->edx & Bit(bit)) << spec;
    EXPECT_FALSE(FindCpuidEntry(entries, 0x80000001, 0)->edx & Bit(bit)) << spec;
    EXPECT_EQ(FindCpuidEntry(entries, 0x80000001, 0)->edx | Bit(bit),
              FindCpuidEntry(original, 0x80000001, 0)->edx)
        << spec << ": only the mirrored bit";
  }
  // sse2 (bit 26) is not mirrored: 80000001H EDX[26] is pdpe1gb there.
  const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(kL1Fixture), "-sse2", 0, 1);
  EXPECT_TRUE(Has(entries, "pdpe1gb"));
}

TEST(ApplyCpuFeatureMaskTest, HypervisorBitSetUnlessRemoved) {
  for (const char* fixture : kFixtures) {
    EXPECT_TRUE(Has(VcpuCpuid(LoadFixture(fixture), "", 1, 2), "hypervisor")) << fixture;
    EXPECT_FALSE(Has(VcpuCpuid(LoadFixture(fixture), "-hypervisor", 1, 2), "hypervisor"))
        << fixture;
  }
  std::vector<kvm_cpuid_entry2> entries = LoadFixture(kL1Fixture);
  EXPECT_TRUE(ApplyCpuFeatureMask(*ParseCpuFeatures("+hypervisor"), entries).ok());
}

TEST(AddTscDeadlineTimerTest, SetAndStillRemovable) {
  for (const char* fixture : kFixtures) {
    std::vector<kvm_cpuid_entry2> entries = LoadFixture(fixture);
    AddTscDeadlineTimer(entries);
    std::vector<kvm_cpuid_entry2> kept = entries;
    ASSERT_TRUE(ApplyCpuFeatureMask(*ParseCpuFeatures("+tsc_deadline"), kept).ok()) << fixture;
    EXPECT_TRUE(Has(kept, "tsc_deadline")) << fixture;
    ASSERT_TRUE(ApplyCpuFeatureMask(*ParseCpuFeatures("-tsc_deadline"), entries).ok()) << fixture;
    EXPECT_FALSE(Has(entries, "tsc_deadline")) << fixture;
  }
}

TEST(ApplyCpuFeatureMaskTest, KvmParavirtLeaves) {
  for (const char* fixture : kFixtures) {
    const std::vector<kvm_cpuid_entry2> entries = VcpuCpuid(LoadFixture(fixture), "", 0, 2);
    const kvm_cpuid_entry2* signature = FindCpuidEntry(entries, 0x40000000, 0);
    ASSERT_NE(signature, nullptr) << fixture;
    EXPECT_GE(signature->eax, 0x40000001u) << fixture;
    char name[13] = {};
    std::memcpy(name, &signature->ebx, 4);
    std::memcpy(name + 4, &signature->ecx, 4);
    std::memcpy(name + 8, &signature->edx, 4);
    EXPECT_STREQ(name, "KVMKVMKVM") << fixture;
    const kvm_cpuid_entry2* features = FindCpuidEntry(entries, 0x40000001, 0);
    ASSERT_NE(features, nullptr) << fixture;
    EXPECT_TRUE(features->eax & Bit(3)) << fixture << ": KVM_FEATURE_CLOCKSOURCE2";
    EXPECT_EQ(features->edx, 0u) << fixture << ": no KVM_HINTS_REALTIME";
  }
}

// --- Topology as Linux 6.1 derives it ----------------------------------------------------------

struct LinuxCpuTopology {
  uint32_t package = 0;
  uint32_t core = 0;
  uint32_t smt_siblings = 1;
};

// arch/x86/kernel/cpu: AMD (amd.c amd_detect_cmp / common.c detect_ht_early) when the vendor is
// AMD, else the x2APIC topology leaf (topology.c detect_extended_topology).
LinuxCpuTopology LinuxTopology(const std::vector<kvm_cpuid_entry2>& entries) {
  LinuxCpuTopology t;
  const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, 1, 0);
  const uint32_t apic_id = leaf1->ebx >> 24;
  const kvm_cpuid_entry2* vendor = FindCpuidEntry(entries, 0, 0);
  if (vendor->ebx == 0x68747541) {
    const kvm_cpuid_entry2* amd = FindCpuidEntry(entries, 0x80000001, 0);
    const kvm_cpuid_entry2* sizes = FindCpuidEntry(entries, 0x80000008, 0);
    EXPECT_FALSE(amd->ecx & Bit(22)) << "TOPOEXT without leaf 0x8000001e";
    const uint32_t max_cores = (sizes->ecx & 0xff) + 1;
    uint32_t bits = (sizes->ecx >> 12) & 0xf;
    if (bits == 0) bits = std::bit_width(max_cores - 1);
    t.core = apic_id & ((1u << bits) - 1);
    t.package = apic_id >> bits;
    // detect_ht_early: with HTT and without CmpLegacy, leaf 1 EBX[23:16] counts SMT siblings.
    if ((leaf1->edx & Bit(28)) && !(amd->ecx & Bit(1))) {
      t.smt_siblings = ((leaf1->ebx >> 16) & 0xff) / max_cores;
    }
    return t;
  }
  const kvm_cpuid_entry2* smt = FindCpuidEntry(entries, 0xb, 0);
  const kvm_cpuid_entry2* core = FindCpuidEntry(entries, 0xb, 1);
  EXPECT_EQ((smt->ecx >> 8) & 0xff, 1u);
  EXPECT_EQ((core->ecx >> 8) & 0xff, 2u);
  const uint32_t x2apic_id = smt->edx;
  t.smt_siblings = smt->ebx & 0xffff;
  t.core = (x2apic_id & ((1u << (core->eax & 0x1f)) - 1)) >> (smt->eax & 0x1f);
  t.package = x2apic_id >> (core->eax & 0x1f);
  return t;
}

TEST(FilterCpuidForVcpuTest, FixturesGiveOnePackageOfCores) {
  for (const char* fixture : kFixtures) {
    for (uint32_t num_cpus : {1u, 2u, 3u, 4u, 8u}) {
      std::vector<uint32_t> cores;
      for (uint32_t apic_id = 0; apic_id < num_cpus; ++apic_id) {
        const std::vector<kvm_cpuid_entry2> entries =
            VcpuCpuid(LoadFixture(fixture), "", apic_id, num_cpus);
        const LinuxCpuTopology t = LinuxTopology(entries);
        EXPECT_EQ(t.package, 0u) << fixture << " cpu " << apic_id << "/" << num_cpus;
        EXPECT_EQ(t.smt_siblings, 1u) << fixture << " cpu " << apic_id << "/" << num_cpus;
        EXPECT_EQ(t.core, apic_id) << fixture;
        cores.push_back(t.core);
        const kvm_cpuid_entry2* leaf1 = FindCpuidEntry(entries, 1, 0);
        EXPECT_EQ(leaf1->ebx >> 24, apic_id);
        EXPECT_EQ((leaf1->ebx >> 16) & 0xff, num_cpus);
        EXPECT_EQ(static_cast<bool>(leaf1->edx & Bit(28)), num_cpus > 1);
      }
    }
  }
}

TEST(FilterCpuidForVcpuTest, AmdCmpLegacyAndTopoext) {
  std::vector<kvm_cpuid_entry2> two = VcpuCpuid(LoadFixture(kL1Fixture), "", 1, 2);
  const kvm_cpuid_entry2* amd = FindCpuidEntry(two, 0x80000001, 0);
  EXPECT_TRUE(amd->ecx & Bit(1)) << "CmpLegacy with 2 cores";
  EXPECT_FALSE(amd->ecx & Bit(22));
  EXPECT_EQ(FindCpuidEntry(two, 0x80000008, 0)->ecx & 0xf0ff, 0x1001u) << "NC 1, 1 core id bit";
  std::vector<kvm_cpuid_entry2> one = VcpuCpuid(LoadFixture(kL1Fixture), "", 0, 1);
  EXPECT_FALSE(FindCpuidEntry(one, 0x80000001, 0)->ecx & Bit(1)) << "CmpLegacy off for 1 CPU";

  // TOPOEXT offered with leaf 0x8000001E: kept, and the leaf describes the core.
  std::vector<kvm_cpuid_entry2> topoext = LoadFixture(kL1Fixture);
  FindCpuidEntry(topoext, 0x80000000, 0)->eax = 0x8000001e;
  FindCpuidEntry(topoext, 0x80000001, 0)->ecx |= Bit(22);
  topoext.push_back(Entry(0x8000001e, 0, 0, 0x77, 0x177, 0x7, 0));
  topoext = VcpuCpuid(topoext, "", 1, 2);
  EXPECT_TRUE(FindCpuidEntry(topoext, 0x80000001, 0)->ecx & Bit(22));
  EXPECT_EQ(FindCpuidEntry(topoext, 0x8000001e, 0)->ebx, 1u) << "core 1, one thread per core";

  // Intel: 80000001H ECX bits 1 and 22 are reserved; left alone.
  const std::vector<kvm_cpuid_entry2> intel = VcpuCpuid(LoadFixture(kIntelFixture), "", 1, 2);
  EXPECT_EQ(FindCpuidEntry(intel, 0x80000001, 0)->ecx,
            FindCpuidEntry(LoadFixture(kIntelFixture), 0x80000001, 0)->ecx);
}

}  // namespace
}  // namespace vmm::x86

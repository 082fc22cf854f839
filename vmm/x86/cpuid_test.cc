#include "vmm/x86/cpuid.h"

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
  const uint32_t leaf1_edx = Bit(0) | Bit(4) | Bit(9) | Bit(15) | Bit(19) | Bit(24) | Bit(25) |
                             Bit(26) | Bit(28);
  const uint32_t leaf7_ebx = Bit(0) | Bit(3) | Bit(5) | Bit(8) | Bit(16) | Bit(17) | Bit(30) |
                             Bit(31);
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
      Entry(0xd, 0, kSignificant, 0xe7, 0x340, 0xa88, 0),
      Entry(0xd, 1, kSignificant, 0xf, 0x340, 0, 0),
      Entry(0xd, 2, kSignificant, 0x100, 0x240, 0, 0),
      Entry(0x80000000, 0, 0, 0x80000008, 0, 0, 0),
      Entry(0x80000001, 0, 0, 0, 0, Bit(0) | Bit(5) | Bit(8), Bit(11) | Bit(20) | Bit(27) | Bit(29)),
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
       {"sse3", "pclmulqdq", "ssse3", "fma", "cx16", "pcid", "sse4_1", "sse4_2", "x2apic",
        "movbe", "popcnt", "tsc_deadline", "aes", "xsave", "avx", "f16c", "rdrand", "hypervisor",
        "fpu", "tsc", "msr", "pae", "mce", "cx8", "apic", "sep", "mtrr", "pge", "mca", "cmov",
        "pat", "pse36", "clflush", "mmx", "fxsr", "sse", "sse2", "ht", "fsgsbase", "bmi1", "hle",
        "avx2", "smep", "bmi2", "erms", "invpcid", "rtm", "avx512f", "rdseed", "adx", "smap",
        "clflushopt", "clwb", "sha", "umip", "pku", "md_clear", "lahf_lm", "abm", "sse4a",
        "prefetchw", "syscall", "nx", "pdpe1gb", "rdtscp", "lm"}) {
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
  EXPECT_EQ(ParseCpuFeatures("-xsave,,-cx16").status().code(),
            absl::StatusCode::kInvalidArgument);
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
  for (const char* gone : {"xsave", "osxsave", "avx", "avx2", "fma", "f16c", "avx512f",
                           "avx512dq", "avx512bw", "avx512vl", "avx512vbmi", "avx512_vnni",
                           "vaes", "vpclmulqdq", "pku", "avx_vnni", "avx512_bf16"}) {
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
  EXPECT_EQ(FindCpuidEntry(entries, 0xd, 0)->eax, 0xe7u) << "leaf 0xd untouched";
}

TEST(ApplyCpuFeatureMaskTest, Cx16AndX2apicAreRemovedAlone) {
  for (const auto& [spec, bit] : {std::pair<std::string_view, int>{"-cx16", 13}, {"-x2apic", 21}}) {
    const std::vector<kvm_cpuid_entry2> entries = Applied(spec);
    std::vector<kvm_cpuid_entry2> expected = SampleEntries();
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
    EXPECT_TRUE(leaf1->ecx & Bit(31)) << "hypervisor";
    EXPECT_EQ(leaf1->eax, 0x000906eau);
    // Features untouched.
    EXPECT_EQ(leaf1->ecx & ~Bit(31), SampleEntries()[1].ecx);
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

}  // namespace
}  // namespace vmm::x86

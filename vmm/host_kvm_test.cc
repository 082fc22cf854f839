#include "vmm/host_kvm.h"

#include "gtest/gtest.h"

namespace vmm {
namespace {

constexpr char kCpuinfo[] =
    "processor\t: 0\n"
    "vendor_id\t: AuthenticAMD\n"
    "flags\t\t: fpu vme de pse tsc msr cpuid_fault_x hypervisor\n"
    "bugs\t\t: sysret_ss_attrs cpuid_fault\n"
    "processor\t: 1\n"
    "flags\t\t: fpu vme de pse tsc msr cpuid_fault_x hypervisor\n";

TEST(HostKvmTest, FlagsAreWholeWordsOfTheFlagsLine) {
  EXPECT_TRUE(CpuinfoHasFlag(kCpuinfo, "fpu"));
  EXPECT_TRUE(CpuinfoHasFlag(kCpuinfo, "hypervisor"));
  // Neither a prefix of another flag nor a word of another line counts.
  EXPECT_FALSE(CpuinfoHasFlag(kCpuinfo, "cpuid_fault"));
  EXPECT_FALSE(CpuinfoHasFlag(kCpuinfo, "sysret_ss_attrs"));
  EXPECT_FALSE(CpuinfoHasFlag("", "fpu"));
  EXPECT_TRUE(CpuinfoHasFlag("flags : a cpuid_fault b\n", "cpuid_fault"));
}

TEST(HostKvmTest, OnlyPvmWithoutCpuidFaultingGetsTheNotice) {
  EXPECT_FALSE(Ring3CpuidNotice({.pvm = false, .cpuid_faulting = false}).has_value());
  EXPECT_FALSE(Ring3CpuidNotice({.pvm = true, .cpuid_faulting = true}).has_value());
  auto notice = Ring3CpuidNotice({.pvm = true, .cpuid_faulting = false});
  ASSERT_TRUE(notice.has_value());
  EXPECT_NE(notice->find("user space returns the host's values"), std::string::npos);
}

}  // namespace
}  // namespace vmm

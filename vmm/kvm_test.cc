#include "vmm/kvm.h"

#include <unistd.h>

#include "gtest/gtest.h"

namespace vmm {
namespace {

TEST(KvmTest, MissingDeviceGivesAClearError) {
  auto kvm = Kvm::Open("/nonexistent/kvm");
  ASSERT_FALSE(kvm.ok());
  EXPECT_EQ(kvm.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(kvm.status().message().find("does not exist"), std::string::npos);
}

TEST(KvmTest, NotAKvmDeviceIsRejected) {
  auto kvm = Kvm::Open("/dev/null");
  ASSERT_FALSE(kvm.ok());
  EXPECT_NE(kvm.status().message().find("API version"), std::string::npos);
}

TEST(KvmTest, CreatesVmAndVcpu) {
  if (access("/dev/kvm", R_OK | W_OK) != 0) GTEST_SKIP() << "SKIPPED: /dev/kvm is not available";
  auto kvm = Kvm::Open();
  ASSERT_TRUE(kvm.ok()) << kvm.status();
  auto cpuid = kvm->GetSupportedCpuid();
  ASSERT_TRUE(cpuid.ok()) << cpuid.status();
  EXPECT_GT(cpuid->size(), 4u);
  auto vm = kvm->CreateVm();
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE(vm->SetTssAddress(0xfffbd000).ok());
  ASSERT_TRUE(vm->CreateIrqchip().ok());
  auto vcpu = vm->CreateVcpu(0);
  ASSERT_TRUE(vcpu.ok()) << vcpu.status();
  EXPECT_NE(vcpu->run_state(), nullptr);
  auto regs = vcpu->GetRegs();
  ASSERT_TRUE(regs.ok());
  // The architectural reset vector: RIP 0xfff0 with CS base 0xffff0000.
  EXPECT_EQ(regs->rip, 0xfff0u);
  EXPECT_NE(vcpu->DumpRegisters().find("rip=000000000000fff0"), std::string::npos);
}

}  // namespace
}  // namespace vmm

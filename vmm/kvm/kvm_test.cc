#include "vmm/kvm/kvm.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/kvm/kvm_msi.h"

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
  if (std::string why = tests::NoKvmReason(); !why.empty()) MICROVM_SKIP(why);
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

namespace vmm {
namespace {

TEST(KvmTest, IoeventfdIrqfdAndMsiRouting) {
  if (std::string why = tests::NoKvmReason(); !why.empty()) MICROVM_SKIP(why);
  auto kvm = Kvm::Open();
  ASSERT_TRUE(kvm.ok());
  auto vm = kvm->CreateVm();
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE(vm->CreateIrqchip().ok());
  sys_util::ScopedFd event(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  VmFd::IoEventSpec spec;
  spec.address = 0xc0001000;
  spec.length = 2;
  spec.datamatch = 3;
  EXPECT_TRUE(vm->RegisterIoeventfd(event.get(), spec).ok());
  // The same registration twice is refused by KVM.
  EXPECT_FALSE(vm->RegisterIoeventfd(event.get(), spec).ok());
  EXPECT_TRUE(vm->UnregisterIoeventfd(event.get(), spec).ok());

  KvmMsiController msi(*vm);
  auto first = msi.AllocateVector();
  auto second = msi.AllocateVector();
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_NE((*first)->event_fd(), (*second)->event_fd());
  // The routing table keeps the legacy pins and adds the programmed vectors.
  EXPECT_TRUE((*first)->SetMessage(0xfee00000, 0x4041).ok());
  EXPECT_TRUE((*second)->SetMessage(0xfee01000, 0x4042).ok());
  (*first)->Trigger();
  EXPECT_TRUE((*first)->SetMessage(0, 0).ok());
  second->reset();
  EXPECT_TRUE((*first)->SetMessage(0xfee00000, 0x4043).ok());
}

}  // namespace
}  // namespace vmm

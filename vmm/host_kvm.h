#ifndef VMM_HOST_KVM_H_
#define VMM_HOST_KVM_H_

#include <optional>
#include <string>
#include <string_view>

// What kind of KVM backs /dev/kvm, as far as a guest can tell the difference.
//
// Hardware-assisted KVM (VMX, SVM) intercepts CPUID at every privilege level, so a guest always
// sees the CPUID the VMM set with KVM_SET_CPUID2. PVM (kvm_pvm, a software virtualization that
// runs guest ring 3 natively) can only intercept a ring-3 CPUID where the host CPU has CPUID
// faulting (Intel's MSR_MISC_FEATURES_ENABLES bit 0, /proc/cpuinfo flag "cpuid_fault"); without
// it, guest user space reads the host's own CPUID: other APIC IDs, features the VMM hid. Guest
// kernels (ring 0) are unaffected.
namespace vmm {

struct HostKvmKind {
  bool pvm = false;             // /dev/kvm is kvm_pvm
  bool cpuid_faulting = false;  // the host CPU can trap CPUID in user mode
};

// Reads /sys/module/kvm_pvm and /proc/cpuinfo.
HostKvmKind DetectHostKvmKind();

// True if the space-separated "flags" line of /proc/cpuinfo text names `flag`.
bool CpuinfoHasFlag(std::string_view cpuinfo, std::string_view flag);

// The one-line notice the VMM prints at start-up when guest ring-3 CPUID is not trapped, or
// nullopt when every CPUID the guest executes returns the VMM's values.
std::optional<std::string> Ring3CpuidNotice(const HostKvmKind& kind);

}  // namespace vmm

#endif  // VMM_HOST_KVM_H_

#ifndef VMM_KVM_KVM_ABI_H_
#define VMM_KVM_KVM_ABI_H_

#include <linux/kvm.h>
#include <sys/ioctl.h>

#include <cstdint>

// Linux 6.1's uapi headers declare the variable-length KVM structures with __DECLARE_FLEX_ARRAY,
// which in C++ adds a one-byte empty struct before the array: sizeof(kvm_cpuid2) becomes 12 instead
// of 8, the entries move to offset 12, and the ioctl numbers that encode the struct size change
// (KVM_GET_SUPPORTED_CPUID then fails with EINVAL). The kernel ABI is the C layout, so these
// structures and ioctl numbers are spelled out here and used instead of the header's.
namespace vmm::kvm_abi {

// Header of kvm_cpuid2 / kvm_msrs / kvm_irq_routing: a count, a pad or flags word, then the entries
// at offset 8.
struct ArrayHeader {
  uint32_t count;
  uint32_t flags_or_padding;
};
static_assert(sizeof(ArrayHeader) == 8);

inline constexpr unsigned long kGetSupportedCpuid = _IOWR(KVMIO, 0x05, ArrayHeader);
inline constexpr unsigned long kSetCpuid2 = _IOW(KVMIO, 0x90, ArrayHeader);
inline constexpr unsigned long kGetMsrs = _IOWR(KVMIO, 0x88, ArrayHeader);
inline constexpr unsigned long kSetMsrs = _IOW(KVMIO, 0x89, ArrayHeader);
inline constexpr unsigned long kSetGsiRouting = _IOW(KVMIO, 0x6a, ArrayHeader);

// kvm_coalesced_mmio_ring, the page of queued writes (KVM_CAP_COALESCED_MMIO's page of a vCPU's
// mapping): the indexes, then the entries at offset 8 (the header's C++ reading puts them at 16).
struct CoalescedRing {
  uint32_t first;  // the oldest entry the VMM has not applied; only the VMM moves it
  uint32_t last;   // one past the newest entry; only KVM moves it
  kvm_coalesced_mmio* entries() {
    return reinterpret_cast<kvm_coalesced_mmio*>(reinterpret_cast<char*>(this) + sizeof(*this));
  }
};
static_assert(sizeof(CoalescedRing) == 8);
static_assert(sizeof(kvm_coalesced_mmio) == 24);

static_assert(sizeof(kvm_cpuid_entry2) == 40);
static_assert(sizeof(kvm_msr_entry) == 16);
static_assert(sizeof(kvm_irq_routing_entry) == 48);

}  // namespace vmm::kvm_abi

#endif  // VMM_KVM_KVM_ABI_H_

#ifndef VMM_KVM_KVM_H_
#define VMM_KVM_KVM_H_

#include <linux/kvm.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/kvm/kvm_abi.h"
#include "vmm/sys_util/scoped_fd.h"

// Thin RAII wrappers over the KVM ioctl API (Documentation/virt/kvm/api.rst). Every ioctl returns an
// absl::Status that names the call and the errno, so callers never see raw -1s.
namespace vmm {

class VcpuFd;
class VmFd;

// /dev/kvm: the system-level handle.
class Kvm {
 public:
  // Opens the device and checks the API version (12) and the capabilities this VMM relies on.
  // Fails with FailedPrecondition (missing) or PermissionDenied (no access) and a hint.
  static absl::StatusOr<Kvm> Open(const std::string& path = "/dev/kvm");

  // KVM_CHECK_EXTENSION: 0 when absent, else the capability's value.
  int CheckExtension(int capability) const;
  absl::StatusOr<std::vector<kvm_cpuid_entry2>> GetSupportedCpuid() const;
  absl::StatusOr<VmFd> CreateVm() const;

 private:
  explicit Kvm(sys_util::ScopedFd fd, size_t vcpu_mmap_size)
      : fd_(std::move(fd)), vcpu_mmap_size_(vcpu_mmap_size) {}
  sys_util::ScopedFd fd_;
  size_t vcpu_mmap_size_;
};

// A VM file descriptor.
class VmFd {
 public:
  VmFd(VmFd&&) = default;
  VmFd& operator=(VmFd&&) = default;

  int fd() const { return fd_.get(); }
  // `read_only`: KVM_MEM_READONLY, a ROM: guest writes exit as MMIO.
  absl::Status SetUserMemoryRegion(uint32_t slot, uint64_t guest_address, uint64_t size,
                                   void* host_address, bool read_only = false);
  // x86 housekeeping KVM needs before vCPUs exist (three pages below 4 GiB for the real-mode TSS).
  absl::Status SetTssAddress(uint64_t address);
  absl::Status SetIdentityMapAddress(uint64_t address);
  absl::Status CreateIrqchip();
  absl::Status CreatePit2();
  // KVM_IRQ_LINE on the in-kernel irqchip (PIC + IOAPIC pin `irq`).
  absl::Status SetIrqLine(uint32_t irq, bool level);
  absl::StatusOr<VcpuFd> CreateVcpu(uint32_t id);

  // KVM_SET_GSI_ROUTING: replaces the whole routing table.
  absl::Status SetGsiRouting(const std::vector<kvm_irq_routing_entry>& entries);
  // KVM_IRQFD: a write to `event_fd` raises `gsi`.
  absl::Status RegisterIrqfd(int event_fd, uint32_t gsi);
  absl::Status UnregisterIrqfd(int event_fd, uint32_t gsi);
  // KVM_IOEVENTFD: a guest write of `length` bytes to `address` (port I/O or MMIO) signals `event_fd`
  // in the kernel, without an exit to the VMM. With `datamatch`, only writes of that value do.
  struct IoEventSpec {
    uint64_t address = 0;
    uint32_t length = 0;  // 0 (any length, MMIO only), 1, 2, 4 or 8
    bool pio = false;
    std::optional<uint64_t> datamatch;
  };
  absl::Status RegisterIoeventfd(int event_fd, const IoEventSpec& spec);
  absl::Status UnregisterIoeventfd(int event_fd, const IoEventSpec& spec);
  // KVM_REGISTER_COALESCED_MMIO with pio set (needs KVM_CAP_COALESCED_PIO): a guest write of up to
  // 8 bytes wholly inside ports [port, port + size) is queued in the VM's coalesced ring, with no
  // exit; the VMM applies the queue (CoalescedWrites) before it handles any vCPU's next exit. A
  // full ring makes KVM fall back to an ordinary exit.
  absl::Status RegisterCoalescedPio(uint16_t port, uint32_t size);

 private:
  friend class Kvm;
  VmFd(sys_util::ScopedFd fd, size_t vcpu_mmap_size)
      : fd_(std::move(fd)), vcpu_mmap_size_(vcpu_mmap_size) {}
  sys_util::ScopedFd fd_;
  size_t vcpu_mmap_size_;
};

// A vCPU file descriptor and its shared kvm_run page (unmapped on destruction).
class VcpuFd {
 public:
  ~VcpuFd();
  VcpuFd(VcpuFd&& other) noexcept;
  VcpuFd& operator=(VcpuFd&&) = delete;
  VcpuFd(const VcpuFd&) = delete;

  uint32_t id() const { return id_; }
  kvm_run* run_state() const { return run_; }

  // KVM_RUN. Returns Aborted when interrupted by a signal (EINTR), so callers can check their stop
  // flag; any other failure is Internal.
  absl::Status Run();

  absl::StatusOr<kvm_regs> GetRegs() const;
  absl::Status SetRegs(const kvm_regs& regs);
  absl::StatusOr<kvm_sregs> GetSregs() const;
  absl::Status SetSregs(const kvm_sregs& sregs);
  absl::Status SetFpu(const kvm_fpu& fpu);
  absl::Status SetCpuid(const std::vector<kvm_cpuid_entry2>& entries);
  // KVM_SET_XCRS with XCR0 only (needs KVM_CAP_XCRS). Call after SetCpuid: KVM accepts only the
  // bits the vCPU's CPUID leaf 0xD enumerates.
  absl::Status SetXcr0(uint64_t xcr0);
  absl::Status SetMsrs(const std::vector<kvm_msr_entry>& msrs);
  absl::StatusOr<kvm_lapic_state> GetLapic() const;
  absl::Status SetLapic(const kvm_lapic_state& lapic);

  // Human-readable register dump for fatal-error reports.
  std::string DumpRegisters() const;

  // Asks KVM to copy the general registers into kvm_run (s.regs.regs) at every exit, so a fatal
  // report can say where the guest was before KVM reset the vCPU (SVM re-initializes it on a
  // triple fault). `sync_regs_capability` is Kvm::CheckExtension(KVM_CAP_SYNC_REGS). Returns false,
  // changing nothing, where KVM cannot; the copy costs a few hundred bytes per exit.
  bool SyncGeneralRegistersOnExit(int sync_regs_capability);

  // The VM's coalesced-write ring, as this vCPU's mapping shows it (every vCPU maps the same page):
  // `page_offset` is Kvm::CheckExtension(KVM_CAP_COALESCED_MMIO), its page in the mapping. nullptr
  // when that is 0 (no ring) or the page lies outside the mapping.
  kvm_abi::CoalescedRing* CoalescedRing(int page_offset) const;

 private:
  friend class VmFd;
  VcpuFd(sys_util::ScopedFd fd, uint32_t id, kvm_run* run, size_t run_size)
      : fd_(std::move(fd)), id_(id), run_(run), run_size_(run_size) {}
  sys_util::ScopedFd fd_;
  uint32_t id_;
  kvm_run* run_;
  size_t run_size_;
};

}  // namespace vmm

#endif  // VMM_KVM_KVM_H_

#include "vmm/kvm/kvm.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "vmm/kvm/kvm_abi.h"

namespace vmm {
namespace {

absl::Status IoctlError(const char* what) {
  const int err = errno;
  return absl::InternalError(absl::StrFormat("%s failed: %s", what, strerror(err)));
}

// The capabilities the VMM cannot run without (x86 with in-kernel irqchip).
constexpr struct {
  int capability;
  const char* name;
} kRequiredCapabilities[] = {
    {KVM_CAP_IRQCHIP, "KVM_CAP_IRQCHIP"},
    {KVM_CAP_USER_MEMORY, "KVM_CAP_USER_MEMORY"},
    {KVM_CAP_SET_TSS_ADDR, "KVM_CAP_SET_TSS_ADDR"},
    {KVM_CAP_PIT2, "KVM_CAP_PIT2"},
    {KVM_CAP_EXT_CPUID, "KVM_CAP_EXT_CPUID"},
    {KVM_CAP_IMMEDIATE_EXIT, "KVM_CAP_IMMEDIATE_EXIT"},
};

// A kvm_abi::ArrayHeader followed by `count` entries, 8-byte aligned, in the kernel's C layout.
template <typename Entry>
class ArrayBuffer {
 public:
  explicit ArrayBuffer(uint32_t count)
      : words_(std::make_unique<uint64_t[]>(
            (sizeof(kvm_abi::ArrayHeader) + count * sizeof(Entry) + 7) / 8)) {
    header()->count = count;
  }
  explicit ArrayBuffer(const std::vector<Entry>& entries)
      : ArrayBuffer(static_cast<uint32_t>(entries.size())) {
    std::memcpy(first(), entries.data(), entries.size() * sizeof(Entry));
  }
  void* data() { return words_.get(); }
  kvm_abi::ArrayHeader* header() { return reinterpret_cast<kvm_abi::ArrayHeader*>(words_.get()); }
  std::vector<Entry> Entries() {
    std::vector<Entry> entries(header()->count);
    std::memcpy(entries.data(), first(), entries.size() * sizeof(Entry));
    return entries;
  }

 private:
  uint8_t* first() {
    return reinterpret_cast<uint8_t*>(words_.get()) + sizeof(kvm_abi::ArrayHeader);
  }
  std::unique_ptr<uint64_t[]> words_;
};

}  // namespace

absl::StatusOr<Kvm> Kvm::Open(const std::string& path) {
  sys_util::ScopedFd fd(open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s does not exist: this host has no KVM (enable virtualization, load kvm_intel/kvm_amd)",
          path));
    }
    if (err == EACCES || err == EPERM) {
      return absl::PermissionDeniedError(absl::StrFormat(
          "cannot open %s: %s (run as root or join the group that owns it, usually 'kvm')", path,
          strerror(err)));
    }
    return absl::FailedPreconditionError(
        absl::StrFormat("cannot open %s: %s", path, strerror(err)));
  }
  const int version = ioctl(fd.get(), KVM_GET_API_VERSION, 0);
  if (version != KVM_API_VERSION) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s reports KVM API version %d, this VMM needs %d", path, version, KVM_API_VERSION));
  }
  for (const auto& required : kRequiredCapabilities) {
    if (ioctl(fd.get(), KVM_CHECK_EXTENSION, required.capability) <= 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("KVM on this host lacks %s", required.name));
    }
  }
  const int mmap_size = ioctl(fd.get(), KVM_GET_VCPU_MMAP_SIZE, 0);
  if (mmap_size <= 0) return IoctlError("KVM_GET_VCPU_MMAP_SIZE");
  return Kvm(std::move(fd), static_cast<size_t>(mmap_size));
}

int Kvm::CheckExtension(int capability) const {
  const int value = ioctl(fd_.get(), KVM_CHECK_EXTENSION, capability);
  return value < 0 ? 0 : value;
}

absl::StatusOr<std::vector<kvm_cpuid_entry2>> Kvm::GetSupportedCpuid() const {
  // KVM fails with E2BIG when the buffer is too small; grow until it fits.
  for (uint32_t capacity = 128; capacity <= 4096; capacity *= 2) {
    ArrayBuffer<kvm_cpuid_entry2> buffer(capacity);
    if (ioctl(fd_.get(), kvm_abi::kGetSupportedCpuid, buffer.data()) == 0) {
      return buffer.Entries();
    }
    if (errno != E2BIG) return IoctlError("KVM_GET_SUPPORTED_CPUID");
  }
  return absl::InternalError("KVM_GET_SUPPORTED_CPUID: too many entries");
}

absl::StatusOr<VmFd> Kvm::CreateVm() const {
  int fd;
  // KVM_CREATE_VM can fail transiently with EINTR while the host is busy.
  do {
    fd = ioctl(fd_.get(), KVM_CREATE_VM, 0);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return IoctlError("KVM_CREATE_VM");
  return VmFd(sys_util::ScopedFd(fd), vcpu_mmap_size_);
}

absl::Status VmFd::SetUserMemoryRegion(uint32_t slot, uint64_t guest_address, uint64_t size,
                                       void* host_address, bool read_only) {
  kvm_userspace_memory_region region{};
  region.slot = slot;
  region.flags = read_only ? KVM_MEM_READONLY : 0;
  region.guest_phys_addr = guest_address;
  region.memory_size = size;
  region.userspace_addr = reinterpret_cast<uint64_t>(host_address);
  if (ioctl(fd_.get(), KVM_SET_USER_MEMORY_REGION, &region) < 0) {
    return IoctlError("KVM_SET_USER_MEMORY_REGION");
  }
  return absl::OkStatus();
}

absl::Status VmFd::SetTssAddress(uint64_t address) {
  if (ioctl(fd_.get(), KVM_SET_TSS_ADDR, static_cast<unsigned long>(address)) < 0) {
    return IoctlError("KVM_SET_TSS_ADDR");
  }
  return absl::OkStatus();
}

absl::Status VmFd::SetIdentityMapAddress(uint64_t address) {
  if (ioctl(fd_.get(), KVM_SET_IDENTITY_MAP_ADDR, &address) < 0) {
    return IoctlError("KVM_SET_IDENTITY_MAP_ADDR");
  }
  return absl::OkStatus();
}

absl::Status VmFd::CreateIrqchip() {
  if (ioctl(fd_.get(), KVM_CREATE_IRQCHIP, 0) < 0) return IoctlError("KVM_CREATE_IRQCHIP");
  return absl::OkStatus();
}

absl::Status VmFd::CreatePit2() {
  kvm_pit_config config{};
  // KVM_PIT_SPEAKER_DUMMY: port 0x61 reads are served in the kernel, as Linux's PIT calibration needs.
  config.flags = KVM_PIT_SPEAKER_DUMMY;
  if (ioctl(fd_.get(), KVM_CREATE_PIT2, &config) < 0) return IoctlError("KVM_CREATE_PIT2");
  return absl::OkStatus();
}

absl::Status VmFd::SetIrqLine(uint32_t irq, bool level) {
  kvm_irq_level irq_level{};
  irq_level.irq = irq;
  irq_level.level = level ? 1 : 0;
  if (ioctl(fd_.get(), KVM_IRQ_LINE, &irq_level) < 0) return IoctlError("KVM_IRQ_LINE");
  return absl::OkStatus();
}

absl::Status VmFd::SetGsiRouting(const std::vector<kvm_irq_routing_entry>& entries) {
  ArrayBuffer<kvm_irq_routing_entry> buffer(entries);
  if (ioctl(fd_.get(), kvm_abi::kSetGsiRouting, buffer.data()) < 0) {
    return IoctlError("KVM_SET_GSI_ROUTING");
  }
  return absl::OkStatus();
}

absl::Status VmFd::RegisterIrqfd(int event_fd, uint32_t gsi) {
  kvm_irqfd irqfd{};
  irqfd.fd = static_cast<uint32_t>(event_fd);
  irqfd.gsi = gsi;
  if (ioctl(fd_.get(), KVM_IRQFD, &irqfd) < 0) return IoctlError("KVM_IRQFD");
  return absl::OkStatus();
}

absl::Status VmFd::UnregisterIrqfd(int event_fd, uint32_t gsi) {
  kvm_irqfd irqfd{};
  irqfd.fd = static_cast<uint32_t>(event_fd);
  irqfd.gsi = gsi;
  irqfd.flags = KVM_IRQFD_FLAG_DEASSIGN;
  if (ioctl(fd_.get(), KVM_IRQFD, &irqfd) < 0) return IoctlError("KVM_IRQFD (deassign)");
  return absl::OkStatus();
}

namespace {

kvm_ioeventfd IoeventfdFor(int event_fd, const VmFd::IoEventSpec& spec) {
  kvm_ioeventfd ioeventfd{};
  ioeventfd.addr = spec.address;
  ioeventfd.len = spec.length;
  ioeventfd.fd = event_fd;
  if (spec.pio) ioeventfd.flags |= KVM_IOEVENTFD_FLAG_PIO;
  if (spec.datamatch) {
    ioeventfd.flags |= KVM_IOEVENTFD_FLAG_DATAMATCH;
    ioeventfd.datamatch = *spec.datamatch;
  }
  return ioeventfd;
}

}  // namespace

absl::Status VmFd::RegisterIoeventfd(int event_fd, const IoEventSpec& spec) {
  kvm_ioeventfd ioeventfd = IoeventfdFor(event_fd, spec);
  if (ioctl(fd_.get(), KVM_IOEVENTFD, &ioeventfd) < 0) return IoctlError("KVM_IOEVENTFD");
  return absl::OkStatus();
}

absl::Status VmFd::UnregisterIoeventfd(int event_fd, const IoEventSpec& spec) {
  kvm_ioeventfd ioeventfd = IoeventfdFor(event_fd, spec);
  ioeventfd.flags |= KVM_IOEVENTFD_FLAG_DEASSIGN;
  if (ioctl(fd_.get(), KVM_IOEVENTFD, &ioeventfd) < 0) {
    return IoctlError("KVM_IOEVENTFD (deassign)");
  }
  return absl::OkStatus();
}

absl::Status VmFd::RegisterCoalescedPio(uint16_t port, uint32_t size) {
  kvm_coalesced_mmio_zone zone{};
  zone.addr = port;
  zone.size = size;
  zone.pio = 1;
  if (ioctl(fd_.get(), KVM_REGISTER_COALESCED_MMIO, &zone) < 0) {
    return IoctlError("KVM_REGISTER_COALESCED_MMIO (port I/O)");
  }
  return absl::OkStatus();
}

absl::StatusOr<VcpuFd> VmFd::CreateVcpu(uint32_t id) {
  sys_util::ScopedFd fd(ioctl(fd_.get(), KVM_CREATE_VCPU, static_cast<unsigned long>(id)));
  if (!fd.valid()) return IoctlError("KVM_CREATE_VCPU");
  void* run = mmap(nullptr, vcpu_mmap_size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (run == MAP_FAILED) return IoctlError("mmap of kvm_run");
  return VcpuFd(std::move(fd), id, static_cast<kvm_run*>(run), vcpu_mmap_size_);
}

kvm_abi::CoalescedRing* VcpuFd::CoalescedRing(int page_offset) const {
  const size_t page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (page_offset <= 0 || (static_cast<size_t>(page_offset) + 1) * page_size > run_size_) {
    return nullptr;
  }
  return reinterpret_cast<kvm_abi::CoalescedRing*>(reinterpret_cast<char*>(run_) +
                                                   page_offset * page_size);
}

VcpuFd::~VcpuFd() {
  if (run_ != nullptr) munmap(run_, run_size_);
}

VcpuFd::VcpuFd(VcpuFd&& other) noexcept
    : fd_(std::move(other.fd_)),
      id_(other.id_),
      run_(std::exchange(other.run_, nullptr)),
      run_size_(other.run_size_) {}

absl::Status VcpuFd::Run() {
  if (ioctl(fd_.get(), KVM_RUN, 0) == 0) return absl::OkStatus();
  if (errno == EINTR || errno == EAGAIN) return absl::AbortedError("KVM_RUN interrupted");
  return IoctlError("KVM_RUN");
}

bool VcpuFd::SyncGeneralRegistersOnExit(int sync_regs_capability) {
  if ((sync_regs_capability & KVM_SYNC_X86_REGS) == 0) return false;
  run_->kvm_valid_regs = KVM_SYNC_X86_REGS;
  return true;
}

absl::StatusOr<kvm_regs> VcpuFd::GetRegs() const {
  kvm_regs regs{};
  if (ioctl(fd_.get(), KVM_GET_REGS, &regs) < 0) return IoctlError("KVM_GET_REGS");
  return regs;
}

absl::Status VcpuFd::SetRegs(const kvm_regs& regs) {
  if (ioctl(fd_.get(), KVM_SET_REGS, &regs) < 0) return IoctlError("KVM_SET_REGS");
  return absl::OkStatus();
}

absl::StatusOr<kvm_sregs> VcpuFd::GetSregs() const {
  kvm_sregs sregs{};
  if (ioctl(fd_.get(), KVM_GET_SREGS, &sregs) < 0) return IoctlError("KVM_GET_SREGS");
  return sregs;
}

absl::Status VcpuFd::SetSregs(const kvm_sregs& sregs) {
  if (ioctl(fd_.get(), KVM_SET_SREGS, &sregs) < 0) return IoctlError("KVM_SET_SREGS");
  return absl::OkStatus();
}

absl::Status VcpuFd::SetFpu(const kvm_fpu& fpu) {
  if (ioctl(fd_.get(), KVM_SET_FPU, &fpu) < 0) return IoctlError("KVM_SET_FPU");
  return absl::OkStatus();
}

absl::Status VcpuFd::SetCpuid(const std::vector<kvm_cpuid_entry2>& entries) {
  ArrayBuffer<kvm_cpuid_entry2> buffer(entries);
  if (ioctl(fd_.get(), kvm_abi::kSetCpuid2, buffer.data()) < 0) return IoctlError("KVM_SET_CPUID2");
  return absl::OkStatus();
}

absl::Status VcpuFd::SetXcr0(uint64_t xcr0) {
  kvm_xcrs xcrs{};
  xcrs.nr_xcrs = 1;
  xcrs.xcrs[0].xcr = 0;  // XCR0, SDM Vol. 1 13.3
  xcrs.xcrs[0].value = xcr0;
  if (ioctl(fd_.get(), KVM_SET_XCRS, &xcrs) < 0) return IoctlError("KVM_SET_XCRS");
  return absl::OkStatus();
}

absl::Status VcpuFd::SetMsrs(const std::vector<kvm_msr_entry>& msrs) {
  ArrayBuffer<kvm_msr_entry> buffer(msrs);
  // KVM_SET_MSRS returns the number of MSRs it set; fewer means one was rejected.
  const int set = ioctl(fd_.get(), kvm_abi::kSetMsrs, buffer.data());
  if (set < 0) return IoctlError("KVM_SET_MSRS");
  if (static_cast<size_t>(set) != msrs.size()) {
    return absl::InternalError(
        absl::StrFormat("KVM_SET_MSRS rejected MSR 0x%x", msrs[static_cast<size_t>(set)].index));
  }
  return absl::OkStatus();
}

absl::StatusOr<kvm_lapic_state> VcpuFd::GetLapic() const {
  kvm_lapic_state lapic{};
  if (ioctl(fd_.get(), KVM_GET_LAPIC, &lapic) < 0) return IoctlError("KVM_GET_LAPIC");
  return lapic;
}

absl::Status VcpuFd::SetLapic(const kvm_lapic_state& lapic) {
  if (ioctl(fd_.get(), KVM_SET_LAPIC, &lapic) < 0) return IoctlError("KVM_SET_LAPIC");
  return absl::OkStatus();
}

std::string VcpuFd::DumpRegisters() const {
  auto regs = GetRegs();
  auto sregs = GetSregs();
  if (!regs.ok() || !sregs.ok()) {
    return absl::StrFormat("vCPU %u: registers unavailable (%s)", id_,
                           (!regs.ok() ? regs.status() : sregs.status()).ToString());
  }
  return absl::StrFormat(
      "vCPU %u registers:\n"
      "  rip=%016x rsp=%016x rflags=%016x\n"
      "  rax=%016x rbx=%016x rcx=%016x rdx=%016x\n"
      "  rsi=%016x rdi=%016x rbp=%016x\n"
      "  r8 =%016x r9 =%016x r10=%016x r11=%016x\n"
      "  r12=%016x r13=%016x r14=%016x r15=%016x\n"
      "  cs=%04x (dpl %u, l %u, db %u) ss=%04x ds=%04x es=%04x\n"
      "  cr0=%016x cr2=%016x cr3=%016x cr4=%016x efer=%016x\n"
      "  gdt=%016x/%04x idt=%016x/%04x tr=%04x",
      id_, regs->rip, regs->rsp, regs->rflags, regs->rax, regs->rbx, regs->rcx, regs->rdx,
      regs->rsi, regs->rdi, regs->rbp, regs->r8, regs->r9, regs->r10, regs->r11, regs->r12,
      regs->r13, regs->r14, regs->r15, sregs->cs.selector, sregs->cs.dpl, sregs->cs.l, sregs->cs.db,
      sregs->ss.selector, sregs->ds.selector, sregs->es.selector, sregs->cr0, sregs->cr2,
      sregs->cr3, sregs->cr4, sregs->efer, sregs->gdt.base, sregs->gdt.limit, sregs->idt.base,
      sregs->idt.limit, sregs->tr.selector);
}

}  // namespace vmm

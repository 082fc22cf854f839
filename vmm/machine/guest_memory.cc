#include "vmm/machine/guest_memory.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_format.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {

namespace {

// x86-64's large page size: the unit of transparent huge pages and of KVM's large NPT/EPT entries.
constexpr uint64_t kHugePageSize = uint64_t{2} << 20;
// Guest RAM below this stays in small pages (see GuestMemoryRegion::Create).
constexpr uint64_t kSmallPageLimit = uint64_t{4} << 20;

absl::Status CheckRegionPlacement(GuestAddress start, uint64_t size) {
  if (size == 0 || size % kPageSize != 0 || start.value() % kPageSize != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("guest memory region at 0x%x of 0x%x bytes is not page aligned or empty",
                        start.value(), size));
  }
  GuestAddress end;
  if (!start.CheckedAdd(size, &end) || end.value() == 0) {
    return absl::InvalidArgumentError("guest memory region wraps around the address space");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> GuestMemoryRegion::Create(GuestAddress start,
                                                                             uint64_t size) {
  RETURN_IF_ERROR(CheckRegionPlacement(start, size));
  // MAP_NORESERVE: guest RAM is touched lazily; the kernel need not reserve swap for all of it.
  // One huge page more than asked for, so that the region can start where a huge page would.
  const uint64_t reserved = size + kHugePageSize;
  void* mapped = mmap(nullptr, reserved, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mapped == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot map %u MiB of guest memory: %s", size >> 20, strerror(errno)));
  }
  // KVM maps guest memory with 2 MiB pages in the nested page tables only where the host backs it
  // with a huge page and the host and guest addresses agree modulo 2 MiB; with 4 KiB mappings each
  // page the guest touches first costs an exit (a nested page fault). So the host address gets the
  // guest address's offset within a huge page, and transparent huge pages are asked for (as QEMU
  // does for guest RAM). Measured with Linux in the nested tier: reading a 128 MiB CD took about
  // 32,000 such exits before, against about 3,800 exits in all for QEMU (docs/bench-linux.md).
  const uintptr_t base = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t skew = (start.value() - base) & (kHugePageSize - 1);
  uint8_t* host = static_cast<uint8_t*>(mapped) + skew;
  if (skew != 0) munmap(mapped, skew);
  munmap(host + size, kHugePageSize - skew);  // never empty: skew < kHugePageSize
  // EINVAL: a kernel without transparent huge pages; the region works the same with small pages.
  madvise(host, size, MADV_HUGEPAGE);
  // Except the first 4 MiB of the guest's address space: the real-mode area, the VMM's boot
  // structures and firmware tables, and where boot images land at 1 MiB (a bzImage's compressed
  // kernel, read once while Linux decompresses itself to 16 MiB; a PVH ELF kernel such as the test
  // guest, 3 MiB with its bss). Guests touch it sparsely, and Linux allocates from the top of RAM
  // down. Small pages there keep a small guest small: the test guest's hello run held two huge
  // pages (4 MiB of RSS) for a few hundred KiB it touched; Linux pays at most 1,024 more nested
  // page faults, once.
  if (start.value() < kSmallPageLimit) {
    madvise(host, std::min<uint64_t>(size, kSmallPageLimit - start.value()), MADV_NOHUGEPAGE);
  }
  return std::unique_ptr<GuestMemoryRegion>(
      new GuestMemoryRegion(start, size, host, /*private_anonymous=*/true));
}

absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> GuestMemoryRegion::CreateFromFile(
    GuestAddress start, uint64_t size, int fd, uint64_t file_offset) {
  RETURN_IF_ERROR(CheckRegionPlacement(start, size));
  if (file_offset % kPageSize != 0 || file_offset + size < file_offset) {
    return absl::InvalidArgumentError(
        absl::StrFormat("guest memory region at 0x%x: file offset 0x%x is not page aligned",
                        start.value(), file_offset));
  }
  // A mapping past the end of the file would fault (SIGBUS) on first touch: refuse it up front.
  struct stat file_status {};
  if (fstat(fd, &file_status) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory at 0x%x: bad file descriptor: %s", start.value(), strerror(errno)));
  }
  // Regular files only (memfd, tmpfs, hugetlbfs): other mappable descriptors (devices, a KVM
  // vCPU) have their own rules about what may be touched. A file shrunk after this check (an
  // unsealed memfd, a tmpfs file) would still fault: QEMU seals its memfds against shrinking.
  if (!S_ISREG(file_status.st_mode)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory at 0x%x: the descriptor is not a regular file", start.value()));
  }
  // A file its owner shrinks under our mapping makes our next access to it fault, and SIGBUS ends
  // the process (H3 of docs/security.md: a front end truncated an unsealed memfd and kicked).
  // Only memory its owner cannot shrink is accepted: a memfd sealed with F_SEAL_SHRINK, which
  // QEMU's memory-backend-memfd does by default (seal=on).
  // Huge pages (hugetlbfs, a memfd made with MFD_HUGETLB) are allocated from a fixed pool when
  // first touched; a page the pool cannot give, or one its owner punched out again (fallocate
  // FALLOC_FL_PUNCH_HOLE, which F_SEAL_SHRINK does not prevent), faults with SIGBUS on our next
  // access, ending the process (H4 of docs/security.md). Ordinary memfd pages come from
  // the page allocator and never fault that way, so only those are accepted.
  struct statfs file_system {};
  if (fstatfs(fd, &file_system) != 0 || file_system.f_type == HUGETLBFS_MAGIC) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory at 0x%x: huge-page memory (hugetlbfs, MFD_HUGETLB) is not accepted: a page "
        "missing from the pool would fault in this process; share guest RAM as an ordinary "
        "memfd (QEMU: memory-backend-memfd without hugetlb=on)",
        start.value()));
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory at 0x%x: the file is not sealed against shrinking (F_SEAL_SHRINK); share "
        "guest RAM as a sealed memfd (QEMU: memory-backend-memfd, seal=on)",
        start.value()));
  }
  if (file_offset + size > static_cast<uint64_t>(file_status.st_size)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "guest memory at 0x%x: 0x%x bytes at file offset 0x%x run past the file's end (0x%x)",
        start.value(), size, file_offset, file_status.st_size));
  }
  // MAP_SHARED: the other process's stores must be visible here and ours there.
  void* host = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd,
                    static_cast<off_t>(file_offset));
  if (host == MAP_FAILED) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot map guest memory at 0x%x (0x%x bytes at file offset 0x%x): %s",
                        start.value(), size, file_offset, strerror(errno)));
  }
  return std::unique_ptr<GuestMemoryRegion>(
      new GuestMemoryRegion(start, size, static_cast<uint8_t*>(host), /*private_anonymous=*/false));
}

GuestMemoryRegion::~GuestMemoryRegion() { munmap(host_, size_); }

absl::StatusOr<GuestMemory> GuestMemory::Create(
    std::vector<std::unique_ptr<GuestMemoryRegion>> regions) {
  if (regions.empty()) return absl::InvalidArgumentError("guest memory needs at least one region");
  std::sort(regions.begin(), regions.end(),
            [](const auto& a, const auto& b) { return a->start() < b->start(); });
  for (size_t i = 1; i < regions.size(); ++i) {
    if (regions[i]->start() < regions[i - 1]->end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("guest memory regions at 0x%x and 0x%x overlap",
                          regions[i - 1]->start().value(), regions[i]->start().value()));
    }
  }
  GuestMemory memory;
  memory.regions_ = std::move(regions);
  return memory;
}

absl::StatusOr<GuestMemory> GuestMemory::CreateX86(uint64_t ram_bytes) {
  if (ram_bytes < kMinimumRamBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("guest memory of %u bytes is too small (at least %u MiB)", ram_bytes,
                        kMinimumRamBytes >> 20));
  }
  if (ram_bytes % kPageSize != 0) {
    return absl::InvalidArgumentError("guest memory size must be a multiple of 4 KiB");
  }
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  const uint64_t low = std::min(ram_bytes, kMmioHoleStart);
  ASSIGN_OR_RETURN(std::unique_ptr<GuestMemoryRegion> low_region,
                   GuestMemoryRegion::Create(GuestAddress(0), low));
  regions.push_back(std::move(low_region));
  if (ram_bytes > low) {
    ASSIGN_OR_RETURN(std::unique_ptr<GuestMemoryRegion> high_region,
                     GuestMemoryRegion::Create(GuestAddress(kHighRamStart), ram_bytes - low));
    regions.push_back(std::move(high_region));
  }
  return Create(std::move(regions));
}

uint64_t GuestMemory::total_size() const {
  uint64_t total = 0;
  for (const auto& region : regions_) total += region->size();
  return total;
}

GuestAddress GuestMemory::end() const { return regions_.back()->end(); }

absl::StatusOr<std::span<uint8_t>> GuestMemory::GetHostSpan(GuestAddress address,
                                                            uint64_t length) const {
  for (const auto& region : regions_) {
    if (address < region->start() || address > region->end()) continue;
    const uint64_t offset = address.value() - region->start().value();
    if (length <= region->size() - offset) {
      return std::span<uint8_t>(region->host_address() + offset, length);
    }
  }
  return absl::OutOfRangeError(absl::StrFormat(
      "guest range [0x%x, +0x%x) is not inside guest memory", address.value(), length));
}

absl::Status GuestMemory::Read(GuestAddress address, std::span<uint8_t> out) const {
  ASSIGN_OR_RETURN(const std::span<uint8_t> host, GetHostSpan(address, out.size()));
  if (!out.empty()) std::memcpy(out.data(), host.data(), out.size());
  return absl::OkStatus();
}

absl::Status GuestMemory::Write(GuestAddress address, std::span<const uint8_t> data) const {
  ASSIGN_OR_RETURN(const std::span<uint8_t> host, GetHostSpan(address, data.size()));
  if (!data.empty()) std::memcpy(host.data(), data.data(), data.size());
  return absl::OkStatus();
}

absl::Status GuestMemory::Zero(GuestAddress address, uint64_t length) const {
  ASSIGN_OR_RETURN(const std::span<uint8_t> host, GetHostSpan(address, length));
  if (length == 0) return absl::OkStatus();
  const auto region = std::find_if(regions_.begin(), regions_.end(), [&](const auto& r) {
    return r->host_address() <= host.data() && host.data() < r->host_address() + r->size();
  });
  uintptr_t begin = reinterpret_cast<uintptr_t>(host.data());
  const uintptr_t end = begin + length;
  if (region != regions_.end() && (*region)->private_anonymous()) {
    // Whole pages go back to the kernel (madvise(2): private anonymous pages read as zeros
    // afterwards); only the partial pages at either end are written.
    const uintptr_t first_page = (begin + kPageSize - 1) & ~uintptr_t{kPageSize - 1};
    const uintptr_t last_page = end & ~uintptr_t{kPageSize - 1};
    if (first_page < last_page &&
        madvise(reinterpret_cast<void*>(first_page), last_page - first_page, MADV_DONTNEED) == 0) {
      std::memset(reinterpret_cast<void*>(begin), 0, first_page - begin);
      begin = last_page;
    }
  }
  std::memset(reinterpret_cast<void*>(begin), 0, end - begin);
  return absl::OkStatus();
}

}  // namespace vmm

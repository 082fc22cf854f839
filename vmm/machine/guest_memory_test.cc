#include "vmm/machine/guest_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/machine/layout.h"

namespace vmm {
namespace {

GuestMemory TwoRegions() {
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0x10000), 0x2000));
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0x0), 0x4000));
  return *GuestMemory::Create(std::move(regions));
}

TEST(GuestMemoryTest, RegionsAreSortedAndSized) {
  GuestMemory memory = TwoRegions();
  ASSERT_EQ(memory.regions().size(), 2u);
  EXPECT_EQ(memory.regions()[0]->start().value(), 0u);
  EXPECT_EQ(memory.total_size(), 0x6000u);
  EXPECT_EQ(memory.end().value(), 0x12000u);
}

TEST(GuestMemoryTest, RejectsOverlapAndMisalignment) {
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0), 0x4000));
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0x3000), 0x2000));
  EXPECT_FALSE(GuestMemory::Create(std::move(regions)).ok());
  EXPECT_FALSE(GuestMemoryRegion::Create(GuestAddress(0x10), 0x1000).ok());
  EXPECT_FALSE(GuestMemoryRegion::Create(GuestAddress(0), 0x1001).ok());
  EXPECT_FALSE(GuestMemoryRegion::Create(GuestAddress(0), 0).ok());
  EXPECT_FALSE(GuestMemoryRegion::Create(GuestAddress(0xfffffffffffff000ull), 0x1000).ok());
}

TEST(GuestMemoryTest, ReadWriteRoundTrip) {
  GuestMemory memory = TwoRegions();
  ASSERT_TRUE(memory.WriteObject<uint64_t>(GuestAddress(0x3ff8), 0x1122334455667788ull).ok());
  auto value = memory.ReadObject<uint64_t>(GuestAddress(0x3ff8));
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(*value, 0x1122334455667788ull);
  std::array<uint8_t, 4> bytes = {1, 2, 3, 4};
  ASSERT_TRUE(memory.Write(GuestAddress(0x11ffc), bytes).ok());
  std::array<uint8_t, 4> back{};
  ASSERT_TRUE(memory.Read(GuestAddress(0x11ffc), back).ok());
  EXPECT_EQ(back, bytes);
  ASSERT_TRUE(memory.Zero(GuestAddress(0x11ffc), 4).ok());
  ASSERT_TRUE(memory.Read(GuestAddress(0x11ffc), back).ok());
  EXPECT_EQ(back, (std::array<uint8_t, 4>{}));
}

TEST(GuestMemoryTest, BoundsChecks) {
  GuestMemory memory = TwoRegions();
  // Wholly inside, touching the end.
  EXPECT_TRUE(memory.IsValidRange(GuestAddress(0x3000), 0x1000));
  // One byte past the first region's end.
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x3000), 0x1001));
  // In the gap between regions.
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x8000), 1));
  // Spanning the gap into the second region.
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x3fff), 0xc002));
  // Past the last region.
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x12000), 1));
  // Huge lengths that would wrap an unchecked end computation.
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x10), std::numeric_limits<uint64_t>::max()));
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(std::numeric_limits<uint64_t>::max()), 2));
  // Empty ranges at a region's end are fine; reads and writes of out-of-range objects fail.
  EXPECT_TRUE(memory.IsValidRange(GuestAddress(0x4000), 0));
  EXPECT_FALSE(memory.ReadObject<uint32_t>(GuestAddress(0x3ffe)).ok());
  EXPECT_FALSE(memory.WriteObject<uint32_t>(GuestAddress(0x11ffe), 7).ok());
  auto status = memory.Write(GuestAddress(0x9000), std::array<uint8_t, 1>{1});
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange);
}

TEST(GuestMemoryTest, X86LayoutSplitsAroundTheMmioHole) {
  auto small = GuestMemory::CreateX86(64ull << 20);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->regions().size(), 1u);
  auto large = GuestMemory::CreateX86(kMmioHoleStart + (64ull << 20));
  ASSERT_TRUE(large.ok());
  ASSERT_EQ(large->regions().size(), 2u);
  EXPECT_EQ(large->regions()[1]->start().value(), kHighRamStart);
  EXPECT_EQ(large->regions()[1]->size(), 64ull << 20);
  EXPECT_FALSE(large->IsValidRange(GuestAddress(kMmioHoleStart), 1));
  EXPECT_FALSE(GuestMemory::CreateX86(1 << 20).ok());
}

// The VMA flags ("VmFlags: rd wr ... hg") of the mapping that holds `address`, from smaps.
std::string VmFlagsOf(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t target = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 &&
        line.find(':') > line.find(' ')) {
      inside = target >= begin && target < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// KVM can map guest RAM with 2 MiB nested-page-table entries only where host and guest addresses
// agree modulo 2 MiB (and the host page is huge): each region is placed so, and asks for THP.
TEST(GuestMemoryTest, RegionsAreHugePageFriendly) {
  constexpr uint64_t kHuge = 2 << 20;
  for (uint64_t start : {uint64_t{0}, uint64_t{0x10000}, uint64_t{3} << 20, kHighRamStart}) {
    auto region = GuestMemoryRegion::Create(GuestAddress(start), 8 << 20);
    ASSERT_TRUE(region.ok()) << region.status();
    const uintptr_t host = reinterpret_cast<uintptr_t>((*region)->host_address());
    EXPECT_EQ(host % kHuge, start % kHuge) << std::hex << start;
    // The whole region is usable (no part of it was unmapped with the alignment slack).
    (*region)->host_address()[0] = 1;
    (*region)->host_address()[(8 << 20) - 1] = 2;
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", R_OK) == 0) {
      // Huge pages asked for, except below guest address 4 MiB (small pages there: "nh").
      const uint64_t first_huge = std::max(start, 2 * kHuge) - start;
      EXPECT_NE(VmFlagsOf((*region)->host_address() + first_huge).find(" hg"), std::string::npos)
          << std::hex << start << ": " << VmFlagsOf((*region)->host_address() + first_huge);
      if (start < 2 * kHuge) {
        EXPECT_NE(VmFlagsOf((*region)->host_address()).find(" nh"), std::string::npos)
            << std::hex << start << ": " << VmFlagsOf((*region)->host_address());
      }
    }
  }
}

// Zero() writes the partial pages at either end and gives whole pages of anonymous RAM back to
// the kernel: the range reads as zeros, the bytes around it are kept, and the whole pages are no
// longer resident (a loader clearing a large .bss costs no RSS).
TEST(GuestMemoryTest, ZeroKeepsNeighboursAndReleasesWholePages) {
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0), 64 * 4096));
  GuestMemory memory = *GuestMemory::Create(std::move(regions));
  uint8_t* host = memory.regions()[0]->host_address();
  std::memset(host, 0xab, 64 * 4096);
  const uint64_t begin = 4096 + 100, end = 40 * 4096 + 7;
  ASSERT_TRUE(memory.Zero(GuestAddress(begin), end - begin).ok());
  // Pages 2..39 were released (checked before anything reads them again); the edge pages stay.
  std::vector<unsigned char> resident(64);
  ASSERT_EQ(mincore(host, 64 * 4096, resident.data()), 0);
  for (int page = 2; page < 40; ++page) EXPECT_FALSE(resident[page] & 1) << page;
  EXPECT_TRUE(resident[1] & 1);
  EXPECT_TRUE(resident[40] & 1);
  for (uint64_t i = 0; i < 64 * 4096; ++i) {
    ASSERT_EQ(host[i], (i >= begin && i < end) ? 0 : 0xab) << i;
  }
}

TEST(GuestMemoryTest, FileRegionIsSharedWithTheFile) {
  const int fd = memfd_create("guest-memory-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 0x6000), 0);
  // Not sealed yet: refused (its owner could shrink it under the mapping: SIGBUS).
  EXPECT_FALSE(GuestMemoryRegion::CreateFromFile(GuestAddress(0x100000), 0x4000, fd, 0x2000).ok());
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  // Another process's view of the same memory, as a vhost-user front end maps it.
  void* other = mmap(nullptr, 0x6000, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ASSERT_NE(other, MAP_FAILED);
  auto region = GuestMemoryRegion::CreateFromFile(GuestAddress(0x100000), 0x4000, fd, 0x2000);
  ASSERT_TRUE(region.ok()) << region.status();
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*std::move(region));
  GuestMemory memory = *GuestMemory::Create(std::move(regions));
  static_cast<uint8_t*>(other)[0x2000 + 0x10] = 0xab;
  EXPECT_EQ(*memory.ReadObject<uint8_t>(GuestAddress(0x100010)), 0xab);
  ASSERT_TRUE(memory.WriteObject<uint8_t>(GuestAddress(0x103fff), 0x5a).ok());
  EXPECT_EQ(static_cast<uint8_t*>(other)[0x5fff], 0x5a);
  EXPECT_FALSE(memory.IsValidRange(GuestAddress(0x104000), 1));

  // Past the file's end (would fault on touch), unaligned offsets and bad fds are refused.
  EXPECT_FALSE(GuestMemoryRegion::CreateFromFile(GuestAddress(0), 0x6000, fd, 0x1000).ok());
  EXPECT_FALSE(GuestMemoryRegion::CreateFromFile(GuestAddress(0), 0x1000, fd, 0x800).ok());
  EXPECT_FALSE(GuestMemoryRegion::CreateFromFile(GuestAddress(0), 0x1000, -1, 0).ok());
  // The attack of H3 (docs/security.md): truncating the sealed file fails, so the mapping stays.
  EXPECT_NE(ftruncate(fd, 0), 0);
  EXPECT_EQ(*memory.ReadObject<uint8_t>(GuestAddress(0x100010)), 0xab);
  munmap(other, 0x6000);
  close(fd);
}

// A huge-page memfd, sealed, with no huge page behind it (none reserved, or one its owner punched
// out): mapping it would hand us a SIGBUS at the first touch. Refused before any mapping.
TEST(GuestMemoryTest, HugePageMemoryIsRefused) {
  const int fd = memfd_create("guest-memory-huge", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB);
  ASSERT_GE(fd, 0) << "memfd_create(MFD_HUGETLB): " << strerror(errno);
  ASSERT_EQ(ftruncate(fd, 2 << 20), 0);
  ASSERT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto region = GuestMemoryRegion::CreateFromFile(GuestAddress(0x200000), 2 << 20, fd, 0);
  EXPECT_EQ(region.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(region.status().message().find("huge-page memory"), std::string::npos)
      << region.status();
  close(fd);
}

}  // namespace
}  // namespace vmm

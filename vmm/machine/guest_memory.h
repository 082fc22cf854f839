#ifndef VMM_MACHINE_GUEST_MEMORY_H_
#define VMM_MACHINE_GUEST_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vmm {

// A guest-physical address. A distinct type so host pointers, offsets and guest addresses do not mix.
class GuestAddress {
 public:
  constexpr GuestAddress() = default;
  constexpr explicit GuestAddress(uint64_t value) : value_(value) {}
  constexpr uint64_t value() const { return value_; }

  // Returns false when adding `offset` would wrap around the 64-bit address space.
  constexpr bool CheckedAdd(uint64_t offset, GuestAddress* out) const {
    if (value_ + offset < value_) return false;
    *out = GuestAddress(value_ + offset);
    return true;
  }
  constexpr GuestAddress operator+(uint64_t offset) const { return GuestAddress(value_ + offset); }
  constexpr auto operator<=>(const GuestAddress&) const = default;

 private:
  uint64_t value_ = 0;
};

// One contiguous range of guest RAM, mapped into this process (unmapped on destruction).
class GuestMemoryRegion {
 public:
  // Anonymous private memory: the VMM's own guest RAM.
  static absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> Create(GuestAddress start,
                                                                   uint64_t size);
  // `size` bytes of the file `fd` (a memfd, hugetlbfs or tmpfs file) from `file_offset`, mapped
  // shared: RAM another process owns, as a vhost-user front end hands it over (SET_MEM_TABLE).
  // Start, size and offset must be page aligned; the caller may close `fd` afterwards.
  static absl::StatusOr<std::unique_ptr<GuestMemoryRegion>> CreateFromFile(GuestAddress start,
                                                                           uint64_t size, int fd,
                                                                           uint64_t file_offset);
  ~GuestMemoryRegion();
  GuestMemoryRegion(const GuestMemoryRegion&) = delete;
  GuestMemoryRegion& operator=(const GuestMemoryRegion&) = delete;

  GuestAddress start() const { return start_; }
  uint64_t size() const { return size_; }
  // One past the last byte. Regions never end at 2^64 (Create rejects that).
  GuestAddress end() const { return start_ + size_; }
  uint8_t* host_address() const { return host_; }
  bool private_anonymous() const { return private_anonymous_; }
  bool Contains(GuestAddress address) const {
    return address >= start_ && address.value() - start_.value() < size_;
  }

 private:
  GuestMemoryRegion(GuestAddress start, uint64_t size, uint8_t* host, bool private_anonymous)
      : start_(start), size_(size), host_(host), private_anonymous_(private_anonymous) {}
  GuestAddress start_;
  uint64_t size_;
  uint8_t* host_;
  // Create()'s memory: a page given back (MADV_DONTNEED) reads as zeros. Not so for a file's.
  bool private_anonymous_;
};

// Guest RAM: a set of non-overlapping regions. Every access is bounds-checked: a range is usable only
// if it lies wholly inside one region. A guest (or a guest-supplied descriptor) can never make the
// VMM touch host memory outside the guest's mappings through this class.
class GuestMemory {
 public:
  // Regions must not overlap; they are kept sorted by address.
  static absl::StatusOr<GuestMemory> Create(
      std::vector<std::unique_ptr<GuestMemoryRegion>> regions);
  // The x86 layout: RAM below 3 GiB, the rest above 4 GiB (docs/machine.md).
  static absl::StatusOr<GuestMemory> CreateX86(uint64_t ram_bytes);

  GuestMemory(GuestMemory&&) = default;
  GuestMemory& operator=(GuestMemory&&) = default;

  const std::vector<std::unique_ptr<GuestMemoryRegion>>& regions() const { return regions_; }
  uint64_t total_size() const;
  // Highest guest address + 1 of any region.
  GuestAddress end() const;

  // The host bytes for [address, address + length), or OutOfRange if any part is outside guest RAM
  // or the range spans two regions. length 0 is allowed (returns an empty span when `address` is
  // inside or at the end of a region).
  absl::StatusOr<std::span<uint8_t>> GetHostSpan(GuestAddress address, uint64_t length) const;
  bool IsValidRange(GuestAddress address, uint64_t length) const {
    return GetHostSpan(address, length).ok();
  }

  absl::Status Read(GuestAddress address, std::span<uint8_t> out) const;
  absl::Status Write(GuestAddress address, std::span<const uint8_t> data) const;
  // Fills [address, address + length) with zeros. Whole pages of the VMM's own (anonymous) RAM
  // are given back to the kernel instead of written, so zeroing a large .bss costs no RSS.
  absl::Status Zero(GuestAddress address, uint64_t length) const;

  template <typename T>
  absl::StatusOr<T> ReadObject(GuestAddress address) const {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    absl::Status status =
        Read(address, std::span<uint8_t>(reinterpret_cast<uint8_t*>(&value), sizeof(T)));
    if (!status.ok()) return status;
    return value;
  }
  template <typename T>
  absl::Status WriteObject(GuestAddress address, const T& value) const {
    static_assert(std::is_trivially_copyable_v<T>);
    return Write(address,
                 std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), sizeof(T)));
  }

 private:
  GuestMemory() = default;
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions_;
};

}  // namespace vmm

#endif  // VMM_MACHINE_GUEST_MEMORY_H_

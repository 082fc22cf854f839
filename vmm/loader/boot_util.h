#ifndef VMM_LOADER_BOOT_UTIL_H_
#define VMM_LOADER_BOOT_UTIL_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "vmm/machine/guest_memory.h"

// Helpers shared by the kernel, initrd and boot-structure writers. Internal to //vmm/loader.
namespace vmm::loader {

// `alignment` must be a power of two. AlignUp saturates instead of wrapping, so a hostile value
// near 2^64 cannot wrap around to a small address.
constexpr uint64_t AlignDown(uint64_t value, uint64_t alignment) {
  return value & ~(alignment - 1);
}
constexpr uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  const uint64_t up = value + (alignment - 1);
  return up < value ? AlignDown(UINT64_MAX, alignment) : AlignDown(up, alignment);
}

// The end (exclusive) of the RAM a kernel and its initrd may occupy: the region that holds 1 MiB,
// cut at 3 GiB (docs/machine.md: "0x0010_0000 – min(RAM, 3 GiB)"). Everything we load must stay
// below 4 GiB anyway: the PVH entry runs with paging off in 32-bit mode and the 64-bit entry's page
// tables identity-map only 0–4 GiB. FailedPrecondition if no RAM region contains 1 MiB.
absl::StatusOr<uint64_t> LowRamEnd(const GuestMemory& memory);

// InvalidArgument if `cmdline` contains a NUL (the guest would silently see only the part before
// it) or needs more than `max_bytes_with_nul` bytes with its terminating NUL.
absl::Status CheckCommandLine(std::string_view cmdline, uint64_t max_bytes_with_nul);

// CheckCommandLine(), then writes `cmdline` plus its terminating NUL at kCmdlineAddress.
absl::Status WriteCommandLine(const GuestMemory& memory, std::string_view cmdline,
                              uint64_t max_bytes_with_nul);

}  // namespace vmm::loader

#endif  // VMM_LOADER_BOOT_UTIL_H_

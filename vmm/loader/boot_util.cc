#include "vmm/loader/boot_util.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::loader {

absl::StatusOr<uint64_t> LowRamEnd(const GuestMemory& memory) {
  for (const auto& region : memory.regions()) {
    if (region->Contains(GuestAddress(kHighMemoryStart))) {
      return std::min(region->end().value(), kMmioHoleStart);
    }
  }
  return absl::FailedPreconditionError(
      "guest memory has no RAM at 1 MiB, where kernels and initrds are loaded");
}

absl::Status CheckCommandLine(std::string_view cmdline, uint64_t max_bytes_with_nul) {
  if (cmdline.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(
        "kernel command line contains a NUL byte; the guest would see only the part before it");
  }
  if (cmdline.size() + 1 > max_bytes_with_nul) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "kernel command line is %u bytes; at most %u fit (including the terminating NUL)",
        cmdline.size(), max_bytes_with_nul));
  }
  return absl::OkStatus();
}

absl::Status WriteCommandLine(const GuestMemory& memory, std::string_view cmdline,
                              uint64_t max_bytes_with_nul) {
  RETURN_IF_ERROR(CheckCommandLine(cmdline, max_bytes_with_nul));
  std::vector<uint8_t> bytes(cmdline.begin(), cmdline.end());
  bytes.push_back(0);
  return memory.Write(GuestAddress(kCmdlineAddress), bytes);
}

}  // namespace vmm::loader

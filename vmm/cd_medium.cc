#include "vmm/cd_medium.h"

#include "absl/strings/str_format.h"

namespace vmm {

absl::Status CheckCdMediumSize(uint64_t size_bytes, const std::string& path) {
  if (size_bytes >= kCdBlockBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d bytes is too small for a CD/DVD medium (the minimum is one %d-byte block)", path,
      size_bytes, kCdBlockBytes));
}

}  // namespace vmm

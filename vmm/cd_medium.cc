#include "vmm/cd_medium.h"

#include "absl/strings/str_format.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {

absl::Status CheckCdMediumSize(uint64_t size_bytes, const std::string& path) {
  if (size_bytes >= kCdBlockBytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: %d bytes is too small for a CD/DVD medium (the minimum is one %d-byte block)", path,
      size_bytes, kCdBlockBytes));
}

block::raw::RawFileOptions CdMediumFileOptions(unsigned queue_threads) {
  block::raw::RawFileOptions options;
  options.prepared_rings = queue_threads;
  options.cache_mode = block::CacheMode::kWriteback;
  options.read_only = true;
  options.sequential = true;
  return options;
}

absl::StatusOr<std::shared_ptr<block::BlockBackend>> AsCdMedium(
    absl::StatusOr<std::shared_ptr<block::BlockBackend>> opened, const std::string& path) {
  RETURN_IF_ERROR(opened.status());
  RETURN_IF_ERROR(CheckCdMediumSize((*opened)->info().size_bytes, path));
  return opened;
}

}  // namespace vmm

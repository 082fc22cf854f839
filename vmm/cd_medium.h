#ifndef VMM_CD_MEDIUM_H_
#define VMM_CD_MEDIUM_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "block/backend.h"
#include "block/raw/raw_file_backend.h"

namespace vmm {

// A CD/DVD medium is addressed in 2048-byte blocks (MMC-6 READ CAPACITY, ISO 9660 sectors).
inline constexpr uint64_t kCdBlockBytes = 2048;

// Whether a file of `size_bytes` can be a CD/DVD medium: it must hold at least one whole block.
// An empty or sub-block image would be a "ready" medium whose capacity is one block and whose
// block 0 cannot be read (QEMU reports such a medium as not ready); it is refused instead, the
// one rule for --cdrom, --ide-cdrom and the control API's Insert. InvalidArgument naming `path`,
// the size and the minimum. A longer image's tail short of a whole block is never addressed.
absl::Status CheckCdMediumSize(uint64_t size_bytes, const std::string& path);

// How every CD/DVD image is opened (--cdrom, --ide-cdrom, the API's Insert with or without
// --media-dir): read-only, through the page cache, with a ring ready for each of the
// `queue_threads` iothreads that may read it (RawFileOptions::prepared_rings).
block::raw::RawFileOptions CdMediumFileOptions(unsigned queue_threads);

// The image `opened` from `path` as a medium, or its open error, or CheckCdMediumSize's.
absl::StatusOr<std::shared_ptr<block::BlockBackend>> AsCdMedium(
    absl::StatusOr<std::shared_ptr<block::BlockBackend>> opened, const std::string& path);

}  // namespace vmm

#endif  // VMM_CD_MEDIUM_H_

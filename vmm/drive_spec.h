#ifndef VMM_DRIVE_SPEC_H_
#define VMM_DRIVE_SPEC_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "block/cache_mode.h"

namespace vmm {

// One drive from the command line:
//   --disk PATH[,cache=none|writeback|writethrough|directsync|unsafe][,fua=native|emulate][,readonly]
//   --cdrom [PATH]          (no path: an empty drive)
struct DriveSpec {
  enum class Kind { kDisk, kCdrom };
  Kind kind = Kind::kDisk;
  std::string path;  // empty for a CD-ROM without a medium
  block::CacheMode cache_mode = block::CacheMode::kWriteback;
  block::FuaMode fua_mode = block::FuaMode::kNative;
  bool read_only = false;
};

absl::StatusOr<DriveSpec> ParseDriveSpec(DriveSpec::Kind kind, absl::string_view text);

}  // namespace vmm

#endif  // VMM_DRIVE_SPEC_H_

#ifndef VMM_DRIVE_SPEC_H_
#define VMM_DRIVE_SPEC_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "block/cache_mode.h"

namespace vmm {

// One drive from the command line:
//   --disk PATH[,cache=none|writeback|writethrough|directsync|unsafe][,fua=native|emulate][,readonly]
//   --cdrom [PATH]          (no path: an empty drive; a host optical drive such as /dev/sr0, or
//                            host:PATH to insist on one, is passed through: block/host_cdrom.h)
//   --ide-disk PATH[,cache=...][,fua=...][,readonly][,channel=0|1][,unit=0|1]
//   --ide-cdrom [PATH][,channel=0|1][,unit=0|1]
// --disk and --cdrom go on the virtio-scsi controller, --ide-* on the PIIX3 IDE controller.
struct DriveSpec {
  enum class Kind { kDisk, kCdrom };
  enum class Bus { kScsi, kIde };
  Kind kind = Kind::kDisk;
  Bus bus = Bus::kScsi;
  // IDE placement: channel 0 (primary) or 1 (secondary), unit 0 (master) or 1 (slave). Unset: the
  // first free place, CD-ROMs from the secondary master as QEMU's -cdrom, disks from the primary.
  std::optional<int> ide_channel;
  std::optional<int> ide_unit;
  // CD-ROMs (benchmarks): serve the ISO through a simulated host optical drive whose status probe
  // takes this long (",probe-delay-us=N"), behind the host CD-ROM backend, to show the I/O path
  // never probes. Unset: a plain read-only file.
  std::optional<int64_t> probe_delay_us;
  // CD-ROMs: "host:PATH" was given: PATH must be a host optical drive (else an error). Without it, a
  // PATH that is a block device answering as a CD-ROM drive is passed through too, and any other
  // path is an image file.
  bool host_drive = false;
  std::string path;  // empty for a CD-ROM without a medium
  block::CacheMode cache_mode = block::CacheMode::kWriteback;
  block::FuaMode fua_mode = block::FuaMode::kNative;
  bool read_only = false;
};

absl::StatusOr<DriveSpec> ParseDriveSpec(DriveSpec::Kind kind, absl::string_view text,
                                         DriveSpec::Bus bus = DriveSpec::Bus::kScsi);

}  // namespace vmm

#endif  // VMM_DRIVE_SPEC_H_

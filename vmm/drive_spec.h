#ifndef VMM_DRIVE_SPEC_H_
#define VMM_DRIVE_SPEC_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "block/cache_mode.h"
#include "block/throttle.h"

namespace vmm {

// One drive from the command line:
//   --disk PATH[,cache=none|writeback|writethrough|directsync|unsafe][,fua=auto|native|emulate][,readonly]
//   --cdrom [PATH]          (no path: an empty drive; a host optical drive such as /dev/sr0, or
//                            host:PATH to insist on one, is passed through: block/host_cdrom.h)
//   --ide-disk PATH[,cache=...][,fua=...][,readonly][,channel=0|1][,unit=0|1]
//   --ide-cdrom [PATH][,channel=0|1][,unit=0|1]
// and on every one of them ,id=NAME and the I/O limits ,iops=N ,bps=N[K|M|G] ,burst=SECONDS
// ,group=NAME (block/throttle.h; a group is an --io-group). --disk and --cdrom go on the
// virtio-scsi controller, --ide-* on the PIIX3 IDE controller.
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
  // The path as the command line gave it (before it was made absolute; with "host:" if given),
  // for messages: the user recognises what they typed.
  std::string given_path;
  block::CacheMode cache_mode = block::CacheMode::kWriteback;
  block::FuaMode fua_mode = block::FuaMode::kAuto;
  bool read_only = false;
  // ",id=NAME": the drive's name in the API, vmmctl and messages. Empty: its position among the
  // drives of its kind, "disk0", "cd1" (counting named ones too, so naming a drive renames no
  // other).
  std::string id;
  // ",iops=", ",bps=", ",burst=": the drive's own I/O limits (unlimited by default).
  block::IoLimits limits;
  // ",group=NAME": the --io-group whose budget the drive shares.
  std::string group;
};

// One --io-group=NAME,iops=N,bps=N[K|M|G],burst=SECONDS: a budget drives share (",group=NAME").
struct IoGroupSpec {
  std::string name;
  block::IoLimits limits;
};
absl::StatusOr<IoGroupSpec> ParseIoGroupSpec(absl::string_view text);

// Whether `id` may name a drive: 1 to 32 letters, digits, '.', '_' or '-', starting with a letter.
bool IsValidDriveId(absl::string_view id);

// Errors name the flag and the text: "--ide-cdrom=a.iso,unit=2: unit must be 0 or 1, not \"2\"".
absl::StatusOr<DriveSpec> ParseDriveSpec(DriveSpec::Kind kind, absl::string_view text,
                                         DriveSpec::Bus bus = DriveSpec::Bus::kScsi);

// The flag a drive comes from: "--disk", "--cdrom", "--ide-disk" or "--ide-cdrom".
const char* DriveFlag(DriveSpec::Kind kind, DriveSpec::Bus bus);
inline const char* DriveFlag(const DriveSpec& spec) { return DriveFlag(spec.kind, spec.bus); }

// `status`, an error about the file `path` that `flag` named (typed as `given`), reworded to lead
// with the flag and the value: a message that starts with `path` (as the block layer's and the
// loaders' do: "PATH: no such file", "PATH is a directory") has it replaced by "--flag=given"; a
// leading "open PATH" or "--flag PATH" likewise. A message that mentions `path` elsewhere gets
// "--flag=given: " in front. One that already starts "--flag=given", any other (not about this
// input) and an OK status come back unchanged; the code is always kept.
absl::Status NameTheFlag(absl::string_view flag, const std::string& given, const std::string& path,
                         const absl::Status& status);

// NameTheFlag for a drive's file: "--ide-cdrom=a.iso: no such file or directory". A message that
// does not mention the file is prefixed all the same: every error of a drive names its flag.
absl::Status DriveError(const DriveSpec& spec, const absl::Status& status);

}  // namespace vmm

#endif  // VMM_DRIVE_SPEC_H_

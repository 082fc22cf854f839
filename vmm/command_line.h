#ifndef VMM_COMMAND_LINE_H_
#define VMM_COMMAND_LINE_H_

// Command-line handling shared by the VMM's binaries (microvm, vhost-user-scsi).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vmm/drive_spec.h"

namespace vmm {

// Parses "256", "256M", "1G", "65536K" into bytes; a bare number is MiB, as QEMU's -m.
bool ParseMemorySize(absl::string_view text, uint64_t* bytes);

// absl flags are named with underscores; users type dashes (--cpu-features, --dump-dtb), as with
// QEMU and Firecracker. Copies argv into `storage`, rewriting the name part of every
// "--name[=value]" argument so both spellings work.
void NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage);

// Takes every --disk, --cdrom, --ide-disk and --ide-cdrom out of `args` (they repeat, which absl
// flags do not), in order, as NormalizeFlagNames left them.
absl::StatusOr<std::vector<DriveSpec>> ExtractDriveFlags(std::vector<std::string>& args);

// The three above in order, then absl::ParseCommandLine on what is left (which exits on unknown
// flags or --help): the flags are set, and the drives are returned in command-line order.
absl::StatusOr<std::vector<DriveSpec>> ParseFlagsAndDrives(int argc, char** argv);

}  // namespace vmm

#endif  // VMM_COMMAND_LINE_H_

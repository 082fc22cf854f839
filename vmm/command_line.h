#ifndef VMM_COMMAND_LINE_H_
#define VMM_COMMAND_LINE_H_

// Command-line handling shared by the VMM's binaries (microvm, vhost-user-scsi): flags with dash
// names, repeatable drive flags, --help, and errors in one style, "--flag=value: what is wrong
// (what to do)", which each binary prints after its name. docs/errors.md lists them.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "vmm/drive_spec.h"
#include "vmm/sys_util/scoped_fd.h"

namespace vmm {

// --memory: "256" (a bare number is MiB, as QEMU's -m), "256M", "1G", "1T", "65536K". At least
// 16 MiB (kMinimumRamBytes), a multiple of 4 KiB, at most kMaxMemoryBytes. InvalidArgument naming
// the flag and the value otherwise.
inline constexpr uint64_t kMaxMemoryBytes = 8ull << 40;
absl::StatusOr<uint64_t> ParseMemorySize(absl::string_view text);

// `value` of `flag` ("--vcpus") within [min, max]; InvalidArgument "--vcpus=0: ..." saying the
// range and, if given, why it is what it is.
absl::Status CheckRange(absl::string_view flag, int64_t value, int64_t min, int64_t max,
                        absl::string_view why = "");

// An input file the VMM reads whole (--kernel, --initrd): it must exist, be readable, be a regular
// file and not be empty. Checked before /dev/kvm is opened, so that a typo is reported as such.
// `flag` and `given` (the value as typed) lead the message: "--kernel=vmlinuz: no such file".
absl::Status CheckInputFile(absl::string_view flag, const std::string& given,
                            const std::string& path);

// absl flags are named with underscores; users type dashes (--cpu-features, --dump-dtb), as with
// QEMU and Firecracker. Copies argv into `storage`, rewriting the name part of every
// "--name[=value]" argument so both spellings work.
void NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage);

// Takes every --disk, --cdrom, --ide-disk and --ide-cdrom before a "--" out of `args` (they repeat,
// which absl flags do not), in order, as NormalizeFlagNames left them. Errors as ParseDriveSpec's.
absl::StatusOr<std::vector<DriveSpec>> ExtractDriveFlags(std::vector<std::string>& args);
// Likewise every --io-group (ParseIoGroupSpec); a group name given twice is an error.
absl::StatusOr<std::vector<IoGroupSpec>> ExtractIoGroupFlags(std::vector<std::string>& args);

// What --help shows of one binary: its flags in groups, each flag's help text and default taken
// from its ABSL_FLAG definition.
struct HelpFlag {
  const char* name;   // as typed: "api-socket"
  const char* value;  // the placeholder after '=': "PATH"; "" for a switch (a bool flag)
};
struct HelpGroup {
  const char* title;  // "Machine"
  std::vector<HelpFlag> flags;
};
struct ProgramHelp {
  std::string program;  // "microvm"
  std::string summary;  // one line: what the binary does
  std::string usage;    // the synopsis after "usage: "
  std::vector<HelpGroup> groups;
  std::string epilogue;  // after the flags (exit statuses, where the docs are)
};

// The --help text: every flag of `help.groups` with dash names, its help text and its default
// (omitted when empty). Flags the binary defines but no group lists follow under "Other flags"
// (a test checks the binaries have none); Abseil's own flags are left to --helpfull.
std::string HelpText(const ProgramHelp& help);

// The flags defined in this binary outside Abseil, with dash names, sorted.
std::vector<std::string> DefinedFlagNames();

struct ParsedCommandLine {
  // What was asked for instead of a run, answered on stdout with exit status 0; nothing else was
  // parsed: --help or -h (HelpText()), --helpfull (the same, then Abseil's own flags), --version
  // (sys_util::VersionText()).
  enum class Request { kRun, kHelp, kHelpFull, kVersion };
  Request request = Request::kRun;
  // The drive flags, in command-line order, their paths made absolute (sys_util::AbsolutePath).
  std::vector<DriveSpec> drives;
  std::vector<IoGroupSpec> io_groups;  // --io-group
};

// Parses argv: --help/-h first; then the drive flags (ExtractDriveFlags); then every other
// "--name=value", "--name value", "--switch", "--switch=false" or "--noswitch" against the
// binary's flags, names with dashes or underscores. Errors name the flag and the value as typed:
// an unknown flag (with the nearest known name), a missing value, a value of the wrong type, an
// argument that is not a flag, a setting given twice, a drive flag with one dash (QEMU's
// -cdrom). Abseil's own flags (--flagfile, ...) go to absl::ParseCommandLine.
absl::StatusOr<ParsedCommandLine> ParseFlagsAndDrives(int argc, char** argv);

// A launcher's first steps, the same in microvm and vhost-user-scsi: every inherited descriptor
// above stderr closed (sys_util::CloseInheritedDescriptors), small thread stacks (before
// any thread exists: vmm/thread_stacks.h), argv parsed (ParseFlagsAndDrives), and with --help the
// help text printed to stdout (the result's `request` is then not kRun: exit 0); likewise
// --helpfull and --version.
absl::StatusOr<ParsedCommandLine> StartLauncher(int argc, char** argv, const ProgramHelp& help);

// Blocks SIGINT, SIGTERM and SIGHUP for the calling thread and every thread it starts from now on (call
// before the first), and returns a non-blocking signalfd that reads them: a launcher's main loop
// stops the VMM on them.
absl::StatusOr<sys_util::ScopedFd> StopSignalFd();

}  // namespace vmm

#endif  // VMM_COMMAND_LINE_H_

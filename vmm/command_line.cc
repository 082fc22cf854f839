#include "vmm/command_line.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vmm/machine/layout.h"
#include "vmm/sys_util/descriptors.h"
#include "vmm/sys_util/host_path.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"
#include "vmm/sys_util/version.h"
#include "vmm/thread_stacks.h"

namespace vmm {
namespace {

std::string Dashed(absl::string_view name) {
  std::string dashed(name);
  std::replace(dashed.begin(), dashed.end(), '_', '-');
  return dashed;
}

std::string Underscored(absl::string_view name) {
  std::string underscored(name);
  std::replace(underscored.begin(), underscored.end(), '-', '_');
  return underscored;
}

// Abseil's own flags (--helpfull, --version, --flagfile, ...) are defined in its sources.
bool IsAbseilFlag(const absl::CommandLineFlag& flag) {
  return absl::StrContains(flag.Filename(), "absl/");
}

// Abseil's parser answers these itself (absl/flags/parse.cc, DeduceUsageFlags): they are not
// registered flags.
bool IsAbseilUsageFlag(absl::string_view name) {
  for (const char* usage :
       {"helpfull", "helppackage", "helpon", "helpmatch", "version", "only_check_args"}) {
    if (name == usage) return true;
  }
  return false;
}

bool IsHelpRequest(const std::string& arg) {
  // As NormalizeFlagNames left them; --helpshort too (Abseil's would match no flag of ours).
  return arg == "--help" || arg == "-h" || arg == "-help" || arg == "--helpshort";
}

// Edit distance, for "did you mean".
size_t Distance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// QEMU's spellings of what the launchers call otherwise (a QEMU user types these first).
const char* QemuEquivalent(absl::string_view dashed) {
  static constexpr std::pair<const char*, const char*> kQemu[] = {
      {"m", "--memory"},
      {"smp", "--vcpus"},
      {"append", "--cmdline"},
      {"drive", "--disk or --cdrom"},
      {"hda", "--ide-disk"},
      {"hdb", "--ide-disk"},
      {"hdc", "--ide-cdrom"},
      {"hdd", "--ide-disk"},
      {"nographic", "--serial=stdout (the default)"},
      {"enable-kvm", "nothing (KVM is always used)"},
      {"qmp", "--api-socket (a gRPC API: vmmctl)"}};
  for (const auto& [qemu, ours] : kQemu) {
    if (dashed == qemu) return ours;
  }
  return nullptr;
}

std::string UnknownFlag(absl::string_view program, const std::string& name) {
  const std::string dashed = Dashed(name);
  if (const char* ours = QemuEquivalent(dashed)) {
    return absl::StrCat("--", dashed, ": unknown flag (QEMU's -", dashed, " is ", ours, " here; ",
                        program, " --help lists them all)");
  }
  std::string nearest;
  size_t best = 3;  // at most two edits away
  std::vector<std::string> known = DefinedFlagNames();
  for (const char* drive : {"disk", "cdrom", "ide-disk", "ide-cdrom"}) known.push_back(drive);
  for (const std::string& candidate : known) {
    const size_t distance = Distance(dashed, candidate);
    if (distance < best) {
      best = distance;
      nearest = candidate;
    }
  }
  return absl::StrCat("--", dashed, ": unknown flag (",
                      nearest.empty() ? "" : absl::StrCat("did you mean --", nearest, "? "),
                      program, " --help lists them all)");
}

// What a flag of this type expects, for a value it did not take. A whole number's range is the
// one its help states ("1 to 40", checked after parsing: CheckRange), else its type's.
std::string Expected(const absl::CommandLineFlag& flag, const std::string& error) {
  if (flag.IsOfType<bool>()) return "expected true or false";
  if (flag.IsOfType<uint32_t>() || flag.IsOfType<uint64_t>() || flag.IsOfType<int32_t>() ||
      flag.IsOfType<int64_t>()) {
    const std::vector<std::string> words =
        absl::StrSplit(flag.Help(), absl::ByAnyChar(" ,;()."), absl::SkipEmpty());
    for (size_t i = 0; i + 2 < words.size(); ++i) {
      int64_t low = 0;
      int64_t high = 0;
      if (words[i + 1] == "to" && absl::SimpleAtoi(words[i], &low) &&
          absl::SimpleAtoi(words[i + 2], &high)) {
        return absl::StrFormat("expected a whole number from %d to %d", low, high);
      }
    }
  }
  if (flag.IsOfType<uint32_t>()) return "expected a whole number from 0 to 4294967295";
  if (flag.IsOfType<uint64_t>()) return "expected a whole number >= 0";
  if (flag.IsOfType<int32_t>() || flag.IsOfType<int64_t>()) return "not a whole number";
  if (flag.IsOfType<double>()) return "not a number";
  return error;
}

// Wraps `text` to `width` columns, each line indented by `indent` spaces.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// --helpfull's second part: Abseil's own flags, which --help leaves out.
std::string AbseilFlagsHelp() {
  std::string text = "Abseil's own flags:\n";
  std::vector<std::pair<std::string, const absl::CommandLineFlag*>> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && IsAbseilFlag(*flag)) flags.emplace_back(std::string(name), flag);
  }
  std::sort(flags.begin(), flags.end());
  for (const auto& [name, flag] : flags) {
    absl::StrAppend(&text, "  --", name, "\n");
    std::string help = flag->Help();
    if (!flag->DefaultValue().empty())
      absl::StrAppend(&help, " Default: ", flag->DefaultValue(), ".");
    absl::StrAppend(&text, Wrap(help, 6, 100));
  }
  return text;
}

std::string FlagHelp(const HelpFlag& entry) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(Underscored(entry.name));
  std::string usage = absl::StrCat("  --", entry.name);
  std::string help = "(not defined in this binary)";
  std::string default_value;
  if (flag != nullptr) {
    help = flag->Help();
    default_value = flag->DefaultValue();
    if (flag->IsOfType<bool>()) {
      // A switch that is on by default is turned off with =false.
      if (default_value == "true") absl::StrAppend(&usage, "=true|false");
      if (default_value == "false") default_value.clear();
    }
  }
  // "PATH" reads "--kernel=PATH"; "[=PATH]" (an optional value) is appended as it is.
  if (*entry.value != '\0') absl::StrAppend(&usage, *entry.value == '[' ? "" : "=", entry.value);
  if (!default_value.empty()) absl::StrAppend(&help, " Default: ", default_value, ".");
  return absl::StrCat(usage, "\n", Wrap(help, 6, 100));
}

}  // namespace

absl::StatusOr<uint64_t> ParseMemorySize(absl::string_view text) {
  const std::string typed = absl::StrCat("--memory=", text);
  absl::string_view digits = text;
  uint64_t multiplier = 1ull << 20;
  if (!digits.empty()) {
    switch (absl::ascii_toupper(digits.back())) {
      case 'K':
        multiplier = 1ull << 10;
        break;
      case 'M':
        multiplier = 1ull << 20;
        break;
      case 'G':
        multiplier = 1ull << 30;
        break;
      case 'T':
        multiplier = 1ull << 40;
        break;
      default:
        multiplier = 0;
        break;
    }
    if (multiplier != 0) {
      digits.remove_suffix(1);
    } else {
      multiplier = 1ull << 20;
    }
  }
  uint64_t value = 0;
  if (digits.empty() || !absl::ascii_isdigit(digits[0]) || !absl::SimpleAtoi(digits, &value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        typed, ": not a size (a number of MiB, or with K, M, G or T: 256, 512M, 2G, 1T)"));
  }
  if (value > kMaxMemoryBytes / multiplier) {
    return absl::InvalidArgumentError(absl::StrCat(typed, ": more than the maximum, ",
                                                   kMaxMemoryBytes >> 40,
                                                   "T (KVM's largest memory slot)"));
  }
  const uint64_t bytes = value * multiplier;
  if (bytes < kMinimumRamBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(typed, ": less than the minimum, ", kMinimumRamBytes >> 20, "M"));
  }
  if (bytes % kPageSize != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(typed, ": not a multiple of ", kPageSize >> 10, "K (the page size)"));
  }
  return bytes;
}

absl::Status CheckRange(absl::string_view flag, int64_t value, int64_t min, int64_t max,
                        absl::string_view why) {
  if (value >= min && value <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s=%d: must be %d to %d%s", flag, value, min, max,
                      why.empty() ? "" : absl::StrCat(" (", why, ")")));
}

absl::Status CheckInputFile(absl::string_view flag, const std::string& given,
                            const std::string& path) {
  const std::string named = absl::StrCat(flag, "=", given);
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR) {
      return absl::NotFoundError(absl::StrCat(named, ": no such file"));
    }
    return absl::ErrnoToStatus(error, absl::StrCat(named, ": cannot read it: ", strerror(error)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        named, S_ISDIR(st.st_mode) ? ": a directory, not a file" : ": not a regular file"));
  }
  // O_NONBLOCK: nothing here may wait (the file was regular a moment ago; it may not be now).
  sys_util::ScopedFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) {
    const int error = errno;
    return absl::ErrnoToStatus(error,
                               absl::StrCat(named, ": cannot open for reading: ", strerror(error)));
  }
  if (st.st_size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(named, ": the file is empty"));
  }
  return absl::OkStatus();
}

void NormalizeFlagNames(int argc, char** argv, std::vector<std::string>& storage) {
  storage.assign(argv, argv + argc);
  for (size_t i = 1; i < storage.size(); ++i) {
    std::string& arg = storage[i];
    if (arg == "--") break;
    if (arg.size() <= 2 || arg[0] != '-' || arg[1] != '-') continue;
    const size_t name_end = std::min(arg.find('='), arg.size());
    std::replace(arg.begin() + 2, arg.begin() + static_cast<std::ptrdiff_t>(name_end), '-', '_');
  }
}

absl::StatusOr<std::vector<DriveSpec>> ExtractDriveFlags(std::vector<std::string>& args) {
  std::vector<DriveSpec> drives;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    // Names as NormalizeFlagNames left them (dashes inside a name became underscores).
    static constexpr struct {
      const char* name;
      DriveSpec::Kind kind;
      DriveSpec::Bus bus;
    } kDriveFlags[] = {
        {"--disk", DriveSpec::Kind::kDisk, DriveSpec::Bus::kScsi},
        {"--cdrom", DriveSpec::Kind::kCdrom, DriveSpec::Bus::kScsi},
        {"--ide_disk", DriveSpec::Kind::kDisk, DriveSpec::Bus::kIde},
        {"--ide_cdrom", DriveSpec::Kind::kCdrom, DriveSpec::Bus::kIde},
    };
    const auto* flag =
        std::find_if(std::begin(kDriveFlags), std::end(kDriveFlags), [&](const auto& f) {
          const std::string name = f.name;
          return arg == name || absl::StartsWith(arg, name + "=");
        });
    if (flag == std::end(kDriveFlags)) {
      rest.push_back(arg);
      continue;
    }
    const std::string name = flag->name;
    std::string value;
    if (arg.size() > name.size()) {
      value = arg.substr(name.size() + 1);
    } else if (i + 1 < args.size() && !absl::StartsWith(args[i + 1], "--")) {
      // "--disk PATH"; a bare --cdrom (last, or followed by another flag) is an empty drive.
      value = args[++i];
    }
    ASSIGN_OR_RETURN(DriveSpec spec, ParseDriveSpec(flag->kind, value, flag->bus));
    drives.push_back(std::move(spec));
  }
  args = std::move(rest);
  return drives;
}

absl::StatusOr<std::vector<IoGroupSpec>> ExtractIoGroupFlags(std::vector<std::string>& args) {
  std::vector<IoGroupSpec> groups;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      rest.insert(rest.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    std::string value;
    if (absl::StartsWith(arg, "--io_group=")) {
      value = arg.substr(strlen("--io_group="));
    } else if (arg == "--io_group") {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError("--io-group: needs a value (--io-group=NAME,iops=N,...)");
      }
      value = args[++i];
    } else {
      rest.push_back(arg);
      continue;
    }
    ASSIGN_OR_RETURN(IoGroupSpec group, ParseIoGroupSpec(value));
    for (const IoGroupSpec& earlier : groups) {
      if (earlier.name == group.name) {
        return absl::InvalidArgumentError(
            absl::StrFormat("--io-group=%s: the group %s is already defined", value, group.name));
      }
    }
    groups.push_back(std::move(group));
  }
  args = std::move(rest);
  return groups;
}

std::vector<std::string> DefinedFlagNames() {
  std::vector<std::string> names;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->IsRetired() || IsAbseilFlag(*flag)) continue;
    names.push_back(Dashed(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string HelpText(const ProgramHelp& help) {
  std::string text =
      absl::StrCat(help.program, ": ", help.summary, "\n\nusage: ", help.usage, "\n");
  std::set<std::string> listed;
  for (const HelpGroup& group : help.groups) {
    absl::StrAppend(&text, "\n", group.title, ":\n");
    for (const HelpFlag& flag : group.flags) {
      listed.insert(flag.name);
      absl::StrAppend(&text, FlagHelp(flag));
    }
  }
  std::vector<std::string> others;
  for (const std::string& name : DefinedFlagNames()) {
    if (listed.count(name) == 0) others.push_back(name);
  }
  if (!others.empty()) {
    absl::StrAppend(&text, "\nOther flags:\n");
    for (const std::string& name : others)
      absl::StrAppend(&text, FlagHelp({name.c_str(), "VALUE"}));
  }
  absl::StrAppend(&text, "\nHelp:\n  -h, --help\n", Wrap("This text.", 6, 100), "  --helpfull\n",
                  Wrap("This text, then Abseil's own flags.", 6, 100), "  --version\n",
                  Wrap("The version and the build (opt, fastbuild or dbg).", 6, 100));
  if (!help.epilogue.empty()) absl::StrAppend(&text, "\n", Wrap(help.epilogue, 0, 100));
  return text;
}

namespace {

// A drive flag with one dash (QEMU's "-cdrom disc.iso") is not a drive flag to ExtractDriveFlags;
// taken as a setting it would give a VM without that drive, silently.
absl::Status CheckOneDashDriveFlag(const std::string& name) {
  for (const char* drive : {"disk", "cdrom", "ide-disk", "ide-cdrom", "ide_disk", "ide_cdrom"}) {
    if (name == drive) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "-%s: a drive flag takes two dashes here (--%s=PATH; -%s is QEMU's spelling)", name,
          Dashed(name), name));
    }
  }
  return absl::OkStatus();
}

// The flag `name` names; --noswitch and --no-switch name the switch (negated), as Abseil's own
// parser takes --noswitch. nullptr when there is none.
absl::CommandLineFlag* FindSetting(const std::string& name, bool& negated) {
  negated = false;
  if (absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name)) return flag;
  if (!absl::StartsWith(name, "no")) return nullptr;
  absl::string_view positive = name;
  positive.remove_prefix(absl::StartsWith(name, "no_") ? 3 : 2);
  absl::CommandLineFlag* candidate = absl::FindCommandLineFlag(positive);
  if (candidate == nullptr || !candidate->IsOfType<bool>() || IsAbseilFlag(*candidate)) {
    return nullptr;
  }
  negated = true;
  return candidate;
}

}  // namespace

absl::StatusOr<ParsedCommandLine> ParseFlagsAndDrives(int argc, char** argv) {
  ParsedCommandLine parsed;
  std::vector<std::string> args;
  NormalizeFlagNames(argc, argv, args);
  std::string program = args.empty() ? "" : args[0];
  if (const size_t slash = program.rfind('/'); slash != std::string::npos) {
    program = program.substr(slash + 1);
  }
  // Help first: whatever else the line holds, help is what was asked for.
  for (size_t i = 1; i < args.size() && args[i] != "--"; ++i) {
    if (IsHelpRequest(args[i])) parsed.request = ParsedCommandLine::Request::kHelp;
    if (args[i] == "--helpfull") parsed.request = ParsedCommandLine::Request::kHelpFull;
    if (args[i] == "--version") parsed.request = ParsedCommandLine::Request::kVersion;
    if (parsed.request != ParsedCommandLine::Request::kRun) return parsed;
  }
  ASSIGN_OR_RETURN(parsed.drives, ExtractDriveFlags(args));
  ASSIGN_OR_RETURN(parsed.io_groups, ExtractIoGroupFlags(args));
  for (DriveSpec& drive : parsed.drives) drive.path = sys_util::AbsolutePath(drive.path);

  std::vector<std::string> for_abseil = {args.empty() ? std::string() : args[0]};
  std::map<std::string, std::string> given;  // flag -> as typed, for "given twice"
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--" && i + 1 < args.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unexpected argument \"%s\" after -- (%s takes --flags only)", args[i + 1], program));
    }
    if (arg == "--") break;
    absl::string_view body = arg;
    if (!absl::ConsumePrefix(&body, "--") &&
        !(body.size() > 1 && absl::ConsumePrefix(&body, "-"))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "unexpected argument \"%s\" (settings are --flag=value; %s --help lists them)", arg,
          program));
    }
    const size_t equals = body.find('=');
    const std::string name(body.substr(0, equals));
    const bool has_value = equals != absl::string_view::npos;
    if (!absl::StartsWith(arg, "--")) RETURN_IF_ERROR(CheckOneDashDriveFlag(name));
    std::string value = has_value ? std::string(body.substr(equals + 1)) : std::string();
    bool negated = false;
    absl::CommandLineFlag* flag = FindSetting(name, negated);
    if (flag == nullptr && IsAbseilUsageFlag(name)) {
      for_abseil.push_back(arg);
      continue;
    }
    if (flag == nullptr || flag->IsRetired()) {
      return absl::InvalidArgumentError(UnknownFlag(program, name));
    }
    if (IsAbseilFlag(*flag)) {
      for_abseil.push_back(arg);
      if (!has_value && !flag->IsOfType<bool>() && i + 1 < args.size()) {
        for_abseil.push_back(args[++i]);
      }
      continue;
    }
    const std::string shown = absl::StrCat("--", Dashed(name));
    if (negated) {
      if (has_value) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s=%s: takes no value (it turns a switch off)", shown, value));
      }
      value = "false";
    } else if (flag->IsOfType<bool>()) {
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: needs a value (%s=VALUE; %s --help says which)", shown, shown, program));
      }
      value = args[++i];
    }
    const std::string typed = negated ? shown : absl::StrCat(shown, "=", value);
    if (auto [previous, first] = given.emplace(flag->Name(), typed); !first) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s is given twice (%s, then %s): give each setting once",
                          Dashed(flag->Name()), previous->second, typed));
    }
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s=%s: %s", shown, value, Expected(*flag, error)));
    }
  }
  if (for_abseil.size() > 1) {
    // --helpfull prints this first.
    absl::SetProgramUsageMessage(
        absl::StrCat("every flag, Abseil's own included (", program, " --help: the usual ones)"));
    std::vector<char*> abseil_argv;
    for (std::string& arg : for_abseil) abseil_argv.push_back(arg.data());
    absl::ParseCommandLine(static_cast<int>(abseil_argv.size()), abseil_argv.data());
  }
  return parsed;
}

absl::StatusOr<ParsedCommandLine> StartLauncher(int argc, char** argv, const ProgramHelp& help) {
  RETURN_IF_ERROR(sys_util::CloseInheritedDescriptors());
  // Everything the launcher creates is its user's alone, for its whole life: the unix sockets are
  // bound at their paths already mode 0600 (api::CheckOwnerOnlyUmask), and the filter allows no
  // chmod and no umask change afterwards (docs/security.md). Set once, before any thread exists.
  umask(0177);
  RETURN_IF_ERROR(UseSmallThreadStacks());
  ASSIGN_OR_RETURN(ParsedCommandLine parsed, ParseFlagsAndDrives(argc, argv));
  switch (parsed.request) {
    case ParsedCommandLine::Request::kRun:
      break;
    case ParsedCommandLine::Request::kHelp:
      absl::PrintF("%s", HelpText(help));
      break;
    case ParsedCommandLine::Request::kHelpFull:
      absl::PrintF("%s\n%s", HelpText(help), AbseilFlagsHelp());
      break;
    case ParsedCommandLine::Request::kVersion:
      absl::PrintF("%s", sys_util::VersionText(help.program));
      break;
  }
  return parsed;
}

absl::StatusOr<sys_util::ScopedFd> StopSignalFd() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // the terminal went away: stop as cleanly as for SIGTERM
  if (int error = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); error != 0) {
    return sys_util::ErrnoStatus(error, "pthread_sigmask");
  }
  sys_util::ScopedFd signal_fd(signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signal_fd.valid()) return sys_util::ErrnoStatus(errno, "signalfd");
  return signal_fd;
}

}  // namespace vmm

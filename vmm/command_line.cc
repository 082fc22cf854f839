#include "vmm/command_line.h"

#include <algorithm>

#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace vmm {

// Parses "256", "256M", "1G", "65536K" into bytes; a bare number is MiB, as QEMU's -m.
bool ParseMemorySize(absl::string_view text, uint64_t* bytes) {
  uint64_t multiplier = 1ull << 20;
  if (absl::ConsumeSuffix(&text, "K") || absl::ConsumeSuffix(&text, "k")) {
    multiplier = 1ull << 10;
  } else if (absl::ConsumeSuffix(&text, "M") || absl::ConsumeSuffix(&text, "m")) {
    multiplier = 1ull << 20;
  } else if (absl::ConsumeSuffix(&text, "G") || absl::ConsumeSuffix(&text, "g")) {
    multiplier = 1ull << 30;
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value == 0 || value > (1ull << 50) / multiplier) {
    return false;
  }
  *bytes = value * multiplier;
  return true;
}

// absl flags are named with underscores; users type dashes (--cpu-features, --dump-dtb), as with
// QEMU and Firecracker. Accept both by rewriting the name part of every "--name[=value]" argument.
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

// Takes every --disk, --cdrom, --ide-disk and --ide-cdrom out of `args` (they repeat, which absl
// flags do not), in order.
absl::StatusOr<std::vector<DriveSpec>> ExtractDriveFlags(std::vector<std::string>& args) {
  std::vector<DriveSpec> drives;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
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
    const auto* flag = std::find_if(std::begin(kDriveFlags), std::end(kDriveFlags), [&](const auto& f) {
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
    auto spec = ParseDriveSpec(flag->kind, value, flag->bus);
    if (!spec.ok()) return spec.status();
    drives.push_back(*std::move(spec));
  }
  args = std::move(rest);
  return drives;
}

absl::StatusOr<std::vector<DriveSpec>> ParseFlagsAndDrives(int argc, char** argv) {
  std::vector<std::string> args;
  NormalizeFlagNames(argc, argv, args);
  auto drives = ExtractDriveFlags(args);
  if (!drives.ok()) return drives.status();
  std::vector<char*> normalized;
  for (std::string& arg : args) normalized.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(normalized.size()), normalized.data());
  return drives;
}

}  // namespace vmm

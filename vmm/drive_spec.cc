#include "vmm/drive_spec.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace vmm {

absl::StatusOr<DriveSpec> ParseDriveSpec(DriveSpec::Kind kind, absl::string_view text,
                                         DriveSpec::Bus bus) {
  DriveSpec spec;
  spec.kind = kind;
  spec.bus = bus;
  const bool ide = bus == DriveSpec::Bus::kIde;
  const char* flag = kind == DriveSpec::Kind::kDisk ? (ide ? "--ide-disk" : "--disk")
                                                    : (ide ? "--ide-cdrom" : "--cdrom");
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  spec.path = std::string(parts[0]);
  if (kind == DriveSpec::Kind::kDisk && spec.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " needs a path: ", flag, "=PATH[,...]"));
  }
  if (kind == DriveSpec::Kind::kCdrom) {
    spec.read_only = true;
    if (absl::StartsWith(spec.path, "host:")) {
      spec.host_drive = true;
      spec.path = spec.path.substr(5);
      if (spec.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, "=host:PATH needs the drive's device node, e.g. host:/dev/sr0"));
      }
    }
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view option = parts[i];
    std::pair<absl::string_view, absl::string_view> key_value = absl::StrSplit(option, '=');
    if (key_value.first == "cache" && kind == DriveSpec::Kind::kDisk) {
      auto mode = block::ParseCacheMode(key_value.second);
      if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", mode.status().message()));
      spec.cache_mode = *mode;
    } else if (key_value.first == "fua" && kind == DriveSpec::Kind::kDisk) {
      auto mode = block::ParseFuaMode(key_value.second);
      if (!mode.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", mode.status().message()));
      spec.fua_mode = *mode;
    } else if (ide && (key_value.first == "channel" || key_value.first == "unit")) {
      if (key_value.second != "0" && key_value.second != "1") {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": ", key_value.first, " must be 0 or 1, not \"", key_value.second, "\""));
      }
      (key_value.first == "channel" ? spec.ide_channel : spec.ide_unit) = key_value.second == "1";
    } else if (key_value.first == "probe-delay-us" && kind == DriveSpec::Kind::kCdrom) {
      int64_t delay = 0;
      if (!absl::SimpleAtoi(key_value.second, &delay) || delay < 0 || delay > 10'000'000) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": probe-delay-us must be 0..10000000, not \"", key_value.second, "\""));
      }
      spec.probe_delay_us = delay;
      if (spec.host_drive) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, ": probe-delay-us simulates a drive; it cannot go with host:"));
      }
    } else if (option == "readonly" || option == "ro") {
      spec.read_only = true;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": unknown option \"", option, "\" in \"", text, "\""));
    }
  }
  return spec;
}

}  // namespace vmm

#include "vmm/drive_spec.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace vmm {
namespace {

// The options a drive of this kind and bus takes, for "unknown option" messages.
const char* OptionsOf(DriveSpec::Kind kind, DriveSpec::Bus bus) {
  const bool ide = bus == DriveSpec::Bus::kIde;
  if (kind == DriveSpec::Kind::kDisk) {
    return ide ? "cache=, fua=, readonly, channel=, unit=, id=" : "cache=, fua=, readonly, id=";
  }
  return ide ? "channel=, unit=, probe-delay-us=, id=" : "probe-delay-us=, id=";
}

}  // namespace

bool IsValidDriveId(absl::string_view id) {
  if (id.empty() || id.size() > 32 || !absl::ascii_isalpha(static_cast<unsigned char>(id[0]))) {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
  });
}

const char* DriveFlag(DriveSpec::Kind kind, DriveSpec::Bus bus) {
  const bool ide = bus == DriveSpec::Bus::kIde;
  if (kind == DriveSpec::Kind::kDisk) return ide ? "--ide-disk" : "--disk";
  return ide ? "--ide-cdrom" : "--cdrom";
}

absl::StatusOr<DriveSpec> ParseDriveSpec(DriveSpec::Kind kind, absl::string_view text,
                                         DriveSpec::Bus bus) {
  DriveSpec spec;
  spec.kind = kind;
  spec.bus = bus;
  const bool ide = bus == DriveSpec::Bus::kIde;
  const std::string flag = DriveFlag(kind, bus);
  // Every message starts with what was typed: "--disk=d.img,turbo: ...".
  const std::string typed = text.empty() ? flag : absl::StrCat(flag, "=", text);
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  spec.path = std::string(parts[0]);
  spec.given_path = spec.path;
  if (kind == DriveSpec::Kind::kDisk && spec.path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(typed, ": needs the image's path (", flag,
                                                   "=PATH[,", OptionsOf(kind, bus), "])"));
  }
  if (kind == DriveSpec::Kind::kCdrom) {
    spec.read_only = true;
    if (absl::StartsWith(spec.path, "host:")) {
      spec.host_drive = true;
      spec.path = spec.path.substr(5);
      if (spec.path.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(typed, ": host: needs the drive's device node (host:/dev/sr0)"));
      }
    }
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view option = parts[i];
    std::pair<absl::string_view, absl::string_view> key_value = absl::StrSplit(option, '=');
    if (key_value.first == "cache" && kind == DriveSpec::Kind::kDisk) {
      auto mode = block::ParseCacheMode(key_value.second);
      if (!mode.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(typed, ": ", mode.status().message()));
      }
      spec.cache_mode = *mode;
    } else if (key_value.first == "fua" && kind == DriveSpec::Kind::kDisk) {
      auto mode = block::ParseFuaMode(key_value.second);
      if (!mode.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(typed, ": ", mode.status().message()));
      }
      spec.fua_mode = *mode;
    } else if (ide && (key_value.first == "channel" || key_value.first == "unit")) {
      if (key_value.second != "0" && key_value.second != "1") {
        return absl::InvalidArgumentError(absl::StrCat(
            typed, ": ", key_value.first, " must be 0 or 1, not \"", key_value.second, "\""));
      }
      (key_value.first == "channel" ? spec.ide_channel : spec.ide_unit) = key_value.second == "1";
    } else if (key_value.first == "probe-delay-us" && kind == DriveSpec::Kind::kCdrom) {
      int64_t delay = 0;
      if (!absl::SimpleAtoi(key_value.second, &delay) || delay < 0 || delay > 10'000'000) {
        return absl::InvalidArgumentError(absl::StrCat(
            typed, ": probe-delay-us must be 0..10000000, not \"", key_value.second, "\""));
      }
      spec.probe_delay_us = delay;
      if (spec.host_drive) {
        return absl::InvalidArgumentError(
            absl::StrCat(typed, ": probe-delay-us simulates a drive; it cannot go with host:"));
      }
    } else if (key_value.first == "id") {
      if (!IsValidDriveId(key_value.second)) {
        return absl::InvalidArgumentError(absl::StrCat(
            typed, ": id \"", key_value.second,
            "\" is not a drive name (1 to 32 letters, digits, '.', '_' or '-', starting with a letter)"));
      }
      spec.id = std::string(key_value.second);
    } else if (option == "readonly" || option == "ro") {
      spec.read_only = true;
    } else {
      const bool placement = key_value.first == "channel" || key_value.first == "unit";
      return absl::InvalidArgumentError(
          absl::StrCat(typed, ": unknown option \"", option, "\" (",
                       placement ? absl::StrCat("channel= and unit= place IDE drives: --ide-",
                                                kind == DriveSpec::Kind::kDisk ? "disk" : "cdrom")
                                 : absl::StrCat(flag, " takes ", OptionsOf(kind, bus)),
                       ")"));
    }
  }
  return spec;
}

absl::Status NameTheFlag(absl::string_view flag, const std::string& given, const std::string& path,
                         const absl::Status& status) {
  if (status.ok() || path.empty()) return status;
  const std::string named = absl::StrCat(flag, "=", given);
  absl::string_view message = status.message();
  if (absl::StartsWith(message, named)) return status;  // named already
  // "open PATH: Permission denied" (the raw backend's errno messages) and "--flag PATH: ..."
  // read as "PATH: ...".
  for (const std::string& lead : {std::string("open "), absl::StrCat(flag, " ")}) {
    absl::string_view rest = message;
    if (absl::ConsumePrefix(&rest, lead) && absl::StartsWith(rest, path)) message = rest;
  }
  if (absl::StartsWith(message, path)) {
    const absl::string_view after = message.substr(path.size());
    if (after.empty() || after[0] == ':' || after[0] == ' ') {
      return absl::Status(status.code(), absl::StrCat(named, after));
    }
  }
  if (absl::StrContains(status.message(), path)) {
    return absl::Status(status.code(), absl::StrCat(named, ": ", status.message()));
  }
  return status;
}

absl::Status DriveError(const DriveSpec& spec, const absl::Status& status) {
  if (status.ok()) return status;
  const char* flag = DriveFlag(spec);
  // Drives built in code (tests) have no typed text: their path stands in.
  const std::string& given = spec.given_path.empty() ? spec.path : spec.given_path;
  absl::Status named = NameTheFlag(flag, given, spec.path, status);
  if (named.message() != status.message()) return named;
  return absl::Status(status.code(), absl::StrCat(flag, "=", given, ": ", status.message()));
}

}  // namespace vmm

#include "vmm/drive_spec.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {
namespace {

// The options a drive of this kind and bus takes, for "unknown option" messages.
const char* OptionsOf(DriveSpec::Kind kind, DriveSpec::Bus bus) {
  const bool ide = bus == DriveSpec::Bus::kIde;
  if (kind == DriveSpec::Kind::kDisk) {
    return ide ? "cache=, fua=, readonly, channel=, unit=, id=, iops=, bps=, burst=, group="
               : "cache=, fua=, readonly, id=, iops=, bps=, burst=, group=";
  }
  return ide ? "channel=, unit=, probe-delay-us=, id=, iops=, bps=, burst=, group="
             : "probe-delay-us=, id=, iops=, bps=, burst=, group=";
}

// iops=, bps= and burst= (seconds of the rates each bucket holds; block/throttle.h's default is a
// tenth): true if `key` is one of them, with `limits` updated or an error naming `typed`.
absl::StatusOr<bool> ParseLimitOption(absl::string_view typed, absl::string_view key,
                                      absl::string_view value, block::IoLimits& limits,
                                      double& burst_seconds) {
  if (key == "iops") {
    if (!absl::SimpleAtoi(value, &limits.iops) || limits.iops == 0 || limits.iops > 10'000'000) {
      return absl::InvalidArgumentError(absl::StrCat(
          typed, ": iops must be 1 to 10000000 operations a second, not \"", value, "\""));
    }
    return true;
  }
  if (key == "bps") {
    uint64_t multiplier = 1;
    absl::string_view digits = value;
    for (const auto& [suffix, factor] :
         {std::pair{'K', uint64_t{1} << 10}, {'M', uint64_t{1} << 20}, {'G', uint64_t{1} << 30}}) {
      if (!digits.empty() && absl::ascii_toupper(digits.back()) == suffix) {
        digits.remove_suffix(1);
        multiplier = factor;
      }
    }
    uint64_t number = 0;
    if (!absl::SimpleAtoi(digits, &number) || number == 0 ||
        number > (uint64_t{1} << 40) / multiplier) {
      return absl::InvalidArgumentError(absl::StrCat(
          typed, ": bps must be bytes a second, 1 to 1T (K, M, G: KiB, MiB, GiB), not \"", value,
          "\""));
    }
    limits.bytes_per_second = number * multiplier;
    return true;
  }
  if (key == "burst") {
    if (!absl::SimpleAtod(value, &burst_seconds) || !(burst_seconds > 0) || burst_seconds > 3600) {
      return absl::InvalidArgumentError(absl::StrCat(
          typed, ": burst must be seconds of the rate (more than 0, at most 3600), not \"", value,
          "\""));
    }
    return true;
  }
  return false;
}

// The buckets' sizes from burst= (once every option is read: burst= may come before the rates).
absl::Status ApplyBurst(absl::string_view typed, double burst_seconds, block::IoLimits& limits) {
  if (burst_seconds == 0) return absl::OkStatus();
  if (limits.unlimited()) {
    return absl::InvalidArgumentError(absl::StrCat(typed, ": burst needs iops= or bps="));
  }
  const auto size = [&](uint64_t rate) {
    return rate == 0 ? 0 : std::max<uint64_t>(1, static_cast<uint64_t>(rate * burst_seconds));
  };
  limits.iops_burst = size(limits.iops);
  limits.bytes_burst = size(limits.bytes_per_second);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IoGroupSpec> ParseIoGroupSpec(absl::string_view text) {
  const std::string typed = absl::StrCat("--io-group=", text);
  std::vector<absl::string_view> parts = absl::StrSplit(text, ',');
  IoGroupSpec group;
  group.name = std::string(parts[0]);
  if (!IsValidDriveId(group.name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        typed,
        ": needs a group name first (1 to 32 letters, digits, '.', '_' or '-', starting "
        "with a letter): --io-group=NAME,iops=N,bps=N,burst=SECONDS"));
  }
  double burst_seconds = 0;
  for (size_t i = 1; i < parts.size(); ++i) {
    std::pair<absl::string_view, absl::string_view> key_value = absl::StrSplit(parts[i], '=');
    ASSIGN_OR_RETURN(const bool known, ParseLimitOption(typed, key_value.first, key_value.second,
                                                        group.limits, burst_seconds));
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(typed, ": unknown option \"", parts[i],
                                                     "\" (--io-group takes iops=, bps=, burst=)"));
    }
  }
  if (group.limits.unlimited()) {
    return absl::InvalidArgumentError(absl::StrCat(typed, ": a group needs iops= or bps="));
  }
  RETURN_IF_ERROR(ApplyBurst(typed, burst_seconds, group.limits));
  return group;
}

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
  double burst_seconds = 0;
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view option = parts[i];
    std::pair<absl::string_view, absl::string_view> key_value = absl::StrSplit(option, '=');
    ASSIGN_OR_RETURN(const bool limit, ParseLimitOption(typed, key_value.first, key_value.second,
                                                        spec.limits, burst_seconds));
    if (limit) continue;
    if (key_value.first == "group") {
      if (!IsValidDriveId(key_value.second)) {
        return absl::InvalidArgumentError(
            absl::StrCat(typed, ": group \"", key_value.second, "\" is not a group name"));
      }
      spec.group = std::string(key_value.second);
    } else if (key_value.first == "cache" && kind == DriveSpec::Kind::kDisk) {
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
        return absl::InvalidArgumentError(
            absl::StrCat(typed, ": id \"", key_value.second,
                         "\" is not a drive name (1 to 32 letters, digits, '.', '_' or '-', "
                         "starting with a letter)"));
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
  RETURN_IF_ERROR(ApplyBurst(typed, burst_seconds, spec.limits));
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

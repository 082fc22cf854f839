// vmmctl's human-readable output: drive lines and tables, events, VM info, statistics, JSON.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "api/vmmctl_lib.h"
#include "google/protobuf/util/json_util.h"

namespace vmmctl {
namespace {

using vmm::v1::DriveStatus;

std::string KindName(DriveStatus::Kind kind) {
  switch (kind) {
    case DriveStatus::DISK:
      return "disk";
    case DriveStatus::CDROM:
      return "cdrom";
    default:
      return "unknown";
  }
}

std::string Bus(const DriveStatus& d) {
  std::string bus = d.bus().empty() ? "-" : d.bus();
  if (!d.address().empty()) absl::StrAppend(&bus, " ", d.address());
  return bus;
}

std::string MediumSummary(const DriveStatus& d) {
  if (!d.medium_present()) return "no medium";
  std::string s =
      absl::StrCat(d.removable() ? "medium " : "", d.source().empty() ? "(unnamed)" : d.source(),
                   " (", HumanSize(d.size_bytes()));
  if (d.read_only()) absl::StrAppend(&s, ", read-only");
  if (!d.cache_mode().empty()) absl::StrAppend(&s, ", cache ", d.cache_mode());
  absl::StrAppend(&s, ")");
  return s;
}

// Pads every column of `rows` to its widest cell (the last column is not padded).
std::string Table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i + 1 < row.size()) {
        absl::StrAppend(&line, row[i], std::string(widths[i] - row[i].size() + 2, ' '));
      } else {
        absl::StrAppend(&line, row[i]);
      }
    }
    absl::StrAppend(&out, absl::StripTrailingAsciiWhitespace(line), "\n");
  }
  return out;
}

}  // namespace

// ---- Output ----

std::string HumanSize(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string DriveLine(const DriveStatus& d) {
  std::string line =
      absl::StrCat(d.name(), " ", KindName(d.kind()), " ", Bus(d), ": ", MediumSummary(d));
  if (d.removable()) {
    absl::StrAppend(&line, ", tray ", d.tray_open() ? "open" : "closed", ", ",
                    d.locked() ? "locked" : "unlocked", ", generation ", d.generation());
  }
  return line;
}

std::string DriveDetails(const DriveStatus& d) {
  std::vector<std::vector<std::string>> rows = {
      {"drive:", d.name()},
      {"kind:", KindName(d.kind())},
      {"bus:", Bus(d)},
      {"removable:", d.removable() ? "yes" : "no"},
  };
  if (d.medium_present()) {
    rows.push_back({"medium:", d.source().empty() ? "present" : d.source()});
    rows.push_back(
        {"size:", absl::StrCat(d.size_bytes(), " bytes (", HumanSize(d.size_bytes()), ")")});
    rows.push_back({"read-only:", d.read_only() ? "yes" : "no"});
  } else {
    rows.push_back({"medium:", "none"});
  }
  if (d.removable()) {
    rows.push_back({"tray:", d.tray_open() ? "open" : "closed"});
    rows.push_back({"locked:", d.locked() ? "yes (the guest prevents removal)" : "no"});
    rows.push_back({"generation:", absl::StrCat(d.generation())});
  }
  if (!d.cache_mode().empty()) rows.push_back({"cache:", d.cache_mode()});
  return Table(rows);
}

std::string DriveTable(const google::protobuf::RepeatedPtrField<DriveStatus>& drives) {
  std::vector<std::vector<std::string>> rows = {
      {"NAME", "KIND", "BUS", "ADDR", "MEDIUM", "TRAY", "LOCK", "SIZE", "GEN", "SOURCE"}};
  for (const DriveStatus& d : drives) {
    rows.push_back({d.name(), KindName(d.kind()), d.bus().empty() ? "-" : d.bus(),
                    d.address().empty() ? "-" : d.address(), d.medium_present() ? "yes" : "no",
                    d.removable() ? (d.tray_open() ? "open" : "closed") : "-",
                    d.removable() ? (d.locked() ? "locked" : "-") : "-",
                    d.medium_present() ? HumanSize(d.size_bytes()) : "-",
                    d.removable() ? absl::StrCat(d.generation()) : "-",
                    d.source().empty() ? "-" : d.source()});
  }
  return Table(rows);
}

std::string EventLine(const vmm::v1::MediaEvent& event) {
  std::string when = "-";
  if (event.time_unix_nanos() != 0) {
    when = absl::FormatTime("%Y-%m-%dT%H:%M:%E3S%Ez", absl::FromUnixNanos(event.time_unix_nanos()),
                            absl::LocalTimeZone());
  }
  std::string line = absl::StrCat(
      when, " ", event.drive().empty() ? event.status().name() : event.drive(), " ",
      vmm::v1::MediaEvent::Type_Name(event.type()), event.by_guest() ? " by guest" : " by host");
  if (event.has_status()) absl::StrAppend(&line, ": ", DriveLine(event.status()));
  return line;
}

std::string VmInfoText(const vmm::v1::VmInfo& info) {
  std::vector<std::vector<std::string>> rows = {
      {"state:", vmm::v1::VmInfo::State_Name(info.state())},
      {"pid:", absl::StrCat(info.pid())},
      {"vcpus:", absl::StrCat(info.vcpus())},
      {"memory:", HumanSize(info.memory_bytes())},
      {"kernel:", info.kernel()},
      {"cmdline:", info.cmdline()},
      {"uptime:", absl::StrFormat("%.3f s", info.uptime_ms() / 1000.0)},
  };
  if (!info.media_dir().empty()) rows.push_back({"media dir:", info.media_dir()});
  if (!info.firmware().empty()) {
    rows.push_back({"firmware:", info.firmware()});
    rows.push_back({"boot order:", info.boot_order().empty()
                                       ? std::string("the firmware's own")
                                       : absl::StrJoin(info.boot_order(), ", ")});
  }
  rows.push_back({"drives:", absl::StrCat(info.drives_size())});
  std::string text = Table(rows);
  if (info.drives_size() > 0) {
    std::string table = DriveTable(info.drives());
    for (absl::string_view line : absl::StrSplit(absl::StripSuffix(table, "\n"), '\n')) {
      absl::StrAppend(&text, "  ", line, "\n");
    }
  }
  return text;
}

std::string StatsTable(const vmm::v1::GetStatsResponse& stats) {
  std::vector<std::vector<std::string>> rows = {
      {"DRIVE", "READS", "READ", "WRITES", "WRITTEN", "FLUSHES", "DISCARDS", "ERRORS",
       "FUA(NATIVE/EMUL)", "LAT-MEAN", "P50", "P99", "MAX", "THROTTLED"}};
  for (const auto& d : stats.drives()) {
    rows.push_back(
        {d.drive(), absl::StrCat(d.read_requests()), HumanSize(d.read_bytes()),
         absl::StrCat(d.write_requests()), HumanSize(d.write_bytes()),
         absl::StrCat(d.flush_requests()), absl::StrCat(d.discard_requests()),
         absl::StrCat(d.errors()), absl::StrCat(d.fua_native(), "/", d.fua_emulated()),
         absl::StrFormat("%.1fus", d.latency_mean_us()), absl::StrCat(d.latency_p50_us(), "us"),
         absl::StrCat(d.latency_p99_us(), "us"), absl::StrCat(d.latency_max_us(), "us"),
         // Requests that waited for their I/O budget, and how long in all.
         d.throttled_requests() == 0
             ? std::string("-")
             : absl::StrFormat("%d (%.1fs)", d.throttled_requests(), d.throttled_us() / 1e6)});
  }
  if (stats.drives().empty()) return "no drives\n";
  return Table(rows);
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  std::string json;
  auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::StrCat("{\"error\": \"", status.ToString(), "\"}");
  // add_whitespace leaves a trailing newline.
  while (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

}  // namespace vmmctl

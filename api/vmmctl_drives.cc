// vmmctl's statistics, I/O limits and disk commands (vm stats, drive limit, disk add|remove|resize).
#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/vmmctl_runner.h"

namespace vmmctl::internal {

int Runner::VmStats(const std::string& drive) {
  grpc::ClientContext context;
  Context(context);
  vmm::v1::GetStatsRequest request;
  request.set_drive(drive);
  vmm::v1::GetStatsResponse response;
  grpc::Status status = vm_->GetStats(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, StatsTable(response));
}

// --iops N, --bps N[K|M|G], --burst SECONDS into `limits` (none given: unlimited). The bursts
// become bucket sizes as the launchers' burst= does: that many seconds of each rate.
absl::Status LimitsFromOptions(const std::map<std::string, std::string>& options,
                               vmm::v1::IoLimits* limits) {
  auto find = [&](const char* name) -> const std::string* {
    const auto it = options.find(name);
    return it == options.end() ? nullptr : &it->second;
  };
  uint64_t number = 0;
  if (const std::string* iops = find("iops")) {
    if (!absl::SimpleAtoi(*iops, &number))
      return absl::InvalidArgumentError("--iops=" + *iops +
                                        ": expected operations a second (0: no limit)");
    limits->set_iops(number);
  }
  if (const std::string* bps = find("bps")) {
    std::string digits = *bps;
    uint64_t multiplier = 1;
    if (!digits.empty()) {
      const char suffix = absl::ascii_toupper(digits.back());
      multiplier = suffix == 'K'   ? 1ull << 10
                   : suffix == 'M' ? 1ull << 20
                   : suffix == 'G' ? 1ull << 30
                                   : 1;
      if (multiplier != 1) digits.pop_back();
    }
    if (!absl::SimpleAtoi(digits, &number))
      return absl::InvalidArgumentError("--bps=" + *bps +
                                        ": expected bytes a second, with K, M or G (0: no limit)");
    limits->set_bytes_per_second(number * multiplier);
  }
  if (const std::string* burst = find("burst")) {
    double seconds = 0;
    if (!absl::SimpleAtod(*burst, &seconds) || !(seconds > 0) || seconds > 3600) {
      return absl::InvalidArgumentError("--burst=" + *burst +
                                        ": expected seconds of the rates (at most 3600)");
    }
    if (limits->iops() == 0 && limits->bytes_per_second() == 0)
      return absl::InvalidArgumentError("--burst needs --iops or --bps");
    if (limits->iops() != 0)
      limits->set_iops_burst(
          std::max<uint64_t>(1, static_cast<uint64_t>(limits->iops() * seconds)));
    if (limits->bytes_per_second() != 0) {
      limits->set_bytes_burst(
          std::max<uint64_t>(1, static_cast<uint64_t>(limits->bytes_per_second() * seconds)));
    }
  }
  return absl::OkStatus();
}

std::string LimitsText(const vmm::v1::IoLimits& limits) {
  if (limits.iops() == 0 && limits.bytes_per_second() == 0) return "unlimited";
  std::vector<std::string> parts;
  if (limits.iops() != 0) parts.push_back(absl::StrCat(limits.iops(), " IOPS"));
  if (limits.bytes_per_second() != 0)
    parts.push_back(absl::StrCat(HumanSize(limits.bytes_per_second()), "/s"));
  if (limits.iops_burst() != 0)
    parts.push_back(absl::StrCat("burst ", limits.iops_burst(), " ops"));
  if (limits.bytes_burst() != 0)
    parts.push_back(absl::StrCat("burst ", HumanSize(limits.bytes_burst())));
  return absl::StrJoin(parts, ", ");
}

int Runner::DiskAdd(const std::string& path) {
  vmm::v1::AttachDiskRequest request;
  if (absl::Status parsed = LimitsFromOptions(cl_.options, request.mutable_limits());
      !parsed.ok()) {
    return UsageError(std::string(parsed.message()));
  }
  if (Has("lun")) {
    uint32_t lun = 0;
    if (!absl::SimpleAtoi(cl_.options.at("lun"), &lun) || lun > 16383) {
      return UsageError("--lun=" + cl_.options.at("lun") + ": expected a LUN, 0 to 16383");
    }
    request.set_lun(lun);
  }
  std::string server_path;
  if (int failed = ServerPath(path, &server_path); failed != kExitOk) return failed;
  request.set_path(server_path);
  if (Has("id")) request.set_id(cl_.options.at("id"));
  if (Has("cache")) request.set_cache_mode(cl_.options.at("cache"));
  if (Has("fua")) request.set_fua_mode(cl_.options.at("fua"));
  if (Has("io-group")) request.set_io_group(cl_.options.at("io-group"));
  request.set_read_only(Has("read-only"));
  DriveStatus response;
  grpc::Status status = Call(*vm_, &vmm::v1::VmService::Stub::AttachDisk, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveLine(response) + "\n");
}

int Runner::DiskRemove(const std::string& drive) {
  vmm::v1::DetachDiskRequest request;
  request.set_drive(drive);
  DriveStatus response;
  grpc::Status status = Call(*vm_, &vmm::v1::VmService::Stub::DetachDisk, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, absl::StrCat(drive, ": detached (", response.source(), ")\n"));
}

int Runner::DiskResize(const std::string& drive, const std::string& size) {
  vmm::v1::ResizeDiskRequest request;
  request.set_drive(drive);
  if (!size.empty()) {
    uint64_t multiplier = 1;
    std::string digits = size;
    switch (digits.back()) {
      case 'K':
      case 'k':
        multiplier = uint64_t{1} << 10;
        digits.pop_back();
        break;
      case 'M':
      case 'm':
        multiplier = uint64_t{1} << 20;
        digits.pop_back();
        break;
      case 'G':
      case 'g':
        multiplier = uint64_t{1} << 30;
        digits.pop_back();
        break;
      default:
        break;
    }
    uint64_t number = 0;
    if (!absl::SimpleAtoi(digits, &number) || number == 0 || number > UINT64_MAX / multiplier) {
      return UsageError(
          "disk resize: " + size +
          ": expected a size in bytes, with K, M or G (none: the image's size on the host)");
    }
    request.set_size_bytes(number * multiplier);
  }
  DriveStatus response;
  grpc::Status status = Call(*vm_, &vmm::v1::VmService::Stub::ResizeDisk, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, DriveLine(response) + "\n");
}

int Runner::DriveLimit(const std::string& name) {
  vmm::v1::SetDriveLimitsRequest request;
  if (absl::Status parsed = LimitsFromOptions(cl_.options, request.mutable_limits());
      !parsed.ok()) {
    return UsageError(std::string(parsed.message()));
  }
  (Has("group") ? request.mutable_group() : request.mutable_drive())->assign(name);
  grpc::ClientContext context;
  Context(context);
  vmm::v1::DriveLimits response;
  grpc::Status status = vm_->SetDriveLimits(&context, request, &response);
  if (!status.ok()) return RpcError(status);
  return Print(response, absl::StrCat(Has("group") ? "group " : "", name, ": ",
                                      LimitsText(response.limits()), "\n"));
}

}  // namespace vmmctl::internal

#include "vmm/x86/firmware_config.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/byte_order.h"

namespace vmm::x86 {
namespace {

std::vector<uint8_t> Le(uint64_t value, size_t bytes) {
  std::vector<uint8_t> out;
  sys_util::AppendLittleEndian(out, value, bytes);
  return out;
}

}  // namespace

absl::StatusOr<FirmwareConfig> BuildFirmwareConfig(const MachineDescription& machine,
                                                   const FirmwareOptions& options,
                                                   std::vector<FirmwareConfigFile> extra_files) {
  if (machine.memory.empty()) return absl::InvalidArgumentError("the machine has no RAM");
  if (machine.cpu_apic_ids.empty() || machine.cpu_apic_ids.size() > UINT16_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the machine has %d CPUs", machine.cpu_apic_ids.size()));
  }
  FirmwareConfig config;
  std::vector<MachineDescription::MemoryRange> ram = machine.memory;
  std::sort(ram.begin(), ram.end(), [](const auto& a, const auto& b) { return a.base < b.base; });
  uint64_t ram_bytes = 0;
  std::vector<uint8_t> e820;
  for (const MachineDescription::MemoryRange& range : ram) {
    if (range.size == 0) continue;
    ram_bytes += range.size;
    sys_util::AppendLittleEndian(e820, range.base, 8);
    sys_util::AppendLittleEndian(e820, range.size, 8);
    sys_util::AppendLittleEndian(e820, kFwCfgE820Ram, 4);
  }
  const auto cpus = static_cast<uint16_t>(machine.cpu_apic_ids.size());
  config.items.push_back({kFwCfgRamSize, Le(ram_bytes, 8)});
  config.items.push_back({kFwCfgNbCpus, Le(cpus, 2)});
  config.items.push_back({kFwCfgMaxCpus, Le(cpus, 2)});
  config.items.push_back({kFwCfgBootMenu, Le(0, 2)});

  config.files.push_back({"etc/e820", std::move(e820)});
  config.files.push_back({"etc/show-boot-menu", Le(0, 2)});
  if (!options.boot_order.empty()) {
    std::vector<uint8_t> list;
    for (const std::string& path : options.boot_order) {
      if (path.empty() || path.find_first_of(std::string("\n\0", 2)) != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrFormat("boot path \"%s\": empty, or with a newline or NUL", path));
      }
      list.insert(list.end(), path.begin(), path.end());
      list.push_back('\n');
    }
    list.push_back('\0');
    config.files.push_back({"bootorder", std::move(list)});
  }
  if (options.serial_console_port) {
    config.files.push_back({"etc/sercon-port", Le(*options.serial_console_port, 2)});
  }
  if (options.boot_fail_wait_ms) {
    config.files.push_back({"etc/boot-fail-wait", Le(*options.boot_fail_wait_ms, 4)});
  }
  for (FirmwareConfigFile& file : extra_files) config.files.push_back(std::move(file));
  std::set<std::string> names;
  for (const FirmwareConfigFile& file : config.files) {
    if (!names.insert(file.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("fw_cfg file \"%s\" given twice", file.name));
    }
  }
  return config;
}

}  // namespace vmm::x86

#include "vmm/acpi/table_loader.h"

#include <algorithm>
#include <span>
#include <string_view>

#include "absl/strings/str_format.h"
#include "vmm/acpi/tables.h"
#include "vmm/sys_util/byte_order.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm::acpi {
namespace {

// ACPI 6.5 5.2.5.3 (RSDP) and 5.2.6 (the table header).
constexpr size_t kRsdpChecksum = 8;
constexpr size_t kRsdpRsdtAddress = 16;
constexpr size_t kRsdpXsdtAddress = 24;
constexpr size_t kRsdpExtendedChecksum = 32;
constexpr size_t kTableChecksum = 9;

constexpr uint32_t kTablesAlignment = 64;  // the FACS's (5.2.10), the strictest in the blob
constexpr uint32_t kRsdpAlignment = 16;    // 5.2.5.1: on a 16-byte boundary

class Script {
 public:
  void Allocate(std::string_view file, uint32_t alignment, LoaderZone zone) {
    std::span<uint8_t> command = Next(LoaderCommand::kAllocate);
    PutName(command.subspan(4), file);
    sys_util::StoreLittleEndian(alignment, command.subspan(4 + kLoaderFileNameBytes, 4));
    command[8 + kLoaderFileNameBytes] = static_cast<uint8_t>(zone);
  }
  void AddPointer(std::string_view destination, std::string_view source, uint32_t offset,
                  uint8_t size) {
    std::span<uint8_t> command = Next(LoaderCommand::kAddPointer);
    PutName(command.subspan(4), destination);
    PutName(command.subspan(4 + kLoaderFileNameBytes), source);
    sys_util::StoreLittleEndian(offset, command.subspan(4 + 2 * kLoaderFileNameBytes, 4));
    command[8 + 2 * kLoaderFileNameBytes] = size;
  }
  void AddChecksum(std::string_view file, uint32_t result_offset, uint32_t start, uint32_t length) {
    std::span<uint8_t> command = Next(LoaderCommand::kAddChecksum);
    PutName(command.subspan(4), file);
    const size_t fields = 4 + kLoaderFileNameBytes;
    sys_util::StoreLittleEndian(result_offset, command.subspan(fields, 4));
    sys_util::StoreLittleEndian(start, command.subspan(fields + 4, 4));
    sys_util::StoreLittleEndian(length, command.subspan(fields + 8, 4));
  }
  std::vector<uint8_t> Take() { return std::move(bytes_); }

 private:
  std::span<uint8_t> Next(LoaderCommand kind) {
    bytes_.resize(bytes_.size() + kLoaderCommandBytes, 0);
    std::span<uint8_t> command = std::span(bytes_).last(kLoaderCommandBytes);
    sys_util::StoreLittleEndian(static_cast<uint32_t>(kind), command.first(4));
    return command;
  }
  static void PutName(std::span<uint8_t> field, std::string_view name) {
    // The names are this file's constants, shorter than the field (its last byte stays NUL).
    std::copy_n(name.begin(), std::min(name.size(), kLoaderFileNameBytes - 1), field.begin());
  }

  std::vector<uint8_t> bytes_;
};

// A pointer field of `width` bytes at `offset` in `file` (whose bytes are `data`): the address it
// holds must lie in the tables blob [0, blob_size), and is then that blob's offset already. Zero
// means "none" and is left alone.
absl::Status Link(Script& script, std::string_view file, std::span<const uint8_t> data,
                  size_t offset, uint8_t width, uint64_t blob_size) {
  if (offset + width > data.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: a pointer at %u runs past its %u bytes", file, offset, data.size()));
  }
  const uint64_t address = sys_util::LoadLittleEndian(data.subspan(offset, width));
  if (address == 0) return absl::OkStatus();
  if (address >= blob_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: the pointer at %u (%#x) is outside the tables (%u bytes)", file,
                        offset, address, blob_size));
  }
  script.AddPointer(file, kTablesFile, static_cast<uint32_t>(offset), width);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FirmwareAcpi> BuildFirmwareAcpi(const AcpiTables& tables) {
  if (tables.tables.empty() || tables.tables.front().signature != "RSD PTR " ||
      tables.tables.front().address != 0) {
    return absl::InvalidArgumentError("the tables must be placed from address 0, the RSDP first");
  }
  FirmwareAcpi out;
  out.rsdp = tables.tables.front().bytes;
  uint64_t blob_size = 0;
  for (const AcpiTable& table : tables.tables) {
    blob_size = std::max(blob_size, table.address + table.bytes.size());
  }
  if (blob_size > UINT32_MAX) return absl::InvalidArgumentError("the tables exceed 4 GiB");
  out.tables.assign(blob_size, 0);
  for (size_t i = 1; i < tables.tables.size(); ++i) {
    const AcpiTable& table = tables.tables[i];
    std::copy(table.bytes.begin(), table.bytes.end(), out.tables.begin() + table.address);
  }

  Script script;
  script.Allocate(kRsdpFile, kRsdpAlignment, LoaderZone::kFseg);
  script.Allocate(kTablesFile, kTablesAlignment, LoaderZone::kHigh);
  // Every pointer first, then the checksums over what they changed.
  for (size_t i = 1; i < tables.tables.size(); ++i) {
    const AcpiTable& table = tables.tables[i];
    const std::span<const uint8_t> blob(out.tables);
    const auto offset = static_cast<uint32_t>(table.address);
    if (table.signature == "XSDT" || table.signature == "RSDT") {
      const uint8_t width = table.signature == "XSDT" ? 8 : 4;
      for (size_t entry = kTableHeaderBytes; entry + width <= table.bytes.size(); entry += width) {
        RETURN_IF_ERROR(Link(script, kTablesFile, blob, offset + entry, width, blob_size));
      }
    } else if (table.signature == "FACP") {
      RETURN_IF_ERROR(
          Link(script, kTablesFile, blob, offset + fadt_offset::kFirmwareCtrl, 4, blob_size));
      RETURN_IF_ERROR(Link(script, kTablesFile, blob, offset + fadt_offset::kDsdt, 4, blob_size));
      if (table.bytes.size() >= fadt_offset::kXDsdt + 8) {
        RETURN_IF_ERROR(
            Link(script, kTablesFile, blob, offset + fadt_offset::kXFirmwareCtrl, 8, blob_size));
        RETURN_IF_ERROR(
            Link(script, kTablesFile, blob, offset + fadt_offset::kXDsdt, 8, blob_size));
      }
    }
  }
  RETURN_IF_ERROR(Link(script, kRsdpFile, out.rsdp, kRsdpRsdtAddress, 4, blob_size));
  RETURN_IF_ERROR(Link(script, kRsdpFile, out.rsdp, kRsdpXsdtAddress, 8, blob_size));
  // The checksums as the firmware computes them: each checksum byte starts at 0 (QEMU's blobs
  // do too), so the loader's correction is the whole checksum.
  for (size_t i = 1; i < tables.tables.size(); ++i) {
    const AcpiTable& table = tables.tables[i];
    if (table.signature == "FACS" || table.bytes.size() < kTableHeaderBytes) continue;
    const auto offset = static_cast<uint32_t>(table.address);
    out.tables[offset + kTableChecksum] = 0;
    script.AddChecksum(kTablesFile, offset + kTableChecksum, offset,
                       static_cast<uint32_t>(table.bytes.size()));
  }
  if (out.rsdp.size() < kRsdpBytes) return absl::InvalidArgumentError("the RSDP is too short");
  out.rsdp[kRsdpChecksum] = 0;
  out.rsdp[kRsdpExtendedChecksum] = 0;
  // The first 20 bytes first: the extended checksum covers that checksum's byte too.
  script.AddChecksum(kRsdpFile, kRsdpChecksum, 0, kRsdpV1ChecksumBytes);
  script.AddChecksum(kRsdpFile, kRsdpExtendedChecksum, 0, static_cast<uint32_t>(out.rsdp.size()));
  out.loader = script.Take();
  return out;
}

}  // namespace vmm::acpi

#include "vmm/acpi/table_loader.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/acpi/machine_acpi.h"
#include "vmm/acpi/machine_acpi_testing.h"
#include "vmm/acpi/tables.h"
#include "vmm/machine/layout.h"
#include "vmm/machine/machine_description.h"
#include "vmm/machine/machine_description_testing.h"

namespace vmm::acpi {
namespace {

using testing::SampleMachine;

uint64_t Le(const std::vector<uint8_t>& bytes, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = width; i-- > 0;) value = value << 8 | bytes.at(offset + i);
  return value;
}

std::string Name(const std::vector<uint8_t>& script, size_t offset) {
  std::string name;
  for (size_t i = 0; i < kLoaderFileNameBytes && script.at(offset + i) != 0; ++i) {
    name += static_cast<char>(script[offset + i]);
  }
  return name;
}

// A firmware's side of the interface, written from the format alone: each file placed at the
// address `placement` gives it (checking the alignment asked for), then the script run.
struct LoadedFile {
  uint64_t address = 0;
  std::vector<uint8_t> bytes;
};
std::map<std::string, LoadedFile> RunScript(const FirmwareAcpi& acpi,
                                            const std::map<std::string, uint64_t>& placement) {
  const std::map<std::string, const std::vector<uint8_t>*> fw_cfg = {{kTablesFile, &acpi.tables},
                                                                     {kRsdpFile, &acpi.rsdp}};
  std::map<std::string, LoadedFile> loaded;
  const std::vector<uint8_t>& script = acpi.loader;
  EXPECT_EQ(script.size() % kLoaderCommandBytes, 0u);
  for (size_t at = 0; at + kLoaderCommandBytes <= script.size(); at += kLoaderCommandBytes) {
    const auto command = static_cast<LoaderCommand>(Le(script, at, 4));
    const std::string file = Name(script, at + 4);
    switch (command) {
      case LoaderCommand::kAllocate: {
        const uint64_t alignment = Le(script, at + 4 + kLoaderFileNameBytes, 4);
        const uint8_t zone = script[at + 8 + kLoaderFileNameBytes];
        const uint64_t address = placement.at(file);
        EXPECT_EQ(address % alignment, 0u) << file;
        if (zone == static_cast<uint8_t>(LoaderZone::kFseg)) {
          EXPECT_GE(address, 0xf0000u) << file;
          EXPECT_LT(address, 0x100000u) << file;
        }
        loaded[file] = {address, *fw_cfg.at(file)};
        break;
      }
      case LoaderCommand::kAddPointer: {
        const std::string source = Name(script, at + 4 + kLoaderFileNameBytes);
        const size_t offset = Le(script, at + 4 + 2 * kLoaderFileNameBytes, 4);
        const size_t size = script[at + 8 + 2 * kLoaderFileNameBytes];
        std::vector<uint8_t>& bytes = loaded.at(file).bytes;
        uint64_t value = Le(bytes, offset, size) + loaded.at(source).address;
        for (size_t i = 0; i < size; ++i, value >>= 8) bytes.at(offset + i) = value & 0xff;
        break;
      }
      case LoaderCommand::kAddChecksum: {
        const size_t fields = at + 4 + kLoaderFileNameBytes;
        const size_t result = Le(script, fields, 4);
        const size_t start = Le(script, fields + 4, 4);
        const size_t length = Le(script, fields + 8, 4);
        std::vector<uint8_t>& bytes = loaded.at(file).bytes;
        uint8_t sum = 0;
        for (size_t i = start; i < start + length; ++i) sum += bytes.at(i);
        bytes.at(result) -= sum;
        break;
      }
      default:
        ADD_FAILURE() << "unknown command " << static_cast<uint32_t>(command);
    }
  }
  return loaded;
}

TEST(TableLoaderTest, TheFirmwareEndsWithTheTablesTheVmmWouldHavePlacedThere) {
  for (uint32_t cpus : {1u, 4u}) {
    auto at_zero = BuildMachineAcpi(SampleMachine(cpus), 0, 0x20000);
    ASSERT_TRUE(at_zero.ok()) << at_zero.status();
    auto acpi = BuildFirmwareAcpi(*at_zero);
    ASSERT_TRUE(acpi.ok()) << acpi.status();
    // Two allocations, then pointers and checksums: 128 bytes each.
    ASSERT_GE(acpi->loader.size(), 4 * kLoaderCommandBytes);
    EXPECT_EQ(Le(acpi->loader, 0, 4), static_cast<uint32_t>(LoaderCommand::kAllocate));

    // Where SeaBIOS might put them: the RSDP in the F segment, the rest high in RAM.
    constexpr uint64_t kTablesAt = 0x0ffe0000;
    constexpr uint64_t kRsdpAt = 0xf5a40;
    const auto loaded = RunScript(
        *acpi, {{std::string(kTablesFile), kTablesAt}, {std::string(kRsdpFile), kRsdpAt}});
    ASSERT_EQ(loaded.size(), 2u);

    // The same tables built by the VMM at kTablesAt: every table but the RSDP lies at the same
    // offset, byte for byte (pointers and checksums included); the RSDP matches wherever it is.
    auto direct = BuildMachineAcpi(SampleMachine(cpus), kTablesAt, kTablesAt + 0x20000);
    ASSERT_TRUE(direct.ok()) << direct.status();
    const LoadedFile& tables = loaded.at(kTablesFile);
    for (const AcpiTable& table : direct->tables) {
      if (table.signature == "RSD PTR ") {
        EXPECT_EQ(loaded.at(kRsdpFile).bytes, table.bytes);
        continue;
      }
      const size_t offset = table.address - kTablesAt;
      ASSERT_LE(offset + table.bytes.size(), tables.bytes.size()) << table.signature;
      EXPECT_EQ(std::vector<uint8_t>(tables.bytes.begin() + offset,
                                     tables.bytes.begin() + offset + table.bytes.size()),
                table.bytes)
          << table.signature << " with " << cpus << " CPUs";
    }
    // And the RSDP's checksums hold.
    const std::vector<uint8_t>& rsdp = loaded.at(kRsdpFile).bytes;
    EXPECT_EQ(Checksum(std::span(rsdp).first(kRsdpV1ChecksumBytes)), 0);
    EXPECT_EQ(Checksum(rsdp), 0);
  }
}

TEST(TableLoaderTest, BlobsAsFirmwareReadsThem) {
  auto at_zero = BuildMachineAcpi(SampleMachine(2), 0, 0x20000);
  ASSERT_TRUE(at_zero.ok());
  auto acpi = BuildFirmwareAcpi(*at_zero);
  ASSERT_TRUE(acpi.ok());
  EXPECT_EQ(acpi->rsdp.size(), kRsdpBytes);
  EXPECT_EQ(std::string(acpi->rsdp.begin(), acpi->rsdp.begin() + 8), "RSD PTR ");
  // The RSDP's place in the tables blob is zeros; the tables follow at their offsets.
  for (size_t i = 0; i < kRsdpBytes; ++i) EXPECT_EQ(acpi->tables[i], 0) << i;
  for (size_t i = 1; i < at_zero->tables.size(); ++i) {
    const AcpiTable& table = at_zero->tables[i];
    EXPECT_EQ(
        std::string(acpi->tables.begin() + table.address, acpi->tables.begin() + table.address + 4),
        table.signature);
  }
  // Each command names files firmware knows, within 56 bytes with a NUL.
  for (size_t at = 0; at < acpi->loader.size(); at += kLoaderCommandBytes) {
    const std::string file = Name(acpi->loader, at + 4);
    EXPECT_TRUE(file == kTablesFile || file == kRsdpFile) << file;
  }
}

TEST(TableLoaderTest, RefusesTablesNotPlacedFromZeroAndPointersOutsideThem) {
  auto placed = BuildMachineAcpi(SampleMachine(1), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(BuildFirmwareAcpi(*placed).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildFirmwareAcpi(AcpiTables{}).status().code(), absl::StatusCode::kInvalidArgument);

  auto at_zero = BuildMachineAcpi(SampleMachine(1), 0, 0x20000);
  ASSERT_TRUE(at_zero.ok());
  for (AcpiTable& table : at_zero->tables) {
    if (table.signature == "XSDT") table.bytes[kTableHeaderBytes + 7] = 0x80;  // far above
  }
  const auto bad = BuildFirmwareAcpi(*at_zero);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("outside the tables"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace vmm::acpi

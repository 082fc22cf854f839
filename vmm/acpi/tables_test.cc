#include "vmm/acpi/tables.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vmm::acpi {
namespace {

using ::testing::ElementsAre;

uint64_t Le(const std::vector<uint8_t>& bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | bytes.at(offset + i);
  return value;
}

uint8_t Sum(const std::vector<uint8_t>& bytes, size_t count) {
  uint8_t sum = 0;
  for (size_t i = 0; i < count; ++i) sum = static_cast<uint8_t>(sum + bytes.at(i));
  return sum;
}

std::string Chars(const std::vector<uint8_t>& bytes, size_t offset, size_t count) {
  return std::string(bytes.begin() + offset, bytes.begin() + offset + count);
}

void ExpectHeader(const std::vector<uint8_t>& table, const std::string& signature,
                  uint8_t revision) {
  ASSERT_GE(table.size(), kTableHeaderBytes);
  EXPECT_EQ(Chars(table, 0, 4), signature);
  EXPECT_EQ(Le(table, 4, 4), table.size());
  EXPECT_EQ(table[8], revision);
  EXPECT_EQ(Sum(table, table.size()), 0) << signature << " checksum";
  EXPECT_EQ(Chars(table, 10, 6), "MICRVM");
  EXPECT_EQ(Chars(table, 16, 8), "MICROVM ");
  EXPECT_EQ(Chars(table, 28, 4), "MVMM");
}

TEST(ChecksumTest, MakesTheBytesSumToZero) {
  std::vector<uint8_t> bytes = {1, 2, 3, 0, 250};
  FillChecksum(bytes, 3);
  EXPECT_EQ(Sum(bytes, bytes.size()), 0);
  EXPECT_EQ(Checksum(bytes), 0);
}

TEST(RsdpTest, RevisionTwoWithBothChecksums) {
  const std::vector<uint8_t> rsdp = BuildRsdp(0xe0040);
  ASSERT_EQ(rsdp.size(), kRsdpBytes);
  EXPECT_EQ(Chars(rsdp, 0, 8), "RSD PTR ");
  EXPECT_EQ(Sum(rsdp, 20), 0) << "ACPI 1.0 checksum over the first 20 bytes";
  EXPECT_EQ(Sum(rsdp, 36), 0) << "extended checksum over all 36 bytes";
  EXPECT_EQ(Chars(rsdp, 9, 6), "MICRVM");
  EXPECT_EQ(rsdp[15], 2);                // Revision
  EXPECT_EQ(Le(rsdp, 16, 4), 0u);        // RsdtAddress: none
  EXPECT_EQ(Le(rsdp, 20, 4), 36u);       // Length
  EXPECT_EQ(Le(rsdp, 24, 8), 0xe0040u);  // XsdtAddress
  EXPECT_THAT(std::vector<uint8_t>(rsdp.begin() + 33, rsdp.end()), ElementsAre(0, 0, 0));
}

TEST(XsdtTest, ListsTheTables) {
  const uint64_t addresses[] = {0xe0080, 0x1'0000'0000};
  const std::vector<uint8_t> xsdt = BuildXsdt(addresses);
  ExpectHeader(xsdt, "XSDT", 1);
  ASSERT_EQ(xsdt.size(), kTableHeaderBytes + 16);
  EXPECT_EQ(Le(xsdt, 36, 8), 0xe0080u);
  EXPECT_EQ(Le(xsdt, 44, 8), 0x1'0000'0000u);
}

TEST(FadtTest, HardwareReducedLayout) {
  FadtConfig config;
  config.dsdt_address = 0xe0200;
  config.flags = kFadtHwReducedAcpi | kFadtResetRegSupported;
  config.iapc_boot_arch = kBootArch8042 | kBootArchVgaNotPresent;
  config.reset_register = GenericAddress::Port8(0x602);
  config.reset_value = 0x42;
  config.sleep_control_register = GenericAddress::Port8(0x600);
  config.sleep_status_register = GenericAddress::Port8(0x601);
  const std::vector<uint8_t> fadt = BuildFadt(config);
  ExpectHeader(fadt, "FACP", 6);
  ASSERT_EQ(fadt.size(), 276u);
  EXPECT_EQ(fadt[fadt_offset::kMinorVersion], 5);
  EXPECT_EQ(Le(fadt, fadt_offset::kFirmwareCtrl, 4), 0u);  // no FACS
  EXPECT_EQ(Le(fadt, fadt_offset::kDsdt, 4), 0xe0200u);    // the same as X_DSDT
  EXPECT_EQ(Le(fadt, fadt_offset::kXFirmwareCtrl, 8), 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kXDsdt, 8), 0xe0200u);
  EXPECT_EQ(Le(fadt, fadt_offset::kSciInt, 2), 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kFlags, 4), (1u << 20) | (1u << 10));
  EXPECT_EQ(Le(fadt, fadt_offset::kIapcBootArch, 2), 0x6u);
  // Generic Address Structures: system I/O (1), 8 bits, offset 0, byte access (1), port.
  EXPECT_THAT(std::vector<uint8_t>(fadt.begin() + fadt_offset::kResetReg,
                                   fadt.begin() + fadt_offset::kResetReg + 12),
              ElementsAre(1, 8, 0, 1, 0x02, 0x06, 0, 0, 0, 0, 0, 0));
  EXPECT_EQ(fadt[fadt_offset::kResetValue], 0x42);
  EXPECT_EQ(Le(fadt, fadt_offset::kSleepControlReg + 4, 8), 0x600u);
  EXPECT_EQ(fadt[fadt_offset::kSleepControlReg], 1);
  EXPECT_EQ(Le(fadt, fadt_offset::kSleepStatusReg + 4, 8), 0x601u);
  EXPECT_EQ(Chars(fadt, fadt_offset::kHypervisorVendor, 7), "microvm");
  // Hardware-reduced: no PM1/PM2/PM timer/GPE blocks, 32-bit (offsets 56-95) or 64-bit (148-243).
  for (size_t offset = 56; offset < 96; ++offset) EXPECT_EQ(fadt[offset], 0) << offset;
  for (size_t offset = 148; offset < 244; ++offset) EXPECT_EQ(fadt[offset], 0) << offset;
}

TEST(FadtTest, FixedHardwareLayout) {
  FadtConfig config;
  config.dsdt_address = 0xe0200;
  config.facs_address = 0xe0200;
  config.sci_interrupt = 9;
  config.flags = kFadtSleepButton | kFadtResetRegSupported;
  config.pm1a_event_block = GenericAddress::Port(0x600, 32, 2);
  config.pm1a_control_block = GenericAddress::Port(0x604, 16, 2);
  config.pm_timer_block = GenericAddress::Port(0x608, 32, 3);
  config.reset_register = GenericAddress::Port8(0x60c);
  config.reset_value = 0x42;
  const std::vector<uint8_t> fadt = BuildFadt(config);
  ExpectHeader(fadt, "FACP", 6);
  EXPECT_EQ(Le(fadt, fadt_offset::kFirmwareCtrl, 4), 0xe0200u);
  EXPECT_EQ(Le(fadt, fadt_offset::kXFirmwareCtrl, 8), 0u) << "only one FACS pointer";
  EXPECT_EQ(Le(fadt, fadt_offset::kSciInt, 2), 9u);
  EXPECT_EQ(Le(fadt, fadt_offset::kSmiCmd, 4), 0u) << "no SMM: always in ACPI mode";
  // 32-bit blocks and lengths, and the X_ structures: the same ports and widths.
  EXPECT_EQ(Le(fadt, fadt_offset::kPm1aEventBlock, 4), 0x600u);
  EXPECT_EQ(Le(fadt, fadt_offset::kPm1aControlBlock, 4), 0x604u);
  EXPECT_EQ(Le(fadt, fadt_offset::kPmTimerBlock, 4), 0x608u);
  EXPECT_EQ(fadt[fadt_offset::kPm1EventLength], 4);
  EXPECT_EQ(fadt[fadt_offset::kPm1ControlLength], 2);
  EXPECT_EQ(fadt[fadt_offset::kPmTimerLength], 4);
  EXPECT_THAT(std::vector<uint8_t>(fadt.begin() + fadt_offset::kXPm1aEventBlock,
                                   fadt.begin() + fadt_offset::kXPm1aEventBlock + 12),
              ElementsAre(1, 32, 0, 2, 0x00, 0x06, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(std::vector<uint8_t>(fadt.begin() + fadt_offset::kXPm1aControlBlock,
                                   fadt.begin() + fadt_offset::kXPm1aControlBlock + 12),
              ElementsAre(1, 16, 0, 2, 0x04, 0x06, 0, 0, 0, 0, 0, 0));
  EXPECT_THAT(std::vector<uint8_t>(fadt.begin() + fadt_offset::kXPmTimerBlock,
                                   fadt.begin() + fadt_offset::kXPmTimerBlock + 12),
              ElementsAre(1, 32, 0, 3, 0x08, 0x06, 0, 0, 0, 0, 0, 0));
  // No PM1b, PM2 or GPE blocks (32-bit or X_), no sleep registers.
  for (size_t offset : {60, 68, 72, 80, 84}) EXPECT_EQ(Le(fadt, offset, 4), 0u) << offset;
  for (size_t offset = 90; offset < 96; ++offset) {
    if (offset != fadt_offset::kPmTimerLength) {
      EXPECT_EQ(fadt[offset], 0) << offset;
    }
  }
  for (size_t offset : {160, 184, 196, 220, 232, 244, 256}) {
    EXPECT_EQ(Le(fadt, offset, 8), 0u) << offset;
    EXPECT_EQ(Le(fadt, offset + 4, 8), 0u) << offset;
  }
  // No C2/C3.
  EXPECT_GT(Le(fadt, fadt_offset::kC2Latency, 2), 100u);
  EXPECT_GT(Le(fadt, fadt_offset::kC3Latency, 2), 1000u);
}

TEST(FacsTest, SixtyFourBytesVersionTwo) {
  const std::vector<uint8_t> facs = BuildFacs();
  ASSERT_EQ(facs.size(), 64u);
  EXPECT_EQ(Chars(facs, 0, 4), "FACS");
  EXPECT_EQ(Le(facs, 4, 4), 64u);
  EXPECT_EQ(facs[32], 2);
  for (size_t offset = 8; offset < 64; ++offset) {
    if (offset != 32) {
      EXPECT_EQ(facs[offset], 0) << offset;
    }
  }
}

TEST(MadtTest, OneLocalApicPerCpu) {
  for (uint8_t cpus : {1, 2, 4, 40}) {
    MadtConfig config;
    config.local_apic_address = 0xfee00000;
    config.flags = kMadtPcatCompat;
    for (uint8_t id = 0; id < cpus; ++id) config.cpu_apic_ids.push_back(id);
    config.ioapic_id = cpus;
    config.ioapic_address = 0xfec00000;
    const std::vector<uint8_t> madt = BuildMadt(config);
    ExpectHeader(madt, "APIC", kMadtRevision);
    ASSERT_EQ(madt.size(), kTableHeaderBytes + 8 + cpus * 8u + 12 + 6);
    EXPECT_EQ(Le(madt, 36, 4), 0xfee00000u);
    EXPECT_EQ(Le(madt, 40, 4), 1u);
    size_t offset = 44;
    for (uint8_t id = 0; id < cpus; ++id, offset += 8) {
      EXPECT_THAT(std::vector<uint8_t>(madt.begin() + offset, madt.begin() + offset + 8),
                  ElementsAre(0, 8, id, id, 1, 0, 0, 0));
    }
    EXPECT_THAT(std::vector<uint8_t>(madt.begin() + offset, madt.begin() + offset + 12),
                ElementsAre(1, 12, cpus, 0, 0x00, 0x00, 0xc0, 0xfe, 0, 0, 0, 0));
    offset += 12;
    // Local APIC NMI: every processor (0xff), flags 0, LINT1.
    EXPECT_THAT(std::vector<uint8_t>(madt.begin() + offset, madt.end()),
                ElementsAre(4, 6, 0xff, 0, 0, 1));
  }
}

TEST(MadtTest, InterruptSourceOverride) {
  MadtConfig config;
  config.cpu_apic_ids = {0};
  config.overrides.push_back({.source_irq = 0, .gsi = 2, .flags = 0});
  const std::vector<uint8_t> madt = BuildMadt(config);
  ExpectHeader(madt, "APIC", kMadtRevision);
  const size_t offset = 44 + 8 + 12;
  EXPECT_THAT(std::vector<uint8_t>(madt.begin() + offset, madt.begin() + offset + 10),
              ElementsAre(2, 10, 0, 0, 2, 0, 0, 0, 0, 0));
}

TEST(DsdtTest, WrapsTheAml) {
  const uint8_t aml[] = {0x10, 0x06, 0x5c, '_', 'S', 'B', '_'};
  const std::vector<uint8_t> dsdt = BuildDsdt(aml);
  ExpectHeader(dsdt, "DSDT", 2);
  EXPECT_EQ(std::memcmp(dsdt.data() + kTableHeaderBytes, aml, sizeof(aml)), 0);
}

}  // namespace
}  // namespace vmm::acpi

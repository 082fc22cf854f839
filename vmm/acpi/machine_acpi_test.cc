#include "vmm/acpi/machine_acpi.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/acpi/machine_acpi_testing.h"
#include "vmm/acpi/tables.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/layout.h"
#include "vmm/machine/machine_description.h"
#include "vmm/machine/machine_description_testing.h"

namespace vmm::acpi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::SampleMachine;

uint64_t Le(const std::vector<uint8_t>& bytes, size_t offset, int width) {
  uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | bytes.at(offset + i);
  return value;
}

const AcpiTable& Find(const AcpiTables& tables, const std::string& signature) {
  for (const AcpiTable& table : tables.tables) {
    if (table.signature == signature) return table;
  }
  ADD_FAILURE() << "no " << signature;
  return tables.tables.front();
}

std::string Text(const std::vector<uint8_t>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

TEST(MachineAcpiTest, LayoutAndPointers) {
  auto tables = BuildMachineAcpi(SampleMachine(2), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_EQ(tables->tables.size(), 6u);
  EXPECT_EQ(tables->rsdp_address(), 0xe0000u);
  uint64_t previous_end = kAcpiTablesAddress;
  for (const AcpiTable& table : tables->tables) {
    EXPECT_EQ(table.address % 16, 0u) << table.signature;
    EXPECT_GE(table.address, previous_end) << table.signature << " overlaps the table before it";
    previous_end = table.address + table.bytes.size();
  }
  EXPECT_LE(previous_end, kAcpiTablesEnd);

  const AcpiTable& rsdp = Find(*tables, "RSD PTR ");
  const AcpiTable& xsdt = Find(*tables, "XSDT");
  const AcpiTable& fadt = Find(*tables, "FACP");
  const AcpiTable& facs = Find(*tables, "FACS");
  const AcpiTable& madt = Find(*tables, "APIC");
  const AcpiTable& dsdt = Find(*tables, "DSDT");
  EXPECT_EQ(Le(rsdp.bytes, 24, 8), xsdt.address);
  EXPECT_EQ(facs.address % 64, 0u) << "5.2.10: the FACS is 64-byte aligned";
  EXPECT_EQ(Le(fadt.bytes, fadt_offset::kFirmwareCtrl, 4), facs.address);
  EXPECT_EQ(facs.bytes.size(), 64u);
  ASSERT_EQ(xsdt.bytes.size(), kTableHeaderBytes + 16);
  EXPECT_EQ(Le(xsdt.bytes, 36, 8), fadt.address);
  EXPECT_EQ(Le(xsdt.bytes, 44, 8), madt.address);
  EXPECT_EQ(Le(fadt.bytes, fadt_offset::kXDsdt, 8), dsdt.address);
  // Every table's length field matches what is placed.
  for (const AcpiTable* table : {&xsdt, &fadt, &madt, &dsdt}) {
    EXPECT_EQ(Le(table->bytes, 4, 4), table->bytes.size()) << table->signature;
    EXPECT_EQ(Checksum(table->bytes), 0) << table->signature;
  }
}

TEST(MachineAcpiTest, FadtDescribesTheFixedHardware) {
  auto tables = BuildMachineAcpi(SampleMachine(1), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  const std::vector<uint8_t>& fadt = Find(*tables, "FACP").bytes;
  EXPECT_EQ(Le(fadt, fadt_offset::kSciInt, 2), kAcpiSciIrq);
  EXPECT_EQ(Le(fadt, fadt_offset::kSmiCmd, 4), 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kPm1aEventBlock, 4), kAcpiPm1EventPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kXPm1aEventBlock + 4, 8), kAcpiPm1EventPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kPm1aControlBlock, 4), kAcpiPm1ControlPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kXPm1aControlBlock + 4, 8), kAcpiPm1ControlPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kPmTimerBlock, 4), kAcpiPmTimerPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kXPmTimerBlock + 4, 8), kAcpiPmTimerPort);
  EXPECT_EQ(Le(fadt, fadt_offset::kResetReg + 4, 8), kAcpiResetPort);
  EXPECT_EQ(fadt[fadt_offset::kResetValue], 0x42);
  EXPECT_EQ(Le(fadt, fadt_offset::kSleepControlReg, 8), 0u) << "hardware-reduced only";
  EXPECT_EQ(Le(fadt, fadt_offset::kSleepStatusReg, 8), 0u);
  const uint32_t flags = static_cast<uint32_t>(Le(fadt, fadt_offset::kFlags, 4));
  EXPECT_EQ(flags & kFadtHwReducedAcpi, 0u);
  EXPECT_EQ(flags & kFadtPowerButton, 0u) << "the power button is a fixed feature";
  EXPECT_NE(flags & kFadtSleepButton, 0u) << "there is no sleep button";
  EXPECT_EQ(flags & kFadtTimerValueExtended, 0u) << "24-bit PM timer";
  EXPECT_NE(flags & kFadtResetRegSupported, 0u);
  // Legacy devices (the UART), no 8042 (reset line only), no VGA, no CMOS RTC; MSI works.
  EXPECT_EQ(Le(fadt, fadt_offset::kIapcBootArch, 2),
            uint64_t{kBootArchLegacyDevices | kBootArchVgaNotPresent | kBootArchPcieAspmControls |
                     kBootArchCmosRtcNotPresent});
}

TEST(MachineAcpiTest, WithoutPowerManagementDeviceHardwareReducedWithoutS5) {
  MachineDescription machine = SampleMachine(1);
  std::erase_if(machine.devices, [](const DeviceDescription& device) {
    return device.compatible.front() == kAcpiPmCompatible;
  });
  auto tables = BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  const std::vector<uint8_t>& fadt = Find(*tables, "FACP").bytes;
  EXPECT_EQ(Le(fadt, fadt_offset::kSleepControlReg, 8), 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kFlags, 4) & kFadtResetRegSupported, 0u);
  EXPECT_NE(Le(fadt, fadt_offset::kFlags, 4) & kFadtHwReducedAcpi, 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kPm1aEventBlock, 4), 0u);
  EXPECT_EQ(Le(fadt, fadt_offset::kFirmwareCtrl, 4), 0u);
  EXPECT_EQ(tables->tables.size(), 5u) << "no FACS";
  for (size_t offset = 44; offset < Find(*tables, "APIC").bytes.size();
       offset += Find(*tables, "APIC").bytes.at(offset + 1)) {
    EXPECT_NE(Find(*tables, "APIC").bytes[offset], 2) << "no SCI, no override";
  }
  EXPECT_THAT(Text(Find(*tables, "DSDT").bytes), Not(HasSubstr("_S5_")));
}

TEST(MachineAcpiTest, MadtHasOneEnabledLocalApicPerCpu) {
  for (uint32_t cpus : {1u, 2u, 8u, 40u}) {
    auto tables = BuildMachineAcpi(SampleMachine(cpus), kAcpiTablesAddress, kAcpiTablesEnd);
    ASSERT_TRUE(tables.ok()) << tables.status();
    const std::vector<uint8_t>& madt = Find(*tables, "APIC").bytes;
    size_t local_apics = 0;
    size_t ioapics = 0;
    size_t overrides = 0;
    for (size_t offset = 44; offset < madt.size(); offset += madt.at(offset + 1)) {
      ASSERT_GE(madt.at(offset + 1), 2u);
      switch (madt[offset]) {
        case 0:
          EXPECT_EQ(madt[offset + 2], local_apics) << "processor UID";
          EXPECT_EQ(madt[offset + 3], local_apics) << "APIC id";
          EXPECT_EQ(Le(madt, offset + 4, 4), 1u) << "enabled";
          ++local_apics;
          break;
        case 1:
          EXPECT_EQ(madt[offset + 2], cpus) << "IOAPIC id follows the CPUs', as in the MP table";
          EXPECT_EQ(Le(madt, offset + 4, 4), kIoapicAddress);
          EXPECT_EQ(Le(madt, offset + 8, 4), 0u) << "GSI base";
          ++ioapics;
          break;
        case 2:
          // Only the SCI's: ISA (bus 0) IRQ 9 -> GSI 9, active high (01), level (11 << 2).
          EXPECT_EQ(madt[offset + 2], 0) << "bus";
          EXPECT_EQ(madt[offset + 3], kAcpiSciIrq) << "source";
          EXPECT_EQ(Le(madt, offset + 4, 4), kAcpiSciIrq) << "GSI";
          EXPECT_EQ(Le(madt, offset + 8, 2), 0x000du) << "flags";
          ++overrides;
          break;
        default:
          break;
      }
    }
    EXPECT_EQ(local_apics, cpus);
    EXPECT_EQ(ioapics, 1u);
    EXPECT_EQ(overrides, 1u) << "the SCI's; none for IRQ 0 (KVM's default routing)";
  }
}

TEST(MachineAcpiTest, DsdtNamesTheDevices) {
  auto tables = BuildMachineAcpi(SampleMachine(1), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  const std::string dsdt = Text(Find(*tables, "DSDT").bytes);
  for (const char* name : {"_SB_", "PCI0", "COM1", "RES0", "RES1", "RES2", "_S5_", "_CRS"}) {
    EXPECT_THAT(dsdt, HasSubstr(name));
  }
  // No keyboard controller for the OS to probe: the i8042 is only the reset line.
  EXPECT_THAT(dsdt, Not(HasSubstr("PS2K")));
  EXPECT_THAT(dsdt, Not(HasSubstr("RES3")));
}

TEST(MachineAcpiTest, RejectsWhatItCannotDescribe) {
  MachineDescription machine = SampleMachine(1);
  machine.cpu_apic_ids.clear();
  EXPECT_EQ(BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd).status().code(),
            absl::StatusCode::kInvalidArgument);

  machine = SampleMachine(2);
  machine.cpu_apic_ids = {0, 0};
  EXPECT_EQ(BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd).status().code(),
            absl::StatusCode::kInvalidArgument);

  machine = SampleMachine(1);
  machine.pci_windows.reset();
  EXPECT_EQ(BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd).status().code(),
            absl::StatusCode::kInvalidArgument);

  machine = SampleMachine(1);
  machine.devices[0].ranges = {{0xfffe, 8}};
  EXPECT_EQ(BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd).status().code(),
            absl::StatusCode::kInvalidArgument);

  machine = SampleMachine(1);
  machine.devices[0].interrupt = 24;
  EXPECT_EQ(BuildMachineAcpi(machine, kAcpiTablesAddress, kAcpiTablesEnd).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Too little room.
  EXPECT_EQ(BuildMachineAcpi(SampleMachine(1), kAcpiTablesAddress, kAcpiTablesAddress + 0x100)
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(MachineAcpiTest, WritesTheTablesToGuestMemory) {
  auto memory = GuestMemory::CreateX86(64ull << 20);
  ASSERT_TRUE(memory.ok()) << memory.status();
  auto tables = BuildMachineAcpi(SampleMachine(2), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_TRUE(WriteAcpiTables(*memory, *tables).ok());
  for (const AcpiTable& table : tables->tables) {
    std::vector<uint8_t> back(table.bytes.size());
    ASSERT_TRUE(memory->Read(GuestAddress(table.address), back).ok());
    EXPECT_EQ(back, table.bytes) << table.signature;
  }
}

std::string ReadFile(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  return text.str();
}

// Disassembles every table with iasl (ACPICA): the AML and the fixed layouts must decode without
// errors, and the disassembled DSDT must compile back without errors.
TEST(MachineAcpiTest, IaslDisassemblesTheTables) {
  if (access("/usr/bin/iasl", X_OK) != 0) MICROVM_SKIP("iasl is not installed (tools/setup)");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/acpi");
  mkdir(dir.c_str(), 0755);
  auto tables = BuildMachineAcpi(SampleMachine(2), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_TRUE(WriteAcpiFiles(*tables, dir).ok());

  // (iasl -d only takes tables with the standard header, so not the RSDP: RsdpTest checks it.)
  for (const char* name : {"dsdt", "facp", "facs", "apic", "xsdt"}) {
    const std::string log = absl::StrCat(dir, "/", name, ".log");
    const std::string command =
        absl::StrCat("cd ", dir, " && /usr/bin/iasl -d ", name, ".dat >", log, " 2>&1");
    const int status = std::system(command.c_str());
    const std::string output = ReadFile(log);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output;
    EXPECT_THAT(output, Not(HasSubstr("Error"))) << name;
    EXPECT_THAT(output, Not(HasSubstr("Warning"))) << name;
    EXPECT_THAT(output, Not(HasSubstr("Invalid"))) << name;
    EXPECT_THAT(ReadFile(absl::StrCat(dir, "/", name, ".dsl")), Not(HasSubstr("**** ")))
        << name << ": iasl flagged a field";
  }
  const std::string dsdt = ReadFile(dir + "/dsdt.dsl");
  EXPECT_THAT(dsdt, HasSubstr("Device (PCI0)"));
  EXPECT_THAT(dsdt, HasSubstr("EisaId (\"PNP0A03\")"));
  EXPECT_THAT(dsdt, HasSubstr("Device (COM1)"));
  EXPECT_THAT(dsdt, HasSubstr("EisaId (\"PNP0501\")"));
  EXPECT_THAT(dsdt, Not(HasSubstr("PNP0303")));
  EXPECT_THAT(dsdt, HasSubstr("Name (_S5, Package"));
  EXPECT_THAT(dsdt, HasSubstr("0x0CF8"));
  EXPECT_THAT(dsdt, HasSubstr("0xFEBFFFFF"));
  const std::string facp = ReadFile(dir + "/facp.dsl");
  EXPECT_THAT(facp, HasSubstr("Hardware Reduced (V5) : 0"));
  EXPECT_THAT(facp, HasSubstr("SCI Interrupt : 0009"));
  EXPECT_THAT(facp, HasSubstr("SMI Command Port : 00000000"));
  EXPECT_THAT(facp, HasSubstr("PM1A Event Block Address : 00000600"));
  EXPECT_THAT(facp, HasSubstr("PM1A Control Block Address : 00000604"));
  EXPECT_THAT(facp, HasSubstr("PM Timer Block Address : 00000608"));
  EXPECT_THAT(facp, HasSubstr("PM1 Event Block Length : 04"));
  EXPECT_THAT(facp, HasSubstr("PM1 Control Block Length : 02"));
  EXPECT_THAT(facp, HasSubstr("PM Timer Block Length : 04"));
  EXPECT_THAT(facp, HasSubstr("Control Method Power Button (V1) : 0"));
  EXPECT_THAT(facp, HasSubstr("Control Method Sleep Button (V1) : 1"));
  EXPECT_THAT(facp, HasSubstr("8042 Present on ports 60/64 (V2) : 0"));
  const std::string facs = ReadFile(dir + "/facs.dsl");
  EXPECT_THAT(facs, HasSubstr("Signature : \"FACS\""));
  EXPECT_THAT(facs, HasSubstr("Version : 02"));
  const std::string apic = ReadFile(dir + "/apic.dsl");
  EXPECT_THAT(apic, HasSubstr("Local Apic ID : 01"));
  EXPECT_THAT(apic, HasSubstr("Interrupt : 00000009"));
  EXPECT_THAT(apic, HasSubstr("Trigger Mode : 3"));
  EXPECT_THAT(apic, HasSubstr("Polarity : 1"));

  // The disassembly compiles back: the AML was well formed enough to round-trip.
  const std::string log = dir + "/recompile.log";
  const std::string command =
      absl::StrCat("cd ", dir, " && /usr/bin/iasl -p recompiled dsdt.dsl >", log, " 2>&1");
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log);
  EXPECT_THAT(ReadFile(log), HasSubstr("0 Errors"));
}

// Loads the tables into ACPICA's interpreter (the code Linux runs) with acpiexec and evaluates what a
// guest evaluates: the namespace must load without exceptions and \_S5 must give the sleep type
// the power-off register decodes.
TEST(MachineAcpiTest, AcpiexecLoadsTheNamespace) {
  if (access("/usr/bin/acpiexec", X_OK) != 0)
    MICROVM_SKIP("acpiexec is not installed (tools/setup)");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/acpiexec");
  mkdir(dir.c_str(), 0755);
  auto tables = BuildMachineAcpi(SampleMachine(2), kAcpiTablesAddress, kAcpiTablesEnd);
  ASSERT_TRUE(tables.ok()) << tables.status();
  ASSERT_TRUE(WriteAcpiFiles(*tables, dir).ok());
  const std::string log = dir + "/acpiexec.log";
  const std::string command = absl::StrCat(
      "cd ", dir,
      " && /usr/bin/acpiexec -b 'evaluate \\_S5;evaluate \\_SB.PCI0._CRS' dsdt.dat facp.dat "
      "apic.dat >",
      log, " 2>&1 </dev/null");
  const int status = std::system(command.c_str());
  const std::string output = ReadFile(log);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command << "\n" << output;
  EXPECT_THAT(output, HasSubstr("ACPI AML tables successfully acquired and loaded"));
  EXPECT_THAT(output, Not(HasSubstr("Exception"))) << output;
  EXPECT_THAT(output, Not(HasSubstr("Error"))) << output;
  EXPECT_THAT(output, HasSubstr("[Integer] = 0000000000000005")) << output;
  EXPECT_THAT(output, HasSubstr("Evaluation of \\_SB.PCI0._CRS returned")) << output;
}

}  // namespace
}  // namespace vmm::acpi

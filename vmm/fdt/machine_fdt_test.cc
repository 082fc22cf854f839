#include "vmm/fdt/machine_fdt.h"

#include <libfdt.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/skip.h"
#include "vmm/machine/layout.h"
#include "vmm/machine/machine_description.h"
#include "vmm/machine/machine_description_testing.h"

namespace vmm::fdt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Space = DeviceDescription::AddressSpace;

// The machine docs/machine.md describes: 5 GiB of RAM (3 GiB low, 2 GiB above 4 GiB), 4 CPUs,
// the legacy ISA devices, plus one MMIO device to exercise the root-level path.
MachineDescription SampleMachine() {
  MachineDescription machine;
  machine.memory = {{0, kMmioHoleStart}, {kHighRamStart, 2ull << 30}};
  machine.cpu_apic_ids = {0, 1, 2, 3};
  machine.cmdline = "console=ttyS0 reboot=k panic=1";
  fixtures::AddLegacyPortDevices(machine);
  machine.devices.push_back({.node_name = "virtio-mmio",
                             .compatible = {"virtio,mmio", "microvm,virtio"},
                             .space = Space::kMmio,
                             .ranges = {{0xd0000000, 0x200}},
                             .interrupt = 5});
  return machine;
}

std::vector<uint32_t> Cells(const void* fdt, int node, const char* name) {
  int len = 0;
  const void* value = fdt_getprop(fdt, node, name, &len);
  if (value == nullptr || len % 4 != 0) {
    ADD_FAILURE() << "property " << name << " missing or not cells (" << len << ")";
    return {};
  }
  std::vector<uint32_t> cells(len / 4);
  for (int i = 0; i < len / 4; ++i) {
    cells[i] = fdt32_to_cpu(static_cast<const fdt32_t*>(value)[i]);
  }
  return cells;
}

// A string or string list property, NULs kept.
std::string Bytes(const void* fdt, int node, const char* name) {
  int len = 0;
  const void* value = fdt_getprop(fdt, node, name, &len);
  if (value == nullptr) {
    ADD_FAILURE() << "property " << name << " missing";
    return "";
  }
  return std::string(static_cast<const char*>(value), len);
}

bool HasProp(const void* fdt, int node, const char* name) {
  return fdt_getprop(fdt, node, name, nullptr) != nullptr;
}

int Path(const void* fdt, const char* path) {
  const int node = fdt_path_offset(fdt, path);
  EXPECT_GE(node, 0) << path << ": " << fdt_strerror(node);
  return node;
}

std::string Z(std::string_view s) { return std::string(s) + '\0'; }

class MachineFdtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(SampleMachine());
    ASSERT_TRUE(blob.ok()) << blob.status();
    blob_ = *std::move(blob);
    ASSERT_EQ(fdt_check_header(fdt()), 0);
  }
  const void* fdt() const { return blob_.data(); }
  std::vector<uint8_t> blob_;
};

TEST_F(MachineFdtTest, HeaderIsPackedAndWithinLimit) {
  EXPECT_EQ(fdt_totalsize(fdt()), blob_.size());
  EXPECT_LE(blob_.size(), kFdtMaxBytes);
  // Packed: the strings block is the last thing in the blob.
  EXPECT_EQ(fdt_off_dt_strings(fdt()) + fdt_size_dt_strings(fdt()), blob_.size());
  EXPECT_EQ(fdt_num_mem_rsv(fdt()), 0);
  EXPECT_EQ(fdt_version(fdt()), 17u);
}

TEST_F(MachineFdtTest, Root) {
  const int root = Path(fdt(), "/");
  EXPECT_EQ(Bytes(fdt(), root, "compatible"), Z("microvm,x86-64"));
  EXPECT_EQ(Bytes(fdt(), root, "model"), Z("microvm"));
  EXPECT_THAT(Cells(fdt(), root, "#address-cells"), ElementsAre(2u));
  EXPECT_THAT(Cells(fdt(), root, "#size-cells"), ElementsAre(2u));
  EXPECT_THAT(Cells(fdt(), root, "interrupt-parent"), ElementsAre(kIoapicPhandle));
  EXPECT_EQ(fdt_address_cells(fdt(), root), 2);
  EXPECT_EQ(fdt_size_cells(fdt(), root), 2);
}

TEST_F(MachineFdtTest, Chosen) {
  const int chosen = Path(fdt(), "/chosen");
  EXPECT_EQ(Bytes(fdt(), chosen, "bootargs"), Z("console=ttyS0 reboot=k panic=1"));
  EXPECT_EQ(Bytes(fdt(), chosen, "stdout-path"), Z("/isa/serial@3f8"));
  // The stdout path resolves.
  EXPECT_GE(fdt_path_offset(fdt(), "/isa/serial@3f8"), 0);
}

TEST_F(MachineFdtTest, Memory) {
  const int memory = Path(fdt(), "/memory@0");
  EXPECT_EQ(Bytes(fdt(), memory, "device_type"), Z("memory"));
  EXPECT_THAT(Cells(fdt(), memory, "reg"),
              ElementsAre(0u, 0u, 0u, 0xc0000000u, 1u, 0u, 0u, 0x80000000u));
}

TEST_F(MachineFdtTest, Cpus) {
  const int cpus = Path(fdt(), "/cpus");
  EXPECT_THAT(Cells(fdt(), cpus, "#address-cells"), ElementsAre(1u));
  EXPECT_THAT(Cells(fdt(), cpus, "#size-cells"), ElementsAre(0u));
  int count = 0;
  int cpu;
  fdt_for_each_subnode(cpu, fdt(), cpus) {
    EXPECT_EQ(fdt_get_name(fdt(), cpu, nullptr), absl::StrCat("cpu@", count));
    EXPECT_EQ(Bytes(fdt(), cpu, "device_type"), Z("cpu"));
    EXPECT_THAT(Cells(fdt(), cpu, "reg"), ElementsAre(static_cast<uint32_t>(count)));
    ++count;
  }
  EXPECT_EQ(count, 4);
}

TEST_F(MachineFdtTest, InterruptControllers) {
  const int ioapic = Path(fdt(), "/interrupt-controller@fec00000");
  EXPECT_EQ(fdt_node_offset_by_compatible(fdt(), -1, "intel,ce4100-ioapic"), ioapic);
  EXPECT_THAT(Cells(fdt(), ioapic, "reg"), ElementsAre(0u, 0xfec00000u, 0u, 0x1000u));
  EXPECT_TRUE(HasProp(fdt(), ioapic, "interrupt-controller"));
  EXPECT_THAT(Cells(fdt(), ioapic, "#interrupt-cells"), ElementsAre(2u));
  EXPECT_THAT(Cells(fdt(), ioapic, "#address-cells"), ElementsAre(0u));
  EXPECT_EQ(fdt_get_phandle(fdt(), ioapic), kIoapicPhandle);
  EXPECT_EQ(fdt_node_offset_by_phandle(fdt(), kIoapicPhandle), ioapic);

  const int lapic = Path(fdt(), "/interrupt-controller@fee00000");
  EXPECT_EQ(fdt_node_offset_by_compatible(fdt(), -1, "intel,ce4100-lapic"), lapic);
  EXPECT_THAT(Cells(fdt(), lapic, "reg"), ElementsAre(0u, 0xfee00000u, 0u, 0x1000u));
  EXPECT_TRUE(HasProp(fdt(), lapic, "interrupt-controller"));
  EXPECT_TRUE(HasProp(fdt(), lapic, "intel,virtual-wire-mode"));
}

TEST_F(MachineFdtTest, IsaDevices) {
  const int isa = Path(fdt(), "/isa");
  EXPECT_EQ(Bytes(fdt(), isa, "compatible"), Z("isa"));
  EXPECT_THAT(Cells(fdt(), isa, "#address-cells"), ElementsAre(2u));
  EXPECT_THAT(Cells(fdt(), isa, "#size-cells"), ElementsAre(1u));
  EXPECT_THAT(Cells(fdt(), isa, "ranges"), ElementsAre(1u, 0u, 0u, 0u, 0x10000u));

  const int serial = Path(fdt(), "/isa/serial@3f8");
  EXPECT_EQ(fdt_node_offset_by_compatible(fdt(), -1, "ns16550a"), serial);
  EXPECT_THAT(Cells(fdt(), serial, "reg"), ElementsAre(1u, 0x3f8u, 8u));
  EXPECT_THAT(Cells(fdt(), serial, "interrupts"), ElementsAre(4u, 3u)) << "pin 4, rising edge";
  EXPECT_THAT(Cells(fdt(), serial, "clock-frequency"), ElementsAre(1843200u));
  EXPECT_EQ(fdt_parent_offset(fdt(), serial), isa);

  const int kbd = Path(fdt(), "/isa/keyboard-controller@60");
  EXPECT_EQ(Bytes(fdt(), kbd, "compatible"), Z("intel,8042"));
  EXPECT_THAT(Cells(fdt(), kbd, "reg"), ElementsAre(1u, 0x60u, 1u, 1u, 0x64u, 1u));
  EXPECT_FALSE(HasProp(fdt(), kbd, "interrupts"));
  EXPECT_FALSE(HasProp(fdt(), kbd, "clock-frequency"));

  const int debug_exit = Path(fdt(), "/isa/debug-exit@f4");
  EXPECT_EQ(Bytes(fdt(), debug_exit, "compatible"), Z("microvm,debug-exit"));
  EXPECT_THAT(Cells(fdt(), debug_exit, "reg"), ElementsAre(1u, 0xf4u, 1u));

  const int post = Path(fdt(), "/isa/post-code@80");
  EXPECT_EQ(Bytes(fdt(), post, "compatible"), Z("microvm,post-code"));
  EXPECT_THAT(Cells(fdt(), post, "reg"), ElementsAre(1u, 0x80u, 1u));

  int count = 0;
  int child;
  fdt_for_each_subnode(child, fdt(), isa)++ count;
  EXPECT_EQ(count, 4);  // The MMIO device is not on the ISA bus.
}

TEST_F(MachineFdtTest, MmioDeviceUnderRoot) {
  const int node = Path(fdt(), "/virtio-mmio@d0000000");
  EXPECT_EQ(fdt_parent_offset(fdt(), node), 0);
  EXPECT_EQ(Bytes(fdt(), node, "compatible"), Z("virtio,mmio") + Z("microvm,virtio"));
  EXPECT_EQ(fdt_node_check_compatible(fdt(), node, "microvm,virtio"), 0);
  EXPECT_THAT(Cells(fdt(), node, "reg"), ElementsAre(0u, 0xd0000000u, 0u, 0x200u));
  EXPECT_THAT(Cells(fdt(), node, "interrupts"), ElementsAre(5u, kIrqTypeEdgeRising));
}

TEST_F(MachineFdtTest, DtcDecodesIt) {
  if (access("/usr/bin/dtc", X_OK) != 0) MICROVM_SKIP("dtc is not installed (tools/setup)");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string dtb = dir + "/machine.dtb";
  const std::string dts = dir + "/machine.dts";
  const std::string err = dir + "/dtc.err";
  ASSERT_TRUE(WriteFdtFile(blob_, dtb).ok());
  const std::string command =
      // unit_address_vs_reg would flag /isa (it has `ranges` but no unit address); the node keeps
      // the plain name docs/machine.md and stdout-path use. Linux's own dtc runs disable this
      // check too (scripts/Makefile.lib, unless W=1).
      absl::StrCat("/usr/bin/dtc -I dtb -O dts -W no-unit_address_vs_reg -o ", dts, " ", dtb, " 2>",
                   err);
  const int status = std::system(command.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << command;
  std::stringstream text;
  text << std::ifstream(dts).rdbuf();
  std::stringstream warnings;
  warnings << std::ifstream(err).rdbuf();
  // dtc checks the tree against the specification's conventions while decoding; none may fire.
  EXPECT_EQ(warnings.str(), "");
  EXPECT_THAT(text.str(), HasSubstr("compatible = \"microvm,x86-64\";"));
  EXPECT_THAT(text.str(), HasSubstr("stdout-path = \"/isa/serial@3f8\";"));
  EXPECT_THAT(text.str(), HasSubstr("serial@3f8 {"));
  EXPECT_THAT(text.str(), HasSubstr("reg = <0x01 0x3f8 0x08>;"));
  EXPECT_THAT(text.str(), HasSubstr("interrupts = <0x04 0x03>;"));
  EXPECT_THAT(text.str(), HasSubstr("cpu@3 {"));
}

TEST(MachineFdtErrorTest, TooBigForTheReservedSpace) {
  MachineDescription machine = SampleMachine();
  // About 80 bytes of structure per device: 1000 devices need well over 64 KiB.
  for (uint32_t i = 0; i < 1000; ++i) {
    machine.devices.push_back({.node_name = "filler-device-with-a-long-name",
                               .compatible = {"microvm,a-rather-long-compatible-string"},
                               .space = Space::kMmio,
                               .ranges = {{0xe0000000ull + i * 0x1000, 0x1000}}});
  }
  absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(machine);
  EXPECT_EQ(blob.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(blob.status().message(), HasSubstr("65536"));
}

TEST(MachineFdtErrorTest, LongCommandLineStillFitsWhenSmallEnough) {
  // Growth path: a command line larger than the first buffer still succeeds.
  MachineDescription machine = SampleMachine();
  machine.cmdline = std::string(20000, 'x');
  absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(machine);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const int chosen = fdt_path_offset(blob->data(), "/chosen");
  EXPECT_EQ(Bytes(blob->data(), chosen, "bootargs"), Z(machine.cmdline));
}

TEST(MachineFdtErrorTest, RejectsInvalidDescriptions) {
  auto code = [](const MachineDescription& m) { return BuildMachineFdt(m).status().code(); };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;

  MachineDescription m = SampleMachine();
  m.memory.clear();
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.cpu_apic_ids.clear();
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.cpu_apic_ids = {0, 1, 1};
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.stdout_device = "serial@2f8";
  EXPECT_EQ(code(m), kInvalid);
  EXPECT_THAT(BuildMachineFdt(m).status().message(), HasSubstr("serial@2f8"));

  m = SampleMachine();
  m.devices[0].node_name = "bad name";
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.devices[0].ranges.clear();
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.devices[0].ranges = {{0xfffe, 8}};  // Beyond the 64 KiB port space.
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.devices[0].interrupt = 24;  // The IOAPIC has 24 pins.
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.devices.push_back(m.devices[0]);  // Two serial@3f8 nodes.
  EXPECT_EQ(code(m), kInvalid);

  m = SampleMachine();
  m.cmdline = std::string("a\0b", 3);
  EXPECT_EQ(code(m), kInvalid);
}

TEST(MachineFdtOptionsTest, NoStdoutDeviceOmitsStdoutPath) {
  MachineDescription machine = SampleMachine();
  machine.stdout_device.clear();
  absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(machine);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const int chosen = fdt_path_offset(blob->data(), "/chosen");
  EXPECT_FALSE(HasProp(blob->data(), chosen, "stdout-path"));
}

TEST(MachineFdtOptionsTest, MmioDeviceCanBeTheConsole) {
  MachineDescription machine = SampleMachine();
  machine.stdout_device = "virtio-mmio@d0000000";
  absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(machine);
  ASSERT_TRUE(blob.ok()) << blob.status();
  const int chosen = fdt_path_offset(blob->data(), "/chosen");
  EXPECT_EQ(Bytes(blob->data(), chosen, "stdout-path"), Z("/virtio-mmio@d0000000"));
}

TEST(WriteFdtFileTest, WritesTheBlobAndNamesThePathOnError) {
  absl::StatusOr<std::vector<uint8_t>> blob = BuildMachineFdt(SampleMachine());
  ASSERT_TRUE(blob.ok()) << blob.status();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/dump.dtb";
  ASSERT_TRUE(WriteFdtFile(*blob, path).ok());
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> read((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(read, *blob);

  const std::string bad = "/nonexistent-directory/x.dtb";
  absl::Status status = WriteFdtFile(*blob, bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(bad));

  EXPECT_EQ(WriteFdtFile({1, 2, 3}, path).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vmm::fdt

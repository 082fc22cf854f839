#include "vmm/x86/firmware_config.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "vmm/machine/machine_description.h"

namespace vmm::x86 {
namespace {

uint64_t Le(const std::vector<uint8_t>& bytes, size_t offset, size_t width) {
  uint64_t value = 0;
  for (size_t i = width; i-- > 0;) value = value << 8 | bytes.at(offset + i);
  return value;
}

const std::vector<uint8_t>* File(const FirmwareConfig& config, const std::string& name) {
  for (const FirmwareConfigFile& file : config.files) {
    if (file.name == name) return &file.data;
  }
  return nullptr;
}

const std::vector<uint8_t>* Item(const FirmwareConfig& config, uint16_t key) {
  for (const FirmwareConfigItem& item : config.items) {
    if (item.key == key) return &item.data;
  }
  return nullptr;
}

MachineDescription Machine() {
  MachineDescription machine;
  // Above 4 GiB listed first: the map comes out in address order.
  machine.memory = {{uint64_t{4} << 30, uint64_t{1} << 30}, {0, uint64_t{3} << 30}};
  machine.cpu_apic_ids = {0, 1};
  return machine;
}

TEST(FirmwareConfigTest, RamCpusAndNoBootMenu) {
  auto config = BuildFirmwareConfig(Machine(), {}, {});
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_NE(Item(*config, kFwCfgRamSize), nullptr);
  EXPECT_EQ(Le(*Item(*config, kFwCfgRamSize), 0, 8), uint64_t{4} << 30);
  EXPECT_EQ(Le(*Item(*config, kFwCfgNbCpus), 0, 2), 2u);
  EXPECT_EQ(Le(*Item(*config, kFwCfgMaxCpus), 0, 2), 2u);
  EXPECT_EQ(Le(*Item(*config, kFwCfgBootMenu), 0, 2), 0u);
  ASSERT_NE(File(*config, "etc/show-boot-menu"), nullptr);
  EXPECT_EQ(*File(*config, "etc/show-boot-menu"), std::vector<uint8_t>({0, 0}));

  const std::vector<uint8_t>* e820 = File(*config, "etc/e820");
  ASSERT_NE(e820, nullptr);
  ASSERT_EQ(e820->size(), 2 * kFwCfgE820EntryBytes);
  EXPECT_EQ(Le(*e820, 0, 8), 0u);
  EXPECT_EQ(Le(*e820, 8, 8), uint64_t{3} << 30);
  EXPECT_EQ(Le(*e820, 16, 4), kFwCfgE820Ram);
  EXPECT_EQ(Le(*e820, 20, 8), uint64_t{4} << 30);
  EXPECT_EQ(Le(*e820, 28, 8), uint64_t{1} << 30);
  EXPECT_EQ(Le(*e820, 36, 4), kFwCfgE820Ram);
  // Nothing asked for, nothing given.
  EXPECT_EQ(File(*config, "bootorder"), nullptr);
  EXPECT_EQ(File(*config, "etc/sercon-port"), nullptr);
  EXPECT_EQ(File(*config, "etc/boot-fail-wait"), nullptr);
}

TEST(FirmwareConfigTest, BootOrderSerconBootFailWaitAndExtraFiles) {
  FirmwareOptions options;
  options.boot_order = {"/pci@i0cf8/ide@1,1/drive@1/disk@0",
                        "/pci@i0cf8/scsi@3/channel@0/disk@0,0"};
  options.serial_console_port = 0x3f8;
  options.boot_fail_wait_ms = 5000;
  auto config = BuildFirmwareConfig(Machine(), options, {{"etc/acpi/rsdp", {1, 2, 3}}});
  ASSERT_TRUE(config.ok()) << config.status();
  const std::vector<uint8_t>* order = File(*config, "bootorder");
  ASSERT_NE(order, nullptr);
  EXPECT_EQ(std::string(order->begin(), order->end()),
            std::string("/pci@i0cf8/ide@1,1/drive@1/disk@0\n"
                        "/pci@i0cf8/scsi@3/channel@0/disk@0,0\n\0",
                        72));
  EXPECT_EQ(*File(*config, "etc/sercon-port"), std::vector<uint8_t>({0xf8, 0x03}));
  EXPECT_EQ(Le(*File(*config, "etc/boot-fail-wait"), 0, 4), 5000u);
  EXPECT_EQ(*File(*config, "etc/acpi/rsdp"), std::vector<uint8_t>({1, 2, 3}));
}

TEST(FirmwareConfigTest, Refusals) {
  MachineDescription no_ram = Machine();
  no_ram.memory.clear();
  EXPECT_EQ(BuildFirmwareConfig(no_ram, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  MachineDescription no_cpus = Machine();
  no_cpus.cpu_apic_ids.clear();
  EXPECT_EQ(BuildFirmwareConfig(no_cpus, {}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  for (const std::string& bad : {std::string("/a\n/b"), std::string("/a\0b", 4), std::string()}) {
    FirmwareOptions options;
    options.boot_order = {bad};
    EXPECT_EQ(BuildFirmwareConfig(Machine(), options, {}).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(BuildFirmwareConfig(Machine(), {}, {{"etc/e820", {}}}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace vmm::x86

#ifndef VMM_X86_FIRMWARE_CONFIG_H_
#define VMM_X86_FIRMWARE_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vmm/machine/machine_description.h"

// What a PC firmware built for QEMU (SeaBIOS) reads from fw_cfg to learn the machine, as data: the
// assembly hands each item and file to the fw_cfg device (devices/legacy/fw_cfg.h). The names,
// keys and formats are QEMU's (its docs/specs/fw_cfg.rst and hw/i386/fw_cfg.c), since the firmware
// knows no other; the values are this machine's.
namespace vmm::x86 {

// Numbered items (QEMU's include/standard-headers/linux/qemu_fw_cfg.h).
inline constexpr uint16_t kFwCfgRamSize = 0x03;   // u64: all RAM, in bytes
inline constexpr uint16_t kFwCfgNbCpus = 0x05;    // u16: CPUs at boot
inline constexpr uint16_t kFwCfgMaxCpus = 0x0f;   // u16: the most CPUs the machine can have
inline constexpr uint16_t kFwCfgBootMenu = 0x0e;  // u16: 0, no boot menu

// One "etc/e820" entry: address u64, length u64, type u32, packed little-endian (QEMU's struct
// e820_entry). Types as the BIOS e820 call reports them.
inline constexpr size_t kFwCfgE820EntryBytes = 20;
inline constexpr uint32_t kFwCfgE820Ram = 1;

struct FirmwareConfigItem {
  uint16_t key;
  std::vector<uint8_t> data;
};
struct FirmwareConfigFile {
  std::string name;
  std::vector<uint8_t> data;
};
struct FirmwareConfig {
  std::vector<FirmwareConfigItem> items;
  std::vector<FirmwareConfigFile> files;
};

struct FirmwareOptions {
  // The boot devices in order, as OpenFirmware paths the firmware matches against the devices it
  // finds (SeaBIOS's boot.c: "/pci@i0cf8/ide@1,1/drive@1/disk@0" is the secondary IDE channel's
  // master; "/pci@i0cf8/scsi@3/channel@0/disk@0,0" a virtio-scsi disk in slot 3). Empty: the
  // firmware's own order.
  std::vector<std::string> boot_order;
  // The I/O port of the serial port the firmware copies its text screen to and takes keys from
  // (SeaBIOS's "sercon"), since the machine has no display.
  std::optional<uint16_t> serial_console_port;
  // Milliseconds the firmware waits, when nothing boots, before it resets the machine and tries
  // again; none: its default (SeaBIOS: 60 s).
  std::optional<uint32_t> boot_fail_wait_ms;
};

// The items and files for `machine` (its RAM ranges and CPUs), `options`, and the ACPI files of
// vmm/acpi/table_loader.h (passed as files, added as they are):
// - RAM size, CPU count and maximum (the machine cannot add CPUs: both are its count), no boot
//   menu (kFwCfgBootMenu 0 and "etc/show-boot-menu" 0: SeaBIOS would wait for a key otherwise);
// - "etc/e820": every RAM range of `machine.memory`, type RAM, in address order. The firmware
//   adds its own reservations (its code, the F segment, the tables it loads) and reports the
//   result to the OS;
// - "bootorder": the paths, each ending in a newline, then a NUL (as QEMU writes it), when any;
// - "etc/sercon-port" (u16), "etc/boot-fail-wait" (u32), when set.
// InvalidArgument for a machine without RAM or CPUs, a boot path with a newline or NUL, a file
// name given twice.
absl::StatusOr<FirmwareConfig> BuildFirmwareConfig(const MachineDescription& machine,
                                                   const FirmwareOptions& options,
                                                   std::vector<FirmwareConfigFile> extra_files);

}  // namespace vmm::x86

#endif  // VMM_X86_FIRMWARE_CONFIG_H_

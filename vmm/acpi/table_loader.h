#ifndef VMM_ACPI_TABLE_LOADER_H_
#define VMM_ACPI_TABLE_LOADER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "vmm/acpi/machine_acpi.h"

// The machine's ACPI tables handed to firmware instead of placed by the VMM: QEMU's "linker/loader"
// interface, which SeaBIOS and OVMF built for QEMU read through fw_cfg (QEMU's
// hw/acpi/bios-linker-loader.c states the format). The firmware allocates each blob where it likes,
// patches the pointers between them with the addresses it chose, fixes the checksums, and so the
// guest finds the same tables as with the VMM's direct boot, in memory the firmware reserved.
namespace vmm::acpi {

// The fw_cfg file names firmware looks for.
inline constexpr char kTablesFile[] = "etc/acpi/tables";
inline constexpr char kRsdpFile[] = "etc/acpi/rsdp";
inline constexpr char kTableLoaderFile[] = "etc/table-loader";

// One command of the loader script: 128 bytes, little-endian, names NUL-padded to 56 bytes.
inline constexpr size_t kLoaderCommandBytes = 128;
inline constexpr size_t kLoaderFileNameBytes = 56;
enum class LoaderCommand : uint32_t {
  // Allocate: file[56], alignment u32, zone u8. The firmware copies the fw_cfg file into memory
  // of that zone, aligned.
  kAllocate = 1,
  // AddPointer: destination file[56], source file[56], offset u32, size u8 (1, 2, 4 or 8). The
  // little-endian value of `size` bytes at `offset` in the destination is an offset into the
  // source; the source's address is added to it.
  kAddPointer = 2,
  // AddChecksum: file[56], result offset u32, start u32, length u32. The byte at `result offset`
  // is decreased by the 8-bit sum of [start, start + length), so that range sums to 0.
  kAddChecksum = 3,
};
enum class LoaderZone : uint8_t {
  kHigh = 1,  // anywhere the firmware keeps reserved RAM (SeaBIOS: high in the 32-bit space)
  kFseg = 2,  // the F segment (0xf0000-0xfffff), where an OS scans for the RSDP
};

struct FirmwareAcpi {
  std::vector<uint8_t> tables;  // kTablesFile: the XSDT, FADT, FACS, MADT and DSDT
  std::vector<uint8_t> rsdp;    // kRsdpFile
  std::vector<uint8_t> loader;  // kTableLoaderFile: the script
};

// `tables` as BuildMachineAcpi(machine, 0, limit) placed them, from guest address 0 with the RSDP
// first, to blobs and the script that loads them: the RSDP alone (zone F segment, 16-byte
// aligned), the rest as one blob whose offsets are those addresses (so the pointers the tables
// hold are already offsets into it; its first bytes, where the RSDP was, are zeros) allocated
// 64-byte aligned, keeping the FACS's alignment. Pointers patched: the RSDP's RSDT and XSDT
// addresses, the XSDT's (or an RSDT's) entries, the FADT's FIRMWARE_CTRL, DSDT, X_FIRMWARE_CTRL
// and X_DSDT; zero fields stay zero. Then every checksum: each table's (not the FACS, which has
// none), and the RSDP's two. InvalidArgument for tables not placed from 0 or a pointer outside
// the blob.
absl::StatusOr<FirmwareAcpi> BuildFirmwareAcpi(const AcpiTables& tables);

}  // namespace vmm::acpi

#endif  // VMM_ACPI_TABLE_LOADER_H_

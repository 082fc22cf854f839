#ifndef DEVICES_IDE_ATA_H_
#define DEVICES_IDE_ATA_H_

#include <cstdint>

// Register bits and command codes of the ATA interface, from ATA/ATAPI-8: ATA8-ACS (the command
// set), ATA8-APT (parallel transport: registers, protocols, signatures) and ATA8-APT's PACKET
// protocol; and the bus master IDE registers of SFF-8038i as the Intel PIIX3 implements them.

namespace devices::ide {

// What sits at one channel/unit position.
enum class DeviceKind : uint8_t {
  kNone,
  kDisk,   // ATA device (ATA8-ACS general feature set, 48-bit address feature set)
  kCdRom,  // ATAPI device (PACKET feature set), MMC-6 behind it
};

// Command block registers, by offset from the command block base (ATA8-APT 5.2, table 6).
namespace reg {
inline constexpr int kData = 0;
inline constexpr int kError = 1;    // read
inline constexpr int kFeature = 1;  // write
inline constexpr int kCount = 2;    // ATAPI: interrupt reason on read
inline constexpr int kLbaLow = 3;   // "sector number"
inline constexpr int kLbaMid = 4;   // "cylinder low"; ATAPI: byte count low
inline constexpr int kLbaHigh = 5;  // "cylinder high"; ATAPI: byte count high
inline constexpr int kDevice = 6;   // "device/head"
inline constexpr int kStatus = 7;   // read
inline constexpr int kCommand = 7;  // write
}  // namespace reg

// Status register (ATA8-APT 5.2.13 / ATA8-ACS 6.1.9).
namespace status {
inline constexpr uint8_t kErr = 0x01;   // error (ATAPI: CHECK)
inline constexpr uint8_t kDrq = 0x08;   // data request
inline constexpr uint8_t kDsc = 0x10;   // obsolete "seek complete"; set when ready, as drives do
inline constexpr uint8_t kDf = 0x20;    // device fault
inline constexpr uint8_t kDrdy = 0x40;  // device ready
inline constexpr uint8_t kBsy = 0x80;   // busy
// A ready ATA device, and the usual "command done" value.
inline constexpr uint8_t kReady = kDrdy | kDsc;
}  // namespace status

// Error register (ATA8-ACS 6.1.x; ATA8-APT for the PACKET command's use of it).
namespace error {
inline constexpr uint8_t kAmnf = 0x01;  // obsolete; after reset/diagnostic, 01h = passed
inline constexpr uint8_t kAbrt = 0x04;  // command aborted
inline constexpr uint8_t kIdnf = 0x10;  // ID not found: address outside the medium
inline constexpr uint8_t kUnc = 0x40;   // uncorrectable data error
// PACKET commands: bits 7:4 carry the SCSI sense key; bit 0 ILI, bit 1 EOM.
inline constexpr int kSenseKeyShift = 4;
// Diagnostic code "device 0 passed, device 1 passed or not present" (ATA8-ACS table 31).
inline constexpr uint8_t kDiagnosticPassed = 0x01;
}  // namespace error

// Device register (ATA8-APT 5.2.8).
namespace device {
inline constexpr uint8_t kHeadMask = 0x0f;  // CHS head, or LBA bits 27:24 in 28-bit commands
inline constexpr uint8_t kDev = 0x10;       // selects device 1
inline constexpr uint8_t kLba = 0x40;       // LBA (not CHS) addressing
inline constexpr uint8_t kObsolete = 0xa0;  // bits 7 and 5, set by old drivers
}  // namespace device

// Device Control register (ATA8-APT 5.2.6), written through the control block.
namespace control {
inline constexpr uint8_t kNien = 0x02;  // interrupts disabled
inline constexpr uint8_t kSrst = 0x04;  // software reset
inline constexpr uint8_t kHob = 0x80;   // read the previous ("high order byte") register contents
}  // namespace control

// PACKET interrupt reason, in the Count register (ATA8-APT 5.2.9 / 11.x).
namespace reason {
inline constexpr uint8_t kCoD = 0x01;  // command (packet or status), not data
inline constexpr uint8_t kIo = 0x02;   // to the host
}  // namespace reason

// PACKET Feature register bits (ATA8-ACS 7.x PACKET).
inline constexpr uint8_t kPacketFeatureDma = 0x01;

// ATA8-APT: the PACKET command's packet is 12 bytes (IDENTIFY PACKET DEVICE word 0 bits 1:0 = 0).
inline constexpr int kPacketSize = 12;
inline constexpr uint32_t kSectorSize = 512;

// Command codes (ATA8-ACS, table of commands; obsolete aliases noted).
namespace cmd {
inline constexpr uint8_t kNop = 0x00;
inline constexpr uint8_t kDeviceReset = 0x08;
inline constexpr uint8_t kRecalibrate = 0x10;  // obsolete; 10h-1Fh
inline constexpr uint8_t kReadSectors = 0x20;
inline constexpr uint8_t kReadSectorsNoRetry = 0x21;  // obsolete alias
inline constexpr uint8_t kReadSectorsExt = 0x24;
inline constexpr uint8_t kReadDmaExt = 0x25;
inline constexpr uint8_t kReadMultipleExt = 0x29;
inline constexpr uint8_t kWriteSectors = 0x30;
inline constexpr uint8_t kWriteSectorsNoRetry = 0x31;  // obsolete alias
inline constexpr uint8_t kWriteSectorsExt = 0x34;
inline constexpr uint8_t kWriteDmaExt = 0x35;
inline constexpr uint8_t kWriteMultipleExt = 0x39;
inline constexpr uint8_t kWriteDmaFuaExt = 0x3d;
inline constexpr uint8_t kReadVerifySectors = 0x40;
inline constexpr uint8_t kReadVerifySectorsNoRetry = 0x41;  // obsolete alias
inline constexpr uint8_t kReadVerifySectorsExt = 0x42;
inline constexpr uint8_t kSeek = 0x70;  // obsolete in ACS; accepted
inline constexpr uint8_t kExecuteDeviceDiagnostic = 0x90;
inline constexpr uint8_t kInitializeDeviceParameters = 0x91;
inline constexpr uint8_t kPacket = 0xa0;
inline constexpr uint8_t kIdentifyPacketDevice = 0xa1;
inline constexpr uint8_t kReadMultiple = 0xc4;
inline constexpr uint8_t kWriteMultiple = 0xc5;
inline constexpr uint8_t kSetMultipleMode = 0xc6;
inline constexpr uint8_t kReadDma = 0xc8;
inline constexpr uint8_t kReadDmaNoRetry = 0xc9;  // obsolete alias
inline constexpr uint8_t kWriteDma = 0xca;
inline constexpr uint8_t kWriteDmaNoRetry = 0xcb;  // obsolete alias
inline constexpr uint8_t kWriteMultipleFuaExt = 0xce;
inline constexpr uint8_t kStandbyImmediate = 0xe0;
inline constexpr uint8_t kIdleImmediate = 0xe1;
inline constexpr uint8_t kStandby = 0xe2;
inline constexpr uint8_t kIdle = 0xe3;
inline constexpr uint8_t kCheckPowerMode = 0xe5;
inline constexpr uint8_t kSleep = 0xe6;
inline constexpr uint8_t kFlushCache = 0xe7;
inline constexpr uint8_t kFlushCacheExt = 0xea;
inline constexpr uint8_t kIdentifyDevice = 0xec;
inline constexpr uint8_t kSetFeatures = 0xef;
}  // namespace cmd

// SET FEATURES subcommands (ATA8-ACS 7.48, table of Feature register values).
namespace feature {
inline constexpr uint8_t kEnableWriteCache = 0x02;
inline constexpr uint8_t kSetTransferMode = 0x03;
inline constexpr uint8_t kDisableReadLookAhead = 0x55;
inline constexpr uint8_t kDisableRevertToDefaults = 0x66;
inline constexpr uint8_t kDisableWriteCache = 0x82;
inline constexpr uint8_t kEnableReadLookAhead = 0xaa;
inline constexpr uint8_t kEnableRevertToDefaults = 0xcc;
}  // namespace feature

// SET FEATURES 03h transfer mode values in the Count register (ATA8-ACS 7.48.x, table 70).
namespace xfer {
inline constexpr uint8_t kPioDefault = 0x00;
inline constexpr uint8_t kPioDefaultNoIordy = 0x01;
inline constexpr uint8_t kPioFlowControl = 0x08;  // | mode (0-4)
inline constexpr uint8_t kMultiwordDma = 0x20;    // | mode (0-2)
inline constexpr uint8_t kUltraDma = 0x40;        // | mode (0-5 here)
inline constexpr uint8_t kModeMask = 0x07;
inline constexpr uint8_t kMaxPio = 4;
inline constexpr uint8_t kMaxMultiwordDma = 2;
inline constexpr uint8_t kMaxUltraDma = 5;
}  // namespace xfer

// CHECK POWER MODE Count output: device in active or idle mode (ATA8-ACS 7.8).
inline constexpr uint8_t kPowerModeActiveOrIdle = 0xff;

// Bus master IDE registers (SFF-8038i rev 1.0, 3.x; Intel PIIX3 datasheet 2.7 "Bus Master IDE I/O
// registers"): eight bytes per channel in BAR4, the primary channel at 0, the secondary at 8.
namespace bm {
inline constexpr int kCommand = 0;   // BMICx
inline constexpr int kStatus = 2;    // BMISx
inline constexpr int kPrdTable = 4;  // BMIDTPx, 32 bits
inline constexpr int kChannelStride = 8;
inline constexpr uint64_t kBarSize = 16;

// Command register.
inline constexpr uint8_t kCmdStart = 0x01;        // Start/Stop Bus Master
inline constexpr uint8_t kCmdWriteMemory = 0x08;  // R/W control: 1 = bus master writes memory
inline constexpr uint8_t kCmdMask = kCmdStart | kCmdWriteMemory;

// Status register.
inline constexpr uint8_t kStatActive = 0x01;     // read-only
inline constexpr uint8_t kStatError = 0x02;      // write 1 to clear
inline constexpr uint8_t kStatInterrupt = 0x04;  // write 1 to clear
inline constexpr uint8_t kStatDrive0Dma = 0x20;  // read/write, for the driver
inline constexpr uint8_t kStatDrive1Dma = 0x40;  // read/write, for the driver
inline constexpr uint8_t kStatSimplex = 0x80;    // read-only: 0, both channels may DMA at once

// Physical Region Descriptor (SFF-8038i 2.x): 8 bytes, 32-bit base (bit 0 reserved), 16-bit byte
// count (bit 0 reserved; 0 means 64 KiB), end of table in bit 31 of the second dword.
inline constexpr uint32_t kPrdEndOfTable = 0x80000000u;
inline constexpr uint32_t kPrdEntrySize = 8;
}  // namespace bm

}  // namespace devices::ide

#endif  // DEVICES_IDE_ATA_H_

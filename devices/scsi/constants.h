#ifndef DEVICES_SCSI_CONSTANTS_H_
#define DEVICES_SCSI_CONSTANTS_H_

#include <cstdint>

namespace devices::scsi {

// SAM-5: the status byte of a completed command.
enum class Status : uint8_t {
  kGood = 0x00,
  kCheckCondition = 0x02,
  kBusy = 0x08,
  kTaskAborted = 0x40,
};

// SPC-4 (standard INQUIRY data): PERIPHERAL DEVICE TYPE.
inline constexpr uint8_t kTypeDisk = 0x00;      // direct access block device (SBC-3)
inline constexpr uint8_t kTypeCdDvd = 0x05;     // CD/DVD device (MMC-6)
inline constexpr uint8_t kTypeNoDevice = 0x1f;  // unknown or no device type
// PERIPHERAL QUALIFIER 011b: the device server cannot support a device at this LUN.
inline constexpr uint8_t kQualifierNotSupported = 0x60;

// Operation codes (SPC-4 Annex D / SBC-3 / MMC-6).
namespace op {
inline constexpr uint8_t kTestUnitReady = 0x00;
inline constexpr uint8_t kRequestSense = 0x03;
inline constexpr uint8_t kRead6 = 0x08;
inline constexpr uint8_t kWrite6 = 0x0a;
inline constexpr uint8_t kInquiry = 0x12;
inline constexpr uint8_t kModeSelect6 = 0x15;
inline constexpr uint8_t kModeSense6 = 0x1a;
inline constexpr uint8_t kStartStopUnit = 0x1b;
inline constexpr uint8_t kPreventAllowMediumRemoval = 0x1e;
inline constexpr uint8_t kReadCapacity10 = 0x25;
inline constexpr uint8_t kRead10 = 0x28;
inline constexpr uint8_t kWrite10 = 0x2a;
inline constexpr uint8_t kSeek10 = 0x2b;
inline constexpr uint8_t kVerify10 = 0x2f;
inline constexpr uint8_t kSynchronizeCache10 = 0x35;
inline constexpr uint8_t kWriteSame10 = 0x41;
inline constexpr uint8_t kUnmap = 0x42;  // SBC-3; the same code is READ SUB-CHANNEL in MMC-6
inline constexpr uint8_t kReadSubChannel = 0x42;
inline constexpr uint8_t kReadTocPmaAtip = 0x43;
inline constexpr uint8_t kGetConfiguration = 0x46;
inline constexpr uint8_t kGetEventStatusNotification = 0x4a;
inline constexpr uint8_t kReadDiscInformation = 0x51;
inline constexpr uint8_t kReadTrackInformation = 0x52;
inline constexpr uint8_t kModeSelect10 = 0x55;
inline constexpr uint8_t kModeSense10 = 0x5a;
inline constexpr uint8_t kRead16 = 0x88;
inline constexpr uint8_t kWrite16 = 0x8a;
inline constexpr uint8_t kVerify16 = 0x8f;
inline constexpr uint8_t kSynchronizeCache16 = 0x91;
inline constexpr uint8_t kWriteSame16 = 0x93;
inline constexpr uint8_t kServiceActionIn16 = 0x9e;
inline constexpr uint8_t kReportLuns = 0xa0;
inline constexpr uint8_t kMaintenanceIn = 0xa3;
inline constexpr uint8_t kRead12 = 0xa8;
inline constexpr uint8_t kWrite12 = 0xaa;
inline constexpr uint8_t kSetCdSpeed = 0xbb;
inline constexpr uint8_t kMechanismStatus = 0xbd;
inline constexpr uint8_t kReadCd = 0xbe;
}  // namespace op

// Service actions.
inline constexpr uint8_t kSaReadCapacity16 = 0x10;                 // SERVICE ACTION IN(16), SBC-3
inline constexpr uint8_t kSaReportSupportedOperationCodes = 0x0c;  // MAINTENANCE IN, SPC-4

// SPC-4: the CDB length implied by the operation code's group (bits 7-5), or 0 where the
// group does not fix it (group 3: reserved and variable length; groups 6 and 7: vendor specific).
constexpr uint8_t CdbLengthForOpcode(uint8_t opcode) {
  switch (opcode >> 5) {
    case 0:
      return 6;
    case 1:
    case 2:
      return 10;
    case 4:
      return 16;
    case 5:
      return 12;
    default:
      return 0;
  }
}

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_CONSTANTS_H_

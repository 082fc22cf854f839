#ifndef DEVICES_SCSI_SENSE_H_
#define DEVICES_SCSI_SENSE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace devices::scsi {

// SPC-4 sense keys.
enum class SenseKey : uint8_t {
  kNoSense = 0x0,
  kRecoveredError = 0x1,
  kNotReady = 0x2,
  kMediumError = 0x3,
  kHardwareError = 0x4,
  kIllegalRequest = 0x5,
  kUnitAttention = 0x6,
  kDataProtect = 0x7,
  kAbortedCommand = 0xb,
};

// A sense key with its additional sense code and qualifier (SPC-4, the ASC/ASCQ assignments).
struct Sense {
  SenseKey key = SenseKey::kNoSense;
  uint8_t asc = 0;
  uint8_t ascq = 0;

  friend constexpr bool operator==(const Sense&, const Sense&) = default;
};

namespace sense {
inline constexpr Sense kNoSense{};
// NOT READY
inline constexpr Sense kMediumNotPresent{SenseKey::kNotReady, 0x3a, 0x00};
inline constexpr Sense kMediumNotPresentTrayClosed{SenseKey::kNotReady, 0x3a, 0x01};
inline constexpr Sense kMediumNotPresentTrayOpen{SenseKey::kNotReady, 0x3a, 0x02};
// MEDIUM ERROR
inline constexpr Sense kWriteError{SenseKey::kMediumError, 0x0c, 0x00};
inline constexpr Sense kUnrecoveredReadError{SenseKey::kMediumError, 0x11, 0x00};
// HARDWARE ERROR
inline constexpr Sense kInternalTargetFailure{SenseKey::kHardwareError, 0x44, 0x00};
// ILLEGAL REQUEST
inline constexpr Sense kParameterListLengthError{SenseKey::kIllegalRequest, 0x1a, 0x00};
inline constexpr Sense kInvalidCommandOperationCode{SenseKey::kIllegalRequest, 0x20, 0x00};
inline constexpr Sense kLbaOutOfRange{SenseKey::kIllegalRequest, 0x21, 0x00};
inline constexpr Sense kInvalidFieldInCdb{SenseKey::kIllegalRequest, 0x24, 0x00};
inline constexpr Sense kLogicalUnitNotSupported{SenseKey::kIllegalRequest, 0x25, 0x00};
inline constexpr Sense kInvalidFieldInParameterList{SenseKey::kIllegalRequest, 0x26, 0x00};
inline constexpr Sense kSavingParametersNotSupported{SenseKey::kIllegalRequest, 0x39, 0x00};
inline constexpr Sense kMediumRemovalPrevented{SenseKey::kIllegalRequest, 0x53, 0x02};
inline constexpr Sense kIllegalModeForThisTrack{SenseKey::kIllegalRequest, 0x64, 0x00};
// UNIT ATTENTION
inline constexpr Sense kNotReadyToReadyChange{SenseKey::kUnitAttention, 0x28, 0x00};
inline constexpr Sense kPowerOnOrReset{SenseKey::kUnitAttention, 0x29, 0x00};
inline constexpr Sense kModeParametersChanged{SenseKey::kUnitAttention, 0x2a, 0x01};
inline constexpr Sense kCapacityDataChanged{SenseKey::kUnitAttention, 0x2a, 0x09};
inline constexpr Sense kReportedLunsDataChanged{SenseKey::kUnitAttention, 0x3f, 0x0e};
inline constexpr Sense kMediumNotPresentAttention{SenseKey::kUnitAttention, 0x3a, 0x00};
// DATA PROTECT
inline constexpr Sense kWriteProtected{SenseKey::kDataProtect, 0x27, 0x00};
inline constexpr Sense kSpaceAllocationFailedWriteProtect{SenseKey::kDataProtect, 0x27, 0x07};
}  // namespace sense

// SPC-4: fixed format sense data, the only format this target returns (D_SENSE = 0 in the
// control mode page; REQUEST SENSE with DESC = 1 is refused).
inline constexpr size_t kFixedSenseSize = 18;
std::array<uint8_t, kFixedSenseSize> EncodeFixedSense(const Sense& sense);

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_SENSE_H_

#include "devices/scsi/sense.h"

namespace devices::scsi {

std::array<uint8_t, kFixedSenseSize> EncodeFixedSense(const Sense& sense) {
  std::array<uint8_t, kFixedSenseSize> data{};
  data[0] = 0x70;  // current error, fixed format; VALID = 0 (no INFORMATION field)
  data[2] = static_cast<uint8_t>(sense.key) & 0x0f;
  data[7] = kFixedSenseSize - 8;  // ADDITIONAL SENSE LENGTH
  data[12] = sense.asc;
  data[13] = sense.ascq;
  return data;
}

}  // namespace devices::scsi

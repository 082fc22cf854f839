#ifndef DEVICES_SCSI_LUN_H_
#define DEVICES_SCSI_LUN_H_

#include <cstdint>
#include <optional>

namespace devices::scsi {

// SAM-5: a LUN is eight bytes, four two-byte levels. Here it travels as a uint64_t holding
// those bytes big-endian (the first level in bits 63-48), which is how REPORT LUNS lists it and how
// virtio-scsi carries it in bytes 2-9 of its lun field.
//
// This target has a single level of LUNs, numbered 0..kMaxLun, addressed either with peripheral
// device addressing (SAM-5, method 00b, bus identifier 0: LUNs 0-255) or flat space
// addressing (method 01b: LUNs 0-16383). Linux's virtio_scsi always sends the flat form
// (0x4000 | lun); SeaBIOS and REPORT LUNS answers use the peripheral form for LUNs below 256.

inline constexpr uint16_t kMaxLun = 16383;

// The LUN number, or nullopt for any other address method, a bus identifier other than 0, or a
// non-zero second to fourth level (SPC-4: such a LUN is not supported by this target).
std::optional<uint16_t> DecodeLun(uint64_t lun);

// The address REPORT LUNS returns for `number` (<= kMaxLun): peripheral below 256, flat above.
uint64_t EncodeLun(uint16_t number);

// The same in the flat form whatever the number (what Linux's virtio_scsi puts on the wire).
uint64_t EncodeFlatLun(uint16_t number);

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_LUN_H_

#ifndef DEVICES_SCSI_BYTES_H_
#define DEVICES_SCSI_BYTES_H_

#include "vmm/sys_util/byte_order.h"

// The SCSI target's names for the big-endian field access of vmm/sys_util/byte_order.h (SPC-4:
// multi-byte fields are big-endian).

namespace devices::scsi {

using sys_util::Be16;
using sys_util::Be24;
using sys_util::Be32;
using sys_util::Be64;
using sys_util::PutBe16;
using sys_util::PutBe24;
using sys_util::PutBe32;
using sys_util::PutBe64;

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_BYTES_H_

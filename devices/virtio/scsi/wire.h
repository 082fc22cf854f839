#ifndef DEVICES_VIRTIO_SCSI_WIRE_H_
#define DEVICES_VIRTIO_SCSI_WIRE_H_

#include <cstdint>

// The virtio-scsi formats (virtio 1.2 §5.6). All fields little-endian, as the host's.
namespace devices::virtio::scsi {

// §5.6.4 device configuration layout.
struct __attribute__((packed)) Config {
  uint32_t num_queues;
  uint32_t seg_max;
  uint32_t max_sectors;
  uint32_t cmd_per_lun;
  uint32_t event_info_size;
  uint32_t sense_size;  // driver-writable
  uint32_t cdb_size;    // driver-writable
  uint16_t max_channel;
  uint16_t max_target;
  uint32_t max_lun;
};
static_assert(sizeof(Config) == 36);
inline constexpr uint32_t kConfigSenseSizeOffset = 20;
inline constexpr uint32_t kConfigCdbSizeOffset = 24;

// §5.6.4: the defaults a reset restores.
inline constexpr uint32_t kDefaultSenseSize = 96;
inline constexpr uint32_t kDefaultCdbSize = 32;

// Queue indexes (§5.6.2).
inline constexpr uint16_t kControlQueue = 0;
inline constexpr uint16_t kEventQueue = 1;
inline constexpr uint16_t kFirstRequestQueue = 2;

// §5.6.6 request queue: the device-readable header before the CDB, and the device-writable
// response before the sense bytes.
struct __attribute__((packed)) CommandHeader {
  uint8_t lun[8];
  uint64_t id;
  uint8_t task_attr;
  uint8_t prio;
  uint8_t crn;
};
static_assert(sizeof(CommandHeader) == 19);

struct __attribute__((packed)) CommandResponse {
  uint32_t sense_len;
  uint32_t residual;
  uint16_t status_qualifier;
  uint8_t status;
  uint8_t response;
};
static_assert(sizeof(CommandResponse) == 12);

// §5.6.6 response codes.
inline constexpr uint8_t kResponseOk = 0;
inline constexpr uint8_t kResponseOverrun = 1;
inline constexpr uint8_t kResponseAborted = 2;
inline constexpr uint8_t kResponseBadTarget = 3;
inline constexpr uint8_t kResponseReset = 4;
inline constexpr uint8_t kResponseBusy = 5;
inline constexpr uint8_t kResponseTransportFailure = 6;
inline constexpr uint8_t kResponseTargetFailure = 7;
inline constexpr uint8_t kResponseNexusFailure = 8;
inline constexpr uint8_t kResponseFailure = 9;

// §5.6.6.2 control queue.
inline constexpr uint32_t kControlTmf = 0;
inline constexpr uint32_t kControlAnQuery = 1;
inline constexpr uint32_t kControlAnSubscribe = 2;

inline constexpr uint32_t kTmfAbortTask = 0;
inline constexpr uint32_t kTmfAbortTaskSet = 1;
inline constexpr uint32_t kTmfClearAca = 2;
inline constexpr uint32_t kTmfClearTaskSet = 3;
inline constexpr uint32_t kTmfItNexusReset = 4;
inline constexpr uint32_t kTmfLogicalUnitReset = 5;
inline constexpr uint32_t kTmfQueryTask = 6;
inline constexpr uint32_t kTmfQueryTaskSet = 7;

inline constexpr uint8_t kTmfFunctionComplete = 0;
inline constexpr uint8_t kTmfFunctionSucceeded = 10;
inline constexpr uint8_t kTmfFunctionRejected = 11;
inline constexpr uint8_t kTmfIncorrectLun = 12;

struct __attribute__((packed)) TmfRequest {
  uint32_t type;
  uint32_t subtype;
  uint8_t lun[8];
  uint64_t id;
};
static_assert(sizeof(TmfRequest) == 24);

struct __attribute__((packed)) AnRequest {
  uint32_t type;
  uint8_t lun[8];
  uint32_t event_requested;
};
static_assert(sizeof(AnRequest) == 16);

struct __attribute__((packed)) AnResponse {
  uint32_t event_actual;
  uint8_t response;
};
static_assert(sizeof(AnResponse) == 5);

// §5.6.3 feature bits the device offers: hot-plug and hot-unplug events (TRANSPORT_RESET with
// reason RESCAN or REMOVED), and parameter change events (a unit's capacity).
inline constexpr uint64_t kFeatureHotplug = 1ull << 1;
inline constexpr uint64_t kFeatureChange = 1ull << 2;

// §5.6.6.3 event queue: the driver makes device-writable buffers of event_info_size available;
// the device fills one per event.
struct __attribute__((packed)) Event {
  uint32_t event;
  uint8_t lun[8];
  uint32_t reason;
};
static_assert(sizeof(Event) == 16);
inline constexpr uint32_t kEventNoEvent = 0;
inline constexpr uint32_t kEventTransportReset = 1;
inline constexpr uint32_t kEventParamChange = 3;
// Or-ed into the next event delivered after the device had one and no buffer for it.
inline constexpr uint32_t kEventsMissed = 0x80000000u;
// TRANSPORT_RESET reasons.
inline constexpr uint32_t kResetRescan = 1;
inline constexpr uint32_t kResetRemoved = 2;

// §5.6.6.1: a virtio-scsi LUN field is lun[0] = 1, lun[1] = the target, and from lun[2] the SAM
// LUN of the logical unit in that target (the driver sends flat space addressing, 0x40 | high byte).
// Only the target is decided here; which unit the SAM LUN names is the SCSI target's one rule
// (devices/scsi/lun.h DecodeLun), for commands and task management alike.
struct LunAddress {
  bool valid;  // lun[0] == 1
  uint8_t target;
  uint64_t sam_lun;  // bytes 2..7, big-endian, in the top six bytes (devices/scsi/lun.h)
};
inline LunAddress DecodeLunField(const uint8_t lun[8]) {
  uint64_t sam = 0;
  for (int i = 2; i < 8; ++i) sam = (sam << 8) | lun[i];
  return {lun[0] == 1, lun[1], sam << 16};
}

}  // namespace devices::virtio::scsi

#endif  // DEVICES_VIRTIO_SCSI_WIRE_H_

#ifndef DEVICES_VIRTIO_VHOST_USER_PROTOCOL_H_
#define DEVICES_VIRTIO_VHOST_USER_PROTOCOL_H_

// The vhost-user protocol's wire format (QEMU's docs/interop/vhost-user.rst, "Message
// specification"): a 12-byte header, a payload of at most a few hundred bytes, and file
// descriptors passed alongside with SCM_RIGHTS. Little-endian, like the hosts it runs on.

#include <cstdint>

namespace devices::virtio::vhost_user {

// Front-end requests ("Front-end message types").
enum class Request : uint32_t {
  kGetFeatures = 1,
  kSetFeatures = 2,
  kSetOwner = 3,
  kResetOwner = 4,
  kSetMemTable = 5,
  kSetLogBase = 6,
  kSetLogFd = 7,
  kSetVringNum = 8,
  kSetVringAddr = 9,
  kSetVringBase = 10,
  kGetVringBase = 11,
  kSetVringKick = 12,
  kSetVringCall = 13,
  kSetVringErr = 14,
  kGetProtocolFeatures = 15,
  kSetProtocolFeatures = 16,
  kGetQueueNum = 17,
  kSetVringEnable = 18,
  kSendRarp = 19,
  kNetSetMtu = 20,
  kSetBackendReqFd = 21,
  kIotlbMsg = 22,
  kSetVringEndian = 23,
  kGetConfig = 24,
  kSetConfig = 25,
  kGetInflightFd = 31,
  kSetInflightFd = 32,
  kResetDevice = 34,
  kVringKick = 35,
  kGetMaxMemSlots = 36,
  kAddMemReg = 37,
  kRemMemReg = 38,
};

// Header flags: the protocol version in bits 0-1, then REPLY and NEED_REPLY.
inline constexpr uint32_t kVersionMask = 0x3;
inline constexpr uint32_t kVersion = 0x1;
inline constexpr uint32_t kFlagReply = 1u << 2;
inline constexpr uint32_t kFlagNeedReply = 1u << 3;

// Virtio feature bit 30, unused by virtio itself: the back end speaks protocol features.
inline constexpr uint64_t kFeatureProtocolFeatures = 1ull << 30;

// Protocol feature bits ("Protocol features").
inline constexpr uint64_t kProtocolMq = 1ull << 0;
inline constexpr uint64_t kProtocolReplyAck = 1ull << 3;
inline constexpr uint64_t kProtocolResetDevice = 1ull << 13;
inline constexpr uint64_t kProtocolConfigureMemSlots = 1ull << 15;

// SET_VRING_KICK/CALL/ERR payload: the vring index in bits 0-7; bit 8 set means "no file
// descriptor" (the ring is polled / the notification is not wanted).
inline constexpr uint64_t kVringIndexMask = 0xff;
inline constexpr uint64_t kVringNoFd = 1ull << 8;

// At most this many file descriptors come with one message (VHOST_MEMORY_BASELINE_NREGIONS).
inline constexpr int kMaxFds = 8;
// SET_MEM_TABLE carries at most this many regions.
inline constexpr uint32_t kMaxMemoryRegions = 8;
// Largest payload accepted: SET_MEM_TABLE with 8 regions is 8 + 8 * 32 = 264 bytes, the largest a
// back end offering these features receives (GET/SET_CONFIG would carry up to 268).
inline constexpr uint32_t kMaxPayload = 4096;

struct Header {
  uint32_t request = 0;
  uint32_t flags = 0;
  uint32_t size = 0;  // payload bytes that follow
};
static_assert(sizeof(Header) == 12);

// SET_VRING_NUM, SET_VRING_BASE, GET_VRING_BASE, SET_VRING_ENABLE.
struct VringState {
  uint32_t index = 0;
  uint32_t num = 0;
};
static_assert(sizeof(VringState) == 8);

// SET_VRING_ADDR: the three areas as addresses in the front end's address space (not guest
// physical), and the log address when logging (migration) is on.
struct VringAddress {
  uint32_t index = 0;
  uint32_t flags = 0;  // bit 0: VHOST_VRING_F_LOG
  uint64_t descriptor = 0;
  uint64_t used = 0;
  uint64_t available = 0;
  uint64_t log = 0;
};
static_assert(sizeof(VringAddress) == 40);

struct MemoryRegion {
  uint64_t guest_phys_addr = 0;
  uint64_t memory_size = 0;
  uint64_t userspace_addr = 0;  // where the front end mapped it
  uint64_t mmap_offset = 0;     // offset of the region in its file descriptor
};
static_assert(sizeof(MemoryRegion) == 32);

// SET_MEM_TABLE: `num_regions` regions follow, one file descriptor each, in order.
struct MemoryTableHeader {
  uint32_t num_regions = 0;
  uint32_t padding = 0;
};
static_assert(sizeof(MemoryTableHeader) == 8);

}  // namespace devices::virtio::vhost_user

#endif  // DEVICES_VIRTIO_VHOST_USER_PROTOCOL_H_

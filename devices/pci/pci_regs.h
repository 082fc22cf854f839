#ifndef DEVICES_PCI_PCI_REGS_H_
#define DEVICES_PCI_PCI_REGS_H_

#include <cstdint>

// Offsets and bits of the PCI configuration space (PCI Local Bus Specification 3.0, §6.1-6.2: the
// predefined header, type 0; §6.7: capabilities list; §6.8.2: MSI-X).
namespace devices::pci {

inline constexpr uint32_t kConfigSpaceSize = 256;
inline constexpr int kNumBars = 6;
inline constexpr uint8_t kMaxDevices = 32;   // device numbers 0..31 on a bus
inline constexpr uint8_t kMaxFunctions = 8;  // function numbers 0..7 in a device

// Type 0 header (§6.1, figure 6-1).
inline constexpr uint32_t kVendorId = 0x00;       // 16 bits, RO
inline constexpr uint32_t kDeviceId = 0x02;       // 16 bits, RO
inline constexpr uint32_t kCommand = 0x04;        // 16 bits
inline constexpr uint32_t kStatus = 0x06;         // 16 bits
inline constexpr uint32_t kRevisionId = 0x08;     // 8 bits, RO
inline constexpr uint32_t kClassCode = 0x09;      // 24 bits, RO: prog-if, subclass, base class
inline constexpr uint32_t kCacheLineSize = 0x0c;  // 8 bits, RW
inline constexpr uint32_t kLatencyTimer = 0x0d;
inline constexpr uint32_t kHeaderType = 0x0e;
inline constexpr uint32_t kBist = 0x0f;
inline constexpr uint32_t kBar0 = 0x10;  // six dwords, 0x10..0x27
inline constexpr uint32_t kCardbusCis = 0x28;
inline constexpr uint32_t kSubsystemVendorId = 0x2c;
inline constexpr uint32_t kSubsystemId = 0x2e;
inline constexpr uint32_t kExpansionRom = 0x30;
inline constexpr uint32_t kCapabilitiesPointer = 0x34;
inline constexpr uint32_t kInterruptLine = 0x3c;
inline constexpr uint32_t kInterruptPin = 0x3d;
inline constexpr uint32_t kMinGnt = 0x3e;
inline constexpr uint32_t kMaxLat = 0x3f;
// Capabilities live after the header (§6.7: "at an offset greater than 0x3F").
inline constexpr uint32_t kFirstCapabilityOffset = 0x40;

// Command register bits (§6.2.2).
inline constexpr uint16_t kCommandIoSpace = 1 << 0;
inline constexpr uint16_t kCommandMemorySpace = 1 << 1;
inline constexpr uint16_t kCommandBusMaster = 1 << 2;
inline constexpr uint16_t kCommandParityErrorResponse = 1 << 6;
inline constexpr uint16_t kCommandSerrEnable = 1 << 8;
inline constexpr uint16_t kCommandInterruptDisable = 1 << 10;
// The bits a guest can change; the rest are hardwired to 0 (special cycles, MWI, VGA snoop, IDSEL
// stepping and fast back-to-back are meaningless here).
inline constexpr uint16_t kCommandWritableMask = kCommandIoSpace | kCommandMemorySpace |
                                                 kCommandBusMaster | kCommandParityErrorResponse |
                                                 kCommandSerrEnable | kCommandInterruptDisable;

// Status register bits (§6.2.3). The error bits are "write 1 to clear".
inline constexpr uint16_t kStatusInterrupt = 1 << 3;
inline constexpr uint16_t kStatusCapabilitiesList = 1 << 4;
inline constexpr uint16_t kStatusMasterDataParityError = 1 << 8;
inline constexpr uint16_t kStatusSignaledTargetAbort = 1 << 11;
inline constexpr uint16_t kStatusReceivedTargetAbort = 1 << 12;
inline constexpr uint16_t kStatusReceivedMasterAbort = 1 << 13;
inline constexpr uint16_t kStatusSignaledSystemError = 1 << 14;
inline constexpr uint16_t kStatusDetectedParityError = 1 << 15;
inline constexpr uint16_t kStatusWriteOneToClearMask =
    kStatusMasterDataParityError | kStatusSignaledTargetAbort | kStatusReceivedTargetAbort |
    kStatusReceivedMasterAbort | kStatusSignaledSystemError | kStatusDetectedParityError;

// Header type (§6.2.1): bit 7 set on function 0 when the device has several functions.
inline constexpr uint8_t kHeaderTypeNormal = 0x00;
inline constexpr uint8_t kHeaderTypeMultiFunction = 0x80;

// Base address register low bits (§6.2.5.1).
inline constexpr uint32_t kBarIoSpace = 0x1;
inline constexpr uint32_t kBarMemoryType64 = 0x4;  // bits 2:1 = 10b
inline constexpr uint32_t kBarPrefetchable = 0x8;
inline constexpr uint32_t kBarIoAddressMask = ~0x3u;
inline constexpr uint32_t kBarMemoryAddressMask = ~0xfu;

// Capability IDs (PCI Code and ID Assignment Specification).
inline constexpr uint8_t kCapabilityIdVendorSpecific = 0x09;
inline constexpr uint8_t kCapabilityIdMsix = 0x11;

// MSI-X capability structure (§6.8.2.1-6.8.2.5): offsets from the capability's start.
inline constexpr uint32_t kMsixMessageControl = 0x02;  // 16 bits
inline constexpr uint32_t kMsixTableOffsetBir = 0x04;  // 32 bits: BIR in bits 2:0
inline constexpr uint32_t kMsixPbaOffsetBir = 0x08;    // 32 bits: BIR in bits 2:0
inline constexpr uint32_t kMsixCapabilityLength = 12;
inline constexpr uint16_t kMsixControlTableSizeMask = 0x07ff;  // N - 1, read-only
inline constexpr uint16_t kMsixControlFunctionMask = 1 << 14;
inline constexpr uint16_t kMsixControlEnable = 1 << 15;
inline constexpr uint32_t kMsixMaxVectors = 2048;
// MSI-X table entry (§6.8.2.6-6.8.2.9): 16 bytes.
inline constexpr uint32_t kMsixEntrySize = 16;
inline constexpr uint32_t kMsixEntryAddressLow = 0x0;
inline constexpr uint32_t kMsixEntryAddressHigh = 0x4;
inline constexpr uint32_t kMsixEntryData = 0x8;
inline constexpr uint32_t kMsixEntryVectorControl = 0xc;
inline constexpr uint32_t kMsixVectorControlMask = 0x1;

}  // namespace devices::pci

#endif  // DEVICES_PCI_PCI_REGS_H_

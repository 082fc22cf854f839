#ifndef DEVICES_LEGACY_FW_CFG_H_
#define DEVICES_LEGACY_FW_CFG_H_

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/guest_memory.h"

namespace devices::legacy {

// The firmware configuration interface SeaBIOS and OVMF read their machine description through
// (QEMU's docs/specs/fw_cfg.rst; the interface is QEMU's, and firmware built for QEMU expects
// exactly it). Items are byte strings selected by a 16-bit key: a few numbered ones (the
// signature, the feature bits, the file directory, legacy items such as the CPU count) and named
// files ("etc/e820", "bootorder", "etc/acpi/tables") listed in the directory. The VMM fills the
// items before the guest runs; the guest only reads them. Registered on the x86 I/O port bus at
// kPortBase, kPortCount ports:
//
//   +0x0  selector  16 bits, write: selects an item and rewinds to its first byte.
//   +0x0, +0x1  data  8 bits, read: the next byte of the selected item (0 past its end, or for a
//                     key with no item). A read of N bytes returns the next N (`rep insb`). Data
//                     writes are ignored (no item is writable, as QEMU 2.4 on made them).
//   +0x4  DMA address, 64 bits big-endian: a 32-bit write at +0x4 sets the high half, one at +0x8
//         the low half and starts the transfer; an 8-byte write at +0x4 sets both and starts it.
//         The high half is 0 again after every transfer, so firmware that lives below 4 GiB
//         (SeaBIOS) writes the low half only. Reads return the signature "QEMU CFG" (byte k of
//         the 8 at +0x4+k).
//
// A DMA transfer reads a descriptor from guest memory at the written address (FWCfgDmaAccess, all
// big-endian: control u32, length u32, address u64). Control bits: kDmaSelect (the key in bits
// 31:16, selected first), then one of kDmaRead (copy `length` bytes of the item at its offset to
// guest `address`; zeros past its end), kDmaSkip (advance the offset), kDmaWrite (refused: error).
// The descriptor's control word is written back 0 on success or kDmaError. Every guest address is
// checked (vmm::GuestMemory): a descriptor outside RAM is ignored, a buffer outside RAM ends the
// transfer with kDmaError. A transfer runs on the vCPU thread that started it, bounded by its
// length (at most 4 GiB, zeros past the item's end given back to the kernel as whole pages).
//
// Thread-safe: vCPU threads may access it at once; one lock holds the selection and DMA address.
class FwCfg : public vmm::BusDevice {
 public:
  static constexpr uint16_t kPortBase = 0x510;
  static constexpr uint64_t kPortCount = 0xc;

  // Numbered items (QEMU's include/standard-headers/linux/qemu_fw_cfg.h).
  static constexpr uint16_t kSignatureKey = 0x0000;  // "QEMU"
  static constexpr uint16_t kIdKey = 0x0001;         // feature bits, little-endian u32
  static constexpr uint16_t kFileDirKey = 0x0019;    // the file directory
  static constexpr uint16_t kFirstFileKey = 0x0020;  // files are numbered from here
  static constexpr uint16_t kMaxFiles = 0x1000;      // our bound: keys 0x0020 to 0x101f
  // Bit 14 of a key asks for write access (refused here); bit 15 marks an architecture's own
  // items (x86: 0x8000 ACPI tables, 0x8003 e820), which are items like any other.
  static constexpr uint16_t kWriteChannel = 0x4000;

  // Feature bits of kIdKey.
  static constexpr uint32_t kFeatureTraditional = 1u << 0;
  static constexpr uint32_t kFeatureDma = 1u << 1;

  // DMA control bits.
  static constexpr uint32_t kDmaError = 1u << 0;
  static constexpr uint32_t kDmaRead = 1u << 1;
  static constexpr uint32_t kDmaSkip = 1u << 2;
  static constexpr uint32_t kDmaSelect = 1u << 3;
  static constexpr uint32_t kDmaWrite = 1u << 4;
  static constexpr size_t kDmaDescriptorSize = 16;

  // A file's name holds at most 55 bytes (56 with its NUL in the directory entry).
  static constexpr size_t kMaxFileName = 55;
  static constexpr size_t kFileDirEntrySize = 64;

  // DMA targets `memory`, which must outlive the device.
  explicit FwCfg(const vmm::GuestMemory* memory);

  // A numbered item (not the signature, ID or directory, which the device keeps; not in the file
  // range). Replaces an item of that key.
  absl::Status AddItem(uint16_t key, std::vector<uint8_t> data);
  // A named file, given the next free key from kFirstFileKey. Names are unique, 1 to 55 bytes.
  // The directory lists the files sorted by name (as QEMU does, so firmware sees one order).
  absl::Status AddFile(const std::string& name, std::vector<uint8_t> data);

  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

 private:
  static constexpr uint64_t kSelectorOffset = 0x0;
  static constexpr uint64_t kDataOffset = 0x1;
  static constexpr uint64_t kDmaOffset = 0x4;

  void Select(uint16_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The selected item, or nullptr when its key has none.
  const std::vector<uint8_t>* Selected() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void RunDma(uint64_t descriptor_address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  // The transfer's control word to write back: 0, or kDmaError.
  uint32_t Transfer(uint32_t control, uint32_t length, uint64_t address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void RebuildDirectory() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const vmm::GuestMemory* const memory_;
  mutable absl::Mutex mutex_;
  std::map<uint16_t, std::vector<uint8_t>> items_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, uint16_t> files_ ABSL_GUARDED_BY(mutex_);  // by name: the directory order
  uint16_t next_file_key_ ABSL_GUARDED_BY(mutex_) = kFirstFileKey;
  bool directory_stale_ ABSL_GUARDED_BY(mutex_) = false;  // files added since it was built
  uint16_t selected_ ABSL_GUARDED_BY(mutex_) = kSignatureKey;
  uint64_t offset_ ABSL_GUARDED_BY(mutex_) = 0;  // into the selected item
  uint64_t dma_address_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace devices::legacy

#endif  // DEVICES_LEGACY_FW_CFG_H_

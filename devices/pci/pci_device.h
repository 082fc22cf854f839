#ifndef DEVICES_PCI_PCI_DEVICE_H_
#define DEVICES_PCI_PCI_DEVICE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/pci/bar_allocator.h"
#include "devices/pci/msix.h"
#include "devices/pci/pci_regs.h"
#include "vmm/machine/bus.h"

namespace devices::pci {

// What a function reports in its header (PCI 3.0 §6.2.1).
struct PciIdentity {
  uint16_t vendor_id = 0;
  uint16_t device_id = 0;
  uint32_t class_code = 0;  // base class << 16 | subclass << 8 | programming interface
  uint8_t revision = 0;
  uint16_t subsystem_vendor_id = 0;
  uint16_t subsystem_id = 0;
};

// One PCI function: a 256-byte configuration space with a type 0 header (PCI 3.0 §6.1), up to six
// BARs, a capability list and optionally MSI-X. Subclasses declare their BARs and capabilities at
// construction and implement the BAR accesses; this class does the rest:
//
// - Read-only fields stay read-only and the status error bits are write-1-to-clear: every byte has
//   a write mask and a W1C mask.
// - BARs (§6.2.5.1): I/O, 32-bit and 64-bit memory (optionally prefetchable). The low bits are
//   hardwired, so writing all-ones and reading back yields the size mask ("sizing").
// - Decoding (§6.2.2): a BAR is registered on the port I/O or MMIO vmm::Bus while its Command
//   enable bit (I/O Space / Memory Space) is set and its address is valid, and moved whenever the
//   guest reprograms it. A BAR the guest places over another device's range (the bus refuses the
//   registration), at address 0, past the end of the address space or, for I/O, above 0xffff stays
//   unmapped until a later configuration write makes it valid. Nothing a guest writes aborts.
// - MSI-X (§6.8.2): the capability structure, with the table and PBA routed to an MsixCapability.
//
// PciDevices must be owned by std::shared_ptr (the bus registrations of the BARs keep the device
// alive while a vCPU may still be inside an access; the device never touches a bus when it is
// destroyed, so buses and devices can die in any order). Call Shutdown() to unmap a device.
//
// Locking: one mutex guards configuration space. OnBarMapped/OnBarUnmapped run with it held (they
// happen inside configuration writes), so they must not call back into the configuration accessors
// below; ReadBar/WriteBar, BeforeConfigRead and AfterConfigWrite run without it.
class PciDevice : public std::enable_shared_from_this<PciDevice> {
 public:
  virtual ~PciDevice();
  PciDevice(const PciDevice&) = delete;
  PciDevice& operator=(const PciDevice&) = delete;

  // Configuration space accesses (from PciRootBus). `offset` + size must stay inside one aligned
  // dword of the 256 bytes, size 1, 2 or 4; otherwise reads return all-ones and writes are dropped.
  void ReadConfig(uint32_t offset, std::span<uint8_t> data);
  void WriteConfig(uint32_t offset, std::span<const uint8_t> data);
  uint32_t ReadConfigDword(uint32_t offset);

  // Firmware's job, done by the VMM before the guest runs: gives every declared BAR an address
  // from `allocator` and sets the Command register's I/O and Memory Space enables for the kinds of
  // BAR the function has. The BARs are mapped once the device is attached.
  absl::Status AssignBars(BarAllocator& allocator);
  // Connects the function to the buses its BARs decode on (PciRootBus::AddDevice does this) and
  // maps the BARs that are enabled. Both buses must outlive the mappings (see Shutdown()).
  void Attach(vmm::Bus& pio_bus, vmm::Bus& mmio_bus);
  // Unmaps every BAR and stops mapping them; then OnShutdown(). Idempotent.
  void Shutdown();
  // Header Type bit 7 (§6.2.1), set by PciRootBus on function 0 of a multi-function device.
  void SetMultiFunction(bool multi_function);

  // An access to BAR `bar` at `offset`, whether or not the BAR is mapped: what the buses call, and
  // what virtio's PCI configuration access capability uses (§4.1.4.9). Accesses outside the BAR
  // or to an undeclared BAR read zero and are dropped. The MSI-X table and PBA are handled here.
  void ReadBarRegion(int bar, uint64_t offset, std::span<uint8_t> data);
  void WriteBarRegion(int bar, uint64_t offset, std::span<const uint8_t> data);

  // Inspection.
  std::optional<BarSpec> bar_spec(int bar) const;
  uint64_t bar_address(int bar) const;                 // as programmed in configuration space
  std::optional<uint64_t> bar_mapping(int bar) const;  // where it is registered now, if anywhere
  MsixCapability* msix() const { return msix_.get(); }
  uint16_t vendor_id() const { return identity_.vendor_id; }
  uint16_t device_id() const { return identity_.device_id; }

 protected:
  explicit PciDevice(const PciIdentity& identity);

  // Construction-time set-up (before Attach()).
  // Declares BAR `bar` (0..5); a 64-bit BAR also takes `bar` + 1 for the upper half.
  absl::Status DeclareBar(int bar, const BarSpec& spec);
  // Appends a capability (§6.7): `body` is everything after the ID and next-pointer bytes, and
  // `body_write_mask` (same length, or empty for read-only) says which of its bits the guest may
  // change. Returns the capability's offset in configuration space (dword-aligned).
  absl::StatusOr<uint32_t> AddCapability(uint8_t id, std::span<const uint8_t> body,
                                         std::span<const uint8_t> body_write_mask = {});
  // Adds the MSI-X capability with its table at `table_offset` and PBA at `pba_offset` of memory
  // BAR `bar` (both 8-byte aligned, inside the BAR, not overlapping).
  absl::Status AddMsixCapability(std::unique_ptr<MsixCapability> msix, int bar,
                                 uint64_t table_offset, uint64_t pba_offset);

  // The function's own BAR accesses: `offset` + size is inside the BAR (checked by the caller) and
  // outside the MSI-X structures. Called without the configuration lock, possibly concurrently.
  virtual void ReadBar(int bar, uint64_t offset, std::span<uint8_t> data) = 0;
  virtual void WriteBar(int bar, uint64_t offset, std::span<const uint8_t> data) = 0;
  // A BAR was registered at / removed from `address` on its bus. Configuration lock held.
  virtual void OnBarMapped(int /*bar*/, uint64_t /*address*/) {}
  virtual void OnBarUnmapped(int /*bar*/, uint64_t /*address*/) {}
  // Called before a configuration read returns bytes [offset, offset + size), and after a write
  // to them has been applied. No lock held: the function may update configuration space with
  // ReadConfigRaw/WriteConfigRaw (virtio's pci_cfg_data window does).
  virtual void BeforeConfigRead(uint32_t /*offset*/, size_t /*size*/) {}
  virtual void AfterConfigWrite(uint32_t /*offset*/, size_t /*size*/) {}
  // After Shutdown() unmapped the BARs.
  virtual void OnShutdown() {}

  // Configuration bytes without masks or side effects (little-endian, size 1..4, inside the 256
  // bytes; out-of-range calls read 0 / do nothing).
  uint32_t ReadConfigRaw(uint32_t offset, size_t size) const;
  void WriteConfigRaw(uint32_t offset, uint32_t value, size_t size);
  // Makes bits of a device-specific configuration register (beyond the standard header)
  // guest-writable; the others stay read-only.
  void SetConfigWriteMask(uint32_t offset, uint32_t mask, size_t size);

 private:
  // The BusDevice registered for one BAR: forwards to ReadBarRegion/WriteBarRegion.
  class BarRegion : public vmm::BusDevice {
   public:
    BarRegion(PciDevice* device, int bar) : device_(device), bar_(bar) {}
    void Read(uint64_t offset, std::span<uint8_t> data) override {
      device_->ReadBarRegion(bar_, offset, data);
    }
    void Write(uint64_t offset, std::span<const uint8_t> data) override {
      device_->WriteBarRegion(bar_, offset, data);
    }

   private:
    PciDevice* const device_;
    const int bar_;
  };

  struct Bar {
    std::optional<BarSpec> spec;  // set on the BAR's first register only
    bool upper_half = false;      // the high dword of the 64-bit BAR below
    std::optional<uint64_t> mapped_at;
  };

  uint32_t ReadLocked(uint32_t offset, size_t size) const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  void WriteLocked(uint32_t offset, uint32_t value, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SetWriteMask(uint32_t offset, uint32_t mask, size_t size)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  uint64_t BarAddressLocked(int bar) const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // Where BAR `bar` should be mapped given Command and the BAR registers, if anywhere.
  std::optional<uint64_t> DesiredMappingLocked(int bar) const ABSL_SHARED_LOCKS_REQUIRED(mutex_);
  // Brings every BAR's bus registration in line with configuration space.
  void UpdateMappingsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void UnmapLocked(int bar) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);
  void SyncMsixControlLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const PciIdentity identity_;
  std::array<BarRegion, kNumBars> regions_;

  mutable absl::Mutex mutex_;
  std::array<uint8_t, kConfigSpaceSize> config_ ABSL_GUARDED_BY(mutex_){};
  std::array<uint8_t, kConfigSpaceSize> write_mask_ ABSL_GUARDED_BY(mutex_){};
  std::array<uint8_t, kConfigSpaceSize> w1c_mask_ ABSL_GUARDED_BY(mutex_){};
  std::array<Bar, kNumBars> bars_ ABSL_GUARDED_BY(mutex_);
  uint32_t next_capability_ ABSL_GUARDED_BY(mutex_) = kFirstCapabilityOffset;
  uint32_t last_capability_ ABSL_GUARDED_BY(mutex_) = 0;  // 0: none yet
  vmm::Bus* pio_bus_ ABSL_GUARDED_BY(mutex_) = nullptr;
  vmm::Bus* mmio_bus_ ABSL_GUARDED_BY(mutex_) = nullptr;
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;

  // MSI-X: set once at construction, then read-only.
  std::unique_ptr<MsixCapability> msix_;
  int msix_bar_ = -1;
  uint64_t msix_table_offset_ = 0;
  uint64_t msix_pba_offset_ = 0;
  uint32_t msix_capability_ = 0;
};

}  // namespace devices::pci

#endif  // DEVICES_PCI_PCI_DEVICE_H_

#ifndef DEVICES_PCI_PCI_ROOT_BUS_H_
#define DEVICES_PCI_PCI_ROOT_BUS_H_

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "devices/pci/pci_device.h"
#include "devices/pci/pci_regs.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/machine_description.h"

namespace devices::pci {

// The host bridge at 00:00.0, so guests find a normal root (Linux's pci_sanity_check looks for a
// host bridge class or an Intel vendor ID on bus 0). It reports itself as QEMU's i440FX does:
// Intel 82441FX PMC, class 06/00/00, no BARs.
//
// Its Programmable Attribute Map registers (82441FX data sheet, PAM0-PAM6 at 0x59-0x5f) are the
// guest's to write, as firmware does to shadow itself in RAM: 13 segments of the legacy area,
// 0xf0000-0xfffff (PAM0 bits 5:4) and 0xc0000-0xeffff in 16 KiB pieces (PAM1-PAM6, bits 1:0 for
// the lower piece and 5:4 for the upper), each with a read-enable and a write-enable bit: reads
// and writes of an enabled kind go to RAM, the others to the ROM or PCI below. Every other bit is
// read-only (reserved), and all are 0 at power-on: both kinds go to ROM. The bridge keeps the
// registers; what the machine maps where is the assembly's, told through the listener.
class PciHostBridge : public PciDevice {
 public:
  static constexpr uint16_t kVendorIntel = 0x8086;
  static constexpr uint16_t kDevice82441 = 0x1237;
  static constexpr uint32_t kClassHostBridge = 0x060000;

  static constexpr uint32_t kPam0 = 0x59;
  static constexpr size_t kPamRegisters = 7;
  static constexpr size_t kPamSegments = 13;
  struct PamSegment {
    uint32_t base;
    uint32_t size;
    bool read_ram;   // reads go to RAM, else to the ROM
    bool write_ram;  // writes go to RAM, else to the ROM (dropped)
    bool operator==(const PamSegment&) const = default;
  };
  using PamListener = std::function<void(std::span<const PamSegment> segments)>;

  PciHostBridge();

  // The segments in address order as the registers set them now.
  std::array<PamSegment, kPamSegments> PamSegments() const;
  // Called, on the vCPU thread that wrote, after a write changed any segment (with all of them),
  // with the bridge's PAM lock held (calls come one at a time, in order; the listener must not
  // call back into the bridge). Set before the guest runs.
  void SetPamListener(PamListener listener);

 protected:
  void ReadBar(int, uint64_t, std::span<uint8_t> data) override;
  void WriteBar(int, uint64_t, std::span<const uint8_t>) override {}
  void AfterConfigWrite(uint32_t offset, size_t size) override;

 private:
  mutable absl::Mutex pam_mutex_;
  PamListener pam_listener_ ABSL_GUARDED_BY(pam_mutex_);
  std::array<PamSegment, kPamSegments> last_segments_ ABSL_GUARDED_BY(pam_mutex_);
};

// PCI bus 0 behind configuration mechanism #1 (PCI 3.0 §3.2.2.3.2): a 32-bit CONFIG_ADDRESS register
// at port 0xCF8 (bit 31 enable, bits 23:16 bus, 15:11 device, 10:8 function, 7:2 register) and a
// CONFIG_DATA window at 0xCFC-0xCFF accessed with byte, word or dword I/O at the byte offset within
// the addressed dword. Registered on the port I/O bus as one 8-port device.
//
// - Only a 32-bit write to 0xCF8 latches CONFIG_ADDRESS (narrower writes there are other chipset
//   registers on a PC, such as 0xCF9 reset control, and are ignored here); reads of 0xCF8 return
//   the latch.
// - Bus 0 only; devices 0..31, functions 0..7. Reads of absent functions, other buses, the
//   enable bit clear, or extended registers (bits 27:24, AMD's extension for offsets >= 256)
//   return all-ones and writes go nowhere, as with master aborts on real hardware.
// - A host bridge occupies 00:00.0.
//
// Thread-safe. The address latch is shared by all vCPUs, as on hardware (guests serialize their
// two-step accesses, as Linux does with pci_config_lock).
class PciRootBus : public vmm::BusDevice {
 public:
  static constexpr uint16_t kConfigAddressPort = 0xcf8;
  static constexpr uint16_t kConfigDataPort = 0xcfc;
  static constexpr uint64_t kPortCount = 8;  // 0xCF8-0xCFF
  static constexpr uint32_t kConfigAddressEnable = 0x80000000u;

  // Creates the bus with its host bridge and registers it on `pio_bus` at 0xCF8. BARs of added
  // devices go on `pio_bus` and `mmio_bus`, which must outlive the mappings (call Shutdown() first
  // when tearing down in an order where they might not).
  static absl::StatusOr<std::shared_ptr<PciRootBus>> Create(vmm::Bus& pio_bus, vmm::Bus& mmio_bus);
  PciRootBus(vmm::Bus& pio_bus, vmm::Bus& mmio_bus);  // Create() without the registration

  // Places `device` at 00:`device_number`.`function` and attaches it to the buses (its enabled
  // BARs get mapped). Sets the multi-function bit of function 0 when the slot has several
  // functions. Fails if the address is taken or out of range.
  absl::Status AddDevice(uint8_t device_number, uint8_t function,
                         std::shared_ptr<PciDevice> device);
  // Places `device` as function 0 of the lowest free device number and returns that number.
  absl::StatusOr<uint8_t> AddDevice(std::shared_ptr<PciDevice> device);
  std::shared_ptr<PciDevice> GetDevice(uint8_t device_number, uint8_t function) const;
  // The host bridge at 00:00.0 (its PAM registers: SetPamListener).
  std::shared_ptr<PciHostBridge> host_bridge() const { return host_bridge_; }

  // Shuts every device down (unmaps their BARs, stops virtio devices). Call before destroying the
  // buses or the VM when the devices might outlive them.
  void Shutdown();

  // For the machine description / FDT: the configuration ports.
  static vmm::DeviceDescription Describe();

  // Configuration access by address, as a CONFIG_ADDRESS value would select (for in-VMM users and
  // tests). Same rules as the port accesses.
  void ReadConfig(uint8_t bus, uint8_t device_number, uint8_t function, uint32_t offset,
                  std::span<uint8_t> data) const;
  void WriteConfig(uint8_t bus, uint8_t device_number, uint8_t function, uint32_t offset,
                   std::span<const uint8_t> data);

  // vmm::BusDevice: offsets 0-3 are CONFIG_ADDRESS, 4-7 CONFIG_DATA.
  void Read(uint64_t offset, std::span<uint8_t> data) override;
  void Write(uint64_t offset, std::span<const uint8_t> data) override;

 private:
  static constexpr size_t kSlots = size_t{kMaxDevices} * kMaxFunctions;
  // The function CONFIG_ADDRESS selects and the register offset (dword-aligned), if any.
  std::shared_ptr<PciDevice> Select(uint32_t address, uint32_t* offset) const;

  vmm::Bus& pio_bus_;
  vmm::Bus& mmio_bus_;
  const std::shared_ptr<PciHostBridge> host_bridge_;
  mutable absl::Mutex mutex_;
  uint32_t config_address_ ABSL_GUARDED_BY(mutex_) = 0;
  std::array<std::shared_ptr<PciDevice>, kSlots> functions_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace devices::pci

#endif  // DEVICES_PCI_PCI_ROOT_BUS_H_

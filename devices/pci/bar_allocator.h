#ifndef DEVICES_PCI_BAR_ALLOCATOR_H_
#define DEVICES_PCI_BAR_ALLOCATOR_H_

#include <cstdint>
#include <optional>

#include "absl/status/statusor.h"

namespace devices::pci {

// What kind of space a base address register decodes (PCI 3.0 §6.2.5.1).
enum class BarKind {
  kIo,      // I/O space
  kMmio32,  // memory space, "locate anywhere in 32-bit address space"
  kMmio64,  // memory space, 64-bit: the BAR and the next one form the address
};

struct BarSpec {
  BarKind kind = BarKind::kMmio32;
  // A power of two. MMIO: at least 16 bytes (§6.2.5.1; 4 KiB or more is recommended so a BAR never
  // shares a page). I/O: 4..256 bytes.
  uint64_t size = 0;
  bool prefetchable = false;  // MMIO only
};

// A guest-physical (or port) range [base, base + size).
struct AddressWindow {
  uint64_t base = 0;
  uint64_t size = 0;
};

// The machine's windows (docs/machine.md): the MMIO hole below the IOAPIC for memory BARs, and the
// top quarter of the port space for I/O BARs (the range PC firmware traditionally hands to PCI,
// clear of every legacy ISA port).
inline constexpr AddressWindow kX86Mmio32Window{0xc0000000, 0xfec00000 - 0xc0000000};
inline constexpr AddressWindow kX86IoWindow{0xc000, 0x4000};

// Places BARs for a firmware-less boot: the VMM assigns every BAR before the guest runs, as a BIOS
// would, and guests (Linux's pcibios_resource_survey, the test guest) keep the assignment.
//
// Each BAR is naturally aligned (§6.2.5.1: the size is a power of two and the BAR's low bits are
// hardwired, so the base must be a multiple of the size). Allocation is a bump pointer per window;
// nothing is freed (devices are not unplugged).
//
// Placement policy: I/O BARs go in the I/O window, 32-bit BARs in the 32-bit window. 64-bit BARs go
// in the 32-bit window too while it has room, and in the optional high window (above RAM, above
// 4 GiB) once it does not: low placement keeps them reachable by guests that map only the first
// 4 GiB (the test guest's identity map, 32-bit firmware) and is what SeaBIOS does for small BARs.
class BarAllocator {
 public:
  BarAllocator(AddressWindow mmio32, AddressWindow io,
               std::optional<AddressWindow> mmio64_high = std::nullopt);
  // The x86 machine's windows, with an optional high window for 64-bit BARs.
  static BarAllocator ForX86(std::optional<AddressWindow> mmio64_high = std::nullopt) {
    return BarAllocator(kX86Mmio32Window, kX86IoWindow, mmio64_high);
  }

  // The base for a BAR of `spec`, or InvalidArgument (size not a power of two or out of range) or
  // ResourceExhausted (no room).
  absl::StatusOr<uint64_t> Allocate(const BarSpec& spec);

 private:
  struct Window {
    uint64_t next;
    uint64_t end;
  };
  static std::optional<uint64_t> Take(Window& window, uint64_t size);

  Window mmio32_;
  Window io_;
  std::optional<Window> mmio64_high_;
};

}  // namespace devices::pci

#endif  // DEVICES_PCI_BAR_ALLOCATOR_H_

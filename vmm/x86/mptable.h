#ifndef VMM_X86_MPTABLE_H_
#define VMM_X86_MPTABLE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/layout.h"

namespace vmm::x86 {

// On-guest layout of the Intel MultiProcessor Specification 1.4 structures (chapter 4). All fields
// are little-endian, as on the x86 host that writes them; every field is naturally aligned, so no
// packing attribute is needed and the static_asserts in mptable.cc pin the sizes.

// 4.1 MP Floating Pointer Structure (16 bytes, paragraph aligned).
struct MpFloatingPointer {
  char signature[4];      // "_MP_"
  uint32_t config_table;  // physical address of the configuration table
  uint8_t length;         // in 16-byte paragraphs: 1
  uint8_t spec_rev;       // 4 = version 1.4
  uint8_t checksum;       // all 16 bytes sum to 0
  uint8_t feature1;       // 0: a configuration table is present (no default configuration)
  uint8_t feature2;       // bit 7 IMCRP: 0 = virtual wire mode, no IMCR
  uint8_t feature3_5[3];  // reserved
};

// 4.2 MP Configuration Table Header (44 bytes).
struct MpConfigTableHeader {
  char signature[4];           // "PCMP"
  uint16_t base_table_length;  // header + all base entries
  uint8_t spec_rev;            // 4
  uint8_t checksum;            // the base table sums to 0
  char oem_id[8];              // space padded
  char product_id[12];         // space padded
  uint32_t oem_table_pointer;
  uint16_t oem_table_size;
  uint16_t entry_count;  // number of base entries
  uint32_t local_apic_address;
  uint16_t extended_table_length;
  uint8_t extended_table_checksum;
  uint8_t reserved;
};

// 4.3 base table entry types (the first byte of each entry).
enum MpEntryType : uint8_t {
  kMpProcessor = 0,
  kMpBus = 1,
  kMpIoApic = 2,
  kMpIoInterrupt = 3,
  kMpLocalInterrupt = 4,
};

// 4.3.1 Processor Entry (20 bytes).
struct MpProcessorEntry {
  uint8_t type;  // kMpProcessor
  uint8_t local_apic_id;
  uint8_t local_apic_version;
  uint8_t cpu_flags;       // kMpCpuEnabled | kMpCpuBootProcessor
  uint32_t cpu_signature;  // CPUID.1 EAX layout: stepping, model, family
  uint32_t feature_flags;  // CPUID.1 EDX
  uint32_t reserved[2];
};
inline constexpr uint8_t kMpCpuEnabled = 1 << 0;
inline constexpr uint8_t kMpCpuBootProcessor = 1 << 1;

// 4.3.2 Bus Entry (8 bytes).
struct MpBusEntry {
  uint8_t type;  // kMpBus
  uint8_t bus_id;
  char bus_type[6];  // "ISA   " (Table 4-8), space padded
};

// 4.3.3 I/O APIC Entry (8 bytes).
struct MpIoApicEntry {
  uint8_t type;  // kMpIoApic
  uint8_t ioapic_id;
  uint8_t ioapic_version;
  uint8_t flags;  // bit 0 EN
  uint32_t address;
};
inline constexpr uint8_t kMpIoApicEnabled = 1 << 0;

// 4.3.4 I/O Interrupt Assignment Entry and 4.3.5 Local Interrupt Assignment Entry share a layout
// (8 bytes); the destination is an IOAPIC id and INTIN pin, or a local APIC id and LINTIN pin.
struct MpInterruptEntry {
  uint8_t type;            // kMpIoInterrupt or kMpLocalInterrupt
  uint8_t interrupt_type;  // MpInterruptType
  uint16_t flags;          // polarity bits 1:0, trigger bits 3:2; 0 = conforms to the bus
  uint8_t source_bus_id;
  uint8_t source_bus_irq;
  uint8_t destination_apic_id;  // 0xff in a local entry: every local APIC
  uint8_t destination_pin;
};

// Table 4-10 I/O interrupt entry flags: polarity (PO) bits 1:0, trigger mode (EL) bits 3:2.
inline constexpr uint16_t kMpConformsToBus = 0;  // ISA: edge, active high
inline constexpr uint16_t kMpLevelActiveHigh = 0b01 | (0b11 << 2);

// Table 4-11 interrupt types.
enum MpInterruptType : uint8_t {
  kMpInt = 0,  // vectored interrupt, vector from the APIC redirection table
  kMpNmi = 1,
  kMpSmi = 2,
  kMpExtInt = 3,  // vectored interrupt, vector from the 8259A
};

// The ISA bus id in the table, and the number of ISA IRQs wired to the IOAPIC.
inline constexpr uint8_t kMpIsaBusId = 0;
inline constexpr uint32_t kMpIsaIrqCount = 16;

// Versions of KVM's in-kernel local APIC (APIC_VERSION, an integrated xAPIC) and IOAPIC
// (IOAPIC_VERSION_ID, 82093AA compatible).
inline constexpr uint8_t kMpLocalApicVersion = 0x14;
inline constexpr uint8_t kMpIoApicVersion = 0x11;

// The table must end before 0xa0000, the end of the 1 KiB EBDA that e820 reserves for it.
inline constexpr uint64_t kMpTableLimit = 0xa0000;

// The bytes the table needs for `num_cpus` processors.
constexpr uint64_t MpTableSize(uint32_t num_cpus) {
  return sizeof(MpFloatingPointer) + sizeof(MpConfigTableHeader) +
         num_cpus * sizeof(MpProcessorEntry) + sizeof(MpBusEntry) + sizeof(MpIoApicEntry) +
         (kMpIsaIrqCount + 2) * sizeof(MpInterruptEntry);
}

// The most processors the table can list within the EBDA (40).
inline constexpr uint32_t kMpTableMaxCpus =
    (kMpTableLimit - kMpTableAddress - MpTableSize(0)) / sizeof(MpProcessorEntry);

// Writes an MP Specification 1.4 table at kMpTableAddress: the floating pointer, then the
// configuration table right after it with processors (APIC ids 0..num_cpus-1, cpu 0 the
// bootstrap processor), the ISA bus, the IOAPIC (id num_cpus, at kIoapicAddress), ISA IRQ n routed
// to IOAPIC pin n for n in 0..15 (edge, active high as on ISA, except IRQ 9, the ACPI SCI
// kAcpiSciIrq: level, active high, as in the ACPI MADT), ExtINT on LINT0 and NMI on LINT1 of every
// local APIC.
//
// ISA IRQ 0 goes to pin 0, not pin 2 as on PC chipsets: the VMM keeps KVM's default GSI routing
// (kvm_setup_default_irq_routing: GSI n -> IOAPIC pin n and 8259 input n for n < 16), and KVM's
// in-kernel PIT raises GSI 0, so the timer arrives at IOAPIC pin 0. QEMU instead installs a GSI 0 ->
// pin 2 route and reports it as an interrupt source override; Firecracker, like us, keeps the
// default and lists IRQ 0 on pin 0. If the VMM ever sets its own routing, this table must follow.
//
// Errors: InvalidArgument when num_cpus is 0 or above kMpTableMaxCpus; OutOfRange when guest memory
// does not cover [kMpTableAddress, kMpTableLimit).
absl::Status WriteMpTable(const GuestMemory& memory, uint32_t num_cpus);

}  // namespace vmm::x86

#endif  // VMM_X86_MPTABLE_H_

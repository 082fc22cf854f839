#include "vmm/x86/mptable.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/strings/str_format.h"
#include "vmm/machine/layout.h"

namespace vmm::x86 {
namespace {

// Sizes fixed by the MP Specification 1.4, chapter 4.
static_assert(sizeof(MpFloatingPointer) == 16);
static_assert(sizeof(MpConfigTableHeader) == 44);
static_assert(sizeof(MpProcessorEntry) == 20);
static_assert(sizeof(MpBusEntry) == 8);
static_assert(sizeof(MpIoApicEntry) == 8);
static_assert(sizeof(MpInterruptEntry) == 8);
// 4.1: the floating pointer must sit on a 16-byte boundary in the first KiB of the EBDA (one of
// the places a guest searches).
static_assert(kMpTableAddress % 16 == 0 && kMpTableAddress == kEbdaStart);
// The IOAPIC id is num_cpus: it must fit the 8-bit id fields and stay below 0xff (broadcast), and
// every local APIC id 0..num_cpus-1 likewise (at most 254 as the brief's xAPIC limit).
static_assert(kMpTableMaxCpus <= 254);

// 4.1 / 4.2: "the checksum field ... makes all bytes in the structure sum to zero".
uint8_t Checksum(std::span<const uint8_t> bytes) {
  uint8_t sum = 0;
  for (uint8_t b : bytes) sum += b;
  return static_cast<uint8_t>(-sum);
}

template <typename T>
void Append(std::vector<uint8_t>& out, const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

// Copies a string into a fixed-size, space-padded field (the OEM, product and bus type strings).
template <size_t N>
void SetPadded(char (&field)[N], const char* text) {
  std::memset(field, ' ', N);
  std::memcpy(field, text, std::min(N, std::strlen(text)));
}

// What the processor entries report as CPU signature and features (4.3.1). Linux and other MP
// table readers only print these; they probe CPUID themselves. Family 6, model 0, stepping 0, with
// the two features the table implies: an on-chip FPU (CPUID.1 EDX bit 0) and APIC (bit 9).
constexpr uint32_t kCpuSignature = 6 << 8;
constexpr uint32_t kCpuFeatureFpu = 1u << 0;
constexpr uint32_t kCpuFeatureApic = 1u << 9;

// Destination "every local APIC" in a local interrupt entry (4.3.5).
constexpr uint8_t kAllLocalApics = 0xff;

MpInterruptEntry InterruptEntry(MpEntryType type, MpInterruptType interrupt_type,
                                uint8_t source_irq, uint8_t destination, uint8_t pin,
                                uint16_t flags = kMpConformsToBus) {
  return MpInterruptEntry{
      .type = type,
      .interrupt_type = interrupt_type,
      .flags = flags,
      .source_bus_id = kMpIsaBusId,
      .source_bus_irq = source_irq,
      .destination_apic_id = destination,
      .destination_pin = pin,
  };
}

}  // namespace

absl::Status WriteMpTable(const GuestMemory& memory, uint32_t num_cpus) {
  if (num_cpus == 0 || num_cpus > kMpTableMaxCpus) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the MP table can list 1 to %u CPUs in the EBDA at 0x%x, not %u",
                        kMpTableMaxCpus, kMpTableAddress, num_cpus));
  }

  // The configuration table: header first, entries after, checksum last.
  const uint64_t config_address = kMpTableAddress + sizeof(MpFloatingPointer);
  std::vector<uint8_t> table;
  table.resize(sizeof(MpConfigTableHeader));
  uint16_t entry_count = 0;

  // 4.3.1: one entry per processor, in APIC id order; the BSP is flagged (the one that starts;
  // the others wait for INIT/SIPI, docs/machine.md).
  for (uint32_t cpu = 0; cpu < num_cpus; ++cpu) {
    Append(table, MpProcessorEntry{
                      .type = kMpProcessor,
                      .local_apic_id = static_cast<uint8_t>(cpu),
                      .local_apic_version = kMpLocalApicVersion,
                      .cpu_flags = static_cast<uint8_t>(kMpCpuEnabled |
                                                        (cpu == 0 ? kMpCpuBootProcessor : 0)),
                      .cpu_signature = kCpuSignature,
                      .feature_flags = kCpuFeatureFpu | kCpuFeatureApic,
                      .reserved = {0, 0},
                  });
    ++entry_count;
  }

  // 4.3.2: the only bus is ISA; the serial port and the other legacy devices sit on it.
  MpBusEntry bus{.type = kMpBus, .bus_id = kMpIsaBusId, .bus_type = {}};
  SetPadded(bus.bus_type, "ISA");
  Append(table, bus);
  ++entry_count;

  // 4.3.3: the in-kernel IOAPIC. Its id follows the local APIC ids so the two never collide.
  const auto ioapic_id = static_cast<uint8_t>(num_cpus);
  Append(table, MpIoApicEntry{
                    .type = kMpIoApic,
                    .ioapic_id = ioapic_id,
                    .ioapic_version = kMpIoApicVersion,
                    .flags = kMpIoApicEnabled,
                    .address = static_cast<uint32_t>(kIoapicAddress),
                });
  ++entry_count;

  // 4.3.4: ISA IRQ n -> IOAPIC pin n, including IRQ 0 (see the header for why not pin 2). The
  // ACPI SCI on IRQ 9 is level-triggered, active high, as the MADT's override says.
  for (uint32_t irq = 0; irq < kMpIsaIrqCount; ++irq) {
    Append(table, InterruptEntry(kMpIoInterrupt, kMpInt, static_cast<uint8_t>(irq), ioapic_id,
                                 static_cast<uint8_t>(irq),
                                 irq == kAcpiSciIrq ? kMpLevelActiveHigh : kMpConformsToBus));
    ++entry_count;
  }

  // 4.3.5 and 5.1 (virtual wire mode): the 8259 reaches every local APIC through LINT0 as ExtINT,
  // NMI through LINT1. KVM's in-kernel LAPIC implements both pins.
  Append(table, InterruptEntry(kMpLocalInterrupt, kMpExtInt, 0, kAllLocalApics, 0));
  Append(table, InterruptEntry(kMpLocalInterrupt, kMpNmi, 0, kAllLocalApics, 1));
  entry_count += 2;

  MpConfigTableHeader header{};
  std::memcpy(header.signature, "PCMP", 4);
  header.base_table_length = static_cast<uint16_t>(table.size());
  header.spec_rev = 4;
  SetPadded(header.oem_id, "MICROVM");
  SetPadded(header.product_id, "MICROVM");
  header.entry_count = entry_count;
  header.local_apic_address = static_cast<uint32_t>(kLapicAddress);
  std::memcpy(table.data(), &header, sizeof(header));
  table[offsetof(MpConfigTableHeader, checksum)] = Checksum(table);

  MpFloatingPointer pointer{};
  std::memcpy(pointer.signature, "_MP_", 4);
  pointer.config_table = static_cast<uint32_t>(config_address);
  pointer.length = 1;
  pointer.spec_rev = 4;
  pointer.checksum = Checksum(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&pointer), sizeof(pointer)));

  std::vector<uint8_t> image;
  Append(image, pointer);
  image.insert(image.end(), table.begin(), table.end());
  if (image.size() != MpTableSize(num_cpus) || kMpTableAddress + image.size() > kMpTableLimit) {
    return absl::InternalError("MP table size does not match its layout");
  }

  // Clear the whole EBDA first so nothing stale after the table looks like a structure.
  absl::Status status = memory.Zero(GuestAddress(kMpTableAddress), kMpTableLimit - kMpTableAddress);
  if (status.ok()) status = memory.Write(GuestAddress(kMpTableAddress), image);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrFormat("cannot write the MP table at 0x%x: %s",
                                                       kMpTableAddress, status.message()));
  }
  return absl::OkStatus();
}

}  // namespace vmm::x86

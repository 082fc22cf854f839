#include "vmm/x86/mptable.h"

#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/machine/layout.h"

namespace vmm::x86 {
namespace {

using ::testing::HasSubstr;

uint8_t Sum(const std::vector<uint8_t>& bytes, size_t offset, size_t length) {
  uint8_t sum = 0;
  for (size_t i = offset; i < offset + length; ++i) sum += bytes[i];
  return sum;
}

template <typename T>
T At(const std::vector<uint8_t>& bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// What a guest's MP table parser (Linux's arch/x86/kernel/mpparse.c) extracts.
struct ParsedTable {
  MpFloatingPointer pointer;
  MpConfigTableHeader header;
  std::vector<MpProcessorEntry> processors;
  std::vector<MpBusEntry> buses;
  std::vector<MpIoApicEntry> ioapics;
  std::vector<MpInterruptEntry> io_interrupts;
  std::vector<MpInterruptEntry> local_interrupts;
};

// Reads the EBDA back from guest memory and walks the table the way a guest does; fails the test on
// any structural error.
ParsedTable Parse(const GuestMemory& memory) {
  ParsedTable parsed{};
  std::vector<uint8_t> ebda(kMpTableLimit - kMpTableAddress);
  EXPECT_TRUE(memory.Read(GuestAddress(kMpTableAddress), std::span<uint8_t>(ebda)).ok());

  parsed.pointer = At<MpFloatingPointer>(ebda, 0);
  EXPECT_EQ(std::string(parsed.pointer.signature, 4), "_MP_");
  EXPECT_EQ(Sum(ebda, 0, 16), 0) << "floating pointer checksum";
  EXPECT_EQ(parsed.pointer.length, 1);
  EXPECT_EQ(parsed.pointer.spec_rev, 4);
  EXPECT_EQ(parsed.pointer.feature1, 0) << "a configuration table must be present";
  EXPECT_EQ(parsed.pointer.config_table, kMpTableAddress + 16);

  const size_t config = parsed.pointer.config_table - kMpTableAddress;
  parsed.header = At<MpConfigTableHeader>(ebda, config);
  EXPECT_EQ(std::string(parsed.header.signature, 4), "PCMP");
  EXPECT_EQ(parsed.header.spec_rev, 4);
  EXPECT_EQ(std::string(parsed.header.oem_id, 8), "MICROVM ");
  EXPECT_LE(config + parsed.header.base_table_length, ebda.size());
  EXPECT_EQ(Sum(ebda, config, parsed.header.base_table_length), 0) << "configuration checksum";
  EXPECT_EQ(parsed.header.extended_table_length, 0);

  size_t offset = config + sizeof(MpConfigTableHeader);
  const size_t end = config + parsed.header.base_table_length;
  int entries = 0;
  while (offset < end) {
    const uint8_t type = ebda[offset];
    switch (type) {
      case kMpProcessor:
        parsed.processors.push_back(At<MpProcessorEntry>(ebda, offset));
        offset += sizeof(MpProcessorEntry);
        break;
      case kMpBus:
        parsed.buses.push_back(At<MpBusEntry>(ebda, offset));
        offset += 8;
        break;
      case kMpIoApic:
        parsed.ioapics.push_back(At<MpIoApicEntry>(ebda, offset));
        offset += 8;
        break;
      case kMpIoInterrupt:
        parsed.io_interrupts.push_back(At<MpInterruptEntry>(ebda, offset));
        offset += 8;
        break;
      case kMpLocalInterrupt:
        parsed.local_interrupts.push_back(At<MpInterruptEntry>(ebda, offset));
        offset += 8;
        break;
      default:
        ADD_FAILURE() << "unknown entry type " << int{type} << " at offset " << offset;
        return parsed;
    }
    ++entries;
  }
  EXPECT_EQ(offset, end);
  EXPECT_EQ(entries, parsed.header.entry_count);
  // Everything after the table in the EBDA is zero.
  for (size_t i = end; i < ebda.size(); ++i) EXPECT_EQ(ebda[i], 0) << "offset " << i;
  return parsed;
}

GuestMemory LowMemory() { return *GuestMemory::CreateX86(kMinimumRamBytes); }

TEST(MpTableTest, FourCpus) {
  GuestMemory memory = LowMemory();
  ASSERT_TRUE(WriteMpTable(memory, 4).ok());
  const ParsedTable t = Parse(memory);

  EXPECT_EQ(t.header.local_apic_address, 0xfee00000u);
  EXPECT_EQ(t.header.entry_count, 4 + 1 + 1 + 16 + 2);

  ASSERT_EQ(t.processors.size(), 4u);
  for (uint8_t i = 0; i < 4; ++i) {
    EXPECT_EQ(t.processors[i].local_apic_id, i);
    EXPECT_EQ(t.processors[i].local_apic_version, 0x14);
    EXPECT_TRUE(t.processors[i].cpu_flags & kMpCpuEnabled);
    EXPECT_EQ((t.processors[i].cpu_flags & kMpCpuBootProcessor) != 0, i == 0) << int{i};
    EXPECT_NE(t.processors[i].cpu_signature, 0u);
    EXPECT_TRUE(t.processors[i].feature_flags & (1u << 9)) << "APIC feature flag";
  }

  ASSERT_EQ(t.buses.size(), 1u);
  EXPECT_EQ(t.buses[0].bus_id, kMpIsaBusId);
  EXPECT_EQ(std::string(t.buses[0].bus_type, 6), "ISA   ");

  ASSERT_EQ(t.ioapics.size(), 1u);
  EXPECT_EQ(t.ioapics[0].ioapic_id, 4);
  EXPECT_EQ(t.ioapics[0].ioapic_version, 0x11);
  EXPECT_EQ(t.ioapics[0].flags & kMpIoApicEnabled, kMpIoApicEnabled);
  EXPECT_EQ(t.ioapics[0].address, 0xfec00000u);

  ASSERT_EQ(t.io_interrupts.size(), 16u);
  for (uint8_t irq = 0; irq < 16; ++irq) {
    const MpInterruptEntry& e = t.io_interrupts[irq];
    EXPECT_EQ(e.interrupt_type, kMpInt);
    // ISA edge/high, except the ACPI SCI on IRQ 9: level (11 << 2), active high (01).
    EXPECT_EQ(e.flags, irq == 9 ? 0x0d : 0) << int{irq};
    EXPECT_EQ(e.source_bus_id, kMpIsaBusId);
    EXPECT_EQ(e.source_bus_irq, irq);
    EXPECT_EQ(e.destination_apic_id, 4);
    EXPECT_EQ(e.destination_pin, irq) << "IRQ n on pin n (KVM default routing)";
  }

  ASSERT_EQ(t.local_interrupts.size(), 2u);
  EXPECT_EQ(t.local_interrupts[0].interrupt_type, kMpExtInt);
  EXPECT_EQ(t.local_interrupts[0].destination_apic_id, 0xff);
  EXPECT_EQ(t.local_interrupts[0].destination_pin, 0);
  EXPECT_EQ(t.local_interrupts[1].interrupt_type, kMpNmi);
  EXPECT_EQ(t.local_interrupts[1].destination_apic_id, 0xff);
  EXPECT_EQ(t.local_interrupts[1].destination_pin, 1);
}

TEST(MpTableTest, OneCpuAndMaximum) {
  GuestMemory memory = LowMemory();
  ASSERT_TRUE(WriteMpTable(memory, 1).ok());
  ParsedTable t = Parse(memory);
  ASSERT_EQ(t.processors.size(), 1u);
  EXPECT_EQ(t.processors[0].cpu_flags, kMpCpuEnabled | kMpCpuBootProcessor);
  EXPECT_EQ(t.ioapics[0].ioapic_id, 1);

  EXPECT_EQ(kMpTableMaxCpus, 40u);
  ASSERT_TRUE(WriteMpTable(memory, kMpTableMaxCpus).ok());
  t = Parse(memory);
  EXPECT_EQ(t.processors.size(), kMpTableMaxCpus);
  EXPECT_LE(kMpTableAddress + MpTableSize(kMpTableMaxCpus), 0xa0000u);
  EXPECT_GT(kMpTableAddress + MpTableSize(kMpTableMaxCpus + 1), 0xa0000u);

  // A smaller table rewritten over a larger one leaves no stale entries (Parse checks the tail).
  ASSERT_TRUE(WriteMpTable(memory, 2).ok());
  EXPECT_EQ(Parse(memory).processors.size(), 2u);
}

TEST(MpTableTest, RejectsBadCpuCounts) {
  GuestMemory memory = LowMemory();
  EXPECT_EQ(WriteMpTable(memory, 0).code(), absl::StatusCode::kInvalidArgument);
  absl::Status status = WriteMpTable(memory, kMpTableMaxCpus + 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("41"));
  EXPECT_EQ(WriteMpTable(memory, 255).code(), absl::StatusCode::kInvalidArgument);
}

TEST(MpTableTest, RejectsMemoryWithoutTheEbda) {
  std::vector<std::unique_ptr<GuestMemoryRegion>> regions;
  regions.push_back(*GuestMemoryRegion::Create(GuestAddress(0), 0x9f000));
  GuestMemory memory = *GuestMemory::Create(std::move(regions));
  absl::Status status = WriteMpTable(memory, 1);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("MP table"));
}

}  // namespace
}  // namespace vmm::x86

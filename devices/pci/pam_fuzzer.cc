// Fuzz target for the shadow RAM below 1 MiB: the i440FX host bridge's PAM registers
// (devices/pci/pci_root_bus.h) written through the configuration ports as a hostile firmware or
// guest likes, and the legacy BIOS area (vmm/machine/legacy_bios_area.h) that follows them, wired
// as the VMM wires them, accessed through the MMIO bus where the hypervisor's map would exit. Nothing
// may crash or hang, and after every operation (checked here, so the plain gcc build finds it too):
// each segment's planned mapping is what its PAM nibble says and lies inside the RAM or the ROM,
// the change lists the area reported kept the map in step, reads see RAM, ROM or all-ones as
// routed, and writes reach RAM only where routed.
//
// Input: a list of operations, each one byte of kind (mod 3) followed by its operands:
//   0 config  u8 register offset (0x58 + mod 8), u8 size (1, 2 or 4), u32 value, through
//             0xcf8/0xcfc as the guest writes it
//   1 write   u32 offset in the area, u8 size (1 to 8), u64 value
//   2 read    u32 offset in the area, u8 size (1 to 8)
// Built normally this file defines only LLVMFuzzerTestOneInput; with PAM_FUZZER_SMOKE_MAIN it
// also has a main() that runs hand-made seeds and deterministic pseudo-random inputs.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "devices/pci/pci_root_bus.h"
#include "devices/virtio/test_random.h"
#include "vmm/machine/bus.h"
#include "vmm/machine/legacy_bios_area.h"

namespace {

using devices::pci::PciHostBridge;
using devices::pci::PciRootBus;
using vmm::LegacyBiosArea;

[[noreturn]] void Fail(const char* what, size_t segment) {
  std::fprintf(stderr, "pam_fuzzer: %s (segment %zu)\n", what, segment);
  std::abort();
}

using Input = devices::virtio::testing::FuzzInput;

struct Machine {
  std::vector<uint8_t> ram = std::vector<uint8_t>(LegacyBiosArea::kSize);
  std::vector<uint8_t> rom = std::vector<uint8_t>(LegacyBiosArea::kMaxRomAliasSize);
  std::vector<uint8_t> expected_ram = std::vector<uint8_t>(LegacyBiosArea::kSize);
  vmm::Bus pio{"pio"};
  vmm::Bus mmio{"mmio"};
  std::shared_ptr<PciRootBus> root;
  std::shared_ptr<LegacyBiosArea> area;
  std::array<LegacyBiosArea::Mapping, LegacyBiosArea::kSegments> map{};  // as the VMM applies it
};

bool Inside(const std::vector<uint8_t>& buffer, const uint8_t* start, uint64_t size) {
  return start >= buffer.data() && start + size <= buffer.data() + buffer.size();
}

void Check(Machine& machine) {
  const auto segments = machine.root->host_bridge()->PamSegments();
  const std::vector<LegacyBiosArea::Mapping> mappings = machine.area->Mappings();
  for (size_t i = 0; i < LegacyBiosArea::kSegments; ++i) {
    const LegacyBiosArea::Mapping& mapping = mappings[i];
    if (segments[i].base != LegacyBiosArea::SegmentStart(i) ||
        segments[i].size != LegacyBiosArea::SegmentSize(i)) {
      Fail("the bridge's segment is not the area's", i);
    }
    if (!(mapping == machine.map[i])) Fail("a changed mapping was not reported", i);
    if (mapping.guest_address != segments[i].base || mapping.size != segments[i].size) {
      Fail("a mapping is not its segment", i);
    }
    const uint64_t offset = mapping.guest_address - LegacyBiosArea::kStart;
    if (segments[i].read_ram) {
      if (mapping.host_address != machine.ram.data() + offset) Fail("RAM reads not on RAM", i);
      if (mapping.read_only == segments[i].write_ram) Fail("RAM writes routed wrongly", i);
    } else if (mapping.host_address != nullptr) {
      if (!Inside(machine.rom, mapping.host_address, mapping.size)) Fail("ROM outside the ROM", i);
      if (!mapping.read_only) Fail("the ROM is mapped writable", i);
    }
  }
  if (machine.ram != machine.expected_ram) Fail("RAM changed where writes were not routed", 0);
}

uint8_t ExpectedByte(const Machine& machine, uint64_t offset) {
  const auto segments = machine.root->host_bridge()->PamSegments();
  const size_t segment = std::min<size_t>(offset / 0x4000, LegacyBiosArea::kSegments - 1);
  if (segments[segment].read_ram) return machine.expected_ram[offset];
  const uint64_t alias_start = LegacyBiosArea::kSize - machine.rom.size();
  return offset >= alias_start ? machine.rom[offset - alias_start] : 0xff;
}

void ConfigWrite(Machine& machine, uint32_t offset, size_t size, uint32_t value) {
  const uint32_t address = 0x80000000u | (offset & 0xfc);
  machine.pio.Write(0xcf8, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&address), 4));
  machine.pio.Write(0xcfc + (offset & 3),
                    std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&value), size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Machine machine;
  for (size_t i = 0; i < machine.rom.size(); ++i) machine.rom[i] = static_cast<uint8_t>(i * 7 + 1);
  auto root = PciRootBus::Create(machine.pio, machine.mmio);
  auto area = LegacyBiosArea::Create(machine.ram, machine.rom);
  if (!root.ok() || !area.ok()) Fail("the machine could not be built", 0);
  machine.root = *std::move(root);
  machine.area = *std::move(area);
  if (!machine.mmio.Register(LegacyBiosArea::kStart, LegacyBiosArea::kSize, machine.area).ok()) {
    Fail("the area could not be registered", 0);
  }
  for (const LegacyBiosArea::Mapping& mapping : machine.area->Mappings()) {
    machine.map[mapping.segment] = mapping;
  }
  using PamSegment = PciHostBridge::PamSegment;
  machine.root->host_bridge()->SetPamListener([&machine](std::span<const PamSegment> segments) {
    std::array<LegacyBiosArea::Route, LegacyBiosArea::kSegments> routes{};
    for (size_t i = 0; i < segments.size() && i < routes.size(); ++i) {
      routes[i] = {segments[i].read_ram, segments[i].write_ram};
    }
    for (const LegacyBiosArea::Mapping& mapping : machine.area->SetRoutes(routes)) {
      if (mapping.segment >= machine.map.size()) Fail("a mapping for no segment", mapping.segment);
      machine.map[mapping.segment] = mapping;
    }
  });
  Check(machine);

  Input input(data, size);
  while (!input.done()) {
    switch (input.Take(1) % 3) {
      case 0: {
        const auto offset = static_cast<uint32_t>(0x58 + input.Take(1) % 8);
        const size_t sizes[] = {1, 2, 4};
        const size_t access = sizes[input.Take(1) % 3];
        ConfigWrite(machine, offset, access, static_cast<uint32_t>(input.Take(4)));
        break;
      }
      case 1: {
        const uint64_t offset = input.Take(4) % LegacyBiosArea::kSize;
        const size_t access = 1 + input.Take(1) % 8;
        const uint64_t value = input.Take(8);
        uint8_t bytes[8];
        std::memcpy(bytes, &value, sizeof(bytes));
        const auto segments = machine.root->host_bridge()->PamSegments();
        const bool inside = offset + access <= LegacyBiosArea::kSize;
        machine.mmio.Write(LegacyBiosArea::kStart + offset,
                           std::span<const uint8_t>(bytes, access));
        for (size_t b = 0; inside && b < access; ++b) {
          const size_t segment =
              std::min<size_t>((offset + b) / 0x4000, LegacyBiosArea::kSegments - 1);
          if (segments[segment].write_ram) machine.expected_ram[offset + b] = bytes[b];
        }
        break;
      }
      case 2: {
        const uint64_t offset = input.Take(4) % LegacyBiosArea::kSize;
        const size_t access = 1 + input.Take(1) % 8;
        uint8_t bytes[8];
        const bool claimed =
            machine.mmio.Read(LegacyBiosArea::kStart + offset, std::span<uint8_t>(bytes, access));
        if (claimed != (offset + access <= LegacyBiosArea::kSize))
          Fail("a read claimed wrongly", 0);
        for (size_t b = 0; claimed && b < access; ++b) {
          if (bytes[b] != ExpectedByte(machine, offset + b)) Fail("a read saw the wrong byte", 0);
        }
        break;
      }
    }
    Check(machine);
  }
  return 0;
}

#ifdef PAM_FUZZER_SMOKE_MAIN

namespace {

void Append(std::vector<uint8_t>& out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

void AppendConfig(std::vector<uint8_t>& out, uint8_t offset, uint8_t size_selector,
                  uint32_t value) {
  Append(out, 0, 1);
  Append(out, offset - 0x58, 1);
  Append(out, size_selector, 1);
  Append(out, value, 4);
}

void AppendAccess(std::vector<uint8_t>& out, uint8_t kind, uint32_t offset, uint8_t size,
                  uint64_t value) {
  Append(out, kind, 1);
  Append(out, offset, 4);
  Append(out, size - 1, 1);
  if (kind == 1) Append(out, value, 8);
}

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  {  // SeaBIOS: shadow on (byte writes of 0x33, 0x30), copy, then write-protect in two dwords.
    std::vector<uint8_t> s;
    for (uint8_t pam = 0x5a; pam <= 0x5f; ++pam) AppendConfig(s, pam, 0, 0x33);
    AppendConfig(s, 0x59, 0, 0x30);
    AppendAccess(s, 1, 0x30000, 8, 0x1122334455667788);
    AppendAccess(s, 2, 0x30000, 8, 0);
    AppendConfig(s, 0x58, 2, 0x11101100);
    AppendConfig(s, 0x5c, 2, 0x33333333);
    AppendAccess(s, 1, 0x30000, 8, 0);
    AppendAccess(s, 2, 0x3fffc, 8, 0);  // runs past 1 MiB: not claimed
    seeds.push_back(s);
  }
  {  // Write-only shadow, then read-only, across segment edges.
    std::vector<uint8_t> s;
    AppendConfig(s, 0x5e, 1, 0x2222);
    AppendAccess(s, 1, 0x27ffc, 8, ~uint64_t{0});
    AppendAccess(s, 2, 0x27ffc, 8, 0);
    AppendConfig(s, 0x5e, 1, 0x1111);
    AppendAccess(s, 2, 0x27ffc, 8, 0);
    seeds.push_back(s);
  }
  return seeds;
}

}  // namespace

int main() {
  return devices::virtio::testing::RunFuzzSmoke("pam_fuzzer", Seeds(), 0x9a3f11d5, 400,
                                                LLVMFuzzerTestOneInput);
}

#endif  // PAM_FUZZER_SMOKE_MAIN

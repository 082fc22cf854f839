// Fuzz target for the fw_cfg device (devices/legacy/fw_cfg.h): the input is a hostile firmware's
// sequence of port accesses and the DMA descriptors it leaves in guest memory. The device must
// never crash, hang, touch memory outside guest RAM (ASan), or report a DMA result other than
// 0 or kDmaError (checked here, so the plain gcc build finds that too).
//
// Guest RAM: region A [0, 64 KiB), a one-page hole, region B [68 KiB, 72 KiB). Items: the ones the
// device keeps, two numbered items and three files. Input: a list of operations, each one byte
// of kind (mod 5) followed by its operands (little-endian):
//   0 select    u16 key
//   1 data read u8 count (up to 255 reads of the data port)
//   2 DMA       u32 control, u32 length, u64 buffer, u32 descriptor address (in A or anywhere), as
//               a guest would leave the descriptor and start it (two 32-bit halves)
//   3 write     u8 offset (mod 12), u8 size (1, 2, 4 or 8), then 8 bytes of data
//   4 read      u8 offset (mod 12), u8 size (1, 2, 4 or 8)
// Built normally this file defines only LLVMFuzzerTestOneInput; with FW_CFG_FUZZER_SMOKE_MAIN it
// also has a main() that runs hand-made seeds and deterministic pseudo-random inputs.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "devices/legacy/fw_cfg.h"
#include "devices/virtio/test_random.h"
#include "vmm/machine/guest_memory.h"
#include "vmm/sys_util/byte_order.h"

namespace {

using devices::legacy::FwCfg;

constexpr uint64_t kRegionBStart = 0x11000;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "fw_cfg_fuzzer: %s\n", what);
  std::abort();
}

const vmm::GuestMemory& Memory() {
  static const vmm::GuestMemory memory = [] {
    std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
    regions.push_back(*vmm::GuestMemoryRegion::Create(vmm::GuestAddress(0), 0x10000));
    regions.push_back(*vmm::GuestMemoryRegion::Create(vmm::GuestAddress(kRegionBStart), 0x1000));
    return *vmm::GuestMemory::Create(std::move(regions));
  }();
  return memory;
}

using Input = devices::virtio::testing::FuzzInput;

size_t AccessSize(uint64_t raw) {
  static constexpr size_t kSizes[] = {1, 2, 4, 8};
  return kSizes[raw % 4];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const vmm::GuestMemory& memory = Memory();
  for (const auto& region : memory.regions()) {
    std::memset(region->host_address(), 0, region->size());
  }
  FwCfg device(&memory);
  if (!device.AddItem(0x0005, {2, 0}).ok() || !device.AddItem(0x8003, {1, 2, 3, 4}).ok() ||
      !device.AddFile("bootorder", std::vector<uint8_t>(37, 'b')).ok() ||
      !device.AddFile("etc/e820", std::vector<uint8_t>(40, 0xe8)).ok() ||
      !device.AddFile("etc/acpi/tables", std::vector<uint8_t>(5000, 0xac)).ok()) {
    Fail("setting up the items failed");
  }
  Input input(data, size);
  while (!input.done()) {
    switch (input.Take(1) % 5) {
      case 0: {
        uint8_t key[2];
        sys_util::StoreLittleEndian(input.Take(2), key);
        device.Write(0, key);
        break;
      }
      case 1: {
        const uint64_t count = input.Take(1);
        for (uint64_t i = 0; i < count; ++i) {
          uint8_t byte;
          device.Read(1, std::span<uint8_t>(&byte, 1));
        }
        break;
      }
      case 2: {
        uint8_t descriptor[FwCfg::kDmaDescriptorSize];
        sys_util::PutBe32(descriptor, static_cast<uint32_t>(input.Take(4)));
        sys_util::PutBe32(descriptor + 4, static_cast<uint32_t>(input.Take(4)));
        sys_util::PutBe64(descriptor + 8, input.Take(8));
        const uint64_t raw_address = input.Take(4);
        // Mostly inside region A, where it is written; sometimes anywhere.
        const uint64_t address =
            (raw_address & 0x80000000) != 0 ? raw_address & 0x7fffffff : raw_address % 0xfff0;
        const bool placed = memory.Write(vmm::GuestAddress(address), descriptor).ok();
        uint8_t half[4];
        sys_util::PutBe32(half, static_cast<uint32_t>(address >> 32));
        device.Write(4, half);
        sys_util::PutBe32(half, static_cast<uint32_t>(address));
        device.Write(8, half);
        uint8_t result[4];
        if (placed && memory.Read(vmm::GuestAddress(address), result).ok()) {
          const uint32_t control = sys_util::Be32(result);
          if (control != 0 && control != FwCfg::kDmaError) Fail("a DMA result not 0 or error");
        }
        break;
      }
      case 3: {
        const uint64_t offset = input.Take(1) % FwCfg::kPortCount;
        const size_t bytes = AccessSize(input.Take(1));
        uint8_t value[8];
        sys_util::StoreLittleEndian(input.Take(8), value);
        if (offset + bytes <= FwCfg::kPortCount) device.Write(offset, std::span(value, bytes));
        break;
      }
      case 4: {
        const uint64_t offset = input.Take(1) % FwCfg::kPortCount;
        const size_t bytes = AccessSize(input.Take(1));
        uint8_t value[8];
        if (offset + bytes <= FwCfg::kPortCount) device.Read(offset, std::span(value, bytes));
        break;
      }
    }
  }
  return 0;
}

#ifdef FW_CFG_FUZZER_SMOKE_MAIN

namespace {

void Append(std::vector<uint8_t>& out, uint64_t value, size_t bytes) {
  sys_util::AppendLittleEndian(out, value, bytes);
}

// A DMA operation: control, length, buffer, descriptor address (bit 31 set: taken as is).
void AppendDma(std::vector<uint8_t>& out, uint32_t control, uint32_t length, uint64_t buffer,
               uint32_t descriptor) {
  Append(out, 2, 1);
  Append(out, control, 4);
  Append(out, length, 4);
  Append(out, buffer, 8);
  Append(out, descriptor, 4);
}

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  const uint32_t select_files = uint32_t{FwCfg::kFileDirKey} << 16 | FwCfg::kDmaSelect;
  {  // SeaBIOS's probe: signature and ID by port, the directory by DMA, a file by DMA.
    std::vector<uint8_t> s;
    Append(s, 0, 1);
    Append(s, FwCfg::kSignatureKey, 2);
    Append(s, 1, 1);
    Append(s, 4, 1);
    Append(s, 0, 1);
    Append(s, FwCfg::kIdKey, 2);
    Append(s, 1, 1);
    Append(s, 4, 1);
    AppendDma(s, select_files | FwCfg::kDmaRead, 4 + 3 * 64, 0x2000, 0x1000);
    AppendDma(s, uint32_t{FwCfg::kFirstFileKey + 2} << 16 | FwCfg::kDmaSelect | FwCfg::kDmaRead,
              5000, 0x4000, 0x1000);
    seeds.push_back(s);
  }
  {  // Buffers across the hole, past the end, a skip, a write, a descriptor in region B's end.
    std::vector<uint8_t> s;
    AppendDma(s, select_files | FwCfg::kDmaRead, 0x100, 0xff80, 0x1000);
    AppendDma(s, FwCfg::kDmaSkip, 0xffffffff, 0, 0x1000);
    AppendDma(s, FwCfg::kDmaRead, 0xffffffff, 0x100, 0x1000);
    AppendDma(s, select_files | FwCfg::kDmaWrite, 16, 0x3000, 0x1000);
    AppendDma(s, FwCfg::kDmaRead, 4, 0x3000, 0x80000000 | (kRegionBStart + 0xff8));
    AppendDma(s, FwCfg::kDmaRead, 4, 0x3000, 0xffffffff);
    seeds.push_back(s);
  }
  {  // Raw accesses of every size at every offset.
    std::vector<uint8_t> s;
    for (uint8_t offset = 0; offset < 12; ++offset) {
      for (uint8_t size = 0; size < 4; ++size) {
        Append(s, 3, 1);
        Append(s, offset, 1);
        Append(s, size, 1);
        Append(s, 0x1000000000000000 | offset, 8);
        Append(s, 4, 1);
        Append(s, offset, 1);
        Append(s, size, 1);
      }
    }
    seeds.push_back(s);
  }
  return seeds;
}

}  // namespace

int main() {
  return devices::virtio::testing::RunFuzzSmoke("fw_cfg_fuzzer", Seeds(), 0x27f3c0de, 400,
                                                LLVMFuzzerTestOneInput);
}

#endif  // FW_CFG_FUZZER_SMOKE_MAIN

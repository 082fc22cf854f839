// Fuzz target for the device side of the split virtqueue (virtio 1.2 §2.7): the input is the whole
// guest (queue configuration, rings, descriptor tables, buffers), and the queue is driven
// (Pop / PushUsed / notification calls) until it reports an error or runs dry. It must never crash,
// hang, or return a buffer outside guest memory (checked here, so that the plain gcc build without
// sanitizers still finds such bugs; ASan additionally catches stray accesses).
//
// Input layout (all little-endian):
//   [0]      bits 0-3: log2 of the queue size (mod 9, so 1..256); bit 7: take the size from
//            bytes 10-11 instead (any 16-bit value, so Create's checks are fuzzed too)
//   [1]      bit 0 EVENT_IDX, bit 1 INDIRECT_DESC, bit 2 ring addresses from bytes 4-9,
//            bit 3 tame the descriptor table (addresses near guest memory, small lengths),
//            bit 4 tame the available ring (idx at most a queue size ahead, heads mostly
//            below the queue size), bit 5 start with notifications
//            disabled, bit 6 ask ShouldInterrupt() after every PushUsed()
//   [2..3]   the initial next_available index
//   [4..9]   descriptor table, available ring and used ring addresses / 2 (with bit 2 of [1])
//   [10..11] the raw queue size (with bit 7 of [0])
//   [12..]   the guest memory image, copied to guest address 0 onwards
//
// Built normally this file defines only LLVMFuzzerTestOneInput. With
// SPLIT_QUEUE_FUZZER_SMOKE_MAIN defined it also has a main() that runs hand-made seeds and a few
// hundred deterministic pseudo-random inputs (the split_queue_fuzzer_smoke_test target).

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "devices/virtio/split_queue.h"
#include "devices/virtio/test_random.h"
#include "vmm/machine/guest_memory.h"

namespace {

using devices::virtio::QueueConfig;
using devices::virtio::SplitQueue;
using vmm::GuestAddress;

// Region A [0, 64 KiB), a one-page hole, then regions B [68 KiB, 72 KiB) and C [72 KiB, 76 KiB),
// adjacent to each other.
constexpr uint64_t kRegionAStart = 0;
constexpr uint64_t kRegionASize = 0x10000;
constexpr uint64_t kRegionBStart = 0x11000;
constexpr uint64_t kRegionBSize = 0x1000;
constexpr uint64_t kRegionCStart = 0x12000;
constexpr uint64_t kRegionCSize = 0x1000;
constexpr uint64_t kMemoryEnd = 0x13000;
constexpr size_t kHeaderBytes = 12;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "split_queue_fuzzer: %s\n", what);
  std::abort();
}

const vmm::GuestMemory& Memory() {
  static const vmm::GuestMemory memory = [] {
    std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> regions;
    for (auto [start, size] :
         {std::pair{kRegionAStart, kRegionASize}, std::pair{kRegionBStart, kRegionBSize},
          std::pair{kRegionCStart, kRegionCSize}}) {
      auto region = vmm::GuestMemoryRegion::Create(GuestAddress(start), size);
      if (!region.ok()) Fail("cannot create a guest memory region");
      regions.push_back(*std::move(region));
    }
    auto created = vmm::GuestMemory::Create(std::move(regions));
    if (!created.ok()) Fail("cannot create guest memory");
    return *std::move(created);
  }();
  return memory;
}

uint16_t Load16(const uint8_t* p) {
  uint16_t value;
  std::memcpy(&value, p, 2);
  return value;
}

uint8_t* Host(uint64_t address) {
  auto span = Memory().GetHostSpan(GuestAddress(address), 1);
  return span.ok() ? span->data() : nullptr;
}

// The oracle: an iovec lies wholly inside one region's host mapping.
bool InsideGuestMemory(const iovec& v) {
  const uint8_t* base = static_cast<const uint8_t*>(v.iov_base);
  for (const auto& region : Memory().regions()) {
    const uint8_t* start = region->host_address();
    if (base >= start && v.iov_len <= region->size() &&
        static_cast<uint64_t>(base - start) <= region->size() - v.iov_len) {
      return true;
    }
  }
  return false;
}

uint64_t CheckAndTouch(const std::vector<iovec>& iovecs, uint64_t expected_bytes, bool write) {
  uint64_t total = 0;
  uint64_t sum = 0;
  for (const iovec& v : iovecs) {
    if (!InsideGuestMemory(v)) Fail("Pop() returned a buffer outside guest memory");
    if (v.iov_len == 0) Fail("Pop() returned an empty iovec");
    total += v.iov_len;
    uint8_t* bytes = static_cast<uint8_t*>(v.iov_base);
    if (write) {
      std::memset(bytes, 0xa5, v.iov_len);  // may well overwrite the rings: a moving guest
    } else {
      sum += bytes[0] + bytes[v.iov_len - 1];
    }
  }
  if (total != expected_bytes) Fail("Pop() byte count disagrees with its iovecs");
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < kHeaderBytes) return 0;
  const vmm::GuestMemory& memory = Memory();
  for (const auto& region : memory.regions()) {
    std::memset(region->host_address(), 0, region->size());
  }

  const uint8_t mode = data[1];
  QueueConfig config;
  config.size =
      (data[0] & 0x80) ? Load16(data + 10) : static_cast<uint16_t>(1u << ((data[0] & 0xf) % 9));
  config.event_idx = mode & 1;
  config.indirect = mode & 2;
  const uint64_t queue_size = config.size;
  if (mode & 4) {
    config.descriptor_table = GuestAddress(uint64_t{Load16(data + 4)} * 2);
    config.available_ring = GuestAddress(uint64_t{Load16(data + 6)} * 2);
    config.used_ring = GuestAddress(uint64_t{Load16(data + 8)} * 2);
  } else {
    config.descriptor_table = GuestAddress(0);
    config.available_ring = GuestAddress(16 * queue_size);
    config.used_ring = GuestAddress((16 * queue_size + 6 + 2 * queue_size + 3) & ~uint64_t{3});
  }

  // The guest memory image: region A first, then B and C.
  const uint8_t* image = data + kHeaderBytes;
  size_t image_bytes = size - kHeaderBytes;
  for (const auto& region : memory.regions()) {
    const size_t chunk = std::min<size_t>(image_bytes, region->size());
    if (chunk == 0) break;
    std::memcpy(region->host_address(), image, chunk);
    image += chunk;
    image_bytes -= chunk;
  }

  auto created = SplitQueue::Create(memory, config);
  if (!created.ok()) return 0;
  SplitQueue queue = *std::move(created);
  const uint16_t start = Load16(data + 2);
  queue.set_next_available(start);

  // Optional taming, so that random inputs get past the first checks more often.
  if (mode & 8) {
    uint8_t* table = Host(config.descriptor_table.value());
    for (uint64_t i = 0; i < queue_size; ++i) {
      uint8_t* d = table + 16 * i;
      uint64_t addr;
      uint32_t len;
      uint16_t flags, next;
      std::memcpy(&addr, d, 8);
      std::memcpy(&len, d + 8, 4);
      std::memcpy(&flags, d + 12, 2);
      std::memcpy(&next, d + 14, 2);
      addr %= kMemoryEnd + 0x1000;
      flags &= 7;
      if (flags & 4) {
        len = (len % (queue_size + 2)) * 16 + ((len & 0x10000) ? 8 : 0);
      } else {
        len %= 0x2000;
      }
      next &= static_cast<uint16_t>(2 * queue_size - 1);
      std::memcpy(d, &addr, 8);
      std::memcpy(d + 8, &len, 4);
      std::memcpy(d + 12, &flags, 2);
      std::memcpy(d + 14, &next, 2);
    }
  }
  if (mode & 16) {
    uint8_t* avail = Host(config.available_ring.value());
    const uint16_t ahead = static_cast<uint16_t>(Load16(avail + 2) % (queue_size + 1));
    const uint16_t value = static_cast<uint16_t>(start + ahead);
    std::memcpy(avail + 2, &value, 2);
    for (uint64_t i = 0; i < queue_size; ++i) {  // heads: mostly, not always, below the size
      const uint16_t head = static_cast<uint16_t>(Load16(avail + 4 + 2 * i) % (queue_size + 1));
      std::memcpy(avail + 4 + 2 * i, &head, 2);
    }
  }
  if (mode & 32) queue.DisableNotifications();

  // Drive it. Each Pop consumes an available entry and only a queue size of them can be
  // outstanding, while EnableNotifications() can only see new ones if the buffers written into
  // the rings moved avail->idx; bound the loop anyway.
  const uint64_t max_steps = 4 * queue_size + 16;
  uint64_t sink = 0;
  for (uint64_t step = 0; step < max_steps; ++step) {
    auto chain = queue.Pop();
    if (!chain.ok()) break;
    if (!chain->has_value()) {
      if (!queue.EnableNotifications()) break;
      queue.DisableNotifications();
      continue;
    }
    const devices::virtio::DescriptorChain& c = **chain;
    if (c.head >= queue_size) Fail("Pop() returned a head outside the table");
    if (c.readable_bytes + c.writable_bytes > (uint64_t{1} << 32)) Fail("chain over 4 GiB");
    sink += CheckAndTouch(c.readable, c.readable_bytes, /*write=*/false);
    CheckAndTouch(c.writable, c.writable_bytes, /*write=*/true);
    const uint32_t written =
        static_cast<uint32_t>(std::min<uint64_t>(c.writable_bytes, UINT32_MAX));
    if (!queue.PushUsed(c.head, written).ok()) Fail("PushUsed() refused a popped head");
    if ((mode & 64) || step % 4 == 3) sink += queue.ShouldInterrupt();
  }
  sink += queue.ShouldInterrupt() + queue.HasAvailable();
  __asm__ volatile("" : : "r"(sink));  // keep the reads of guest buffers
  return 0;
}

#ifdef SPLIT_QUEUE_FUZZER_SMOKE_MAIN

namespace {

constexpr uint16_t kNext = 1, kWrite = 2, kIndirect = 4;

// A hand-made input: default ring layout (descriptor table at 0) for `size`.
class Seed {
 public:
  Seed(uint8_t size_log2, uint8_t mode, uint16_t next_available = 0)
      : bytes_(kHeaderBytes + 0x8000), size_(uint16_t{1} << size_log2) {
    bytes_[0] = size_log2;
    bytes_[1] = mode;
    std::memcpy(&bytes_[2], &next_available, 2);
  }
  void Descriptor(uint64_t table, uint16_t index, uint64_t addr, uint32_t len, uint16_t flags,
                  uint16_t next) {
    uint8_t* d = &bytes_[kHeaderBytes + table + 16 * index];
    std::memcpy(d, &addr, 8);
    std::memcpy(d + 8, &len, 4);
    std::memcpy(d + 12, &flags, 2);
    std::memcpy(d + 14, &next, 2);
  }
  void Avail(uint16_t slot, uint16_t head) { Put16(16 * size_ + 4 + 2 * slot, head); }
  void AvailIdx(uint16_t idx) { Put16(16 * size_ + 2, idx); }
  void UsedEvent(uint16_t event) { Put16(16 * size_ + 4 + 2 * size_, event); }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  void Put16(uint64_t offset, uint16_t value) {
    std::memcpy(&bytes_[kHeaderBytes + offset], &value, 2);
  }
  std::vector<uint8_t> bytes_;
  uint16_t size_;
};

std::vector<std::vector<uint8_t>> Seeds() {
  std::vector<std::vector<uint8_t>> seeds;
  {  // Two good chains: readable + writable, and one across the adjacent regions B and C.
    Seed s(3, 0);
    s.Descriptor(0, 0, 0x4000, 16, kNext, 1);
    s.Descriptor(0, 1, 0x5000, 512, kWrite, 0);
    s.Descriptor(0, 2, kRegionCStart - 8, 32, 0, 0);
    s.Avail(0, 0);
    s.Avail(1, 2);
    s.AvailIdx(2);
    seeds.push_back(s.bytes());
  }
  {  // Indirect table, EVENT_IDX, index wrap from 0xfffe.
    Seed s(4, 1 | 2 | 64, 0xfffe);
    s.Descriptor(0, 3, 0x3000, 48, kIndirect, 0);
    s.Descriptor(0x3000, 0, 0x4000, 16, kNext, 1);
    s.Descriptor(0x3000, 1, 0x4100, 4096, kNext, 2);
    s.Descriptor(0x3000, 2, 0x6000, 1, kWrite, 0);
    for (uint16_t slot = 0; slot < 16; ++slot) s.Avail(slot, 3);
    s.AvailIdx(0x0003);
    s.UsedEvent(0xffff);
    seeds.push_back(s.bytes());
  }
  {  // A loop.
    Seed s(2, 0);
    s.Descriptor(0, 0, 0x4000, 16, kNext, 1);
    s.Descriptor(0, 1, 0x4000, 16, kNext, 0);
    s.AvailIdx(1);
    seeds.push_back(s.bytes());
  }
  {  // Nested indirect, and a buffer into the hole.
    Seed s(2, 2);
    s.Descriptor(0, 0, 0x3000, 16, kIndirect, 0);
    s.Descriptor(0x3000, 0, 0x3000, 16, kIndirect, 0);
    s.Descriptor(0, 1, kRegionASize + 8, 16, 0, 0);
    s.Avail(1, 1);
    s.AvailIdx(2);
    seeds.push_back(s.bytes());
  }
  {  // A readable buffer after a writable one.
    Seed s(2, 0);
    s.Descriptor(0, 0, 0x4000, 16, kWrite | kNext, 1);
    s.Descriptor(0, 1, 0x4000, 16, 0, 0);
    s.AvailIdx(1);
    seeds.push_back(s.bytes());
  }
  {  // A buffer wrapping around 2^64.
    Seed s(2, 0);
    s.Descriptor(0, 0, 0xfffffffffffffff0ull, 0x20, 0, 0);
    s.AvailIdx(1);
    seeds.push_back(s.bytes());
  }
  {  // Writable buffers over the rings themselves: the guest memory changes under the walk.
    Seed s(3, 8 | 16);
    for (uint16_t i = 0; i < 8; ++i) {
      s.Descriptor(0, i, 0, 0x200, kWrite | (i < 7 ? kNext : 0), static_cast<uint16_t>(i + 1));
      s.Avail(i, 0);
    }
    s.AvailIdx(8);
    seeds.push_back(s.bytes());
  }
  {  // Custom ring addresses in region B, and an invalid size.
    std::vector<uint8_t> bytes(kHeaderBytes + 0x100, 0);
    bytes[1] = 4;
    const uint16_t desc = kRegionBStart / 2, avail = (kRegionBStart + 0x100) / 2,
                   used = (kRegionBStart + 0x200) / 2;
    std::memcpy(&bytes[4], &desc, 2);
    std::memcpy(&bytes[6], &avail, 2);
    std::memcpy(&bytes[8], &used, 2);
    seeds.push_back(bytes);
    bytes[0] = 0x80;
    bytes[10] = 3;
    seeds.push_back(bytes);
  }
  return seeds;
}

uint64_t Next(uint64_t& state) { return devices::virtio::testing::XorShift64(state); }

}  // namespace

int main() {
  int runs = 0;
  const std::vector<std::vector<uint8_t>> seeds = Seeds();
  for (const auto& seed : seeds) {
    LLVMFuzzerTestOneInput(seed.data(), seed.size());
    ++runs;
  }
  uint64_t state = 0x9e3779b97f4a7c15ull;
  // Pure noise, of every length up to a few pages, with the taming bits often set.
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> input(Next(state) % 0x3000);
    for (uint8_t& byte : input) byte = static_cast<uint8_t>(Next(state));
    if (input.size() > 1 && i % 2 == 0) {  // a valid size and ring layout, tamed rings
      input[0] &= 0x7f;
      input[1] = static_cast<uint8_t>((input[1] | 8 | 16) & ~4);
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++runs;
  }
  // Mutated seeds: a few flipped bytes each, mostly in the rings.
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> input = seeds[i % seeds.size()];
    const int flips = 1 + static_cast<int>(Next(state) % 8);
    for (int f = 0; f < flips; ++f) {
      const uint64_t r = Next(state);
      const size_t position = (r & 1)
                                  ? (r >> 8) % std::min<size_t>(input.size(), kHeaderBytes + 0x400)
                                  : (r >> 8) % input.size();
      input[position] ^= static_cast<uint8_t>(1u << ((r >> 4) % 8));
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++runs;
  }
  std::printf("split_queue_fuzzer smoke test: %d inputs, no crash\n", runs);
  return 0;
}

#endif  // SPLIT_QUEUE_FUZZER_SMOKE_MAIN

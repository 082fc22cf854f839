// Fuzz target for the vhost-user back end's message handling: the input is a front end's whole
// conversation, message by message, with file descriptors attached where the input says so (an
// eventfd, a pipe, or a shared memfd that can serve as guest memory). After every message the back
// end synchronizes the device, as the server does when the socket is idle. It must never crash or
// hang, and whenever it activates the device, every ring it hands over must lie in the memory it
// hands over (checked here, so the plain gcc build without sanitizers still finds such bugs).
//
// Input: a sequence of messages, each
//   [0]     request: byte % 40 (0 and unknown codes included)
//   [1]     bit 0 NEED_REPLY, bits 1-2 descriptor: none / eventfd / pipe / memfd, bit 3 two of them
//   [2]     payload length (0..255)
//   [3..]   the payload; with bit 4 of [1], 8-byte fields whose top bits are 01 are rebased onto
//           the memfd's mapping (front-end addresses), so tables and rings can actually start.
//
// Built normally this file defines only LLVMFuzzerTestOneInput; with
// VHOST_USER_FUZZER_SMOKE_MAIN it also has a main() running deterministic pseudo-random
// conversations and a scripted QEMU-like one (the backend_fuzzer_smoke_test target).

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "devices/virtio/test_random.h"
#include "devices/virtio/vhost_user/backend.h"
#include "devices/virtio/vhost_user/message.h"

namespace {

using devices::virtio::VirtioActivation;
using devices::virtio::VirtioDevice;
namespace vu = devices::virtio::vhost_user;

constexpr uint64_t kMemfdBytes = 1 << 20;
// Activations seen (the smoke main checks that its scripted start reaches the device).
int activations = 0;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "vhost_user_fuzzer: %s\n", what);
  std::abort();
}

// The front end's guest RAM: one memfd, mapped here too (its address is what SET_MEM_TABLE and
// SET_VRING_ADDR name).
struct SharedMemory {
  int fd = -1;
  uint8_t* mapping = nullptr;
  SharedMemory() {
    fd = memfd_create("vhost-user-fuzz", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, kMemfdBytes) != 0) Fail("memfd");
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) Fail("seal");
    void* map = mmap(nullptr, kMemfdBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) Fail("mmap");
    mapping = static_cast<uint8_t*>(map);
  }
};

const SharedMemory& Shared() {
  static const SharedMemory* shared = new SharedMemory();
  return *shared;
}

// Checks every activation against the memory it comes with.
class CheckingDevice : public VirtioDevice {
 public:
  uint32_t device_type() const override { return devices::virtio::kDeviceTypeScsi; }
  uint64_t device_features() const override { return 0; }
  std::vector<uint16_t> queue_max_sizes() const override { return {128, 128, 256, 256}; }
  uint32_t config_size() const override { return 36; }
  void ReadConfig(uint32_t, std::span<uint8_t> data) override {
    std::memset(data.data(), 0, data.size());
  }
  void WriteConfig(uint32_t, std::span<const uint8_t>) override {}
  absl::Status Activate(VirtioActivation activation) override {
    if (active_) Fail("Activate() while active");
    if (activation.memory == nullptr || activation.events == nullptr) Fail("activation incomplete");
    for (const auto& queue : activation.queues) {
      const uint64_t size = queue.config.size;
      if (size == 0 || size > queue_max_sizes()[queue.index]) Fail("ring size beyond the maximum");
      if (queue.notify_fd < 0 || queue.interrupt == nullptr) Fail("ring without kick/interrupt");
      if (!activation.memory->IsValidRange(queue.config.descriptor_table, 16 * size) ||
          !activation.memory->IsValidRange(queue.config.available_ring, 6 + 2 * size) ||
          !activation.memory->IsValidRange(queue.config.used_ring, 6 + 8 * size)) {
        Fail("ring outside the memory handed over");
      }
      // Touch the rings as the device would.
      (void)activation.memory->ReadObject<uint16_t>(queue.config.available_ring + 2);
      (void)activation.memory->WriteObject<uint16_t>(queue.config.used_ring + 2,
                                                     queue.config.start_index);
      queue.interrupt->Signal();
    }
    active_ = true;
    ++activations;
    return (activation.features & 1) ? absl::InternalError("injected start failure")
                                     : absl::OkStatus();
  }
  void Reset() override { active_ = false; }
  void Stop() override { active_ = false; }

 private:
  bool active_ = false;
};

void RunConversation(const uint8_t* data, size_t size) {
  const SharedMemory& shared = Shared();
  CheckingDevice device;
  vu::VhostUserBackend backend(device);
  size_t at = 0;
  int messages = 0;
  while (at + 3 <= size && messages++ < 64) {
    const uint8_t request = data[at] % 40;
    const uint8_t flags = data[at + 1];
    size_t length = data[at + 2];
    at += 3;
    if (length > size - at) length = size - at;
    vu::Message message;
    message.header.request = request;
    message.header.flags = vu::kVersion | ((flags & 1) ? vu::kFlagNeedReply : 0);
    message.header.size = static_cast<uint32_t>(length);
    message.payload.assign(data + at, data + at + length);
    at += length;
    // Rebase marked address fields (bit 62 set) onto the mapping, so tables and rings can be
    // valid: the front end names its own addresses.
    if ((flags & 0x10) != 0) {
      const uint64_t base = reinterpret_cast<uint64_t>(shared.mapping);
      for (size_t offset = 0; offset + 8 <= message.payload.size(); offset += 8) {
        uint64_t value;
        std::memcpy(&value, message.payload.data() + offset, 8);
        if ((value >> 62) == 1) {
          value = base + (value & (kMemfdBytes - 1));
          std::memcpy(message.payload.data() + offset, &value, 8);
        }
      }
    }
    const int count = (flags & 0x08) ? 2 : 1;
    for (int i = 0; i < count; ++i) {
      switch ((flags >> 1) & 3) {
        case 1:
          message.fds.emplace_back(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
          break;
        case 2: {
          int fds[2];
          if (pipe(fds) == 0) {
            close(fds[0]);
            message.fds.emplace_back(fds[1]);
          }
          break;
        }
        case 3:
          message.fds.emplace_back(dup(shared.fd));
          break;
        default:
          break;
      }
    }
    vu::VhostUserBackend::Result result = backend.Handle(std::move(message));
    if (result.reply.has_value() && result.reply->size() > vu::kMaxPayload) Fail("huge reply");
    (void)backend.Synchronize();
  }
  backend.Disconnect();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RunConversation(data, size);
  return 0;
}

#ifdef VHOST_USER_FUZZER_SMOKE_MAIN

namespace {

// Appends one message to a conversation.
void Add(std::vector<uint8_t>& out, vu::Request request, uint8_t flags,
         std::vector<uint8_t> payload) {
  out.push_back(static_cast<uint8_t>(request));
  out.push_back(flags);
  out.push_back(static_cast<uint8_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
}

template <typename T>
std::vector<uint8_t> Bytes(const T& value) {
  std::vector<uint8_t> bytes(sizeof(T));
  std::memcpy(bytes.data(), &value, sizeof(T));
  return bytes;
}

// What QEMU sends to start a device with one request ring, the addresses relative to the memfd.
std::vector<uint8_t> QemuLikeStart() {
  std::vector<uint8_t> out;
  Add(out, vu::Request::kGetFeatures, 0, {});
  Add(out, vu::Request::kSetOwner, 0, {});
  Add(out, vu::Request::kSetFeatures, 0, Bytes<uint64_t>(1ull << 32 | 1ull << 29));
  // One region from the memfd's second page (its front-end address is rebased onto the mapping).
  vu::MemoryTableHeader header{1, 0};
  constexpr uint64_t kRebase = 1ull << 62;
  vu::MemoryRegion region{0, kMemfdBytes - 0x1000, kRebase | 0x1000, 0x1000};
  std::vector<uint8_t> table = Bytes(header);
  const std::vector<uint8_t> region_bytes = Bytes(region);
  table.insert(table.end(), region_bytes.begin(), region_bytes.end());
  Add(out, vu::Request::kSetMemTable, 0x10 | (3 << 1), table);
  for (uint32_t ring : {0u, 2u}) {
    Add(out, vu::Request::kSetVringNum, 0, Bytes(vu::VringState{ring, 64}));
    Add(out, vu::Request::kSetVringBase, 0, Bytes(vu::VringState{ring, 5}));
    const uint64_t base = kRebase | (0x10000 + 0x4000 * ring);
    Add(out, vu::Request::kSetVringAddr, 0x10,
        Bytes(vu::VringAddress{ring, 0, base, base + 0x800, base + 0x400, 0}));
    Add(out, vu::Request::kSetVringKick, 1 << 1, Bytes<uint64_t>(ring));
    Add(out, vu::Request::kSetVringCall, 1 << 1, Bytes<uint64_t>(ring));
  }
  Add(out, vu::Request::kGetVringBase, 0, Bytes(vu::VringState{2, 0}));
  Add(out, vu::Request::kSetVringCall, 2 << 1, Bytes<uint64_t>(0));  // a pipe: refused
  return out;
}

uint64_t Next(uint64_t& state) { return devices::virtio::testing::XorShift64(state); }

}  // namespace

int main() {
  const std::vector<uint8_t> start = QemuLikeStart();
  RunConversation(start.data(), start.size());
  if (activations == 0) Fail("the scripted QEMU-like start never activated the device");
  uint64_t state = 0x9e3779b97f4a7c15ull;
  int runs = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<uint8_t> input = start;
    // Mutate a few bytes of the scripted start, or append random messages.
    const int edits = 1 + static_cast<int>(Next(state) % 6);
    for (int e = 0; e < edits; ++e) {
      if (Next(state) % 3 == 0) {
        input.push_back(static_cast<uint8_t>(Next(state)));
      } else {
        input[Next(state) % input.size()] = static_cast<uint8_t>(Next(state));
      }
    }
    RunConversation(input.data(), input.size());
    ++runs;
  }
  std::printf("vhost_user_fuzzer smoke: %d conversations, %d device activations, no crash\n",
              runs + 1, activations);
  return 0;
}

#endif  // VHOST_USER_FUZZER_SMOKE_MAIN

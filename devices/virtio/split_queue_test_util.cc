#include "devices/virtio/split_queue_test_util.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"

namespace devices::virtio::testing {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "split_queue_test_util: %s\n", message.c_str());
  std::abort();
}

uint64_t AlignUp(uint64_t value, uint64_t align) { return (value + align - 1) & ~(align - 1); }

}  // namespace

vmm::GuestMemory MakeGuestMemory(std::vector<std::pair<uint64_t, uint64_t>> regions) {
  std::vector<std::unique_ptr<vmm::GuestMemoryRegion>> created;
  for (const auto& [start, size] : regions) {
    auto region = vmm::GuestMemoryRegion::Create(vmm::GuestAddress(start), size);
    if (!region.ok()) Die(std::string(region.status().message()));
    created.push_back(*std::move(region));
  }
  auto memory = vmm::GuestMemory::Create(std::move(created));
  if (!memory.ok()) Die(std::string(memory.status().message()));
  return *std::move(memory);
}

vmm::GuestAddress GuestAllocator::Allocate(uint64_t bytes, uint64_t align) {
  const uint64_t start = AlignUp(next_.value(), align);
  if (start + bytes > end_.value() || start + bytes < start) {
    Die(absl::StrFormat("guest allocator exhausted allocating 0x%x bytes", bytes));
  }
  next_ = vmm::GuestAddress(start + bytes);
  return vmm::GuestAddress(start);
}

uint64_t DriverQueue::LayoutBytes(uint16_t size) {
  const uint64_t used = AlignUp(16 * uint64_t{size} + 6 + 2 * uint64_t{size}, 4);
  return used + 6 + 8 * uint64_t{size};
}

QueueConfig DriverQueue::Layout(uint16_t size, vmm::GuestAddress base, bool event_idx,
                                bool indirect) {
  QueueConfig config;
  config.size = size;
  config.descriptor_table = base;
  config.available_ring = base + 16 * uint64_t{size};
  config.used_ring = base + AlignUp(16 * uint64_t{size} + 6 + 2 * uint64_t{size}, 4);
  config.event_idx = event_idx;
  config.indirect = indirect;
  return config;
}

DriverQueue::DriverQueue(const vmm::GuestMemory& memory, const QueueConfig& config)
    : memory_(&memory), config_(config), chains_(config.size) {
  std::memset(Host(config.descriptor_table, 16 * uint64_t{config.size}), 0,
              16 * uint64_t{config.size});
  std::memset(Host(config.available_ring, 6 + 2 * uint64_t{config.size}), 0,
              6 + 2 * uint64_t{config.size});
  std::memset(Host(config.used_ring, 6 + 8 * uint64_t{config.size}), 0,
              6 + 8 * uint64_t{config.size});
  free_.reserve(config.size);
  // Lowest index on top of the stack, so the first chain starts at descriptor 0.
  for (uint32_t i = config.size; i > 0; --i) free_.push_back(static_cast<uint16_t>(i - 1));
}

uint8_t* DriverQueue::Host(vmm::GuestAddress address, uint64_t length) const {
  auto span = memory_->GetHostSpan(address, length);
  if (!span.ok()) Die(std::string(span.status().message()));
  return span->data();
}

absl::StatusOr<uint16_t> DriverQueue::AddChain(std::span<const Buffer> buffers) {
  if (buffers.empty()) return absl::InvalidArgumentError("a chain needs at least one buffer");
  if (buffers.size() > free_.size()) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%u descriptors needed, %u free", buffers.size(), free_.size()));
  }
  std::vector<uint16_t> indices(buffers.size());
  for (uint16_t& index : indices) {
    index = free_.back();
    free_.pop_back();
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    RawDescriptor descriptor;
    descriptor.addr = buffers[i].address.value();
    descriptor.len = buffers[i].length;
    descriptor.flags = buffers[i].writable ? kDescWrite : 0;
    if (i + 1 < buffers.size()) {
      descriptor.flags |= kDescNext;
      descriptor.next = indices[i + 1];
    }
    WriteDescriptor(indices[i], descriptor);
  }
  const uint16_t head = indices[0];
  chains_[head] = std::move(indices);
  Publish(head);
  return head;
}

absl::StatusOr<uint16_t> DriverQueue::AddIndirectChain(std::span<const Buffer> buffers,
                                                       vmm::GuestAddress table) {
  if (buffers.empty()) return absl::InvalidArgumentError("a chain needs at least one buffer");
  if (free_.empty()) return absl::ResourceExhaustedError("no free descriptor");
  for (size_t i = 0; i < buffers.size(); ++i) {
    RawDescriptor descriptor;
    descriptor.addr = buffers[i].address.value();
    descriptor.len = buffers[i].length;
    descriptor.flags = buffers[i].writable ? kDescWrite : 0;
    if (i + 1 < buffers.size()) {
      descriptor.flags |= kDescNext;
      descriptor.next = static_cast<uint16_t>(i + 1);
    }
    WriteTableDescriptor(table, static_cast<uint32_t>(i), descriptor);
  }
  const uint16_t head = free_.back();
  free_.pop_back();
  RawDescriptor indirect;
  indirect.addr = table.value();
  indirect.len = static_cast<uint32_t>(16 * buffers.size());
  indirect.flags = kDescIndirect;
  WriteDescriptor(head, indirect);
  chains_[head] = {head};
  Publish(head);
  return head;
}

void DriverQueue::WriteDescriptor(uint16_t index, const RawDescriptor& descriptor) const {
  if (index >= config_.size) Die("descriptor index out of the table");
  WriteTableDescriptor(config_.descriptor_table, index, descriptor);
}

void DriverQueue::WriteTableDescriptor(vmm::GuestAddress table, uint32_t index,
                                       const RawDescriptor& descriptor) const {
  std::memcpy(Host(table + 16 * uint64_t{index}, 16), &descriptor, 16);
}

void DriverQueue::Offer(uint16_t head) {
  uint8_t* ring = Host(config_.available_ring, 6 + 2 * uint64_t{config_.size});
  const uint16_t slot = avail_shadow_ & (config_.size - 1);
  __atomic_store_n(reinterpret_cast<uint16_t*>(ring + 4 + 2 * slot), head, __ATOMIC_RELAXED);
  ++avail_shadow_;
}

void DriverQueue::Expose() { SetAvailIdx(avail_shadow_); }

void DriverQueue::SetAvailIdx(uint16_t idx) {
  avail_shadow_ = idx;
  __atomic_store_n(reinterpret_cast<uint16_t*>(Host(config_.available_ring + 2, 2)), idx,
                   __ATOMIC_RELEASE);
}

void DriverQueue::SetAvailFlags(uint16_t flags) const {
  __atomic_store_n(reinterpret_cast<uint16_t*>(Host(config_.available_ring, 2)), flags,
                   __ATOMIC_RELAXED);
}

void DriverQueue::SetUsedEvent(uint16_t used_event) const {
  __atomic_store_n(
      reinterpret_cast<uint16_t*>(Host(config_.available_ring + 4 + 2 * uint64_t{config_.size}, 2)),
      used_event, __ATOMIC_RELAXED);
}

uint16_t DriverQueue::UsedIdx() const {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(Host(config_.used_ring + 2, 2)),
                         __ATOMIC_ACQUIRE);
}

uint16_t DriverQueue::UsedFlags() const {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(Host(config_.used_ring, 2)),
                         __ATOMIC_RELAXED);
}

uint16_t DriverQueue::AvailEvent() const {
  return __atomic_load_n(reinterpret_cast<const uint16_t*>(
                             Host(config_.used_ring + 4 + 8 * uint64_t{config_.size}, 2)),
                         __ATOMIC_RELAXED);
}

UsedElement DriverQueue::UsedAt(uint16_t index) const {
  UsedElement element;
  const uint16_t slot = index & (config_.size - 1);
  std::memcpy(&element, Host(config_.used_ring + 4 + 8 * uint64_t{slot}, 8), 8);
  return element;
}

std::optional<UsedElement> DriverQueue::CollectUsed() {
  if (UsedIdx() == last_used_) return std::nullopt;
  const UsedElement element = UsedAt(last_used_++);
  if (element.id < config_.size) {
    for (uint16_t index : chains_[element.id]) free_.push_back(index);
    chains_[element.id].clear();
  }
  return element;
}

bool DriverQueue::NeedsNotification(uint16_t old_idx) const {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (!config_.event_idx) return !(UsedFlags() & kUsedNoNotify);
  const uint16_t event = AvailEvent();
  return static_cast<uint16_t>(avail_shadow_ - event - 1) <
         static_cast<uint16_t>(avail_shadow_ - old_idx);
}

}  // namespace devices::virtio::testing

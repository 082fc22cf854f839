#include "devices/legacy/fw_cfg.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/byte_order.h"

namespace devices::legacy {
namespace {

constexpr char kSignature[] = {'Q', 'E', 'M', 'U'};
// What a read of the DMA address register returns: "QEMU CFG", big-endian (fw_cfg.rst, "DMA
// interface": firmware probes for DMA with it).
constexpr char kDmaSignature[] = {'Q', 'E', 'M', 'U', ' ', 'C', 'F', 'G'};

// The key an item is stored under: the write-channel bit selects the same item.
uint16_t ItemKey(uint16_t key) { return key & static_cast<uint16_t>(~FwCfg::kWriteChannel); }

}  // namespace

FwCfg::FwCfg(const vmm::GuestMemory* memory) : memory_(memory) {
  absl::MutexLock lock(&mutex_);
  items_[kSignatureKey].assign(std::begin(kSignature), std::end(kSignature));
  sys_util::AppendLittleEndian(items_[kIdKey], kFeatureTraditional | kFeatureDma, 4);
  RebuildDirectory();
}

absl::Status FwCfg::AddItem(uint16_t key, std::vector<uint8_t> data) {
  const uint16_t entry = key & 0x7fff;
  if ((key & kWriteChannel) != 0 || key == kSignatureKey || key == kIdKey || key == kFileDirKey ||
      (entry >= kFirstFileKey && (key & 0x8000) == 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fw_cfg: key 0x%04x is not a numbered item's", key));
  }
  if (data.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat("fw_cfg: item 0x%04x is over 4 GiB", key));
  }
  absl::MutexLock lock(&mutex_);
  items_[key] = std::move(data);
  return absl::OkStatus();
}

absl::Status FwCfg::AddFile(const std::string& name, std::vector<uint8_t> data) {
  if (name.empty() || name.size() > kMaxFileName || name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrFormat("fw_cfg: file name \"%s\": 1 to %d bytes, no NUL", name, kMaxFileName));
  }
  if (data.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat("fw_cfg: file %s is over 4 GiB", name));
  }
  absl::MutexLock lock(&mutex_);
  if (files_.count(name) != 0) {
    return absl::AlreadyExistsError(absl::StrFormat("fw_cfg: file %s exists", name));
  }
  if (next_file_key_ >= kFirstFileKey + kMaxFiles) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("fw_cfg: no key left for file %s (%d files)", name, kMaxFiles));
  }
  const uint16_t key = next_file_key_++;
  items_[key] = std::move(data);
  files_[name] = key;
  directory_stale_ = true;  // rebuilt when next selected: adding N files costs O(N), not O(N^2)
  return absl::OkStatus();
}

// The directory (fw_cfg.rst, "File Directory"): a big-endian count, then per file its size (u32),
// key (u16), a reserved u16 and its NUL-padded 56-byte name, all big-endian.
void FwCfg::RebuildDirectory() {
  std::vector<uint8_t> directory(4 + files_.size() * kFileDirEntrySize, 0);
  sys_util::PutBe32(directory.data(), static_cast<uint32_t>(files_.size()));
  uint8_t* entry = directory.data() + 4;
  for (const auto& [name, key] : files_) {
    sys_util::PutBe32(entry, static_cast<uint32_t>(items_[key].size()));
    sys_util::PutBe16(entry + 4, key);
    std::memcpy(entry + 8, name.data(), name.size());
    entry += kFileDirEntrySize;
  }
  items_[kFileDirKey] = std::move(directory);
  directory_stale_ = false;
}

void FwCfg::Select(uint16_t key) {
  selected_ = key;
  offset_ = 0;
  if (ItemKey(key) == kFileDirKey && directory_stale_) RebuildDirectory();
}

const std::vector<uint8_t>* FwCfg::Selected() const {
  auto it = items_.find(ItemKey(selected_));
  return it == items_.end() ? nullptr : &it->second;
}

void FwCfg::Read(uint64_t offset, std::span<uint8_t> data) {
  if (offset + data.size() <= kDmaOffset && offset <= kDataOffset) {
    // The data port: successive bytes of the selected item, 0 past its end.
    absl::MutexLock lock(&mutex_);
    const std::vector<uint8_t>* item = Selected();
    for (uint8_t& byte : data) {
      byte = item != nullptr && offset_ < item->size() ? (*item)[offset_++] : 0;
    }
    return;
  }
  if (offset >= kDmaOffset && offset + data.size() <= kPortCount) {
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<uint8_t>(kDmaSignature[offset - kDmaOffset + i]);
    }
    return;
  }
  std::fill(data.begin(), data.end(), 0xff);  // the unused ports between, or across both
}

void FwCfg::Write(uint64_t offset, std::span<const uint8_t> data) {
  absl::MutexLock lock(&mutex_);
  if (offset == kSelectorOffset && data.size() == 2) {
    Select(static_cast<uint16_t>(sys_util::LoadLittleEndian(data)));
    return;
  }
  // The DMA address is big-endian on the port (the guest writes htonl() of each half).
  if (offset == kDmaOffset && data.size() == 4) {
    dma_address_ = uint64_t{sys_util::Be32(data.data())} << 32;
  } else if (offset == kDmaOffset + 4 && data.size() == 4) {
    dma_address_ |= sys_util::Be32(data.data());
    RunDma(dma_address_);
    dma_address_ = 0;
  } else if (offset == kDmaOffset && data.size() == 8) {
    RunDma(sys_util::Be64(data.data()));
    dma_address_ = 0;
  }
  // Anything else (a data-port write, a byte of the selector) changes nothing.
}

void FwCfg::RunDma(uint64_t descriptor_address) {
  uint8_t descriptor[kDmaDescriptorSize];
  const vmm::GuestAddress address(descriptor_address);
  if (!memory_->Read(address, descriptor).ok()) return;  // nowhere to report to
  const uint32_t result = Transfer(sys_util::Be32(descriptor), sys_util::Be32(descriptor + 4),
                                   sys_util::Be64(descriptor + 8));
  uint8_t control[4];
  sys_util::PutBe32(control, result);
  (void)memory_->Write(address, control);  // checked; a descriptor gone from RAM is its loss
}

uint32_t FwCfg::Transfer(uint32_t control, uint32_t length, uint64_t address) {
  if ((control & kDmaSelect) != 0) Select(static_cast<uint16_t>(control >> 16));
  bool copy = false;
  if ((control & kDmaRead) != 0) {
    copy = true;
  } else if ((control & kDmaWrite) != 0) {
    return kDmaError;  // no item is writable
  } else if ((control & kDmaSkip) == 0) {
    return 0;  // a select alone
  }
  uint64_t remaining = length;
  vmm::GuestAddress target(address);
  const std::vector<uint8_t>* item = Selected();
  if (item != nullptr && offset_ < item->size()) {
    const uint64_t count = std::min<uint64_t>(remaining, item->size() - offset_);
    if (copy) {
      std::span<const uint8_t> bytes(item->data() + offset_, count);
      if (!memory_->Write(target, bytes).ok()) return kDmaError;
    }
    offset_ += count;
    remaining -= count;
    if (!target.CheckedAdd(count, &target)) return remaining == 0 ? 0 : kDmaError;
  }
  // Past the item's end (or no item): a read gets zeros, a skip moves nothing.
  if (remaining != 0 && copy && !memory_->Zero(target, remaining).ok()) return kDmaError;
  return 0;
}

}  // namespace devices::legacy

#ifndef DEVICES_SCSI_DISK_H_
#define DEVICES_SCSI_DISK_H_

#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "block/drive.h"
#include "devices/scsi/logical_unit.h"

namespace devices::scsi {

// A direct-access block device (SBC-3) on a fixed block::Drive. Its block size is the drive's
// logical block size (512 to 65536, a power of two).
//
// Durability. WRITE with FUA reaches the drive as Request::fua; the caching mode page reports the
// cache mode's write cache (WCE) and the mode header's DPOFUA bit, so Linux sends FUA writes
// instead of write + SYNCHRONIZE CACHE. READ with FUA flushes first (SBC-3: the data must
// come from the medium, so whatever is cached is made durable before the read is issued) when the
// cache mode has a write cache. SYNCHRONIZE CACHE flushes the whole drive whatever its range (IMMED
// is ignored: the command completes when the flush does).
//
// Thin provisioning, when the drive can discard: UNMAP, and WRITE SAME with UNMAP, become discards;
// LBPME in READ CAPACITY(16), LBPU/LBPWS/LBPWS10 in VPD page B2h, LBPRZ = 0 (a discarded range may
// read back as its old data: block/request.h). WRITE SAME without UNMAP writes its block (zeros go
// out from a static zero buffer; another pattern from a per-task buffer, replicated), in requests of
// up to 1 MiB issued together; ext4 zeroes new extents with it.
class Disk final : public LogicalUnit {
 public:
  // InvalidArgument for a removable drive or an unsupported block size.
  static absl::StatusOr<std::shared_ptr<Disk>> Create(std::shared_ptr<block::Drive> drive,
                                                      LogicalUnitOptions options = {});

  // Limits reported in VPD page B0h and enforced.
  uint32_t max_transfer_blocks() const { return max_transfer_blocks_; }
  uint32_t max_write_same_blocks() const { return max_write_same_blocks_; }
  uint32_t max_unmap_blocks() const { return max_unmap_blocks_; }
  static constexpr uint32_t kMaxUnmapDescriptors = 64;
  bool discard() const { return discard_; }
  uint8_t physical_block_exponent() const { return physical_exponent_; }

  std::span<const uint8_t> VpdPages() const override;
  size_t BuildVpdPage(uint8_t page, const MediumInfo& medium,
                      std::span<uint8_t> out) const override;
  std::span<const uint8_t> ModePages() const override;
  size_t BuildModePage(uint8_t page, PageControl control, const MediumInfo& medium,
                       std::span<uint8_t> out) const override;
  uint8_t ModeDeviceSpecificParameter(const MediumInfo& medium) const override;
  bool HasBlockDescriptors() const override { return true; }
  Sense SelectModePage(std::span<const uint8_t> page, const MediumInfo& medium,
                       bool apply) override;

  // For the SBC command handlers: the WCE the guest set (writes are FUA while it is off) and
  // whether the cache mode has a cache to flush before a FUA read.
  bool guest_write_cache() const { return write_cache_enabled(); }
  bool drive_write_cache() const { return default_wce(); }

  // The dispatch table (all entries; UNMAP only offered with discard).
  static std::span<const CommandInfo> Commands();

  // Public for std::make_shared; use Create().
  Disk(std::shared_ptr<block::Drive> drive, LogicalUnitOptions options,
       const block::DriveInfo& info);

 private:
  const bool discard_;
  uint32_t max_transfer_blocks_ = 0;
  uint32_t max_write_same_blocks_ = 0;
  uint32_t max_unmap_blocks_ = 0;
  uint8_t physical_exponent_ = 0;
  uint64_t naa_ = 0;
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_DISK_H_

#ifndef DEVICES_SCSI_CDROM_H_
#define DEVICES_SCSI_CDROM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "block/drive.h"
#include "block/media.h"
#include "devices/scsi/logical_unit.h"

namespace devices::scsi {

// A CD/DVD device (MMC-6) on a removable block::Drive: read-only, 2048-byte blocks, one data track
// in one complete session. The same unit serves virtio-scsi (SCSI) and IDE ATAPI: an ATAPI
// transport creates it with
//   power_on_unit_attention = false,
//   media_change_report = MediaChangeReport::kNotReadyThenUnitAttention,
//   physical_interface = 2 (ATAPI),
// and drives a LuQueue directly (one LUN), answering its own REQUEST SENSE after each error
// through the unit (the sense of the last CHECK CONDITION is kept for it).
//
// Media state comes only from block::RemovableMedia::Current(), one atomic snapshot per command;
// nothing asks the host. The unit compares the snapshot's generation with the one it last
// accounted for to raise the media-change conditions (see MediaChangeReport), and listens to the
// media (MediaListener) for GET EVENT STATUS NOTIFICATION's events: NewMedia on an insertion,
// MediaRemoval on a removal, EjectRequest when an eject was refused because the guest had locked
// the drive (or the host asked for one).
//
// Current profile (GET CONFIGURATION): DVD-ROM for media larger than a CD can hold (737,280,000
// bytes, 80 minutes of mode-1 sectors, as QEMU decides), else CD-ROM; none without a medium.
class CdRom final : public LogicalUnit, private block::MediaListener {
 public:
  // InvalidArgument for a drive that is not removable.
  static absl::StatusOr<std::shared_ptr<CdRom>> Create(std::shared_ptr<block::Drive> drive,
                                                       LogicalUnitOptions options = {});
  ~CdRom() override;

  static constexpr uint64_t kCdMaxBytes = 80ULL * 60 * 75 * 2048;
  static bool IsDvd(const MediumInfo& medium) {
    return medium.present && medium.blocks * 2048 > kCdMaxBytes;
  }

  block::RemovableMedia& media() const { return *drive().media(); }

  // GET EVENT STATUS NOTIFICATION, media class (MMC-6): the next pending event code (0 NoChg,
  // 1 EjectRequest, 2 NewMedia, 3 MediaRemoval), consumed.
  uint8_t TakeMediaEvent(const MediumInfo& medium);

  uint32_t max_transfer_blocks() const { return max_transfer_blocks_; }

  std::span<const uint8_t> VpdPages() const override;
  size_t BuildVpdPage(uint8_t page, const MediumInfo& medium,
                      std::span<uint8_t> out) const override;
  std::span<const uint8_t> ModePages() const override;
  size_t BuildModePage(uint8_t page, PageControl control, const MediumInfo& medium,
                       std::span<uint8_t> out) const override;
  uint8_t ModeDeviceSpecificParameter(const MediumInfo&) const override { return 0; }
  bool HasBlockDescriptors() const override { return false; }

  static std::span<const CommandInfo> Commands();

  // Public for std::make_shared; use Create().
  CdRom(std::shared_ptr<block::Drive> drive, LogicalUnitOptions options);

 private:
  enum MediaEventBit : uint32_t {
    kEventEjectRequest = 1u << 0,
    kEventNewMedia = 1u << 1,
    kEventMediaRemoval = 1u << 2,
  };

  // On the thread changing the media: only atomics.
  void OnMediaEvent(const block::MediaEvent& event) override;

  uint32_t max_transfer_blocks_ = 0;
  std::atomic<uint32_t> media_events_{0};
  bool listening_ = false;
};

}  // namespace devices::scsi

#endif  // DEVICES_SCSI_CDROM_H_

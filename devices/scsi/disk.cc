#include "devices/scsi/disk.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/spc.h"

namespace devices::scsi {
namespace {

constexpr uint64_t kMaxWriteSameBytes = 32 << 20;  // per WRITE SAME (VPD B0h)
constexpr uint64_t kMaxUnmapBytes = 1 << 30;       // per UNMAP (VPD B0h), as QEMU's default

Disk& DiskOf(CommandContext& ctx) { return static_cast<Disk&>(ctx.lu()); }

bool InRange(const MediumInfo& medium, uint64_t lba, uint64_t blocks) {
  return lba <= medium.blocks && blocks <= medium.blocks - lba;
}

// SBC-3 READ(6/10/12/16) and WRITE(6/10/12/16).
struct ReadWrite {
  bool write;
  bool fua;
  uint64_t lba;
  uint32_t blocks;

  static std::optional<ReadWrite> Parse(const uint8_t* cdb) {
    ReadWrite c{};
    uint8_t protect = 0;
    switch (cdb[0]) {
      case op::kRead6:
      case op::kWrite6:
        c.write = cdb[0] == op::kWrite6;
        c.lba = Be24(cdb + 1) & 0x1fffff;
        c.blocks = cdb[4] == 0 ? 256 : cdb[4];  // 0 means 256 blocks (SBC-3)
        return c;
      case op::kRead10:
      case op::kWrite10:
        c.lba = Be32(cdb + 2);
        c.blocks = Be16(cdb + 7);
        break;
      case op::kRead12:
      case op::kWrite12:
        c.lba = Be32(cdb + 2);
        c.blocks = Be32(cdb + 6);
        break;
      default:  // READ(16), WRITE(16)
        c.lba = Be64(cdb + 2);
        c.blocks = Be32(cdb + 10);
        break;
    }
    c.write = cdb[0] == op::kWrite10 || cdb[0] == op::kWrite12 || cdb[0] == op::kWrite16;
    protect = cdb[1] >> 5;  // RDPROTECT / WRPROTECT: no protection information here
    c.fua = cdb[1] & 0x08;  // DPO (bit 4) is accepted and ignored
    if (protect != 0) return std::nullopt;
    return c;
  }

  Execution Emulate(CommandContext& ctx) const {
    Disk& disk = DiskOf(ctx);
    const MediumInfo& medium = ctx.medium();
    if (write && medium.read_only) return ctx.Fail(sense::kWriteProtected);
    if (blocks > disk.max_transfer_blocks()) return ctx.Fail(sense::kInvalidFieldInCdb);
    if (!InRange(medium, lba, blocks)) return ctx.Fail(sense::kLbaOutOfRange);
    // A zero TRANSFER LENGTH transfers nothing and is not an error (SBC-3).
    if (blocks == 0) return ctx.Good();
    const uint64_t offset = lba * medium.block_size;
    const uint64_t length = static_cast<uint64_t>(blocks) * medium.block_size;
    if (write) {
      if (!ctx.DataOutCovers(length)) return ctx.Overrun();
      // With WCE turned off by MODE SELECT, every write is made durable before it completes.
      return ctx.StartWrite(offset, length, fua || !disk.guest_write_cache());
    }
    if (!ctx.DataInCovers(length)) return ctx.Overrun();
    return ctx.StartRead(offset, length, fua && disk.drive_write_cache());
  }
};

// SBC-3 SYNCHRONIZE CACHE(10/16).
struct SynchronizeCache {
  uint64_t lba;
  uint32_t blocks;  // 0: to the end of the medium

  static std::optional<SynchronizeCache> Parse(const uint8_t* cdb) {
    if (cdb[0] == op::kSynchronizeCache10) return SynchronizeCache{Be32(cdb + 2), Be16(cdb + 7)};
    return SynchronizeCache{Be64(cdb + 2), Be32(cdb + 10)};
  }

  Execution Emulate(CommandContext& ctx) const {
    if (!InRange(ctx.medium(), lba, blocks)) return ctx.Fail(sense::kLbaOutOfRange);
    return ctx.StartFlush();  // the whole drive: a flush has no range
  }
};

// SBC-3 VERIFY(10/16), without data comparison.
struct Verify {
  uint64_t lba;
  uint32_t blocks;

  static std::optional<Verify> Parse(const uint8_t* cdb) {
    if ((cdb[1] >> 5) != 0) return std::nullopt;           // VRPROTECT
    if (((cdb[1] >> 1) & 0x03) != 0) return std::nullopt;  // BYTCHK: comparison not supported
    if (cdb[0] == op::kVerify10) return Verify{Be32(cdb + 2), Be16(cdb + 7)};
    return Verify{Be64(cdb + 2), Be32(cdb + 10)};
  }

  Execution Emulate(CommandContext& ctx) const {
    // BYTCHK = 0: the medium is checked by the backend on every read; nothing to do but the range.
    if (!InRange(ctx.medium(), lba, blocks)) return ctx.Fail(sense::kLbaOutOfRange);
    return ctx.Good();
  }
};

// SBC-3 READ CAPACITY(10).
struct ReadCapacity10 {
  static std::optional<ReadCapacity10> Parse(const uint8_t* cdb) {
    // The obsolete LOGICAL BLOCK ADDRESS must be zero unless PMI is set.
    if (!(cdb[8] & 0x01) && Be32(cdb + 2) != 0) return std::nullopt;
    return ReadCapacity10{};
  }

  Execution Emulate(CommandContext& ctx) const {
    const MediumInfo& medium = ctx.medium();
    std::array<uint8_t, 8> data{};
    const uint64_t last = medium.blocks == 0 ? 0 : medium.blocks - 1;
    // FFFFFFFFh: too large, use READ CAPACITY(16).
    PutBe32(&data[0], last > 0xfffffffe ? 0xffffffff : static_cast<uint32_t>(last));
    PutBe32(&data[4], medium.block_size);
    return ctx.DataIn(data, data.size());
  }
};

// SBC-3 READ CAPACITY(16) (SERVICE ACTION IN(16), service action 10h).
struct ReadCapacity16 {
  uint32_t allocation_length;

  static std::optional<ReadCapacity16> Parse(const uint8_t* cdb) {
    if (!(cdb[14] & 0x01) && Be64(cdb + 2) != 0) return std::nullopt;
    return ReadCapacity16{Be32(cdb + 10)};
  }

  Execution Emulate(CommandContext& ctx) const {
    const Disk& disk = DiskOf(ctx);
    const MediumInfo& medium = ctx.medium();
    std::array<uint8_t, 32> data{};
    PutBe64(&data[0], medium.blocks == 0 ? 0 : medium.blocks - 1);
    PutBe32(&data[8], medium.block_size);
    data[13] = disk.physical_block_exponent();  // LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT
    if (disk.discard()) data[14] = 0x80;        // LBPME (LBPRZ = 0)
    return ctx.DataIn(data, allocation_length);
  }
};

// SBC-3 START STOP UNIT. The disk has no motor: accepted; a stop (START = 0, POWER CONDITION 0)
// without NO_FLUSH writes the cache first, as the standard asks before stopping.
struct StartStopUnit {
  bool start;
  bool no_flush;
  uint8_t power_condition;

  static std::optional<StartStopUnit> Parse(const uint8_t* cdb) {
    return StartStopUnit{static_cast<bool>(cdb[4] & 0x01), static_cast<bool>(cdb[4] & 0x04),
                         static_cast<uint8_t>(cdb[4] >> 4)};
  }

  Execution Emulate(CommandContext& ctx) const {
    if (power_condition == 0 && !start && !no_flush) return ctx.StartFlush();
    return ctx.Good();
  }
};

// SBC-3 WRITE SAME(10/16).
struct WriteSame {
  bool unmap;
  bool ndob;  // WRITE SAME(16) NDOB: no data-out buffer, the block is zeros
  uint64_t lba;
  uint32_t blocks;

  static std::optional<WriteSame> Parse(const uint8_t* cdb) {
    WriteSame c{};
    const bool sixteen = cdb[0] == op::kWriteSame16;
    // WRPROTECT, ANCHOR, and the obsolete PBDATA/LBDATA are not supported.
    if ((cdb[1] & 0xf6) != 0) return std::nullopt;
    c.unmap = cdb[1] & 0x08;
    c.ndob = sixteen && (cdb[1] & 0x01);
    if (!sixteen && (cdb[1] & 0x01)) return std::nullopt;
    c.lba = sixteen ? Be64(cdb + 2) : Be32(cdb + 2);
    c.blocks = sixteen ? Be32(cdb + 10) : Be16(cdb + 7);
    // WSNZ = 1 in the Block Limits VPD page: zero blocks ("to the end") is not supported.
    if (c.blocks == 0) return std::nullopt;
    return c;
  }

  Execution Emulate(CommandContext& ctx) const {
    Disk& disk = DiskOf(ctx);
    const MediumInfo& medium = ctx.medium();
    if (medium.read_only) return ctx.Fail(sense::kWriteProtected);
    if (blocks > disk.max_write_same_blocks()) return ctx.Fail(sense::kInvalidFieldInCdb);
    if (unmap && !disk.discard()) return ctx.Fail(sense::kInvalidFieldInCdb);
    if (!InRange(medium, lba, blocks)) return ctx.Fail(sense::kLbaOutOfRange);
    const uint32_t block = medium.block_size;
    if (!ndob && !ctx.DataOutCovers(block)) return ctx.Overrun();
    if (unmap) {
      // LBPRZ = 0: unmapped blocks read back as whatever the backend has, so the data block need
      // not be zeros for the unmap to be done.
      if (!ndob) ctx.MarkDataOut(block);
      const CommandContext::Range range{lba * block, static_cast<uint64_t>(blocks) * block};
      return ctx.StartDiscards(std::span<const CommandContext::Range>(&range, 1));
    }
    const bool zeros = ndob || IsZero(ctx.task().data_out, block);
    return ctx.StartWriteSame(lba * block, blocks, block, zeros, !ndob);
  }
};

// SBC-3 UNMAP.
struct Unmap {
  uint16_t parameter_list_length;

  static std::optional<Unmap> Parse(const uint8_t* cdb) {
    if (cdb[1] & 0x01) return std::nullopt;  // ANCHOR: not supported
    return Unmap{Be16(cdb + 7)};
  }

  Execution Emulate(CommandContext& ctx) const {
    Disk& disk = DiskOf(ctx);
    const MediumInfo& medium = ctx.medium();
    if (parameter_list_length == 0) return ctx.Good();  // nothing to unmap
    if (medium.read_only) return ctx.Fail(sense::kWriteProtected);
    if (parameter_list_length < 8) return ctx.Fail(sense::kParameterListLengthError);
    if (!ctx.DataOutCovers(parameter_list_length)) return ctx.Overrun();

    std::array<uint8_t, 8 + 16 * Disk::kMaxUnmapDescriptors> list;
    GatherFrom(ctx.task().data_out, std::span<uint8_t>(list.data(), 8));
    // UNMAP BLOCK DESCRIPTOR DATA LENGTH, bounded by the list; a partial descriptor is ignored.
    const size_t count = std::min<size_t>(Be16(&list[2]), parameter_list_length - 8) / 16;
    if (count > Disk::kMaxUnmapDescriptors) {
      return ctx.Fail(sense::kInvalidFieldInParameterList);
    }
    GatherFrom(ctx.task().data_out, std::span<uint8_t>(list.data(), 8 + 16 * count));
    ctx.MarkDataOut(parameter_list_length);

    std::array<CommandContext::Range, Disk::kMaxUnmapDescriptors> ranges;
    uint64_t total = 0;
    for (size_t i = 0; i < count; ++i) {
      const uint8_t* d = &list[8 + 16 * i];
      const uint64_t lba = Be64(d);
      const uint32_t blocks = Be32(d + 8);
      if (!InRange(medium, lba, blocks)) return ctx.Fail(sense::kLbaOutOfRange);
      total += blocks;
      if (total > disk.max_unmap_blocks()) return ctx.Fail(sense::kInvalidFieldInParameterList);
      ranges[i] = {lba * medium.block_size, static_cast<uint64_t>(blocks) * medium.block_size};
    }
    return ctx.StartDiscards(std::span<const CommandContext::Range>(ranges.data(), count));
  }
};

// 64-bit FNV-1a, for the NAA identifier derived from the drive's name.
uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

constexpr uint8_t kVpdPages[] = {0x00, 0x80, 0x83, 0xb0, 0xb1, 0xb2};
constexpr uint8_t kModePages[] = {0x01, 0x04, 0x08, 0x0a};

// The dispatch table. CDB usage data per SPC-4 (the bits each command evaluates).
// clang-format off
constexpr CommandInfo kCommands[] = {
    {op::kTestUnitReady, kNoServiceAction, "TEST UNIT READY", 0,
     {0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, &Run<spc::TestUnitReady>},
    {op::kRequestSense, kNoServiceAction, "REQUEST SENSE", kAllowedWithUnitAttention,
     {0x03, 0x01, 0x00, 0x00, 0xff, 0x00}, &Run<spc::RequestSense>},
    {op::kRead6, kNoServiceAction, "READ(6)", 0,
     {0x08, 0x1f, 0xff, 0xff, 0xff, 0x00}, &Run<ReadWrite>},
    {op::kWrite6, kNoServiceAction, "WRITE(6)", 0,
     {0x0a, 0x1f, 0xff, 0xff, 0xff, 0x00}, &Run<ReadWrite>},
    {op::kInquiry, kNoServiceAction, "INQUIRY", kAllowedWithUnitAttention,
     {0x12, 0x01, 0xff, 0xff, 0xff, 0x00}, &Run<spc::Inquiry>},
    {op::kModeSelect6, kNoServiceAction, "MODE SELECT(6)", 0,
     {0x15, 0x11, 0x00, 0x00, 0xff, 0x00}, &Run<spc::ModeSelect>},
    {op::kModeSense6, kNoServiceAction, "MODE SENSE(6)", 0,
     {0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}, &Run<spc::ModeSense>},
    {op::kStartStopUnit, kNoServiceAction, "START STOP UNIT", 0,
     {0x1b, 0x01, 0x00, 0x0f, 0xf7, 0x00}, &Run<StartStopUnit>},
    {op::kReadCapacity10, kNoServiceAction, "READ CAPACITY(10)", 0,
     {0x25, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x01, 0x00}, &Run<ReadCapacity10>},
    {op::kRead10, kNoServiceAction, "READ(10)", 0,
     {0x28, 0x18, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<ReadWrite>},
    {op::kWrite10, kNoServiceAction, "WRITE(10)", 0,
     {0x2a, 0x18, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<ReadWrite>},
    {op::kVerify10, kNoServiceAction, "VERIFY(10)", 0,
     {0x2f, 0x10, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<Verify>},
    {op::kSynchronizeCache10, kNoServiceAction, "SYNCHRONIZE CACHE(10)", 0,
     {0x35, 0x02, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<SynchronizeCache>},
    {op::kWriteSame10, kNoServiceAction, "WRITE SAME(10)", 0,
     {0x41, 0x08, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<WriteSame>},
    {op::kUnmap, kNoServiceAction, "UNMAP", kNeedsDiscard,
     {0x42, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<Unmap>},
    {op::kModeSelect10, kNoServiceAction, "MODE SELECT(10)", 0,
     {0x55, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<spc::ModeSelect>},
    {op::kModeSense10, kNoServiceAction, "MODE SENSE(10)", 0,
     {0x5a, 0x18, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<spc::ModeSense>},
    {op::kRead16, kNoServiceAction, "READ(16)", 0,
     {0x88, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00},
     &Run<ReadWrite>},
    {op::kWrite16, kNoServiceAction, "WRITE(16)", 0,
     {0x8a, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00},
     &Run<ReadWrite>},
    {op::kVerify16, kNoServiceAction, "VERIFY(16)", 0,
     {0x8f, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00},
     &Run<Verify>},
    {op::kSynchronizeCache16, kNoServiceAction, "SYNCHRONIZE CACHE(16)", 0,
     {0x91, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00},
     &Run<SynchronizeCache>},
    {op::kWriteSame16, kNoServiceAction, "WRITE SAME(16)", 0,
     {0x93, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00,
      0x00},
     &Run<WriteSame>},
    {op::kServiceActionIn16, kSaReadCapacity16, "READ CAPACITY(16)", 0,
     {0x9e, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
      0x00},
     &Run<ReadCapacity16>},
    {op::kReportLuns, kNoServiceAction, "REPORT LUNS", kAllowedWithUnitAttention,
     {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
     &Run<spc::ReportLuns>},
    {op::kMaintenanceIn, kSaReportSupportedOperationCodes, "REPORT SUPPORTED OPERATION CODES", 0,
     {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
     &Run<spc::ReportSupportedOperationCodes>},
    {op::kRead12, kNoServiceAction, "READ(12)", 0,
     {0xa8, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, &Run<ReadWrite>},
    {op::kWrite12, kNoServiceAction, "WRITE(12)", 0,
     {0xaa, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, &Run<ReadWrite>},
};
// clang-format on

}  // namespace

std::span<const CommandInfo> Disk::Commands() { return kCommands; }

absl::StatusOr<std::shared_ptr<Disk>> Disk::Create(std::shared_ptr<block::Drive> drive,
                                                   LogicalUnitOptions options) {
  if (drive == nullptr) return absl::InvalidArgumentError("SCSI disk without a drive");
  if (drive->removable()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SCSI disk \"", drive->name(), "\" needs a fixed drive, not a removable one"));
  }
  const block::DriveInfo info = drive->info();
  const uint32_t block = info.logical_block_size;
  if (!std::has_single_bit(block) || block < 512 || block > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("SCSI disk \"", drive->name(), "\": unsupported logical block size ", block));
  }
  if (options.product.empty()) options.product = "VIRTUAL DISK";
  return std::make_shared<Disk>(std::move(drive), std::move(options), info);
}

Disk::Disk(std::shared_ptr<block::Drive> drive, LogicalUnitOptions options,
           const block::DriveInfo& info)
    : LogicalUnit(kTypeDisk, std::move(drive), std::move(options), kCommands, info.discard),
      discard_(info.discard) {
  const uint32_t block = info.logical_block_size;
  fixed_medium_.present = true;
  fixed_medium_.ready = true;
  fixed_medium_.block_size = block;
  fixed_medium_.blocks = info.size_bytes / block;
  fixed_blocks_.store(fixed_medium_.blocks);
  fixed_medium_.backend_block_size = block;
  fixed_medium_.read_only = info.read_only;
  max_transfer_blocks_ = std::max<uint32_t>(1, this->options().max_transfer_bytes / block);
  max_write_same_blocks_ = static_cast<uint32_t>(std::max<uint64_t>(1, kMaxWriteSameBytes / block));
  max_unmap_blocks_ = static_cast<uint32_t>(std::max<uint64_t>(1, kMaxUnmapBytes / block));
  const uint32_t physical =
      std::max(block, std::bit_ceil(std::max<uint32_t>(1, this->options().physical_block_size)));
  physical_exponent_ = static_cast<uint8_t>(std::min(15, std::countr_zero(physical / block)));
  naa_ =
      (uint64_t{3} << 60) | (Fnv1a(this->drive().name().empty() ? serial() : this->drive().name()) &
                             0x0fffffffffffffffULL);
}

std::span<const uint8_t> Disk::VpdPages() const { return kVpdPages; }

size_t Disk::BuildVpdPage(uint8_t page, const MediumInfo& medium, std::span<uint8_t> out) const {
  std::fill(out.begin(), out.end(), 0);
  out[0] = kTypeDisk;
  out[1] = page;
  switch (page) {
    case 0x80:
      return spc::BuildUnitSerialNumberPage(serial(), out);
    case 0x83: {
      // SPC-4 Device Identification: a T10 vendor ID based designator (the vendor id,
      // then the serial) and an NAA designator (NAA 3h locally assigned: a hash of the
      // drive's name), both for the logical unit.
      size_t at = 4;
      at += spc::PutT10VendorIdDesignator(options().vendor, serial(), out.subspan(at));
      out[at + 0] = 0x01;  // CODE SET 1 (binary)
      out[at + 1] = 0x03;  // ASSOCIATION 0, DESIGNATOR TYPE 3 (NAA)
      out[at + 3] = 8;
      PutBe64(&out[at + 4], naa_);
      at += 12;
      PutBe16(&out[2], static_cast<uint16_t>(at - 4));
      return at;
    }
    case 0xb0: {
      // SBC-3 Block Limits.
      PutBe16(&out[2], 0x3c);
      out[4] = 0x01;  // WSNZ: WRITE SAME of zero blocks is not supported
      const uint32_t per_physical = 1u << physical_exponent_;
      PutBe16(&out[6], static_cast<uint16_t>(per_physical));  // OPTIMAL TRANSFER LENGTH GRANULARITY
      PutBe32(&out[8], max_transfer_blocks_);                 // MAXIMUM TRANSFER LENGTH
      if (discard_) {
        PutBe32(&out[20], max_unmap_blocks_);     // MAXIMUM UNMAP LBA COUNT
        PutBe32(&out[24], kMaxUnmapDescriptors);  // MAXIMUM UNMAP BLOCK DESCRIPTOR COUNT
        PutBe32(&out[28], per_physical);          // OPTIMAL UNMAP GRANULARITY
      }
      PutBe64(&out[36], max_write_same_blocks_);  // MAXIMUM WRITE SAME LENGTH
      return 64;
    }
    case 0xb1:
      // SBC-3 Block Device Characteristics: MEDIUM ROTATION RATE 1 = non-rotating medium.
      PutBe16(&out[2], 0x3c);
      PutBe16(&out[4], 0x0001);
      return 64;
    case 0xb2:
      // SBC-3 Logical Block Provisioning.
      PutBe16(&out[2], 0x04);
      if (discard_) {
        out[5] = 0xe0;  // LBPU, LBPWS, LBPWS10 (LBPRZ = 0, ANC_SUP = 0, DP = 0)
        out[6] = 0x02;  // PROVISIONING TYPE: thin provisioned
      }
      return 8;
    default:
      return 0;
  }
}

std::span<const uint8_t> Disk::ModePages() const { return kModePages; }

size_t Disk::BuildModePage(uint8_t page, PageControl control, const MediumInfo& medium,
                           std::span<uint8_t> out) const {
  const bool changeable = control == PageControl::kChangeable;
  switch (page) {
    case 0x01:
      // SBC-3 Read-Write Error Recovery: AWRE (automatic write reallocation), as QEMU.
      std::fill_n(out.begin(), 12, 0);
      out[0] = 0x01;
      out[1] = 0x0a;
      if (!changeable) out[2] = 0x80;
      return 12;
    case 0x04: {
      // SBC-2 Rigid Disk Drive Geometry (obsolete in SBC-3; SeaBIOS asks for it): a CHS geometry
      // of 16 heads, 63 sectors per track, and a non-rotating medium.
      std::fill_n(out.begin(), 24, 0);
      out[0] = 0x04;
      out[1] = 0x16;
      if (!changeable) {
        PutBe24(&out[2],
                static_cast<uint32_t>(std::min<uint64_t>(medium.blocks / (16 * 63), 0xffffff)));
        out[5] = 16;
        PutBe16(&out[20], 0x0001);
      }
      return 24;
    }
    case 0x08:
      // SBC-3 Caching: WCE (byte 2 bit 2), RCD = 0 (the read cache is on). Only WCE is
      // changeable.
      std::fill_n(out.begin(), 20, 0);
      out[0] = 0x08;
      out[1] = 0x12;
      if (changeable) {
        out[2] = 0x04;
      } else {
        const bool wce = control == PageControl::kDefault ? default_wce() : write_cache_enabled();
        out[2] = wce ? 0x04 : 0x00;
      }
      return 20;
    case 0x0a:
      // SPC-4 Control: QUEUE ALGORITHM MODIFIER 1 (unrestricted reordering), D_SENSE = 0
      // (fixed format sense), nothing changeable.
      std::fill_n(out.begin(), 12, 0);
      out[0] = 0x0a;
      out[1] = 0x0a;
      if (!changeable) {
        out[3] = 0x10;
        PutBe16(&out[8], 0xffff);  // BUSY TIMEOUT PERIOD: unlimited
      }
      return 12;
    default:
      return 0;
  }
}

uint8_t Disk::ModeDeviceSpecificParameter(const MediumInfo& medium) const {
  // SBC-3: WP (bit 7) and DPOFUA (bit 4: the DPO and FUA bits are supported).
  return static_cast<uint8_t>((medium.read_only ? 0x80 : 0x00) | 0x10);
}

Sense Disk::SelectModePage(std::span<const uint8_t> page, const MediumInfo& medium, bool apply) {
  if ((page[0] & 0x3f) != 0x08) return LogicalUnit::SelectModePage(page, medium, apply);
  std::array<uint8_t, 20> current;
  BuildModePage(0x08, PageControl::kCurrent, medium, current);
  if (page.size() != current.size() || page[1] != current[1]) {
    return sense::kInvalidFieldInParameterList;
  }
  // Everything but WCE must stay as it is (PS, byte 0 bit 7, is reserved here).
  for (size_t i = 2; i < current.size(); ++i) {
    const uint8_t mask = i == 2 ? 0xfb : 0xff;
    if ((page[i] & mask) != (current[i] & mask)) return sense::kInvalidFieldInParameterList;
  }
  if (apply) set_write_cache_enabled(page[2] & 0x04);
  return sense::kNoSense;
}

}  // namespace devices::scsi

#include "devices/ide/ata_command_set.h"

#include <algorithm>
#include <bit>

#include "devices/ide/ata.h"
#include "devices/ide/identify.h"

namespace devices::ide {
namespace {

AtaOutcome Complete() { return AtaOutcome{}; }

AtaOutcome Abort() {
  AtaOutcome outcome;
  outcome.kind = AtaOutcome::Kind::kError;
  outcome.error = error::kAbrt;
  return outcome;
}

AtaOutcome Error(uint8_t bits) {
  AtaOutcome outcome;
  outcome.kind = AtaOutcome::Kind::kError;
  outcome.error = bits;
  return outcome;
}

AtaOutcome Outcome(AtaOutcome::Kind kind) {
  AtaOutcome outcome;
  outcome.kind = kind;
  return outcome;
}

// The shape of one read/write opcode.
struct TransferCommand {
  bool write = false;
  bool dma = false;
  bool lba48 = false;
  bool multiple = false;
  bool fua = false;
};

std::optional<TransferCommand> TransferCommandFor(uint8_t command) {
  switch (command) {
    case cmd::kReadSectors:
    case cmd::kReadSectorsNoRetry:
      return TransferCommand{};
    case cmd::kReadSectorsExt:
      return TransferCommand{.lba48 = true};
    case cmd::kReadMultiple:
      return TransferCommand{.multiple = true};
    case cmd::kReadMultipleExt:
      return TransferCommand{.lba48 = true, .multiple = true};
    case cmd::kReadDma:
    case cmd::kReadDmaNoRetry:
      return TransferCommand{.dma = true};
    case cmd::kReadDmaExt:
      return TransferCommand{.dma = true, .lba48 = true};
    case cmd::kWriteSectors:
    case cmd::kWriteSectorsNoRetry:
      return TransferCommand{.write = true};
    case cmd::kWriteSectorsExt:
      return TransferCommand{.write = true, .lba48 = true};
    case cmd::kWriteMultiple:
      return TransferCommand{.write = true, .multiple = true};
    case cmd::kWriteMultipleExt:
      return TransferCommand{.write = true, .lba48 = true, .multiple = true};
    case cmd::kWriteMultipleFuaExt:
      return TransferCommand{.write = true, .lba48 = true, .multiple = true, .fua = true};
    case cmd::kWriteDma:
    case cmd::kWriteDmaNoRetry:
      return TransferCommand{.write = true, .dma = true};
    case cmd::kWriteDmaExt:
      return TransferCommand{.write = true, .dma = true, .lba48 = true};
    case cmd::kWriteDmaFuaExt:
      return TransferCommand{.write = true, .dma = true, .lba48 = true, .fua = true};
    default:
      return std::nullopt;
  }
}

// The address and count of a command: 48-bit from the register pairs, 28-bit LBA, or CHS under
// the current translation (ATA8-ACS 4.x; CHS is obsolete but INITIALIZE DEVICE PARAMETERS users
// still send it). nullopt: a CHS address that does not exist.
struct Range {
  uint64_t lba;
  uint32_t sectors;
};

std::optional<Range> RangeOf(const TaskFile& tf, const DeviceSettings& settings, bool lba48) {
  if (lba48) return Range{tf.Lba48(), tf.Count48()};
  if (tf.lba_mode()) return Range{tf.Lba28(), tf.Count28()};
  std::optional<uint64_t> lba = tf.ChsToLba(settings.geometry);
  if (!lba) return std::nullopt;
  return Range{*lba, tf.Count28()};
}

bool InMedium(const Range& range, uint64_t sectors) {
  return range.lba <= sectors && range.sectors <= sectors - range.lba;
}

AtaOutcome DiskTransferCommand(const TransferCommand& c, const TaskFile& tf,
                               const DeviceSettings& settings) {
  // READ/WRITE MULTIPLE with multiple mode off: "the device shall return command aborted"
  // (ATA8-ACS 7.26.x / 7.63.x).
  if (c.multiple && settings.multiple == 0) return Abort();
  std::optional<Range> range = RangeOf(tf, settings, c.lba48);
  // "IDNF ... if an address outside of the range of user-accessible addresses is requested".
  if (!range || !InMedium(*range, settings.sectors)) return Error(error::kIdnf);
  // A fixed disk has no write-protect error bit (WP is for removable media): command aborted.
  if (c.write && settings.read_only) return Abort();
  AtaOutcome outcome = Outcome(AtaOutcome::Kind::kTransfer);
  DiskTransfer& t = outcome.transfer;
  t.write = c.write;
  t.dma = c.dma;
  t.lba = range->lba;
  t.sectors = range->sectors;
  t.block_sectors = c.multiple ? settings.multiple : 1;
  t.fua = c.write && (c.fua || !settings.write_cache);
  t.lba48 = c.lba48;
  return outcome;
}

AtaOutcome ReadVerify(const TaskFile& tf, const DeviceSettings& settings, bool lba48) {
  // READ VERIFY SECTORS (ATA8-ACS 7.34/7.35): no data crosses the interface. The medium is a host
  // file whose errors surface on reads; the range check is what can fail here.
  std::optional<Range> range = RangeOf(tf, settings, lba48);
  if (!range || !InMedium(*range, settings.sectors)) return Error(error::kIdnf);
  return Complete();
}

AtaOutcome SetFeatures(const TaskFile& tf, DeviceSettings& settings) {
  const bool disk = settings.kind == DeviceKind::kDisk;
  switch (tf.feature) {
    case feature::kEnableWriteCache:
    case feature::kDisableWriteCache:
      if (!disk) return Abort();
      settings.write_cache = tf.feature == feature::kEnableWriteCache;
      return Complete();
    case feature::kSetTransferMode: {
      // ATA8-ACS 7.48.4: the Count register holds the mode; a mode the device does not support
      // is aborted. PIO modes leave the DMA selection alone.
      const uint8_t mode = tf.count & xfer::kModeMask;
      switch (tf.count & ~xfer::kModeMask) {
        case xfer::kPioDefault:  // 00h and 01h
          if (mode > 1) return Abort();
          return Complete();
        case xfer::kPioFlowControl:
          if (mode > xfer::kMaxPio) return Abort();
          return Complete();
        case xfer::kMultiwordDma:
          if (mode > xfer::kMaxMultiwordDma) return Abort();
          settings.transfer_mode = tf.count;
          return Complete();
        case xfer::kUltraDma:
          if (mode > xfer::kMaxUltraDma) return Abort();
          settings.transfer_mode = tf.count;
          return Complete();
        default:
          return Abort();
      }
    }
    case feature::kEnableReadLookAhead:
    case feature::kDisableReadLookAhead:
    case feature::kEnableRevertToDefaults:
    case feature::kDisableRevertToDefaults:
      // Accepted: look-ahead is the host's page cache; settings are never reverted by a reset.
      return Complete();
    default:
      return Abort();
  }
}

AtaOutcome SetMultipleMode(const TaskFile& tf, DeviceSettings& settings) {
  // ATA8-ACS 7.47: the block size must be one the device supports (a power of two up to word 47);
  // 0 turns multiple mode off.
  const uint8_t count = tf.count;
  if (count != 0 && (count > DeviceSettings::kMaxMultiple || !std::has_single_bit(count))) {
    return Abort();
  }
  settings.multiple = count;
  return Complete();
}

AtaOutcome InitializeDeviceParameters(const TaskFile& tf, DeviceSettings& settings) {
  // ATA-5 8.x (obsolete in ATA8-ACS): heads = Device bits 3:0 + 1, sectors per track = Count.
  const uint32_t heads = (tf.device & device::kHeadMask) + 1u;
  const uint32_t per_track = tf.count;
  if (per_track == 0) return Abort();
  settings.geometry.heads = heads;
  settings.geometry.sectors = per_track;
  settings.geometry.cylinders =
      static_cast<uint32_t>(std::min<uint64_t>(settings.sectors / (heads * per_track), 65535));
  return Complete();
}

AtaOutcome DiskCommand(uint8_t command, const TaskFile& tf, DeviceSettings& settings) {
  if (std::optional<TransferCommand> transfer = TransferCommandFor(command)) {
    return DiskTransferCommand(*transfer, tf, settings);
  }
  if (command >= cmd::kRecalibrate && command <= cmd::kRecalibrate + 0x0f) return Complete();
  switch (command) {
    case cmd::kIdentifyDevice: {
      AtaOutcome outcome = Outcome(AtaOutcome::Kind::kPioIn);
      outcome.data = IdentifyBytes(BuildIdentifyDevice(settings));
      return outcome;
    }
    case cmd::kReadVerifySectors:
    case cmd::kReadVerifySectorsNoRetry:
      return ReadVerify(tf, settings, /*lba48=*/false);
    case cmd::kReadVerifySectorsExt:
      return ReadVerify(tf, settings, /*lba48=*/true);
    case cmd::kFlushCache:
    case cmd::kFlushCacheExt:
      return Outcome(AtaOutcome::Kind::kFlush);
    case cmd::kSetMultipleMode:
      return SetMultipleMode(tf, settings);
    case cmd::kInitializeDeviceParameters:
      return InitializeDeviceParameters(tf, settings);
    case cmd::kSeek:
      return Complete();
    default:
      // PACKET, IDENTIFY PACKET DEVICE and DEVICE RESET belong to the PACKET feature set
      // (ATA8-ACS 7.x: "a device not implementing it shall abort").
      return Abort();
  }
}

AtaOutcome PacketDeviceCommand(uint8_t command, const TaskFile& tf, DeviceSettings& settings) {
  switch (command) {
    case cmd::kPacket: {
      AtaOutcome outcome = Outcome(AtaOutcome::Kind::kPacket);
      outcome.packet_dma = (tf.feature & kPacketFeatureDma) != 0;
      return outcome;
    }
    case cmd::kIdentifyPacketDevice: {
      AtaOutcome outcome = Outcome(AtaOutcome::Kind::kPioIn);
      outcome.data = IdentifyBytes(BuildIdentifyPacketDevice(settings));
      return outcome;
    }
    case cmd::kIdentifyDevice: {
      AtaOutcome outcome = Abort();
      outcome.signature = true;
      return outcome;
    }
    case cmd::kDeviceReset:
      return Outcome(AtaOutcome::Kind::kDeviceReset);
    case cmd::kFlushCache:
    case cmd::kFlushCacheExt:
      return Complete();  // a read-only medium has nothing to write back
    default:
      return Abort();
  }
}

}  // namespace

AtaOutcome ExecuteAtaCommand(uint8_t command, const TaskFile& tf, DeviceSettings& settings) {
  // Commands common to both device kinds.
  switch (command) {
    case cmd::kNop:
      // ATA8-ACS 7.27: NOP with subcommand 00h "shall ... return command aborted".
      return Abort();
    case cmd::kExecuteDeviceDiagnostic:
      return Outcome(AtaOutcome::Kind::kDiagnostic);
    case cmd::kSetFeatures:
      return SetFeatures(tf, settings);
    case cmd::kCheckPowerMode: {
      AtaOutcome outcome = Complete();
      outcome.count = kPowerModeActiveOrIdle;
      return outcome;
    }
    case cmd::kIdleImmediate:
    case cmd::kStandbyImmediate:
    case cmd::kIdle:
    case cmd::kStandby:
    case cmd::kSleep:
      // Power management (ATA8-ACS 4.15): accepted; the device is always ready at once.
      return Complete();
    default:
      break;
  }
  switch (settings.kind) {
    case DeviceKind::kDisk:
      return DiskCommand(command, tf, settings);
    case DeviceKind::kCdRom:
      return PacketDeviceCommand(command, tf, settings);
    case DeviceKind::kNone:
      break;
  }
  return Abort();
}

}  // namespace devices::ide

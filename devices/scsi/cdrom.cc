#include "devices/scsi/cdrom.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "devices/scsi/bytes.h"
#include "devices/scsi/spc.h"

namespace devices::scsi {
namespace {

constexpr uint32_t kBlock = 2048;
constexpr uint8_t kAdrControlData = 0x14;  // ADR 1 (Q sub-channel position), CONTROL 4 (data)

// MMC-6 (address format): LBA to MSF, with the 2-second (150 frame) pre-gap. Minutes saturate
// at 255 (a DVD's size does not fit the CD time format; MSF addressing is for CDs).
void PutMsf(uint8_t* p, uint64_t lba) {
  const uint64_t frames = lba + 150;
  const uint64_t minutes = frames / (75 * 60);
  if (minutes > 0xff) {
    p[0] = 0xff;
    p[1] = 59;
    p[2] = 74;
    return;
  }
  p[0] = static_cast<uint8_t>(minutes);
  p[1] = static_cast<uint8_t>((frames / 75) % 60);
  p[2] = static_cast<uint8_t>(frames % 75);
}

// An address field of 4 bytes: LBA, or MSF as 00 M S F.
void PutAddress(uint8_t* p, uint64_t lba, bool msf) {
  if (msf) {
    p[0] = 0;
    PutMsf(p + 1, lba);
  } else {
    PutBe32(p, static_cast<uint32_t>(lba));
  }
}

CdRom& CdOf(CommandContext& ctx) { return static_cast<CdRom&>(ctx.lu()); }

// MMC-6 READ(10), READ(12): 2048-byte user data blocks. DPO and FUA are accepted and
// ignored (a read-only medium has nothing cached to write back).
struct Read {
  uint64_t lba;
  uint32_t blocks;

  static std::optional<Read> Parse(const uint8_t* cdb) {
    if (cdb[0] == op::kRead10) return Read{Be32(cdb + 2), Be16(cdb + 7)};
    return Read{Be32(cdb + 2), Be32(cdb + 6)};
  }

  Execution Emulate(CommandContext& ctx) const {
    const MediumInfo& medium = ctx.medium();
    if (blocks > CdOf(ctx).max_transfer_blocks()) return ctx.Fail(sense::kInvalidFieldInCdb);
    if (lba > medium.blocks || blocks > medium.blocks - lba) {
      return ctx.Fail(sense::kLbaOutOfRange);
    }
    if (blocks == 0) return ctx.Good();
    const uint64_t length = static_cast<uint64_t>(blocks) * kBlock;
    if (!ctx.DataInCovers(length)) return ctx.Overrun();
    return ctx.StartRead(lba * kBlock, length, /*flush_first=*/false);
  }
};

// MMC-6 READ CD: user data of mode-1 (or DVD) sectors only, which is what a data disc image
// holds. Raw sectors (sync, headers, EDC/ECC), C2 error bits and sub-channel data are not
// available: INVALID FIELD IN CDB; an audio or mode-2 sector type: ILLEGAL MODE FOR THIS TRACK.
struct ReadCd {
  uint8_t sector_type;
  uint64_t lba;
  uint32_t blocks;
  uint8_t fields;

  static std::optional<ReadCd> Parse(const uint8_t* cdb) {
    ReadCd c{};
    c.sector_type = (cdb[1] >> 2) & 0x07;
    c.lba = Be32(cdb + 2);
    c.blocks = Be24(cdb + 6);
    c.fields = cdb[9];
    if ((cdb[10] & 0x07) != 0) return std::nullopt;  // sub-channel data
    if (c.sector_type > 5) return std::nullopt;      // reserved
    // Byte 9: only "no data" (00h) or "user data" (10h); the EDC/ECC, header and sync fields and
    // C2 error information cannot be produced from an image of user data.
    if (c.fields != 0x00 && c.fields != 0x10) return std::nullopt;
    return c;
  }

  Execution Emulate(CommandContext& ctx) const {
    // 0: any type; 2: mode 1. CD-DA (1) and the mode 2 forms (3, 4, 5) are not what the track is.
    if (sector_type != 0 && sector_type != 2) return ctx.Fail(sense::kIllegalModeForThisTrack);
    const MediumInfo& medium = ctx.medium();
    if (blocks > CdOf(ctx).max_transfer_blocks()) return ctx.Fail(sense::kInvalidFieldInCdb);
    if (lba > medium.blocks || blocks > medium.blocks - lba) {
      return ctx.Fail(sense::kLbaOutOfRange);
    }
    if (blocks == 0 || fields == 0x00) return ctx.Good();
    const uint64_t length = static_cast<uint64_t>(blocks) * kBlock;
    if (!ctx.DataInCovers(length)) return ctx.Overrun();
    return ctx.StartRead(lba * kBlock, length, /*flush_first=*/false);
  }
};

// MMC-6 READ CAPACITY: the last block's address and 2048.
struct ReadCapacity {
  static std::optional<ReadCapacity> Parse(const uint8_t*) { return ReadCapacity{}; }

  Execution Emulate(CommandContext& ctx) const {
    const MediumInfo& medium = ctx.medium();
    std::array<uint8_t, 8> data{};
    const uint64_t last = medium.blocks == 0 ? 0 : medium.blocks - 1;
    PutBe32(&data[0], static_cast<uint32_t>(std::min<uint64_t>(last, 0xffffffff)));
    PutBe32(&data[4], kBlock);
    return ctx.DataIn(data, data.size());
  }
};

// SEEK(10) (SBC-2, kept by MMC drives; QEMU's ATAPI model has it): a range check.
struct Seek {
  uint32_t lba;

  static std::optional<Seek> Parse(const uint8_t* cdb) { return Seek{Be32(cdb + 2)}; }

  Execution Emulate(CommandContext& ctx) const {
    if (lba >= ctx.medium().blocks) return ctx.Fail(sense::kLbaOutOfRange);
    return ctx.Good();
  }
};

// MMC-6 READ TOC/PMA/ATIP: formats 0 (TOC), 1 (session information) and 2 (full TOC) of a
// disc with one data track in one session.
struct ReadToc {
  bool msf;
  uint8_t format;
  uint8_t track;
  uint16_t allocation_length;

  static std::optional<ReadToc> Parse(const uint8_t* cdb) {
    ReadToc c{};
    c.msf = cdb[1] & 0x02;
    c.format = cdb[2] & 0x0f;
    // Format 0 with bits 7-6 of the CONTROL byte set: the older (SFF-8020) way of asking for
    // formats 1 and 2, which Linux still uses for the session information.
    if (c.format == 0) c.format = cdb[9] >> 6;
    c.track = cdb[6];
    c.allocation_length = Be16(cdb + 7);
    if (c.format > 2) return std::nullopt;  // PMA, ATIP, CD-TEXT: not on a pressed data disc
    return c;
  }

  Execution Emulate(CommandContext& ctx) const {
    const uint64_t blocks = ctx.medium().blocks;
    std::array<uint8_t, 64> data{};
    size_t length = 4;
    data[2] = 1;  // first track (format 0) / first session (formats 1, 2)
    data[3] = 1;  // last track / last session
    if (format == 0) {
      // TRACK/SESSION NUMBER: the first track to describe; 0AAh for the lead-out alone.
      if (track > 1 && track != 0xaa) return ctx.Fail(sense::kInvalidFieldInCdb);
      if (track <= 1) {
        data[length + 1] = kAdrControlData;
        data[length + 2] = 1;
        PutAddress(&data[length + 4], 0, msf);
        length += 8;
      }
      data[length + 1] = kAdrControlData;
      data[length + 2] = 0xaa;  // lead-out
      PutAddress(&data[length + 4], blocks, msf);
      length += 8;
    } else if (format == 1) {
      // The first track of the last session, and its start.
      data[length + 1] = kAdrControlData;
      data[length + 2] = 1;
      PutAddress(&data[length + 4], 0, msf);
      length += 8;
    } else {
      // Full TOC: Q sub-channel descriptors of the lead-in, POINT A0h (first track), A1h (last
      // track), A2h (lead-out start) and track 1. Addresses are always MSF.
      auto descriptor = [&](uint8_t point, uint8_t pmin, uint8_t psec, uint8_t pframe) {
        uint8_t* d = &data[length];
        d[0] = 1;  // session
        d[1] = kAdrControlData;
        d[3] = point;
        d[8] = pmin;
        d[9] = psec;
        d[10] = pframe;
        length += 11;
      };
      uint8_t lead_out[3];
      PutMsf(lead_out, blocks);
      uint8_t start[3];
      PutMsf(start, 0);
      descriptor(0xa0, 1, 0x00, 0);  // first track 1, disc type 00h (CD-DA or CD-ROM)
      descriptor(0xa1, 1, 0, 0);     // last track 1
      descriptor(0xa2, lead_out[0], lead_out[1], lead_out[2]);
      descriptor(0x01, start[0], start[1], start[2]);
    }
    PutBe16(&data[0], static_cast<uint16_t>(length - 2));
    return ctx.DataIn(std::span<const uint8_t>(data.data(), length), allocation_length);
  }
};

// MMC-6 READ DISC INFORMATION, standard disc information (data type 000b).
struct ReadDiscInformation {
  uint16_t allocation_length;

  static std::optional<ReadDiscInformation> Parse(const uint8_t* cdb) {
    if ((cdb[1] & 0x07) != 0) return std::nullopt;  // track resources, POW resources: not a BD
    return ReadDiscInformation{Be16(cdb + 7)};
  }

  Execution Emulate(CommandContext& ctx) const {
    std::array<uint8_t, 34> data{};
    PutBe16(&data[0], 32);  // DISC INFORMATION LENGTH
    data[2] = 0x0e;         // last session complete (11b), disc complete (10b), not erasable
    data[3] = 1;            // first track on disc
    data[4] = 1;            // number of sessions
    data[5] = 1;            // first track in last session
    data[6] = 1;            // last track in last session
    data[7] = 0x20;         // URU: unrestricted use
    data[8] = 0x00;         // disc type: CD-DA or CD-ROM
    PutBe32(&data[16], 0xffffffff);  // last session lead-in start: none (disc complete)
    PutBe32(&data[20], 0xffffffff);  // last possible lead-out start: none
    return ctx.DataIn(data, allocation_length);
  }
};

// MMC-6 READ TRACK INFORMATION (which QEMU's scsi-cd lacks: Linux falls back to READ TOC).
// Linux's sr uses TRACK START ADDRESS + TRACK SIZE as the last written block
// (cdrom_get_last_written), so TRACK SIZE is exactly the medium's blocks.
struct ReadTrackInformation {
  uint8_t address_type;
  uint32_t number;
  uint16_t allocation_length;

  static std::optional<ReadTrackInformation> Parse(const uint8_t* cdb) {
    if (cdb[1] & 0x04) return std::nullopt;  // OPEN: there is no open (incomplete) track
    const uint8_t type = cdb[1] & 0x03;
    if (type == 3) return std::nullopt;
    return ReadTrackInformation{type, Be32(cdb + 2), Be16(cdb + 7)};
  }

  Execution Emulate(CommandContext& ctx) const {
    const MediumInfo& medium = ctx.medium();
    switch (address_type) {
      case 0:  // LBA: the track containing it
        if (number >= medium.blocks) return ctx.Fail(sense::kLbaOutOfRange);
        break;
      case 1:  // track number: 1 only (0 is the lead-in, FFh an invisible track)
      case 2:  // session number: the first track of session 1
        if (number != 1) return ctx.Fail(sense::kInvalidFieldInCdb);
        break;
    }
    const bool dvd = CdRom::IsDvd(medium);
    std::array<uint8_t, 48> data{};
    PutBe16(&data[0], 46);  // DATA LENGTH
    data[2] = 1;            // track number (LSB)
    data[3] = 1;            // session number (LSB)
    data[5] = 0x04;         // TRACK MODE: data track, recorded uninterrupted, copy prohibited
    data[6] = 0x01;         // DATA MODE: mode 1 (a DVD reports 1h too)
    // TRACK START ADDRESS 0; NWA_V = LRA_V = 0; FREE BLOCKS 0.
    PutBe32(&data[20], dvd ? 16 : 0);  // FIXED PACKET SIZE / BLOCKING FACTOR
    PutBe32(&data[24], static_cast<uint32_t>(std::min<uint64_t>(medium.blocks, 0xffffffff)));
    return ctx.DataIn(data, allocation_length);
  }
};

// MMC-6 GET CONFIGURATION. Features: Profile List (0000h), Core (0001h), Morphing (0002h),
// Removable Medium (0003h), Random Readable (0010h), CD Read (001Eh), DVD Read (001Fh), Power
// Management (0100h). Profiles: DVD-ROM (0010h) and CD-ROM (0008h).
struct GetConfiguration {
  uint8_t rt;
  uint16_t starting_feature;
  uint16_t allocation_length;

  static std::optional<GetConfiguration> Parse(const uint8_t* cdb) {
    const uint8_t rt = cdb[1] & 0x03;
    if (rt == 3) return std::nullopt;  // reserved
    return GetConfiguration{rt, Be16(cdb + 2), Be16(cdb + 7)};
  }

  Execution Emulate(CommandContext& ctx) const {
    const CdRom& cd = CdOf(ctx);
    const MediumInfo& medium = ctx.medium();
    const bool dvd = medium.present && CdRom::IsDvd(medium);
    const bool cd_medium = medium.present && !dvd;
    const uint16_t profile = dvd ? 0x0010 : cd_medium ? 0x0008 : 0x0000;

    std::array<uint8_t, 128> data{};
    size_t length = 8;
    // One feature descriptor; `current` decides RT 01b, `version` in bits 5-2 of byte 2.
    auto feature = [&](uint16_t code, uint8_t version, bool persistent, bool current,
                       std::span<const uint8_t> body) {
      if (code < starting_feature) return;
      if (rt == 1 && !current) return;
      if (rt == 2 && code != starting_feature) return;
      uint8_t* d = &data[length];
      PutBe16(d, code);
      d[2] = static_cast<uint8_t>(version << 2 | (persistent ? 0x02 : 0) | (current ? 0x01 : 0));
      d[3] = static_cast<uint8_t>(body.size());
      std::copy(body.begin(), body.end(), d + 4);
      length += 4 + body.size();
    };
    const uint8_t profiles[8] = {0x00, 0x10, static_cast<uint8_t>(dvd ? 1 : 0),       0,
                                 0x00, 0x08, static_cast<uint8_t>(cd_medium ? 1 : 0), 0};
    feature(0x0000, 0, true, true, profiles);
    uint8_t core[8] = {};
    PutBe32(core, cd.options().physical_interface);
    core[4] = 0x01;  // DBE: device busy events
    feature(0x0001, 2, true, true, core);
    const uint8_t morphing[4] = {0x00, 0, 0, 0};  // polled GESN only: no Async, no OCEvent
    feature(0x0002, 1, true, true, morphing);
    // Loading mechanism: tray (001b); Load, Eject, Lock.
    const uint8_t removable[4] = {0x39, 0, 0, 0};
    feature(0x0003, 2, true, true, removable);
    uint8_t random_readable[8] = {};
    PutBe32(random_readable, kBlock);
    PutBe16(&random_readable[4], dvd ? 16 : 1);  // BLOCKING
    feature(0x0010, 0, false, medium.ready, random_readable);
    const uint8_t cd_read[4] = {0, 0, 0, 0};  // no CD-Text, C2 flags or DAP
    feature(0x001e, 2, false, cd_medium, cd_read);
    feature(0x001f, 0, false, dvd, {});
    feature(0x0100, 0, true, true, {});

    PutBe32(&data[0], static_cast<uint32_t>(length - 4));  // DATA LENGTH
    PutBe16(&data[6], profile);                            // CURRENT PROFILE
    return ctx.DataIn(std::span<const uint8_t>(data.data(), length), allocation_length);
  }
};

// MMC-6 GET EVENT STATUS NOTIFICATION, polled, media class (class 4) only.
struct GetEventStatusNotification {
  uint8_t class_request;
  uint16_t allocation_length;

  static std::optional<GetEventStatusNotification> Parse(const uint8_t* cdb) {
    // Asynchronous operation (POLLED = 0) is not supported: INVALID FIELD IN CDB.
    if (!(cdb[1] & 0x01)) return std::nullopt;
    return GetEventStatusNotification{cdb[4], Be16(cdb + 7)};
  }

  Execution Emulate(CommandContext& ctx) const {
    constexpr uint8_t kMediaClass = 4;
    std::array<uint8_t, 8> data{};
    data[3] = 1 << kMediaClass;  // SUPPORTED EVENT CLASSES
    size_t length = 4;
    if (class_request & (1 << kMediaClass)) {
      const MediumInfo& medium = ctx.medium();
      data[2] = kMediaClass;
      data[4] = CdOf(ctx).TakeMediaEvent(medium);
      // MEDIA STATUS: Door or Tray Open (bit 0), Media Present (bit 1). A medium in the open tray
      // is not "present" (Linux's CDROM_DRIVE_STATUS reads this as "disc OK").
      data[5] = medium.tray_open ? 0x01 : medium.present ? 0x02 : 0x00;
      length = 8;
    } else {
      data[2] = 0x80;  // NEA: none of the requested classes is supported
    }
    PutBe16(&data[0], static_cast<uint16_t>(length - 4));  // EVENT DESCRIPTOR LENGTH
    return ctx.DataIn(std::span<const uint8_t>(data.data(), length), allocation_length);
  }
};

// MMC-6 START STOP UNIT: LoEj with START = 0 ejects (opens the tray), with START = 1 loads
// (closes it), through RemovableMedia::GuestLoadEject(). An eject while the guest prevents removal
// fails with ILLEGAL REQUEST, MEDIUM REMOVAL PREVENTED (and becomes an EjectRequest event).
struct StartStopUnit {
  bool start;
  bool load_eject;
  uint8_t power_condition;

  static std::optional<StartStopUnit> Parse(const uint8_t* cdb) {
    return StartStopUnit{static_cast<bool>(cdb[4] & 0x01), static_cast<bool>(cdb[4] & 0x02),
                         static_cast<uint8_t>(cdb[4] >> 4)};
  }

  Execution Emulate(CommandContext& ctx) const {
    // A power condition other than 0 changes the power state only: load and eject are ignored.
    if (power_condition != 0 || !load_eject) return ctx.Good();
    if (!CdOf(ctx).media().GuestLoadEject(!start).ok()) {
      return ctx.Fail(sense::kMediumRemovalPrevented);
    }
    return ctx.Good();
  }
};

// SPC-4 / MMC-6 PREVENT ALLOW MEDIUM REMOVAL: PREVENT bit 0 locks the tray (bit 1,
// persistent prevention, is accepted and treated the same).
struct PreventAllowMediumRemoval {
  bool prevent;

  static std::optional<PreventAllowMediumRemoval> Parse(const uint8_t* cdb) {
    return PreventAllowMediumRemoval{static_cast<bool>(cdb[4] & 0x01)};
  }

  Execution Emulate(CommandContext& ctx) const {
    CdOf(ctx).media().SetLocked(prevent, /*by_guest=*/true);
    return ctx.Good();
  }
};

// MMC-6 MECHANISM STATUS: not a changer; the door-open bit from the tray.
struct MechanismStatus {
  uint16_t allocation_length;

  static std::optional<MechanismStatus> Parse(const uint8_t* cdb) {
    return MechanismStatus{Be16(cdb + 8)};
  }

  Execution Emulate(CommandContext& ctx) const {
    std::array<uint8_t, 8> data{};
    if (ctx.medium().tray_open) data[1] = 0x10;  // DOOR OPEN; mechanism state idle
    // CURRENT LBA (obsolete) 0, NUMBER OF SLOTS AVAILABLE 0, no slot tables.
    return ctx.DataIn(data, allocation_length);
  }
};

// MMC-6 SET CD SPEED: accepted (there is no spindle).
struct SetCdSpeed {
  static std::optional<SetCdSpeed> Parse(const uint8_t*) { return SetCdSpeed{}; }
  Execution Emulate(CommandContext& ctx) const { return ctx.Good(); }
};

// MMC-6 READ SUB-CHANNEL, minimal: no audio is playing; the current position is the start of
// track 1; no media catalogue number or ISRC.
struct ReadSubChannel {
  bool msf;
  bool subq;
  uint8_t format;
  uint8_t track;
  uint16_t allocation_length;

  static std::optional<ReadSubChannel> Parse(const uint8_t* cdb) {
    ReadSubChannel c{static_cast<bool>(cdb[1] & 0x02), static_cast<bool>(cdb[2] & 0x40), cdb[3],
                     cdb[6], Be16(cdb + 7)};
    if (c.subq && (c.format < 1 || c.format > 3)) return std::nullopt;
    return c;
  }

  Execution Emulate(CommandContext& ctx) const {
    std::array<uint8_t, 24> data{};
    data[1] = 0x15;  // AUDIO STATUS: no current audio status to return
    size_t length = 4;
    if (subq) {
      data[4] = format;
      if (format == 1) {  // CD current position
        data[5] = kAdrControlData;
        data[6] = 1;  // track
        data[7] = 1;  // index
        PutAddress(&data[8], 0, msf);
        if (msf) {
          data[13] = 0;  // relative MSF 00:00:00
        }
        length = 16;
      } else {  // 2: media catalogue number, 3: ISRC; MCVAL / TCVAL = 0
        if (format == 3) {
          data[5] = kAdrControlData;
          data[6] = track;
        }
        length = 24;
      }
    }
    PutBe16(&data[2], static_cast<uint16_t>(length - 4));
    return ctx.DataIn(std::span<const uint8_t>(data.data(), length), allocation_length);
  }
};

constexpr uint8_t kVpdPages[] = {0x00, 0x80, 0x83};
constexpr uint8_t kModePages[] = {0x01, 0x0d, 0x0e, 0x2a};

constexpr uint32_t kNoFlags = 0;

// The dispatch table. CDB usage data per SPC-4.
// clang-format off
constexpr CommandInfo kCommands[] = {
    {op::kTestUnitReady, kNoServiceAction, "TEST UNIT READY", kNeedsMedium,
     {0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, &Run<spc::TestUnitReady>},
    {op::kRequestSense, kNoServiceAction, "REQUEST SENSE", kAllowedWithUnitAttention,
     {0x03, 0x01, 0x00, 0x00, 0xff, 0x00}, &Run<spc::RequestSense>},
    {op::kInquiry, kNoServiceAction, "INQUIRY", kAllowedWithUnitAttention,
     {0x12, 0x01, 0xff, 0xff, 0xff, 0x00}, &Run<spc::Inquiry>},
    {op::kModeSelect6, kNoServiceAction, "MODE SELECT(6)", kNoFlags,
     {0x15, 0x11, 0x00, 0x00, 0xff, 0x00}, &Run<spc::ModeSelect>},
    {op::kModeSense6, kNoServiceAction, "MODE SENSE(6)", kNoFlags,
     {0x1a, 0x08, 0xff, 0xff, 0xff, 0x00}, &Run<spc::ModeSense>},
    {op::kStartStopUnit, kNoServiceAction, "START STOP UNIT", kNoFlags,
     {0x1b, 0x01, 0x00, 0x0f, 0xf3, 0x00}, &Run<StartStopUnit>},
    {op::kPreventAllowMediumRemoval, kNoServiceAction, "PREVENT ALLOW MEDIUM REMOVAL", kNoFlags,
     {0x1e, 0x00, 0x00, 0x00, 0x03, 0x00}, &Run<PreventAllowMediumRemoval>},
    {op::kReadCapacity10, kNoServiceAction, "READ CAPACITY", kNeedsMedium,
     {0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, &Run<ReadCapacity>},
    {op::kRead10, kNoServiceAction, "READ(10)", kNeedsMedium,
     {0x28, 0x18, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<Read>},
    {op::kSeek10, kNoServiceAction, "SEEK(10)", kNeedsMedium,
     {0x2b, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00}, &Run<Seek>},
    {op::kReadSubChannel, kNoServiceAction, "READ SUB-CHANNEL", kNeedsMedium,
     {0x42, 0x02, 0x40, 0xff, 0x00, 0x00, 0xff, 0xff, 0xff, 0x00}, &Run<ReadSubChannel>},
    {op::kReadTocPmaAtip, kNoServiceAction, "READ TOC/PMA/ATIP", kNeedsMedium,
     {0x43, 0x02, 0x0f, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xc0}, &Run<ReadToc>},
    {op::kGetConfiguration, kNoServiceAction, "GET CONFIGURATION", kAllowedWithUnitAttention,
     {0x46, 0x03, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<GetConfiguration>},
    {op::kGetEventStatusNotification, kNoServiceAction, "GET EVENT STATUS NOTIFICATION",
     kAllowedWithUnitAttention,
     {0x4a, 0x01, 0x00, 0x00, 0xff, 0x00, 0x00, 0xff, 0xff, 0x00},
     &Run<GetEventStatusNotification>},
    {op::kReadDiscInformation, kNoServiceAction, "READ DISC INFORMATION", kNeedsMedium,
     {0x51, 0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<ReadDiscInformation>},
    {op::kReadTrackInformation, kNoServiceAction, "READ TRACK INFORMATION", kNeedsMedium,
     {0x52, 0x07, 0xff, 0xff, 0xff, 0xff, 0x00, 0xff, 0xff, 0x00}, &Run<ReadTrackInformation>},
    {op::kModeSelect10, kNoServiceAction, "MODE SELECT(10)", kNoFlags,
     {0x55, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<spc::ModeSelect>},
    {op::kModeSense10, kNoServiceAction, "MODE SENSE(10)", kNoFlags,
     {0x5a, 0x08, 0xff, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00}, &Run<spc::ModeSense>},
    {op::kReportLuns, kNoServiceAction, "REPORT LUNS", kAllowedWithUnitAttention,
     {0xa0, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
     &Run<spc::ReportLuns>},
    {op::kMaintenanceIn, kSaReportSupportedOperationCodes, "REPORT SUPPORTED OPERATION CODES",
     kNoFlags,
     {0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00},
     &Run<spc::ReportSupportedOperationCodes>},
    {op::kRead12, kNoServiceAction, "READ(12)", kNeedsMedium,
     {0xa8, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00}, &Run<Read>},
    {op::kSetCdSpeed, kNoServiceAction, "SET CD SPEED", kNoFlags,
     {0xbb, 0x00, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, &Run<SetCdSpeed>},
    {op::kMechanismStatus, kNoServiceAction, "MECHANISM STATUS", kNoFlags,
     {0xbd, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0x00, 0x00},
     &Run<MechanismStatus>},
    {op::kReadCd, kNoServiceAction, "READ CD", kNeedsMedium,
     {0xbe, 0x1c, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf8, 0x07, 0x00}, &Run<ReadCd>},
};
// clang-format on

}  // namespace

std::span<const CommandInfo> CdRom::Commands() { return kCommands; }

absl::StatusOr<std::shared_ptr<CdRom>> CdRom::Create(std::shared_ptr<block::Drive> drive,
                                                     LogicalUnitOptions options) {
  if (drive == nullptr) return absl::InvalidArgumentError("SCSI CD/DVD without a drive");
  if (!drive->removable()) {
    return absl::InvalidArgumentError(
        absl::StrCat("SCSI CD/DVD \"", drive->name(), "\" needs a removable drive"));
  }
  if (options.product.empty()) options.product = "VIRTUAL DVD-ROM";
  auto cd = std::make_shared<CdRom>(std::move(drive), std::move(options));
  cd->media().AddListener(cd.get());
  cd->listening_ = true;
  return cd;
}

CdRom::CdRom(std::shared_ptr<block::Drive> drive, LogicalUnitOptions options)
    : LogicalUnit(kTypeCdDvd, std::move(drive), std::move(options), kCommands, false) {
  max_transfer_blocks_ = std::max<uint32_t>(1, this->options().max_transfer_bytes / kBlock);
}

CdRom::~CdRom() {
  if (listening_) media().RemoveListener(this);
}

void CdRom::OnMediaEvent(const block::MediaEvent& event) {
  switch (event.type) {
    case block::MediaEventType::kInserted:
      media_events_.fetch_or(kEventNewMedia, std::memory_order_acq_rel);
      break;
    case block::MediaEventType::kRemoved:
      media_events_.fetch_and(~static_cast<uint32_t>(kEventNewMedia), std::memory_order_acq_rel);
      media_events_.fetch_or(kEventMediaRemoval, std::memory_order_acq_rel);
      break;
    case block::MediaEventType::kEjectRequested:
      media_events_.fetch_or(kEventEjectRequest, std::memory_order_acq_rel);
      break;
    default:
      break;
  }
}

uint8_t CdRom::TakeMediaEvent(const MediumInfo& medium) {
  // In order of occurrence where it matters: a removal before a (later) insertion; an eject
  // request first. NewMedia waits for the tray to close (as QEMU's ATAPI model).
  const uint32_t events = media_events_.load(std::memory_order_acquire);
  uint32_t bit = 0;
  uint8_t code = 0;
  if (events & kEventEjectRequest) {
    bit = kEventEjectRequest;
    code = 1;
  } else if (events & kEventMediaRemoval) {
    bit = kEventMediaRemoval;
    code = 3;
  } else if ((events & kEventNewMedia) && !medium.tray_open) {
    bit = kEventNewMedia;
    code = 2;
  }
  if (bit != 0) media_events_.fetch_and(~bit, std::memory_order_acq_rel);
  return code;
}

std::span<const uint8_t> CdRom::VpdPages() const { return kVpdPages; }

size_t CdRom::BuildVpdPage(uint8_t page, const MediumInfo&, std::span<uint8_t> out) const {
  std::fill(out.begin(), out.end(), 0);
  out[0] = kTypeCdDvd;
  out[1] = page;
  if (page == 0x80) return spc::BuildUnitSerialNumberPage(serial(), out);
  if (page == 0x83) {
    // SPC-4 Device Identification: one T10 vendor ID based designator.
    const size_t designator =
        spc::PutT10VendorIdDesignator(options().vendor, serial(), out.subspan(4));
    PutBe16(&out[2], static_cast<uint16_t>(designator));
    return 4 + designator;
  }
  return 0;
}

std::span<const uint8_t> CdRom::ModePages() const { return kModePages; }

size_t CdRom::BuildModePage(uint8_t page, PageControl control, const MediumInfo& medium,
                            std::span<uint8_t> out) const {
  const bool changeable = control == PageControl::kChangeable;
  switch (page) {
    case 0x01:
      // MMC-6 Read/Write Error Recovery: READ RETRY COUNT 20h (QEMU's value).
      std::fill_n(out.begin(), 12, 0);
      out[0] = 0x01;
      out[1] = 0x0a;
      if (!changeable) out[3] = 0x20;
      return 12;
    case 0x0d:
      // CD Device Parameters (MMC-2; SFF-8020): S units per M = 60, F units per S = 75.
      std::fill_n(out.begin(), 8, 0);
      out[0] = 0x0d;
      out[1] = 0x06;
      if (!changeable) {
        PutBe16(&out[4], 60);
        PutBe16(&out[6], 75);
      }
      return 8;
    case 0x0e:
      // CD Audio Control (MMC-2): IMMED, ports 0 and 1 on channels 0 and 1 at full volume.
      std::fill_n(out.begin(), 16, 0);
      out[0] = 0x0e;
      out[1] = 0x0e;
      if (!changeable) {
        out[2] = 0x04;
        out[8] = 0x01;
        out[9] = 0xff;
        out[10] = 0x02;
        out[11] = 0xff;
      }
      return 16;
    case 0x2a:
      // MMC-3 CD/DVD Capabilities and Mechanical Status (legacy in MMC-6; Linux's sr reads it),
      // with QEMU scsi-cd's values: reads CD-R/RW and DVD-ROM/R/RAM, no writing, tray loading
      // with lock and eject, 50x maximum and 16x current read speed.
      std::fill_n(out.begin(), 22, 0);
      out[0] = 0x2a;
      out[1] = 0x14;
      if (!changeable) {
        out[2] = 0x3b;
        out[3] = 0x00;
        out[4] = 0x7f;
        out[5] = 0xff;
        out[6] = static_cast<uint8_t>(0x2d | (medium.locked ? 0x02 : 0x00));
        PutBe16(&out[8], 50 * 176);
        PutBe16(&out[10], 2);
        PutBe16(&out[12], 2048);
        PutBe16(&out[14], 16 * 176);
        PutBe16(&out[18], 16 * 176);
        PutBe16(&out[20], 16 * 176);
      }
      return 22;
    default:
      return 0;
  }
}

}  // namespace devices::scsi

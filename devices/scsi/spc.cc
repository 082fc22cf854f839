#include "devices/scsi/spc.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "devices/scsi/bytes.h"
#include "devices/scsi/lun.h"

namespace devices::scsi::spc {

void PutAscii(std::span<uint8_t> out, const std::string& text) {
  std::fill(out.begin(), out.end(), ' ');
  std::memcpy(out.data(), text.data(), std::min(out.size(), text.size()));
}

size_t BuildUnitSerialNumberPage(const std::string& serial, std::span<uint8_t> out) {
  const size_t n = std::min<size_t>(serial.size(), out.size() - 4);
  std::memcpy(&out[4], serial.data(), n);
  PutBe16(&out[2], static_cast<uint16_t>(n));
  return 4 + n;
}

size_t PutT10VendorIdDesignator(const std::string& vendor, const std::string& serial,
                                std::span<uint8_t> out) {
  const size_t id = std::min<size_t>(serial.size(), 64);
  out[0] = 0x02;  // PROTOCOL IDENTIFIER 0, CODE SET 2 (ASCII)
  out[1] = 0x01;  // PIV 0, ASSOCIATION 0 (logical unit), DESIGNATOR TYPE 1 (T10 vendor ID)
  out[2] = 0;
  out[3] = static_cast<uint8_t>(8 + id);
  PutAscii(out.subspan(4, 8), vendor);
  std::memcpy(&out[12], serial.data(), id);
  return 4 + 8 + id;
}

void BuildStandardInquiry(uint8_t byte0, bool removable, const LogicalUnitOptions& options,
                          const std::string& product,
                          std::span<uint8_t, kStandardInquirySize> out) {
  std::fill(out.begin(), out.end(), 0);
  out[0] = byte0;
  out[1] = removable ? 0x80 : 0x00;   // RMB
  out[2] = 0x06;                      // VERSION: SPC-4
  out[3] = 0x10 | 0x02;               // HISUP (hierarchical LUNs), RESPONSE DATA FORMAT 2
  out[4] = kStandardInquirySize - 5;  // ADDITIONAL LENGTH
  out[7] = 0x02;                      // CMDQUE: command queuing
  PutAscii(out.subspan(8, 8), options.vendor);
  PutAscii(out.subspan(16, 16), product);
  PutAscii(out.subspan(32, 4), options.revision);
}

bool ValidSelectReport(uint8_t select_report) { return select_report <= 0x02; }

void WriteReportLuns(std::span<const uint16_t> luns, uint8_t select_report, DataInWriter& out) {
  // SELECT REPORT 00h: the LUNs of logical units (no well-known LUNs here); 01h: well-known LUNs
  // only (none); 02h: all.
  const bool listed = select_report != 0x01;
  std::array<uint8_t, 8> header{};
  PutBe32(header.data(), listed ? static_cast<uint32_t>(luns.size() * 8) : 0);
  out.Append(header);
  if (!listed) return;
  for (uint16_t lun : luns) {
    std::array<uint8_t, 8> entry;
    PutBe64(entry.data(), EncodeLun(lun));
    out.Append(entry);
  }
}

// ---- TEST UNIT READY ----

std::optional<TestUnitReady> TestUnitReady::Parse(const uint8_t*) { return TestUnitReady{}; }

Execution TestUnitReady::Emulate(CommandContext& ctx) const { return ctx.Good(); }

// ---- REQUEST SENSE ----

std::optional<RequestSense> RequestSense::Parse(const uint8_t* cdb) {
  // DESC (byte 1 bit 0): descriptor format sense data is not supported, so INVALID FIELD IN CDB.
  if (cdb[1] & 0x01) return std::nullopt;
  return RequestSense{cdb[4]};
}

Execution RequestSense::Emulate(CommandContext& ctx) const {
  const std::array<uint8_t, kFixedSenseSize> data =
      EncodeFixedSense(ctx.lu().TakeRequestSense(ctx.medium()));
  return ctx.DataIn(data, allocation_length);
}

// ---- INQUIRY ----

std::optional<Inquiry> Inquiry::Parse(const uint8_t* cdb) {
  const bool evpd = cdb[1] & 0x01;
  // CMDDT (bit 1) is obsolete; a PAGE CODE without EVPD is invalid (SPC-4).
  if (cdb[1] & 0x02) return std::nullopt;
  if (!evpd && cdb[2] != 0) return std::nullopt;
  return Inquiry{evpd, cdb[2], Be16(cdb + 3)};
}

Execution Inquiry::Emulate(CommandContext& ctx) const {
  LogicalUnit& lu = ctx.lu();
  if (!evpd) {
    std::array<uint8_t, kStandardInquirySize> data;
    const std::string& product = lu.options().product;
    BuildStandardInquiry(lu.peripheral_type(), lu.removable_medium_bit(), lu.options(), product,
                         data);
    return ctx.DataIn(data, allocation_length);
  }
  std::array<uint8_t, 256> page{};
  size_t length = 0;
  if (page_code == 0x00) {
    // SPC-4 Supported VPD Pages.
    const std::span<const uint8_t> pages = lu.VpdPages();
    page[0] = lu.peripheral_type();
    page[1] = 0x00;
    PutBe16(&page[2], static_cast<uint16_t>(pages.size()));
    std::copy(pages.begin(), pages.end(), page.begin() + 4);
    length = 4 + pages.size();
  } else if (std::find(lu.VpdPages().begin(), lu.VpdPages().end(), page_code) !=
             lu.VpdPages().end()) {
    length = lu.BuildVpdPage(page_code, ctx.medium(), page);
  }
  if (length == 0) return ctx.Fail(sense::kInvalidFieldInCdb);
  return ctx.DataIn(std::span<const uint8_t>(page.data(), length), allocation_length);
}

// ---- MODE SENSE ----

std::optional<ModeSense> ModeSense::Parse(const uint8_t* cdb) {
  ModeSense c{};
  c.ten = cdb[0] == op::kModeSense10;
  c.dbd = cdb[1] & 0x08;
  c.llbaa = c.ten && (cdb[1] & 0x10);
  c.control = static_cast<PageControl>(cdb[2] >> 6);
  c.page = cdb[2] & 0x3f;
  c.subpage = cdb[3];
  c.allocation_length = c.ten ? Be16(cdb + 7) : cdb[4];
  // Subpages: only 00h, or FFh ("all subpages", answered with the subpage 00h pages).
  if (c.subpage != 0x00 && c.subpage != 0xff) return std::nullopt;
  return c;
}

Execution ModeSense::Emulate(CommandContext& ctx) const {
  // SPC-4 PC = 11b: saved values are not supported.
  if (control == PageControl::kSaved) return ctx.Fail(sense::kSavingParametersNotSupported);
  LogicalUnit& lu = ctx.lu();
  const MediumInfo& medium = ctx.medium();
  std::array<uint8_t, 1024> data{};
  const size_t header = ten ? 8 : 4;
  size_t length = header;

  // SBC-3 block descriptor (short LBA, or long LBA when LLBAA is set in MODE SENSE(10)).
  size_t descriptor = 0;
  if (!dbd && lu.HasBlockDescriptors()) {
    uint8_t* d = &data[length];
    if (llbaa) {
      descriptor = 16;
      if (control != PageControl::kChangeable) {
        PutBe64(d, medium.blocks);
        PutBe32(d + 12, medium.block_size);
      }
    } else {
      descriptor = 8;
      if (control != PageControl::kChangeable) {
        // NUMBER OF LOGICAL BLOCKS: FFFFFFh when the capacity does not fit.
        PutBe24(d + 1, static_cast<uint32_t>(std::min<uint64_t>(medium.blocks, 0xffffff)));
        PutBe24(d + 5, medium.block_size);
      }
    }
    length += descriptor;
  }

  auto append = [&](uint8_t code) {
    const size_t n =
        lu.BuildModePage(code, control, medium, std::span<uint8_t>(data).subspan(length, 256));
    length += n;
    return n;
  };
  if (page == 0x3f) {
    for (uint8_t code : lu.ModePages()) append(code);
  } else if (append(page) == 0) {
    return ctx.Fail(sense::kInvalidFieldInCdb);
  }

  const uint8_t device_specific = lu.ModeDeviceSpecificParameter(medium);
  if (ten) {
    PutBe16(&data[0], static_cast<uint16_t>(length - 2));  // MODE DATA LENGTH
    data[3] = device_specific;
    data[4] = descriptor == 16 ? 0x01 : 0x00;  // LONGLBA
    PutBe16(&data[6], static_cast<uint16_t>(descriptor));
  } else {
    data[0] = static_cast<uint8_t>(std::min<size_t>(length - 1, 0xff));
    data[2] = device_specific;
    data[3] = static_cast<uint8_t>(descriptor);
  }
  return ctx.DataIn(std::span<const uint8_t>(data.data(), length), allocation_length);
}

// ---- MODE SELECT ----

std::optional<ModeSelect> ModeSelect::Parse(const uint8_t* cdb) {
  ModeSelect c{};
  c.ten = cdb[0] == op::kModeSelect10;
  c.page_format = cdb[1] & 0x10;
  c.save_pages = cdb[1] & 0x01;
  c.parameter_list_length = c.ten ? Be16(cdb + 7) : cdb[4];
  // SP: no saved pages (SPC-4: INVALID FIELD IN CDB when saving is not supported).
  if (c.save_pages) return std::nullopt;
  return c;
}

Execution ModeSelect::Emulate(CommandContext& ctx) const {
  // A zero PARAMETER LIST LENGTH transfers nothing and is not an error (SPC-4).
  if (parameter_list_length == 0) return ctx.Good();
  // Only the page format of SPC-4 is implemented (PF = 0 is vendor specific).
  if (!page_format) return ctx.Fail(sense::kInvalidFieldInCdb);
  // Longer lists than any combination of this unit's pages are refused rather than buffered.
  constexpr size_t kMaxList = 1024;
  if (parameter_list_length > kMaxList) return ctx.Fail(sense::kInvalidFieldInParameterList);
  if (!ctx.DataOutCovers(parameter_list_length)) return ctx.Overrun();
  std::array<uint8_t, kMaxList> data;
  const std::span<uint8_t> list(data.data(), parameter_list_length);
  if (!ctx.ReadDataOut(list)) return ctx.Overrun();

  const size_t header = ten ? 8 : 4;
  if (list.size() < header) return ctx.Fail(sense::kParameterListLengthError);
  const bool long_lba = ten && (list[4] & 0x01);
  const size_t descriptors = ten ? Be16(&list[6]) : list[3];
  if (header + descriptors > list.size()) return ctx.Fail(sense::kParameterListLengthError);
  LogicalUnit& lu = ctx.lu();
  const MediumInfo& medium = ctx.medium();

  // Block descriptors may restate the current geometry (NUMBER OF LOGICAL BLOCKS 0 or the current
  // value, the current block length); a change is not supported.
  if (descriptors != 0) {
    const size_t size = long_lba ? 16 : 8;
    if (!lu.HasBlockDescriptors() || descriptors % size != 0) {
      return ctx.Fail(sense::kInvalidFieldInParameterList);
    }
    for (size_t at = header; at < header + descriptors; at += size) {
      const uint8_t* d = &list[at];
      const uint64_t blocks = long_lba ? Be64(d) : Be24(d + 1);
      const uint32_t block_length = long_lba ? Be32(d + 12) : Be24(d + 5);
      const uint64_t current_blocks =
          long_lba ? medium.blocks : std::min<uint64_t>(medium.blocks, 0xffffff);
      if ((!long_lba && d[0] != 0) || (blocks != 0 && blocks != current_blocks) ||
          block_length != medium.block_size) {
        return ctx.Fail(sense::kInvalidFieldInParameterList);
      }
    }
  }

  // Pages: validated all first, then applied, so a bad list changes nothing.
  for (bool apply : {false, true}) {
    size_t at = header + descriptors;
    while (at < list.size()) {
      if (list.size() - at < 2) return ctx.Fail(sense::kParameterListLengthError);
      // SPF (byte 0 bit 6): sub_page format; no subpages are changeable here.
      if (list[at] & 0x40) return ctx.Fail(sense::kInvalidFieldInParameterList);
      const size_t size = 2 + list[at + 1];
      if (size > list.size() - at) return ctx.Fail(sense::kParameterListLengthError);
      const Sense result = lu.SelectModePage(list.subspan(at, size), medium, apply);
      if (result != sense::kNoSense) return ctx.Fail(result);
      at += size;
    }
  }
  return ctx.Good();
}

// ---- REPORT LUNS ----

std::optional<ReportLuns> ReportLuns::Parse(const uint8_t* cdb) {
  if (!ValidSelectReport(cdb[2])) return std::nullopt;
  return ReportLuns{cdb[2], Be32(cdb + 6)};
}

Execution ReportLuns::Emulate(CommandContext& ctx) const {
  static constexpr uint16_t kLunZero[] = {0};
  const LunInventory* inventory = ctx.queue().inventory();
  DataInWriter out = ctx.Writer(allocation_length);
  WriteReportLuns(inventory != nullptr ? inventory->luns() : std::span<const uint16_t>(kLunZero),
                  select_report, out);
  return ctx.Finish(out);
}

// ---- REPORT SUPPORTED OPERATION CODES ----

std::optional<ReportSupportedOperationCodes> ReportSupportedOperationCodes::Parse(
    const uint8_t* cdb) {
  ReportSupportedOperationCodes c{};
  c.rctd = cdb[2] & 0x80;
  c.reporting_options = cdb[2] & 0x07;
  c.requested_opcode = cdb[3];
  c.requested_service_action = Be16(cdb + 4);
  c.allocation_length = Be32(cdb + 6);
  if (c.reporting_options > 3) return std::nullopt;
  return c;
}

Execution ReportSupportedOperationCodes::Emulate(CommandContext& ctx) const {
  LogicalUnit& lu = ctx.lu();
  // SPC-4 command timeouts descriptor: no timeouts are specified (zero).
  std::array<uint8_t, 12> timeouts{};
  PutBe16(timeouts.data(), 0x0a);
  DataInWriter out = ctx.Writer(allocation_length);

  if (reporting_options == 0) {
    // SPC-4 all_commands parameter data.
    const size_t each = rctd ? 20 : 8;
    std::array<uint8_t, 4> header{};
    PutBe32(header.data(), static_cast<uint32_t>(lu.commands().size() * each));
    out.Append(header);
    for (const CommandInfo* info : lu.commands()) {
      std::array<uint8_t, 8> d{};
      d[0] = info->opcode;
      if (info->service_action != kNoServiceAction) {
        PutBe16(&d[2], static_cast<uint16_t>(info->service_action));
        d[5] |= 0x01;  // SERVACTV
      }
      if (rctd) d[5] |= 0x02;  // CTDP
      PutBe16(&d[6], info->cdb_length());
      out.Append(d);
      if (rctd) out.Append(timeouts);
    }
    return ctx.Finish(out);
  }

  // One command (SPC-4). Option 1: by opcode, which must have no service actions; option
  // 2: by opcode and service action, which it must have; option 3: either.
  const bool has_actions = lu.HasServiceActions(requested_opcode);
  if ((reporting_options == 1 && has_actions) ||
      (reporting_options == 2 && !has_actions && lu.Find(requested_opcode, -1) != nullptr)) {
    return ctx.Fail(sense::kInvalidFieldInCdb);
  }
  const CommandInfo* info =
      lu.Find(requested_opcode, has_actions ? requested_service_action : kNoServiceAction);
  std::array<uint8_t, 4> header{};
  if (rctd) header[1] |= 0x80;                 // CTDP
  header[1] |= info != nullptr ? 0x03 : 0x01;  // SUPPORT: 011b supported, 001b not supported
  if (info != nullptr) PutBe16(&header[2], info->cdb_length());
  out.Append(header);
  if (info != nullptr) out.Append(std::span<const uint8_t>(info->usage.data(), info->cdb_length()));
  if (rctd) out.Append(timeouts);
  return ctx.Finish(out);
}

}  // namespace devices::scsi::spc

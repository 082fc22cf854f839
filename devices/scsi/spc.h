#ifndef DEVICES_SCSI_SPC_H_
#define DEVICES_SCSI_SPC_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "devices/scsi/iovec_util.h"
#include "devices/scsi/logical_unit.h"

// Commands every unit type implements (SPC-4), shared by the disk and CD/DVD dispatch tables. Each
// is a parsed-CDB struct with Parse() and Emulate(); the tables point at Run<...>.

namespace devices::scsi::spc {

// SPC-4 TEST UNIT READY. (A unit without its medium fails earlier, through kNeedsMedium.)
struct TestUnitReady {
  static std::optional<TestUnitReady> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 REQUEST SENSE.
struct RequestSense {
  uint8_t allocation_length;
  static std::optional<RequestSense> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 INQUIRY: standard data and the unit's vital product data pages.
struct Inquiry {
  bool evpd;
  uint8_t page_code;
  uint16_t allocation_length;
  static std::optional<Inquiry> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 MODE SENSE(6) and (10).
struct ModeSense {
  bool ten;
  bool dbd;
  bool llbaa;
  PageControl control;
  uint8_t page;
  uint8_t subpage;
  uint16_t allocation_length;
  static std::optional<ModeSense> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 MODE SELECT(6) and (10).
struct ModeSelect {
  bool ten;
  bool page_format;
  bool save_pages;
  uint16_t parameter_list_length;
  static std::optional<ModeSelect> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 REPORT LUNS.
struct ReportLuns {
  uint8_t select_report;
  uint32_t allocation_length;
  static std::optional<ReportLuns> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// SPC-4 REPORT SUPPORTED OPERATION CODES (MAINTENANCE IN, service action 0Ch), generated
// from the unit's dispatch table.
struct ReportSupportedOperationCodes {
  bool rctd;
  uint8_t reporting_options;
  uint8_t requested_opcode;
  uint16_t requested_service_action;
  uint32_t allocation_length;
  static std::optional<ReportSupportedOperationCodes> Parse(const uint8_t* cdb);
  Execution Emulate(CommandContext& ctx) const;
};

// ---- Building blocks, also used for LUNs the target does not have ----

// Copies `text` into `out`, space-padded or truncated (SPC-4 ASCII fields).
void PutAscii(std::span<uint8_t> out, const std::string& text);

// The body of the Unit Serial Number VPD page (SPC-4 7.8.15): the serial after the 4-byte header,
// whose PAGE LENGTH it sets (the caller sets bytes 0 and 1). Returns the page's length.
size_t BuildUnitSerialNumberPage(const std::string& serial, std::span<uint8_t> out);

// One T10 vendor ID based designator of the logical unit (SPC-4 7.8.6.4: the vendor id, then up to
// 64 bytes of serial), for the Device Identification VPD page; returns its length.
size_t PutT10VendorIdDesignator(const std::string& vendor, const std::string& serial,
                                std::span<uint8_t> out);

// The 36-byte standard INQUIRY data (SPC-4) with `byte0` as PERIPHERAL QUALIFIER and TYPE.
inline constexpr size_t kStandardInquirySize = 36;
void BuildStandardInquiry(uint8_t byte0, bool removable, const LogicalUnitOptions& options,
                          const std::string& product, std::span<uint8_t, kStandardInquirySize> out);

// REPORT LUNS parameter data for `luns` under SELECT REPORT `select_report` (validated: 0, 1 or 2;
// this target has no well-known LUNs).
void WriteReportLuns(std::span<const uint16_t> luns, uint8_t select_report, DataInWriter& out);

// Whether REPORT LUNS accepts SELECT REPORT `select_report`.
bool ValidSelectReport(uint8_t select_report);

}  // namespace devices::scsi::spc

#endif  // DEVICES_SCSI_SPC_H_

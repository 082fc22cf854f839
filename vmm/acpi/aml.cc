#include "vmm/acpi/aml.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "vmm/sys_util/byte_order.h"

namespace vmm::acpi::aml {
namespace {

// Opcodes and prefixes (ACPI 6.5 20.3 "AML Byte Stream Byte Values").
constexpr uint8_t kZeroOp = 0x00;
constexpr uint8_t kOneOp = 0x01;
constexpr uint8_t kNameOp = 0x08;
constexpr uint8_t kBytePrefix = 0x0a;
constexpr uint8_t kWordPrefix = 0x0b;
constexpr uint8_t kDWordPrefix = 0x0c;
constexpr uint8_t kStringPrefix = 0x0d;
constexpr uint8_t kQWordPrefix = 0x0e;
constexpr uint8_t kScopeOp = 0x10;
constexpr uint8_t kBufferOp = 0x11;
constexpr uint8_t kPackageOp = 0x12;
constexpr uint8_t kMethodOp = 0x14;
constexpr uint8_t kDualNamePrefix = 0x2e;
constexpr uint8_t kMultiNamePrefix = 0x2f;
constexpr uint8_t kExtOpPrefix = 0x5b;
constexpr uint8_t kDeviceOp = 0x82;          // after kExtOpPrefix
constexpr uint8_t kRootChar = 0x5c;          // '\'
constexpr uint8_t kParentPrefixChar = 0x5e;  // '^'
constexpr uint8_t kReturnOp = 0xa4;

// 6.4.2 small resource data type tags: bits 6:3 the item name, bits 2:0 the length.
constexpr uint8_t kSmallIrqTag = (0x04 << 3) | 3;
constexpr uint8_t kSmallIoTag = (0x08 << 3) | 7;
constexpr uint8_t kSmallEndTag = (0x0f << 3) | 1;
// 6.4.3 large resource data type tags: bit 7 set, bits 6:0 the item name.
constexpr uint8_t kLargeMemory32FixedTag = 0x86;
constexpr uint8_t kLargeDWordAddressTag = 0x87;
constexpr uint8_t kLargeWordAddressTag = 0x88;
constexpr uint8_t kLargeExtendedIrqTag = 0x89;
constexpr uint8_t kLargeQWordAddressTag = 0x8a;

// 6.4.3.5 Table 6.49 Resource Type.
constexpr uint8_t kMemoryRange = 0;
constexpr uint8_t kIoRange = 1;
constexpr uint8_t kBusNumberRange = 2;
// 6.4.3.5 General Flags: bit 0 consumer (1) / producer (0), bit 1 _DEC (0 = positive decode), bit 2
// _MIF (min fixed), bit 3 _MAF (max fixed).
constexpr uint8_t kProducerMinMaxFixed = (1 << 2) | (1 << 3);
// Table 6.51 I/O type-specific flags: _RNG = 3, EntireRange.
constexpr uint8_t kIoEntireRange = 3;
// Table 6.50 memory type-specific flags: bit 0 _RW (1 = read/write), bits 2:1 _MEM.
constexpr uint8_t kMemoryReadWrite = 1;

void AppendLe(Bytes& out, uint64_t value, int bytes) {
  sys_util::AppendLittleEndian(out, value, bytes);
}

void Append(Bytes& out, const Bytes& more) { out.insert(out.end(), more.begin(), more.end()); }

// Op [ExtOp] PkgLength <contents>.
Bytes WithPkgLength(std::initializer_list<uint8_t> opcode, const Bytes& contents) {
  Bytes out(opcode);
  Append(out, PkgLength(contents.size()));
  Append(out, contents);
  return out;
}

Bytes Concat(const std::vector<Bytes>& terms) {
  Bytes out;
  for (const Bytes& term : terms) Append(out, term);
  return out;
}

// One NameSeg: four characters, '_'-padded.
void AppendSegment(Bytes& out, std::string_view segment) {
  for (size_t i = 0; i < 4; ++i) out.push_back(i < segment.size() ? segment[i] : '_');
}

uint8_t MemoryFlags(resource::Cacheability cacheability) {
  return static_cast<uint8_t>(kMemoryReadWrite | (static_cast<uint8_t>(cacheability) << 1));
}

// The fields shared by Word/DWord/QWord address space descriptors (6.4.3.5.1-3): tag, length,
// resource type, general flags, type-specific flags, then granularity, minimum, maximum,
// translation offset and length, each `width` bytes.
Bytes AddressSpace(uint8_t tag, int width, uint8_t resource_type, uint8_t type_flags,
                   uint64_t minimum, uint64_t maximum) {
  Bytes out = {tag};
  AppendLe(out, 3 + 5 * width, 2);  // The length of the rest of the descriptor.
  out.push_back(resource_type);
  out.push_back(kProducerMinMaxFixed);
  out.push_back(type_flags);
  AppendLe(out, 0, width);                      // _GRA: 0 as the spec allows for fixed windows
  AppendLe(out, minimum, width);                // _MIN
  AppendLe(out, maximum, width);                // _MAX
  AppendLe(out, 0, width);                      // _TRA: no translation
  AppendLe(out, maximum - minimum + 1, width);  // _LEN
  return out;
}

// 6.4.2.1 / 6.4.3.6 interrupt flags: bit 0 of the IRQ information byte is _HE (1 = edge), bit 3 _LL
// (1 = active low); the extended descriptor has _HE in bit 1 and _LL in bit 2 with bit 0
// "consumer".
bool IsEdge(resource::Trigger trigger) { return trigger == resource::Trigger::kEdge; }
bool IsLow(resource::Polarity polarity) { return polarity == resource::Polarity::kActiveLow; }

}  // namespace

absl::StatusOr<NameString> NameString::Parse(std::string_view text) {
  NameString name;
  if (!name.Store(text)) {
    return absl::InvalidArgumentError(absl::StrFormat("\"%s\" is not an AML NameString", text));
  }
  return name;
}

Bytes PkgLength(size_t content_length) {
  // The total counts the PkgLength bytes too; pick the smallest encoding that holds it.
  constexpr size_t kMaxTotal = (1u << 28) - 1;
  content_length = std::min(content_length, kMaxTotal - 4);
  if (content_length + 1 <= 0x3f) return {static_cast<uint8_t>(content_length + 1)};
  for (size_t following = 1; following <= 3; ++following) {
    const size_t total = content_length + 1 + following;
    if (total < (size_t{1} << (4 + 8 * following))) {
      Bytes out = {static_cast<uint8_t>((following << 6) | (total & 0x0f))};
      for (size_t i = 0; i < following; ++i)
        out.push_back(static_cast<uint8_t>(total >> (4 + 8 * i)));
      return out;
    }
  }
  return {};  // Unreachable: the clamp keeps the total below 2^28.
}

Bytes EncodeName(const NameString& name) {
  std::string_view text = name.text();
  Bytes out;
  while (!text.empty() && (text.front() == '\\' || text.front() == '^')) {
    out.push_back(text.front() == '\\' ? kRootChar : kParentPrefixChar);
    text.remove_prefix(1);
  }
  if (text.empty()) {
    out.push_back(kZeroOp);  // NullName
    return out;
  }
  std::vector<std::string_view> segments;
  for (size_t dot; (dot = text.find('.')) != std::string_view::npos; text.remove_prefix(dot + 1)) {
    segments.push_back(text.substr(0, dot));
  }
  segments.push_back(text);
  if (segments.size() == 2) {
    out.push_back(kDualNamePrefix);
  } else if (segments.size() > 2) {
    // NameString's length limit keeps the count well below 256.
    out.push_back(kMultiNamePrefix);
    out.push_back(static_cast<uint8_t>(segments.size()));
  }
  for (std::string_view segment : segments) AppendSegment(out, segment);
  return out;
}

Bytes Integer(uint64_t value) {
  if (value == 0) return {kZeroOp};
  if (value == 1) return {kOneOp};
  Bytes out;
  if (value <= 0xff) {
    out.push_back(kBytePrefix);
    AppendLe(out, value, 1);
  } else if (value <= 0xffff) {
    out.push_back(kWordPrefix);
    AppendLe(out, value, 2);
  } else if (value <= 0xffffffff) {
    out.push_back(kDWordPrefix);
    AppendLe(out, value, 4);
  } else {
    out.push_back(kQWordPrefix);
    AppendLe(out, value, 8);
  }
  return out;
}

Bytes String(std::string_view value) {
  Bytes out = {kStringPrefix};
  for (char c : value) {
    // 20.2.3 AsciiChar is 0x01-0x7F; anything else would end or corrupt the string.
    out.push_back(c >= 0x01 && c <= 0x7f ? static_cast<uint8_t>(c) : '?');
  }
  out.push_back(0);
  return out;
}

Bytes Buffer(std::span<const uint8_t> bytes) {
  Bytes contents = Integer(bytes.size());
  contents.insert(contents.end(), bytes.begin(), bytes.end());
  return WithPkgLength({kBufferOp}, contents);
}

Bytes Package(const std::vector<Bytes>& elements) {
  // NumElements is one byte; the VMM's packages are tiny (_S5_), so more is a programming error.
  Bytes contents = {static_cast<uint8_t>(std::min<size_t>(elements.size(), 255))};
  for (size_t i = 0; i < elements.size() && i < 255; ++i) Append(contents, elements[i]);
  return WithPkgLength({kPackageOp}, contents);
}

absl::StatusOr<Bytes> EisaId(std::string_view id) {
  const auto is_hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); };
  bool valid = id.size() == 7;
  for (size_t i = 0; valid && i < 7; ++i) {
    valid = i < 3 ? (id[i] >= 'A' && id[i] <= 'Z') : is_hex(id[i]);
  }
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrFormat("\"%s\" is not an EISA id (AAA####)", id));
  }
  const auto hex = [](char c) -> uint32_t { return c <= '9' ? c - '0' : c - 'A' + 10; };
  // Bits 30:26, 25:21, 20:16: the letters as 1-26 ('A' = 1); then the four hex digits. The
  // resulting 32-bit value is stored most significant byte first.
  const uint32_t big_endian = (uint32_t(id[0] - 'A' + 1) << 26) |
                              (uint32_t(id[1] - 'A' + 1) << 21) |
                              (uint32_t(id[2] - 'A' + 1) << 16) | (hex(id[3]) << 12) |
                              (hex(id[4]) << 8) | (hex(id[5]) << 4) | hex(id[6]);
  const uint32_t value = ((big_endian & 0xff) << 24) | ((big_endian & 0xff00) << 8) |
                         ((big_endian >> 8) & 0xff00) | (big_endian >> 24);
  Bytes out = {kDWordPrefix};
  AppendLe(out, value, 4);
  return out;
}

Bytes Name(const NameString& name, const Bytes& object) {
  Bytes out = {kNameOp};
  Append(out, EncodeName(name));
  Append(out, object);
  return out;
}

Bytes Scope(const NameString& name, const std::vector<Bytes>& terms) {
  Bytes contents = EncodeName(name);
  Append(contents, Concat(terms));
  return WithPkgLength({kScopeOp}, contents);
}

Bytes Device(const NameString& name, const std::vector<Bytes>& terms) {
  Bytes contents = EncodeName(name);
  Append(contents, Concat(terms));
  return WithPkgLength({kExtOpPrefix, kDeviceOp}, contents);
}

Bytes Method(const NameString& name, uint8_t arg_count, bool serialized,
             const std::vector<Bytes>& terms) {
  Bytes contents = EncodeName(name);
  contents.push_back(static_cast<uint8_t>((arg_count & 0x07) | (serialized ? 0x08 : 0)));
  Append(contents, Concat(terms));
  return WithPkgLength({kMethodOp}, contents);
}

Bytes Return(const Bytes& value) {
  Bytes out = {kReturnOp};
  Append(out, value);
  return out;
}

namespace resource {

Bytes Io(uint16_t minimum, uint16_t maximum, uint8_t alignment, uint8_t length) {
  Bytes out = {kSmallIoTag, 0x01};  // Information bit 0: the device decodes 16 address bits.
  AppendLe(out, minimum, 2);
  AppendLe(out, maximum, 2);
  out.push_back(alignment);
  out.push_back(length);
  return out;
}

Bytes Memory32Fixed(uint32_t base, uint32_t length) {
  Bytes out = {kLargeMemory32FixedTag};
  AppendLe(out, 9, 2);  // The length of the rest of the descriptor.
  out.push_back(0x01);  // Information bit 0: read/write.
  AppendLe(out, base, 4);
  AppendLe(out, length, 4);
  return out;
}

Bytes Irq(uint8_t irq, Trigger trigger, Polarity polarity) {
  const uint16_t mask = static_cast<uint16_t>(1u << (irq & 0x0f));
  Bytes out = {kSmallIrqTag};
  AppendLe(out, mask, 2);
  out.push_back(static_cast<uint8_t>((IsEdge(trigger) ? 0x01 : 0) | (IsLow(polarity) ? 0x08 : 0)));
  return out;
}

Bytes Interrupt(uint32_t gsi, Trigger trigger, Polarity polarity) {
  Bytes out = {kLargeExtendedIrqTag};
  AppendLe(out, 6, 2);  // flags, table length, one 32-bit interrupt number
  out.push_back(
      static_cast<uint8_t>(0x01 | (IsEdge(trigger) ? 0x02 : 0) | (IsLow(polarity) ? 0x04 : 0)));
  out.push_back(1);
  AppendLe(out, gsi, 4);
  return out;
}

Bytes WordBusNumber(uint16_t minimum, uint16_t maximum) {
  return AddressSpace(kLargeWordAddressTag, 2, kBusNumberRange, 0, minimum, maximum);
}

Bytes WordIo(uint16_t minimum, uint16_t maximum) {
  return AddressSpace(kLargeWordAddressTag, 2, kIoRange, kIoEntireRange, minimum, maximum);
}

Bytes DWordMemory(uint32_t minimum, uint32_t maximum, Cacheability cacheability) {
  return AddressSpace(kLargeDWordAddressTag, 4, kMemoryRange, MemoryFlags(cacheability), minimum,
                      maximum);
}

Bytes QWordMemory(uint64_t minimum, uint64_t maximum, Cacheability cacheability) {
  return AddressSpace(kLargeQWordAddressTag, 8, kMemoryRange, MemoryFlags(cacheability), minimum,
                      maximum);
}

Bytes EndTag() { return {kSmallEndTag, 0x00}; }

}  // namespace resource

Bytes ResourceTemplate(const std::vector<Bytes>& descriptors) {
  Bytes contents = Concat(descriptors);
  Append(contents, resource::EndTag());
  return Buffer(contents);
}

}  // namespace vmm::acpi::aml

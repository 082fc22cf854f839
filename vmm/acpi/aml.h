#ifndef VMM_ACPI_AML_H_
#define VMM_ACPI_AML_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

// A small encoder for ACPI Machine Language (ACPI 6.5 chapter 20, "ACPI Machine Language
// Specification"): the objects a VMM's DSDT needs (names, integers, strings, buffers, packages,
// scopes, devices, methods) and the resource descriptors of ResourceTemplate()s (chapter 6.4).
//
// Every function returns the encoded bytes of one term; terms compose by nesting (a Device takes
// the encoded terms of its body). Nothing here can fail except parsing a name at run time:
// literal names are checked at compile time (NameString's consteval constructor).
namespace vmm::acpi::aml {

using Bytes = std::vector<uint8_t>;

// A NameString in its ASL spelling (20.2.2): an optional root prefix '\' or parent prefixes '^',
// then zero or more NameSegs separated by '.'. Each NameSeg is 1-4 characters, the first from
// [A-Z_], the others from [A-Z0-9_]; short segments are padded with '_' (as iasl does), so "PCI0",
// "_S5" and "\\_SB.COM1" are all valid.
class NameString {
 public:
  static constexpr size_t kMaxLength = 128;

  // Literal names: an invalid literal does not compile.
  consteval NameString(const char* literal) {  // NOLINT: implicit on purpose, for literals
    size_t length = 0;
    while (literal[length] != '\0') ++length;
    if (!Store(std::string_view(literal, length))) {
      throw "invalid AML NameString literal";  // Only reachable at compile time.
    }
  }
  // Names built at run time; InvalidArgument when `text` is not a NameString.
  static absl::StatusOr<NameString> Parse(std::string_view text);

  std::string_view text() const { return std::string_view(text_, length_); }

 private:
  constexpr NameString() = default;
  constexpr bool Store(std::string_view text) {
    if (!IsValid(text) || text.size() > kMaxLength) return false;
    for (size_t i = 0; i < text.size(); ++i) text_[i] = text[i];
    length_ = text.size();
    return true;
  }
  static constexpr bool IsLeadChar(char c) { return (c >= 'A' && c <= 'Z') || c == '_'; }
  static constexpr bool IsValid(std::string_view text) {
    size_t i = 0;
    if (i < text.size() && text[i] == '\\') {
      ++i;
    } else {
      while (i < text.size() && text[i] == '^') ++i;
    }
    if (i == text.size()) return true;  // NullName after the prefix.
    size_t segment_length = 0;
    for (; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '.') {
        if (segment_length == 0) return false;
        segment_length = 0;
        continue;
      }
      const bool ok =
          segment_length == 0 ? IsLeadChar(c) : (IsLeadChar(c) || (c >= '0' && c <= '9'));
      if (!ok || ++segment_length > 4) return false;
    }
    return segment_length != 0;
  }

  char text_[kMaxLength] = {};
  size_t length_ = 0;
};

// 20.2.4: the PkgLength encoding of a package whose contents (after the PkgLength) are
// `content_length` bytes: 1 byte up to 63 bytes in all, else 2-4 bytes with the count of following
// bytes in bits 7:6 of the first. The encoded length counts the PkgLength bytes themselves.
// Contents up to 2^28 - 5 bytes are representable; larger ones are a programming error and are
// clamped (never produced by this VMM's tables, which must fit in 128 KiB).
Bytes PkgLength(size_t content_length);

// 20.2.2 NameString encoding: prefixes, then NameSeg / DualNamePrefix / MultiNamePrefix / NullName.
Bytes EncodeName(const NameString& name);

// 20.2.3 data objects.
Bytes Integer(uint64_t value);  // ZeroOp, OneOp, or the smallest of Byte/Word/DWord/QWordConst.
Bytes String(
    std::string_view value);  // StringPrefix AsciiCharList NullChar; value must be ASCII 1-0x7f.
Bytes Buffer(std::span<const uint8_t> bytes);       // BufferOp PkgLength BufferSize ByteList
Bytes Package(const std::vector<Bytes>& elements);  // PackageOp PkgLength NumElements (<= 255)
// An EISA/PNP id such as "PNP0A03" as the 32-bit integer ASL's EisaId() produces (6.1.5 _HID):
// three letters compressed to 5 bits each, then four hex digits, stored big-endian. InvalidArgument
// for anything but [A-Z]{3}[0-9A-F]{4}.
absl::StatusOr<Bytes> EisaId(std::string_view id);

// 20.2.5 named objects and namespace modifiers.
Bytes Name(const NameString& name, const Bytes& object);  // NameOp NameString DataRefObject
Bytes Scope(const NameString& name, const std::vector<Bytes>& terms);
Bytes Device(const NameString& name, const std::vector<Bytes>& terms);
// MethodFlags: ArgCount (0-7) in bits 2:0, SerializeFlag bit 3, SyncLevel 0.
Bytes Method(const NameString& name, uint8_t arg_count, bool serialized,
             const std::vector<Bytes>& terms);
Bytes Return(const Bytes& value);  // ReturnOp ArgObject

// 6.4 resource descriptors, and ResourceTemplate(): a Buffer holding the descriptors and an End
// Tag.
namespace resource {

// 6.4.2.5 I/O Port Descriptor, 16-bit decode: IO(Decode16, min, max, alignment, length).
Bytes Io(uint16_t minimum, uint16_t maximum, uint8_t alignment, uint8_t length);

enum class Trigger { kEdge, kLevel };
enum class Polarity { kActiveHigh, kActiveLow };

// 6.4.2.1 IRQ Descriptor, 3-byte form with the information byte, exclusive, for one ISA IRQ
// (0-15): IRQ(Edge|Level, ActiveHigh|ActiveLow, Exclusive) {irq}.
Bytes Irq(uint8_t irq, Trigger trigger, Polarity polarity);
// 6.4.3.6 Extended Interrupt Descriptor, one GSI, resource consumer, exclusive:
// Interrupt(ResourceConsumer, Edge|Level, ActiveHigh|ActiveLow, Exclusive) {gsi}.
Bytes Interrupt(uint32_t gsi, Trigger trigger, Polarity polarity);

// Address space descriptors (6.4.3.5) as a bridge's windows: ResourceProducer, PosDecode, MinFixed,
// MaxFixed, granularity 0, translation 0, length = max - min + 1.
// WordBusNumber (6.4.3.5.3, resource type 2).
Bytes WordBusNumber(uint16_t minimum, uint16_t maximum);
// WordIO (6.4.3.5.3, resource type 1), EntireRange (_RNG = 3).
Bytes WordIo(uint16_t minimum, uint16_t maximum);
enum class Cacheability { kNonCacheable, kCacheable, kWriteCombining, kPrefetchable };
// DWordMemory (6.4.3.5.2, resource type 0), ReadWrite, AddressRangeMemory.
Bytes DWordMemory(uint32_t minimum, uint32_t maximum, Cacheability cacheability);
// QWordMemory (6.4.3.5.1, resource type 0), ReadWrite, AddressRangeMemory.
Bytes QWordMemory(uint64_t minimum, uint64_t maximum, Cacheability cacheability);

// 6.4.3.4 32-Bit Fixed Memory Range Descriptor, read/write: Memory32Fixed(ReadWrite, base, length).
Bytes Memory32Fixed(uint32_t base, uint32_t length);

// 6.4.2.9 End Tag, checksum 0 ("treated as if the checksum operation succeeded").
Bytes EndTag();

}  // namespace resource

// ASL ResourceTemplate(): a Buffer of the descriptors followed by an End Tag.
Bytes ResourceTemplate(const std::vector<Bytes>& descriptors);

}  // namespace vmm::acpi::aml

#endif  // VMM_ACPI_AML_H_

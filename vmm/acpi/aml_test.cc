#include "vmm/acpi/aml.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vmm::acpi::aml {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

Bytes Seq(std::initializer_list<int> bytes) {
  Bytes out;
  for (int b : bytes) out.push_back(static_cast<uint8_t>(b));
  return out;
}

Bytes Concat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& part : parts) out.insert(out.end(), part.begin(), part.end());
  return out;
}

TEST(PkgLengthTest, OneByteUpTo63InAll) {
  // 20.2.4: bits 5:0 hold the length, which includes the PkgLength byte itself.
  EXPECT_THAT(PkgLength(0), ElementsAre(0x01));
  EXPECT_THAT(PkgLength(10), ElementsAre(0x0b));
  EXPECT_THAT(PkgLength(62), ElementsAre(0x3f));
}

TEST(PkgLengthTest, TwoThreeAndFourBytes) {
  // 63 content bytes + 2 = 65 = 0x41: lead byte 0b01 << 6 | low nibble 1, then 0x41 >> 4 = 0x04.
  EXPECT_THAT(PkgLength(63), ElementsAre(0x41, 0x04));
  // The largest 2-byte length: 0xfff in all.
  EXPECT_THAT(PkgLength(0xfff - 2), ElementsAre(0x4f, 0xff));
  // One more needs three bytes: 0xffe + 3 = 0x1001.
  EXPECT_THAT(PkgLength(0xffe), ElementsAre(0x81, 0x00, 0x01));
  EXPECT_THAT(PkgLength(0xfffff - 3), ElementsAre(0x8f, 0xff, 0xff));
  // 0xffffd + 4 = 0x100001: four bytes.
  EXPECT_THAT(PkgLength(0xffffd), ElementsAre(0xc1, 0x00, 0x00, 0x01));
}

TEST(NameTest, SegmentsArePaddedWithUnderscores) {
  EXPECT_THAT(EncodeName("_HID"), ElementsAre('_', 'H', 'I', 'D'));
  EXPECT_THAT(EncodeName("_S5"), ElementsAre('_', 'S', '5', '_'));
  EXPECT_THAT(EncodeName("A"), ElementsAre('A', '_', '_', '_'));
}

TEST(NameTest, PrefixesAndMultiSegmentPaths) {
  EXPECT_THAT(EncodeName("\\_SB"), ElementsAre(0x5c, '_', 'S', 'B', '_'));
  EXPECT_THAT(EncodeName("\\_SB.PCI0"),
              ElementsAre(0x5c, 0x2e, '_', 'S', 'B', '_', 'P', 'C', 'I', '0'));
  EXPECT_THAT(EncodeName("^^COM1"), ElementsAre(0x5e, 0x5e, 'C', 'O', 'M', '1'));
  EXPECT_THAT(EncodeName("\\_SB.PCI0.ISA"), ElementsAre(0x5c, 0x2f, 3, '_', 'S', 'B', '_', 'P', 'C',
                                                        'I', '0', 'I', 'S', 'A', '_'));
  EXPECT_THAT(EncodeName("\\"), ElementsAre(0x5c, 0x00));  // root, NullName
}

TEST(NameTest, ParseRejectsWhatIsNotANameString) {
  EXPECT_TRUE(NameString::Parse("COM1").ok());
  EXPECT_TRUE(NameString::Parse("\\_SB.RES0").ok());
  EXPECT_FALSE(NameString::Parse("1COM").ok());   // a digit cannot lead
  EXPECT_FALSE(NameString::Parse("com1").ok());   // lower case
  EXPECT_FALSE(NameString::Parse("PCI00").ok());  // 5 characters
  EXPECT_FALSE(NameString::Parse("_SB..PCI0").ok());
  EXPECT_FALSE(NameString::Parse("_SB.").ok());
  EXPECT_FALSE(NameString::Parse("^\\_SB").ok());  // root after parent prefix
  EXPECT_FALSE(NameString::Parse(std::string(200, 'A')).ok());
}

TEST(DataTest, IntegersUseTheSmallestEncoding) {
  EXPECT_THAT(Integer(0), ElementsAre(0x00));  // ZeroOp
  EXPECT_THAT(Integer(1), ElementsAre(0x01));  // OneOp
  EXPECT_THAT(Integer(5), ElementsAre(0x0a, 0x05));
  EXPECT_THAT(Integer(0xff), ElementsAre(0x0a, 0xff));
  EXPECT_THAT(Integer(0x100), ElementsAre(0x0b, 0x00, 0x01));
  EXPECT_THAT(Integer(0x12345678), ElementsAre(0x0c, 0x78, 0x56, 0x34, 0x12));
  EXPECT_THAT(Integer(0x1'0000'0000ull),
              ElementsAre(0x0e, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00));
}

TEST(DataTest, StringsAreNulTerminated) {
  EXPECT_THAT(String("ab"), ElementsAre(0x0d, 'a', 'b', 0x00));
  EXPECT_THAT(String(""), ElementsAre(0x0d, 0x00));
  // A NUL or non-ASCII byte cannot be in an AML string.
  EXPECT_THAT(String(std::string("a\0b", 3)), ElementsAre(0x0d, 'a', '?', 'b', 0x00));
}

TEST(DataTest, BufferAndPackage) {
  const uint8_t data[] = {0xaa, 0xbb};
  // BufferOp PkgLength(4) BufferSize(ByteConst 2) 0xaa 0xbb
  EXPECT_THAT(Buffer(data), ElementsAre(0x11, 0x05, 0x0a, 0x02, 0xaa, 0xbb));
  // Name(_S5_, Package() {5, 0}) as iasl compiles it.
  EXPECT_THAT(Name("_S5", Package({Integer(5), Integer(0)})),
              ElementsAre(0x08, '_', 'S', '5', '_', 0x12, 0x05, 0x02, 0x0a, 0x05, 0x00));
}

TEST(DataTest, EisaIdMatchesAslEisaId) {
  // iasl: EisaId("PNP0A03") = 0x030AD041, EisaId("PNP0501") = 0x0105D041.
  EXPECT_THAT(*EisaId("PNP0A03"), ElementsAre(0x0c, 0x41, 0xd0, 0x0a, 0x03));
  EXPECT_THAT(*EisaId("PNP0501"), ElementsAre(0x0c, 0x41, 0xd0, 0x05, 0x01));
  EXPECT_THAT(*EisaId("PNP0303"), ElementsAre(0x0c, 0x41, 0xd0, 0x03, 0x03));
  EXPECT_FALSE(EisaId("PNP0A0").ok());
  EXPECT_FALSE(EisaId("pnp0A03").ok());
  EXPECT_FALSE(EisaId("PNP0G03").ok());
}

TEST(NamespaceTest, ScopeDeviceMethod) {
  const Bytes hid = Name("_UID", Integer(1));  // 08 _UID 01 = 6 bytes
  // Device(COM1) { Name(_UID, 1) }: ExtOpPrefix DeviceOp PkgLength(1 + 4 + 6) "COM1" ...
  EXPECT_THAT(Device("COM1", {hid}),
              ElementsAreArray(Concat({Seq({0x5b, 0x82, 0x0b, 'C', 'O', 'M', '1'}), hid})));
  // Scope(\_SB) {}: ScopeOp PkgLength(1 + 5) '\' "_SB_"
  EXPECT_THAT(Scope("\\_SB", {}), ElementsAre(0x10, 0x06, 0x5c, '_', 'S', 'B', '_'));
  // Method(_STA, 0, NotSerialized) { Return(0x0F) }
  EXPECT_THAT(Method("_STA", 0, false, {Return(Integer(0x0f))}),
              ElementsAre(0x14, 0x09, '_', 'S', 'T', 'A', 0x00, 0xa4, 0x0a, 0x0f));
  EXPECT_THAT(Method("FOO", 2, true, {}), ElementsAre(0x14, 0x06, 'F', 'O', 'O', '_', 0x0a));
}

TEST(NamespaceTest, LongBodiesUseLongerPkgLengths) {
  std::vector<Bytes> terms(20, Name("_UID", Integer(0)));  // 20 * 6 = 120 bytes
  const Bytes device = Device("RES0", terms);
  // 4 name bytes + 120 = 124 content bytes, + 2 PkgLength bytes = 126 = 0x7e.
  ASSERT_GE(device.size(), 4u);
  EXPECT_THAT(Bytes(device.begin(), device.begin() + 4), ElementsAre(0x5b, 0x82, 0x4e, 0x07));
  EXPECT_EQ(device.size(), 2u + 126u);
}

TEST(ResourceTest, Memory32Fixed) {
  // Memory32Fixed(ReadWrite, 0xD0000000, 0x00000200): the bytes the machine's MMIO devices had
  // when the DSDT builder encoded the descriptor itself.
  EXPECT_THAT(resource::Memory32Fixed(0xd0000000, 0x200),
              ElementsAre(0x86, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0xd0, 0x00, 0x02, 0x00, 0x00));
}

TEST(ResourceTest, SmallDescriptors) {
  // IO(Decode16, 0x03F8, 0x03F8, 0x01, 0x08)
  EXPECT_THAT(resource::Io(0x3f8, 0x3f8, 1, 8),
              ElementsAre(0x47, 0x01, 0xf8, 0x03, 0xf8, 0x03, 0x01, 0x08));
  // IRQ(Edge, ActiveHigh, Exclusive) {4}
  EXPECT_THAT(resource::Irq(4, resource::Trigger::kEdge, resource::Polarity::kActiveHigh),
              ElementsAre(0x23, 0x10, 0x00, 0x01));
  // IRQ(Level, ActiveLow, Exclusive) {14}
  EXPECT_THAT(resource::Irq(14, resource::Trigger::kLevel, resource::Polarity::kActiveLow),
              ElementsAre(0x23, 0x00, 0x40, 0x08));
  EXPECT_THAT(resource::EndTag(), ElementsAre(0x79, 0x00));
}

TEST(ResourceTest, ExtendedInterrupt) {
  // Interrupt(ResourceConsumer, Level, ActiveLow, Exclusive) {20}
  EXPECT_THAT(resource::Interrupt(20, resource::Trigger::kLevel, resource::Polarity::kActiveLow),
              ElementsAre(0x89, 0x06, 0x00, 0x05, 0x01, 20, 0, 0, 0));
  EXPECT_THAT(resource::Interrupt(5, resource::Trigger::kEdge, resource::Polarity::kActiveHigh),
              ElementsAre(0x89, 0x06, 0x00, 0x03, 0x01, 5, 0, 0, 0));
}

TEST(ResourceTest, AddressSpaceDescriptors) {
  // WordBusNumber(ResourceProducer, MinFixed, MaxFixed, PosDecode, 0, 0, 0xff, 0, 0x100)
  EXPECT_THAT(resource::WordBusNumber(0, 0xff), ElementsAre(0x88, 0x0d, 0x00, 0x02, 0x0c, 0x00, 0,
                                                            0, 0, 0, 0xff, 0, 0, 0, 0x00, 0x01));
  // WordIO(ResourceProducer, MinFixed, MaxFixed, PosDecode, EntireRange, 0, 0x0d00, 0xffff, 0,
  // 0xf300)
  EXPECT_THAT(resource::WordIo(0x0d00, 0xffff),
              ElementsAre(0x88, 0x0d, 0x00, 0x01, 0x0c, 0x03, 0, 0, 0x00, 0x0d, 0xff, 0xff, 0, 0,
                          0x00, 0xf3));
  // DWordMemory(ResourceProducer, PosDecode, MinFixed, MaxFixed, NonCacheable, ReadWrite, 0,
  // 0xC0000000, 0xFEBFFFFF, 0, 0x3EC00000)
  EXPECT_THAT(resource::DWordMemory(0xc0000000, 0xfebfffff, resource::Cacheability::kNonCacheable),
              ElementsAre(0x87, 0x17, 0x00, 0x00, 0x0c, 0x01,  //
                          0, 0, 0, 0,                          // _GRA
                          0x00, 0x00, 0x00, 0xc0,              // _MIN
                          0xff, 0xff, 0xbf, 0xfe,              // _MAX
                          0, 0, 0, 0,                          // _TRA
                          0x00, 0x00, 0xc0, 0x3e));            // _LEN
  // QWordMemory(..., Prefetchable, ReadWrite, 0, 0x1_0000_0000, 0x1_FFFF_FFFF, 0, 0x1_0000_0000)
  const Bytes qword =
      resource::QWordMemory(0x100000000, 0x1ffffffff, resource::Cacheability::kPrefetchable);
  ASSERT_EQ(qword.size(), 46u);
  EXPECT_THAT(Bytes(qword.begin(), qword.begin() + 6),
              ElementsAre(0x8a, 0x2b, 0x00, 0x00, 0x0c, 0x07));
  EXPECT_THAT(Bytes(qword.begin() + 14, qword.begin() + 22), ElementsAre(0, 0, 0, 0, 1, 0, 0, 0));
  EXPECT_THAT(Bytes(qword.begin() + 38, qword.end()), ElementsAre(0, 0, 0, 0, 1, 0, 0, 0));
}

TEST(ResourceTest, TemplateEndsWithEndTag) {
  // ResourceTemplate() { IO(Decode16, 0x60, 0x60, 1, 1) }: Buffer of 8 + 2 bytes.
  EXPECT_THAT(ResourceTemplate({resource::Io(0x60, 0x60, 1, 1)}),
              ElementsAre(0x11, 0x0d, 0x0a, 0x0a, 0x47, 0x01, 0x60, 0x00, 0x60, 0x00, 0x01, 0x01,
                          0x79, 0x00));
}

}  // namespace
}  // namespace vmm::acpi::aml

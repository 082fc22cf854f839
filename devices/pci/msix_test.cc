#include "devices/pci/msix.h"

#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "devices/pci/pci_regs.h"
#include "devices/pci/testing/fake_msi.h"
#include "gtest/gtest.h"

namespace devices::pci {
namespace {

using testing::FakeMsiController;
using testing::FakeMsiVector;

class MsixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto msix = MsixCapability::Create(controller_, 4);
    ASSERT_TRUE(msix.ok()) << msix.status();
    msix_ = *std::move(msix);
  }

  void WriteDword(uint64_t offset, uint32_t value) {
    std::array<uint8_t, 4> bytes;
    for (int i = 0; i < 4; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    msix_->WriteTable(offset, bytes);
  }
  uint32_t ReadDword(uint64_t offset) {
    std::array<uint8_t, 4> bytes{};
    msix_->ReadTable(offset, bytes);
    return bytes[0] | bytes[1] << 8 | bytes[2] << 16 | static_cast<uint32_t>(bytes[3]) << 24;
  }
  uint64_t ReadPbaQword(uint64_t offset) {
    std::array<uint8_t, 8> bytes{};
    msix_->ReadPba(offset, bytes);
    uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value |= uint64_t{bytes[i]} << (8 * i);
    return value;
  }
  // Programs entry `vector` as Linux does: address and data while masked.
  void Program(uint32_t vector, uint64_t address, uint32_t data) {
    const uint64_t base = vector * kMsixEntrySize;
    WriteDword(base + kMsixEntryAddressLow, static_cast<uint32_t>(address));
    WriteDword(base + kMsixEntryAddressHigh, static_cast<uint32_t>(address >> 32));
    WriteDword(base + kMsixEntryData, data);
  }
  void SetMask(uint32_t vector, bool masked) {
    WriteDword(vector * kMsixEntrySize + kMsixEntryVectorControl, masked ? 1 : 0);
  }
  FakeMsiVector& fake(uint32_t vector) { return *controller_.vector(vector); }

  FakeMsiController controller_;
  std::unique_ptr<MsixCapability> msix_;
};

TEST_F(MsixTest, AllocatesOneVectorPerEntryAndStartsMasked) {
  EXPECT_EQ(controller_.allocated(), 4u);
  EXPECT_EQ(msix_->table_bytes(), 64u);
  EXPECT_EQ(msix_->pba_bytes(), 8u);
  for (uint32_t v = 0; v < 4; ++v) {
    EXPECT_EQ(ReadDword(v * 16 + kMsixEntryVectorControl), 1u);
    EXPECT_TRUE(msix_->entry(v).masked);
  }
  EXPECT_FALSE(msix_->enabled());
}

TEST_F(MsixTest, CreateRejectsBadSizesAndAllocationFailures) {
  FakeMsiController controller;
  EXPECT_FALSE(MsixCapability::Create(controller, 0).ok());
  EXPECT_FALSE(MsixCapability::Create(controller, 2049).ok());
  controller.FailAfter(2);
  EXPECT_EQ(MsixCapability::Create(controller, 3).status().code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(MsixTest, ProgrammingHandsTheMessageToTheVectorOnUnmask) {
  msix_->SetControl(/*enable=*/true, /*function_mask=*/false);
  Program(1, 0xfee01000, 0x4041);
  EXPECT_EQ(ReadDword(16 + kMsixEntryAddressLow), 0xfee01000u);
  EXPECT_EQ(ReadDword(16 + kMsixEntryData), 0x4041u);
  // Masked: no routing update yet.
  EXPECT_TRUE(fake(1).messages().empty());
  SetMask(1, false);
  ASSERT_EQ(fake(1).messages().size(), 1u);
  EXPECT_EQ(fake(1).messages()[0], (FakeMsiVector::Message{0xfee01000, 0x4041}));
  // Reprogramming a live vector follows immediately.
  WriteDword(16 + kMsixEntryData, 0x4042);
  ASSERT_EQ(fake(1).messages().size(), 2u);
  EXPECT_EQ(fake(1).messages()[1], (FakeMsiVector::Message{0xfee01000, 0x4042}));
  // Re-masking and unmasking without changes does not reprogram.
  SetMask(1, true);
  SetMask(1, false);
  EXPECT_EQ(fake(1).messages().size(), 2u);
  msix_->Trigger(1);
  EXPECT_EQ(fake(1).triggers(), 1);
  EXPECT_EQ(fake(0).triggers(), 0);
}

TEST_F(MsixTest, QwordAccesses) {
  std::array<uint8_t, 8> address = {0x00, 0x20, 0xe0, 0xfe, 0x01, 0x00, 0x00, 0x00};
  msix_->WriteTable(2 * 16, address);
  std::array<uint8_t, 8> data_and_control = {0x31, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
  msix_->SetControl(true, false);
  msix_->WriteTable(2 * 16 + 8, data_and_control);  // data 0x31, unmasked in one write
  EXPECT_EQ(msix_->entry(2).address, 0x1fee02000ull);
  EXPECT_EQ(msix_->entry(2).data, 0x31u);
  EXPECT_FALSE(msix_->entry(2).masked);
  ASSERT_EQ(fake(2).messages().size(), 1u);
  EXPECT_EQ(fake(2).messages()[0], (FakeMsiVector::Message{0x1fee02000ull, 0x31}));
  std::array<uint8_t, 8> back{};
  msix_->ReadTable(2 * 16, back);
  EXPECT_EQ(back, address);
}

TEST_F(MsixTest, MaskedVectorIsPendingAndDeliveredOnUnmask) {
  msix_->SetControl(true, false);
  Program(0, 0xfee00000, 0x30);
  msix_->Trigger(0);
  msix_->Trigger(0);
  EXPECT_EQ(fake(0).triggers(), 0);
  EXPECT_TRUE(msix_->pending(0));
  EXPECT_EQ(ReadPbaQword(0), 0x1u);
  SetMask(0, false);
  EXPECT_EQ(fake(0).triggers(), 1);  // one message for the pending bit
  EXPECT_FALSE(msix_->pending(0));
  EXPECT_EQ(ReadPbaQword(0), 0u);
  msix_->Trigger(0);
  EXPECT_EQ(fake(0).triggers(), 2);
}

TEST_F(MsixTest, FunctionMaskHoldsEveryVector) {
  msix_->SetControl(true, false);
  for (uint32_t v = 0; v < 4; ++v) {
    Program(v, 0xfee00000, 0x30 + v);
    SetMask(v, false);
  }
  msix_->SetControl(true, /*function_mask=*/true);
  EXPECT_TRUE(msix_->function_masked());
  msix_->Trigger(1);
  msix_->Trigger(3);
  EXPECT_EQ(fake(1).triggers(), 0);
  EXPECT_EQ(ReadPbaQword(0), 0b1010u);
  // Unmasking the function delivers both, but not a vector that is individually masked.
  SetMask(3, true);
  msix_->SetControl(true, false);
  EXPECT_EQ(fake(1).triggers(), 1);
  EXPECT_EQ(fake(3).triggers(), 0);
  EXPECT_EQ(ReadPbaQword(0), 0b1000u);
  SetMask(3, false);
  EXPECT_EQ(fake(3).triggers(), 1);
}

TEST_F(MsixTest, DisabledRecordsPendingUntilEnabled) {
  Program(2, 0xfee00000, 0x41);
  SetMask(2, false);  // unmasked while MSI-X is still disabled: no routing yet
  EXPECT_TRUE(fake(2).messages().empty());
  msix_->Trigger(2);
  EXPECT_EQ(fake(2).triggers(), 0);
  EXPECT_TRUE(msix_->pending(2));
  msix_->SetControl(true, false);
  ASSERT_EQ(fake(2).messages().size(), 1u);  // message programmed before delivery
  EXPECT_EQ(fake(2).triggers(), 1);
  EXPECT_FALSE(msix_->pending(2));
  msix_->SetControl(false, false);
  EXPECT_FALSE(msix_->enabled());
  msix_->Trigger(2);
  EXPECT_EQ(fake(2).triggers(), 1);
}

TEST_F(MsixTest, HostileAccessesAreIgnored) {
  msix_->SetControl(true, false);
  Program(0, 0xfee00000, 0x30);
  // Byte and word writes, misaligned dwords: dropped.
  std::array<uint8_t, 1> byte = {0x00};
  msix_->WriteTable(kMsixEntryVectorControl, byte);
  std::array<uint8_t, 2> word = {0x00, 0x00};
  msix_->WriteTable(kMsixEntryVectorControl, word);
  std::array<uint8_t, 4> dword = {0, 0, 0, 0};
  msix_->WriteTable(kMsixEntryVectorControl + 1, dword);
  std::array<uint8_t, 8> qword{};
  msix_->WriteTable(4, qword);  // 8 bytes, 4-aligned
  EXPECT_TRUE(msix_->entry(0).masked);
  EXPECT_EQ(msix_->entry(0).address, 0xfee00000u);
  // Reads of odd sizes return zero.
  std::array<uint8_t, 2> read_word = {0xaa, 0xaa};
  msix_->ReadTable(0, read_word);
  EXPECT_EQ(read_word, (std::array<uint8_t, 2>{0, 0}));
  // Beyond the table: nothing happens, reads zero.
  WriteDword(4 * 16, 0x12345678);
  WriteDword(UINT64_MAX - 3, 0x12345678);
  EXPECT_EQ(ReadDword(4 * 16), 0u);
  EXPECT_EQ(ReadDword(UINT64_MAX - 3), 0u);
  // The low two address bits and the reserved control bits are hardwired to zero.
  WriteDword(kMsixEntryAddressLow, 0xfee00003);
  EXPECT_EQ(ReadDword(kMsixEntryAddressLow), 0xfee00000u);
  WriteDword(kMsixEntryVectorControl, 0xfffffffe);
  EXPECT_EQ(ReadDword(kMsixEntryVectorControl), 0u);
  // PBA writes are ignored; PBA reads beyond its end are zero.
  msix_->Trigger(1);
  std::array<uint8_t, 8> ones;
  ones.fill(0xff);
  msix_->ReadPba(8, ones);
  EXPECT_EQ(ones, (std::array<uint8_t, 8>{}));
  EXPECT_EQ(ReadPbaQword(0), 0b10u);
  // Out-of-range triggers are ignored.
  msix_->Trigger(4);
  msix_->Trigger(UINT32_MAX);
}

// Triggers racing with mask/unmask never lose an interrupt: once everything is unmasked and quiet,
// every Trigger() call has been delivered or folded into a delivered pending bit.
TEST_F(MsixTest, ConcurrentTriggerAndMaskLoseNothing) {
  msix_->SetControl(true, false);
  Program(0, 0xfee00000, 0x30);
  std::atomic<bool> stop{false};
  std::atomic<int> calls{0};
  std::thread trigger([&] {
    while (!stop.load()) {
      msix_->Trigger(0);
      ++calls;
    }
  });
  // At least 20000 mask flips, and go on until the trigger thread has really raced them (on a
  // loaded machine it may not even have started when the flips are done).
  for (int i = 0; i < 20000 || calls.load() < 20000; ++i) {
    SetMask(0, (i & 1) == 0);
    if (i % 1000 == 0) msix_->SetControl(true, (i & 2000) == 0);
  }
  stop.store(true);
  trigger.join();
  msix_->SetControl(true, false);
  SetMask(0, false);
  EXPECT_FALSE(msix_->pending(0));
  const int before = fake(0).triggers();
  EXPECT_GT(before, 0);
  msix_->Trigger(0);
  EXPECT_EQ(fake(0).triggers(), before + 1);
}

}  // namespace
}  // namespace devices::pci

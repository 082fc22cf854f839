#include "devices/ide/bus_master.h"

#include "devices/ide/ata.h"
#include "gtest/gtest.h"

namespace devices::ide {
namespace {

TEST(BusMasterTest, StartSetsActiveAndStopClearsIt) {
  BusMasterRegisters r;
  EXPECT_TRUE(r.Write(bm::kCommand, bm::kCmdStart | bm::kCmdWriteMemory).started);
  EXPECT_TRUE(r.started());
  EXPECT_TRUE(r.writes_memory());
  EXPECT_EQ(r.Read(bm::kStatus) & bm::kStatActive, bm::kStatActive);
  EXPECT_FALSE(r.Write(bm::kCommand, bm::kCmdStart | bm::kCmdWriteMemory).started);
  EXPECT_TRUE(r.Write(bm::kCommand, 0).stopped);
  EXPECT_EQ(r.Read(bm::kStatus) & bm::kStatActive, 0);
}

TEST(BusMasterTest, DirectionIsFixedWhileRunning) {
  BusMasterRegisters r;
  r.Write(bm::kCommand, bm::kCmdStart);
  r.Write(bm::kCommand, bm::kCmdStart | bm::kCmdWriteMemory);
  EXPECT_FALSE(r.writes_memory());
  r.Write(bm::kCommand, bm::kCmdWriteMemory);  // stop and change at once: allowed
  EXPECT_TRUE(r.writes_memory());
  EXPECT_EQ(r.Read(bm::kCommand), bm::kCmdWriteMemory);
  r.Write(bm::kCommand, 0xff);  // reserved bits read 0
  EXPECT_EQ(r.Read(bm::kCommand), bm::kCmdMask);
}

TEST(BusMasterTest, StatusBits) {
  BusMasterRegisters r;
  r.SetInterrupt();
  r.SetError();
  r.SetDriveDmaCapable(0, true);
  EXPECT_EQ(r.Read(bm::kStatus), bm::kStatInterrupt | bm::kStatError | bm::kStatDrive0Dma);
  // Write 1 to clear Interrupt only; Active is read-only; drive bits are plain read/write.
  r.Write(bm::kStatus, bm::kStatInterrupt | bm::kStatActive | bm::kStatDrive1Dma);
  EXPECT_EQ(r.Read(bm::kStatus), bm::kStatError | bm::kStatDrive1Dma);
  r.Write(bm::kStatus, bm::kStatError | bm::kStatSimplex);
  EXPECT_EQ(r.Read(bm::kStatus), 0);  // simplex stays 0
}

TEST(BusMasterTest, PrdPointerIsDwordAligned) {
  BusMasterRegisters r;
  for (int i = 0; i < 4; ++i) r.Write(bm::kPrdTable + i, static_cast<uint8_t>(0x13 + i));
  EXPECT_EQ(r.prd_table(), 0x16151410u);
  EXPECT_EQ(r.Read(bm::kPrdTable), 0x10);
  EXPECT_EQ(r.Read(1), 0);
  EXPECT_EQ(r.Read(3), 0);
}

}  // namespace
}  // namespace devices::ide

// Boots the test guest in microvm with disks and CD-ROMs on the PIIX3 IDE controller and runs the
// guest's ide-* tests against it (docs/test-guest.md, "IDE"): probing both channels and units by
// signature, every sector of an ISO by DMA and by PIO, WRITE DMA FUA EXT and LBA48 on the disk,
// error and malformed-PRD cases, a media change (NOT READY, UNIT ATTENTION, new data), and the CD
// behind a simulated host drive whose status probe is slow: its probe count must not move while
// the guest reads. After every run the VMM must have exited by itself with the guest's status.
#include <unistd.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"
#include "tests/integration/test_util.h"
#include "tests/support/skip.h"

namespace tests {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kMicrovm[] = "vmm/microvm";
// The test build of the launcher: it alone has the simulated slow host drive (probe-delay-us).
constexpr char kMicrovmTesting[] = "vmm/microvm_testing";
constexpr char kGuest[] = "tests/guest/test_guest";
constexpr char kPatternTool[] = "tools/make-pattern-image";

class IdeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string python;
    if (std::string why = GuestSkipReason(&python); !why.empty()) MICROVM_SKIP(why);
  }

  // A fresh pattern image (tests write to disks, so every test makes its own).
  std::string Image(const std::string& name, int seed, const std::string& size) {
    const std::string path = TempPath(name);
    ProcessResult made = RunProcess(
        {FindPython(), kPatternTool, "--seed", std::to_string(seed), "--size", size, path});
    EXPECT_EQ(made.exit_status, 0) << made.err;
    return path;
  }

  ProcessResult Boot(const std::string& cmdline, std::vector<std::string> flags,
                     const char* launcher = kMicrovm) {
    std::vector<std::string> argv = {launcher, std::string("--kernel=") + kGuest,
                                     "--cmdline=" + cmdline, "--memory=128M"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    ProcessOptions options;
    options.timeout = absl::Seconds(120);
    ProcessResult result = RunProcess(argv, options);
    EXPECT_FALSE(result.timed_out) << cmdline << "\n" << result.out;
    EXPECT_TRUE(result.exited) << "killed by signal " << result.term_signal << "\n" << result.err;
    EXPECT_THAT(result.err, Not(HasSubstr("fatal")));
    return result;
  }

  void ExpectPass(const ProcessResult& result, const std::string& test) {
    EXPECT_EQ(result.exit_status, 0) << result.out << result.err;
    EXPECT_THAT(result.out, HasSubstr("TEST " + test + ": PASS")) << result.out;
  }
};

TEST_F(IdeTest, ProbesBothChannelsBySignature) {
  const std::string disk = Image("probe-disk.img", 5, "16M");
  const std::string cd = Image("probe-cd.iso", 9, "4M");
  ProcessResult result =
      Boot("test=ide-probe disk=0:0 cd=1:0", {"--ide-disk=" + disk, "--ide-cdrom=" + cd});
  ExpectPass(result, "ide-probe");
  EXPECT_THAT(result.out, HasSubstr("0:0 ATA"));
  EXPECT_THAT(result.out, HasSubstr("1:0 ATAPI"));
  EXPECT_THAT(result.out, HasSubstr("FUA yes"));
  // The CD as the primary slave, the secondary channel empty.
  ProcessResult slave = Boot("test=ide-probe disk=0:0 cd=0:1",
                             {"--ide-disk=" + disk, "--ide-cdrom=" + cd + ",channel=0,unit=1"});
  ExpectPass(slave, "ide-probe");
}

TEST_F(IdeTest, ReadsEveryCdSectorByDmaAndPio) {
  const std::string cd = Image("read-cd.iso", 9, "4M");
  ProcessResult result =
      Boot("test=ide-cd seed=9 mode=both pio_bcl=0xfffe,1000", {"--ide-cdrom=" + cd});
  ExpectPass(result, "ide-cd");
}

TEST_F(IdeTest, FuaWritesAndLba48OnTheDisk) {
  const std::string disk = Image("rw-disk.img", 5, "64M");
  // Sparse to beyond 2^32 sectors, so LBA48 addresses are exercised.
  ASSERT_EQ(truncate(disk.c_str(), (2ll << 40) + (64ll << 20)), 0);
  ProcessResult result =
      Boot("test=ide-disk seed=5 fua=1 need48=1 pattern_blocks=131072", {"--ide-disk=" + disk});
  ExpectPass(result, "ide-disk");
}

TEST_F(IdeTest, ErrorsAndMalformedPrdTablesLeaveTheControllerWorking) {
  const std::string disk = Image("err-disk.img", 5, "64M");
  const std::string cd = Image("err-cd.iso", 9, "8M");
  ProcessResult result =
      Boot("test=ide-errors seed=5 cd_seed=9", {"--ide-disk=" + disk, "--ide-cdrom=" + cd});
  ExpectPass(result, "ide-errors");
  EXPECT_THAT(result.out, HasSubstr("0 unexpected answer(s)"));
}

TEST_F(IdeTest, StringIoFromRing3) {
  const std::string disk = Image("strio-disk.img", 5, "64M");  // scratch LBA 60000
  ProcessResult result = Boot("test=ide-strio", {"--ide-disk=" + disk});
  ExpectPass(result, "ide-strio");
}

TEST_F(IdeTest, SlowHostDriveIsNeverProbedWhileTheGuestReads) {
  const std::string cd = Image("slow.iso", 9, "8M");
  ProcessResult result =
      Boot("test=ide-cd seed=9 mode=dma",
           {"--ide-cdrom=" + cd + ",probe-delay-us=1000", "--boot-report"}, kMicrovmTesting);
  ExpectPass(result, "ide-cd");
  // HostCdrom::Refresh() at start-up asks status and capacity once; 4096 sectors of reads add none.
  EXPECT_THAT(result.err, HasSubstr("cd0: simulated host drive probed 2 time(s)"));
}

}  // namespace
}  // namespace tests

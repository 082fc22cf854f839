// Boots the test guest (tests/guest) in the microvm binary with a virtio-scsi disk and CD-ROM made
// by tools/make-pattern-image, and runs the guest's scsi-* tests against our device
// (docs/test-guest.md, "virtio-scsi"): probing with the cache mode's WCE, FUA writes checked in the
// image file on the host afterwards, every sector of an ISO, two queues on two iothreads and two
// vCPUs, MSI-X completion, error senses, and
// every scsi-hostile case (a guest that breaks the rules on purpose). After every run the VMM must
// have exited by itself with the guest's status: no crash, no signal, no fatal error.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
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
constexpr char kGuest[] = "tests/guest/test_guest";
constexpr char kPatternTool[] = "tools/make-pattern-image";

// The images (the same seeds and sizes as //tests/guest:qemu_scsi_test uses for QEMU).
constexpr uint32_t kDiskSeed = 11;
constexpr uint64_t kDiskBytes = 64ull << 20;
constexpr uint64_t kDiskBlocks = kDiskBytes / 512;
constexpr uint32_t kCdSeed = 22;
constexpr uint64_t kCdBytes = 8ull << 20;  // 4096 sectors of 2048 bytes
constexpr uint32_t kWriteSeed = 4660;      // scsi-rw's wseed=

// The block pattern of tools/make-pattern-image (its header has the formula), recomputed here so
// the host can tell which seed a block of the image file carries.
uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string PatternBlock(uint32_t seed, uint64_t lba) {
  std::string block(512, '\0');
  std::memcpy(block.data(), "MVMPATRN", 8);
  for (int i = 0; i < 4; ++i) block[8 + i] = static_cast<char>(seed >> (8 * i));
  for (int i = 0; i < 8; ++i) block[12 + i] = static_cast<char>(lba >> (8 * i));
  uint8_t key[62 * 8];
  for (uint64_t k = 0; k < 62; ++k) {
    const uint64_t word = Mix64((uint64_t{seed} << 32) | k);
    for (int i = 0; i < 8; ++i) key[8 * k + i] = static_cast<uint8_t>(word >> (8 * i));
  }
  const uint64_t w = Mix64(lba * 0x9e3779b97f4a7c15ull + seed);
  for (int i = 0; i < 492; ++i) {
    block[20 + i] = static_cast<char>(key[i] ^ static_cast<uint8_t>(w >> (8 * (i % 8))));
  }
  return block;
}

struct Images {
  bool ready = false;
  std::string error;
  std::string python;
  std::string disk;       // pristine, seed kDiskSeed
  std::string cd;         // seed kCdSeed
  bool direct_io = true;  // whether the temporary directory takes O_DIRECT (cache=none/directsync)
};

class ScsiTest : public ::testing::Test {
 protected:
  static Images& images() {
    static Images images;
    return images;
  }

  void SetUp() override {
    Images& im = images();
    if (std::string why = GuestSkipReason(&im.python); !why.empty()) MICROVM_SKIP(why);
    if (!im.ready && im.error.empty()) MakeImages(im);
    ASSERT_TRUE(im.error.empty()) << im.error;
  }

  static void MakeImages(Images& im) {
    struct {
      std::string* path;
      const char* name;
      uint32_t seed;
      uint64_t bytes;
    } wanted[] = {
        {&im.disk, "disk.img", kDiskSeed, kDiskBytes},
        {&im.cd, "cd.iso", kCdSeed, kCdBytes},
    };
    for (auto& w : wanted) {
      *w.path = TempPath(w.name);
      ProcessResult r = RunProcess({im.python, kPatternTool, "--seed", std::to_string(w.seed),
                                    "--size", std::to_string(w.bytes), *w.path});
      if (!r.exited || r.exit_status != 0) {
        im.error = absl::StrCat("make-pattern-image for ", w.name, " failed: ", r.err);
        return;
      }
    }
    // cache=none and directsync open the file with O_DIRECT; some file systems (tmpfs before
    // Linux 6.6) refuse it.
    const int fd = open(im.disk.c_str(), O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
      im.direct_io = false;
    } else {
      close(fd);
    }
    im.ready = true;
  }

  // A private copy of the pristine disk for one run.
  static std::string FreshDisk(const std::string& name = "run.img") {
    const std::string path = TempPath(name);
    EXPECT_TRUE(CopyFile(images().disk, path)) << strerror(errno);
    return path;
  }

  // cache=none / directsync where O_DIRECT works, else the buffered mode with the same WCE.
  static std::string Cache(const std::string& mode) {
    if (images().direct_io) return mode;
    return mode == "none" ? "writeback" : mode == "directsync" ? "writethrough" : mode;
  }

  // Boots the guest with `cmdline` on a virtio-scsi controller; checks that the VMM exited by
  // itself (no timeout, no signal, no fatal error) with the guest's status `want_status` and,
  // for status 0, that the guest's test passed.
  ProcessResult Run(const std::string& cmdline, std::vector<std::string> flags, int want_status = 0,
                    absl::Duration timeout = absl::Seconds(60)) {
    std::vector<std::string> argv = {kMicrovm, std::string("--kernel=") + kGuest,
                                     "--cmdline=" + cmdline};
    // 128 MiB unless the test gives its own size (a setting may be given once).
    if (std::none_of(flags.begin(), flags.end(),
                     [](const std::string& f) { return f.starts_with("--memory="); })) {
      argv.push_back("--memory=128M");
    }
    argv.insert(argv.end(), flags.begin(), flags.end());
    ProcessOptions options;
    options.timeout = timeout;
    ProcessResult r = RunProcess(argv, options);
    std::vector<std::string> problems;
    if (r.timed_out) problems.push_back("microvm did not finish (killed after the timeout)");
    if (!r.exited || r.term_signal != 0)
      problems.push_back(absl::StrCat("killed by signal ", r.term_signal));
    if (r.exited && r.exit_status != want_status) {
      problems.push_back(absl::StrCat("exit status ", r.exit_status, ", expected ", want_status));
    }
    if (absl::StrContains(r.err, "fatal")) problems.push_back("a fatal error on stderr");
    if (absl::StrContains(r.err, "Sanitizer")) problems.push_back("a sanitizer report on stderr");
    if (want_status == 0) {
      const std::string name = cmdline.substr(5, cmdline.find(' ') - 5);  // "test=NAME ..."
      if (!absl::StrContains(r.out, "TEST " + name + ": PASS"))
        problems.push_back("no \"TEST " + name + ": PASS\"");
      if (absl::StrContains(r.out, ": FAIL")) problems.push_back("\": FAIL\" in the output");
    }
    // One failure per run with the whole output (the guest's lines say what went wrong).
    EXPECT_TRUE(problems.empty()) << absl::StrJoin(problems, "; ") << "\ncmdline: " << cmdline
                                  << "\nflags: " << absl::StrJoin(flags, " ") << "\nstdout:\n"
                                  << r.out << "\nstderr:\n"
                                  << r.err;
    return r;
  }

  // The usual controller: the disk and the CD, two request queues on two iothreads.
  std::vector<std::string> Drives(const std::string& disk, const std::string& cache = "none") {
    return {"--disk=" + disk + ",cache=" + Cache(cache), "--cdrom=" + images().cd,
            "--scsi-queues=2", "--iothreads=2"};
  }
};

TEST_F(ScsiTest, PatternMatchesTheImageTool) {
  const std::string disk = ReadFile(images().disk);
  ASSERT_EQ(disk.size(), kDiskBytes);
  for (uint64_t lba : {uint64_t{0}, uint64_t{1}, uint64_t{777}, kDiskBlocks - 1}) {
    EXPECT_EQ(disk.substr(lba * 512, 512), PatternBlock(kDiskSeed, lba)) << "block " << lba;
  }
}

TEST_F(ScsiTest, ProbeReportsWceFromTheCacheModeAndDpofua) {
  const std::string disk = FreshDisk();
  ProcessResult none = Run("test=scsi-probe wce=1 dpofua=1", Drives(disk, "none"));
  EXPECT_THAT(none.out, HasSubstr("WCE=1, DPOFUA=1"));
  EXPECT_THAT(none.out, HasSubstr("131072 x 512-byte blocks"));
  EXPECT_THAT(none.out, HasSubstr("scsi-probe: cd 0:1"));
  ProcessResult directsync = Run("test=scsi-probe wce=0 dpofua=1", Drives(disk, "directsync"));
  EXPECT_THAT(directsync.out, HasSubstr("WCE=0, DPOFUA=1"));
}

// The 7 writes of scsi-rw (tests/guest/scsi_tests.c): LBA, blocks, FUA.
struct Written {
  uint64_t lba;
  uint32_t blocks;
  bool fua;
};
const Written kRwWrites[] = {
    {1, 1, false},
    {8, 8, true},
    {100, 64, false},
    {1000, 256, true},
    {kDiskBlocks / 2 - 3, 7, true},
    {kDiskBlocks - 8, 8, true},
    {2048, 128, false},
};

TEST_F(ScsiTest, ReadWriteWithFuaReachesTheFile) {
  const std::string disk = FreshDisk();
  ProcessResult r =
      Run(absl::StrCat("test=scsi-rw seed=", kDiskSeed, " wseed=", kWriteSeed, " full=1"),
          Drives(disk, "none"));
  EXPECT_THAT(r.out, HasSubstr("full check: 131072 blocks verified"));
  EXPECT_THAT(r.out, HasSubstr("WRITE(16) FUA LBA 1000 x256 in 32 segment(s)"));

  // The guest's writes are in the file, block for block, with the write seed.
  const std::string after = ReadFile(disk);
  ASSERT_EQ(after.size(), kDiskBytes);
  unsigned fua_blocks = 0;
  for (const Written& w : kRwWrites) {
    for (uint64_t lba = w.lba; lba < w.lba + w.blocks; ++lba) {
      ASSERT_EQ(after.substr(lba * 512, 512), PatternBlock(kWriteSeed, lba))
          << "block " << lba << " of the write at LBA " << w.lba << (w.fua ? " (FUA)" : "")
          << " is not what the guest wrote";
      if (w.fua) ++fua_blocks;
    }
  }
  EXPECT_EQ(fua_blocks, 8u + 256u + 7u + 8u);

  // The rest is untouched: with the written ranges put back from the pristine image, the pattern
  // tool's --check must accept the whole file (and without that, it must not).
  ProcessResult check_dirty = RunProcess(
      {images().python, kPatternTool, "--seed", std::to_string(kDiskSeed), "--check", disk});
  EXPECT_NE(check_dirty.exit_status, 0) << "--check accepted a file the guest wrote into";
  EXPECT_THAT(check_dirty.err, HasSubstr("block 1 does not match"));
  const std::string pristine = ReadFile(images().disk);
  std::string restored = after;
  for (const Written& w : kRwWrites) {
    restored.replace(w.lba * 512, w.blocks * 512ull, pristine, w.lba * 512, w.blocks * 512ull);
  }
  const std::string restored_path = TempPath("restored.img");
  std::ofstream(restored_path, std::ios::binary) << restored;
  ProcessResult check = RunProcess({images().python, kPatternTool, "--seed",
                                    std::to_string(kDiskSeed), "--check", restored_path});
  EXPECT_EQ(check.exit_status, 0) << check.out << check.err;
  EXPECT_THAT(check.out, HasSubstr("131072 blocks match seed 11"));
}

TEST_F(ScsiTest, CdReadsEverySectorOfTheIso) {
  ProcessResult r = Run(absl::StrCat("test=scsi-cd seed=", kCdSeed), Drives(FreshDisk()));
  EXPECT_THAT(r.out, HasSubstr("read and verified 4096 sectors (8192 KiB) from LBA 0"));
  EXPECT_THAT(r.out, HasSubstr("READ CAPACITY(10): 4096 blocks of 2048 bytes"));
}

// --on-reboot=restart: the guest resets twice and boots three times in one VMM process. Each boot
// meets the disk in its power-on state (the unit attention for power on, checked by the guest)
// and reads the boot counter the previous boot wrote: the drive and its data stayed.
TEST_F(ScsiTest, OnRebootRestartBootsTheGuestAgainInThisProcess) {
  const std::string disk = FreshDisk();
  std::vector<std::string> flags = Drives(disk);
  flags.push_back("--vcpus=2");
  flags.push_back("--on-reboot=restart");
  ProcessResult r = Run("test=scsi-restart boots=3", flags);
  for (int boot = 1; boot <= 3; ++boot) {
    EXPECT_THAT(r.out, HasSubstr(absl::StrCat("scsi-restart: boot ", boot, " of 3")));
  }
  size_t restarts = 0;
  for (size_t at = r.err.find("restarting the guest"); at != std::string::npos;
       at = r.err.find("restarting the guest", at + 1)) {
    ++restarts;
  }
  EXPECT_EQ(restarts, 2u) << r.err;
  EXPECT_THAT(r.err, HasSubstr("guest reset (i8042), restarting the guest (--on-reboot=restart)"));
  // The last boot's count reached the file.
  const std::string after = ReadFile(disk);
  ASSERT_EQ(after.size(), kDiskBytes);
  EXPECT_EQ(after.substr((kDiskBlocks - 1) * 512, 16), std::string("microvm-restart\0", 16));
  EXPECT_EQ(static_cast<uint8_t>(after[(kDiskBlocks - 1) * 512 + 16]), 3);
}

// The default, --on-reboot=exit: the guest's reset ends the VMM with status 0.
TEST_F(ScsiTest, OnRebootExitEndsTheVmmAtTheReset) {
  const std::string disk = FreshDisk();
  std::vector<std::string> argv = {kMicrovm, std::string("--kernel=") + kGuest,
                                   "--cmdline=test=scsi-restart boots=2", "--memory=128M"};
  for (const std::string& flag : Drives(disk)) argv.push_back(flag);
  ProcessOptions options;
  options.timeout = absl::Seconds(60);
  ProcessResult r = RunProcess(argv, options);
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.exit_status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("scsi-restart: boot 1 of 2"));
  EXPECT_THAT(r.out, HasSubstr("scsi-restart: resetting through the i8042"));
  EXPECT_THAT(r.out, Not(HasSubstr("boot 2 of 2")));
  EXPECT_THAT(r.err, HasSubstr("guest reset (i8042), VM stopped"));
}

TEST_F(ScsiTest, TwoQueuesOnTwoIothreadsAndTwoVcpus) {
  const std::string disk = FreshDisk();
  std::vector<std::string> flags = Drives(disk);
  flags.push_back("--vcpus=2");
  ProcessResult polled = Run("test=scsi-queues cpus=2", flags);
  EXPECT_THAT(polled.out, HasSubstr("one CPU per queue, polled"));
  EXPECT_THAT(polled.out, HasSubstr("queue 3: 1000 writes + 1000 reads verified"));
  ProcessResult irq = Run("test=scsi-queues cpus=2 irq=1 count=300", flags);
  EXPECT_THAT(irq.out, HasSubstr("one CPU per queue, interrupt-driven"));
}

// The VMM's peak RSS (VmHWM) as its --boot-report gives it at exit, in KiB; 0 when absent.
uint64_t PeakRssKib(const std::string& err) {
  const size_t at = err.find("peak RSS ");
  uint64_t kib = 0;
  if (at == std::string::npos) return 0;
  const size_t end = err.find(' ', at + 9);
  return absl::SimpleAtoi(err.substr(at + 9, end - at - 9), &kib) ? kib : 0;
}

// H6 of docs/security.md: a 32 MiB guest that writes 8 MiB at a time from a misaligned
// buffer, 4 such writes in flight on each of 4 request queues (128 MiB that a cache=none disk must
// bounce), with the queues on one iothread and on four. The acceptance: the VMM's peak RSS stays
// under the bounce budget (16 MiB, block/raw/raw_file_backend.cc) times the queues plus the
// guest's memory. Measured closer: each iothread has one engine queue per drive, and so one bounce
// arena, so the misaligned run may exceed the same writes from a page-aligned buffer (which bounce
// nothing) by the budget times the iothreads, plus 1 MiB for the bookkeeping of bounced requests.
// (Unbounded, or from the heap, it would hold at least the 128 MiB.)
TEST_F(ScsiTest, MisalignedWritesOnEveryQueueStayWithinTheBounceBudget) {
  ASSERT_TRUE(images().direct_io)
      << "the temporary directory refuses O_DIRECT: nothing would bounce";
  constexpr uint64_t kQueues = 4;
  constexpr uint64_t kGuestKib = 32 << 10;
  constexpr uint64_t kBounceBudgetKib = 16 << 10;
  constexpr uint64_t kBookkeepingKib = 1 << 10;
  for (const uint64_t iothreads : {1, 4}) {
    SCOPED_TRACE(absl::StrCat(iothreads, " iothread(s)"));
    const std::string disk = FreshDisk();
    const std::vector<std::string> flags = {
        "--memory=32M", "--disk=" + disk + ",cache=none", absl::StrCat("--scsi-queues=", kQueues),
        absl::StrCat("--iothreads=", iothreads), "--boot-report"};
    ProcessResult aligned =
        Run("test=scsi-big-writes misaligned=0 per_queue=4", flags, 0, absl::Seconds(300));
    ProcessResult misaligned =
        Run("test=scsi-big-writes misaligned=1 per_queue=4", flags, 0, absl::Seconds(300));
    EXPECT_THAT(misaligned.out,
                HasSubstr("16 WRITE(10) of 8 MiB from a misaligned (page + 1) buffer"));
    EXPECT_THAT(misaligned.out, HasSubstr("16 writes GOOD"));
    const uint64_t aligned_kib = PeakRssKib(aligned.err),
                   misaligned_kib = PeakRssKib(misaligned.err);
    ASSERT_GT(aligned_kib, 0u) << aligned.err;
    ASSERT_GT(misaligned_kib, 0u) << misaligned.err;
    RecordProperty(absl::StrCat("peak_rss_kib_aligned_", iothreads, "_iothreads"),
                   std::to_string(aligned_kib));
    RecordProperty(absl::StrCat("peak_rss_kib_misaligned_", iothreads, "_iothreads"),
                   std::to_string(misaligned_kib));
    std::printf("%lu iothread(s): peak RSS %lu KiB page-aligned, %lu KiB misaligned\n", iothreads,
                aligned_kib, misaligned_kib);
    EXPECT_LE(misaligned_kib, kQueues * kBounceBudgetKib + kGuestKib);
    EXPECT_LE(misaligned_kib, aligned_kib + iothreads * kBounceBudgetKib + kBookkeepingKib);
  }
}

TEST_F(ScsiTest, InterruptDrivenCompletionAndMasking) {
  ProcessResult r = Run("test=scsi-irq", Drives(FreshDisk()));
  EXPECT_THAT(r.out, HasSubstr("PBA pending bit set"));
}

TEST_F(ScsiTest, ErrorsGetTheRightSense) {
  ProcessResult r = Run("test=scsi-errors", Drives(FreshDisk()));
  EXPECT_THAT(r.out, Not(HasSubstr("<-- expected")));
  EXPECT_THAT(
      r.out, HasSubstr("READ(10) 8 blocks into a 2048-byte buffer -> virtio response OVERRUN (1)"));
  EXPECT_THAT(r.out, HasSubstr("TEST UNIT READY 0:7 (no such LUN) -> CHECK CONDITION 05/25/00"));
  EXPECT_THAT(r.out, HasSubstr("TEST UNIT READY after the LU reset -> CHECK CONDITION 06/29/00"));
}

// --- scsi-hostile --------------------------------------------------------------------------------

// What the line "hostile: <case>: ..." must say for each case (beyond the guest's own checks:
// no "UNEXPECTED", PASS). Cases missing here only need the guest's verdict.
const std::map<std::string, std::vector<std::string>>& HostileExpectations() {
  static const auto* expectations = [] {
    auto* m = new std::map<std::string, std::vector<std::string>>;
    const std::vector<std::string> broken_request_queue = {
        "NEEDS_RESET after", "queue 2: no used entry", "queue 3 READ verified",
        "control queue QUERY TASK SET", "WRITE FUA + READ verified"};
    for (const char* name : {"desc-loop-self",
                             "desc-loop-pair",
                             "chain-too-long",
                             "indirect-too-long",
                             "head-out-of-range",
                             "avail-idx-jump",
                             "addr-high",
                             "addr-mmio",
                             "addr-ram-end",
                             "addr-wrap",
                             "len-huge",
                             "len-total-4g",
                             "indirect-next",
                             "indirect-nested",
                             "indirect-len-odd",
                             "indirect-len-zero",
                             "indirect-addr-bad",
                             "indirect-unnegotiated",
                             "readable-after-writable",
                             "resp-short",
                             "resp-no-sense"}) {
      (*m)[name] = broken_request_queue;
    }
    const std::vector<std::string> broken_control_queue = {
        "NEEDS_RESET after", "queue 0: no used entry", "queue 2 READ verified",
        "queue 3 READ verified", "WRITE FUA + READ verified"};
    for (const char* name : {"ctrl-short", "ctrl-no-response", "ctrl-loop"})
      (*m)[name] = broken_control_queue;
    for (const char* name :
         {"qsize-0", "qsize-3", "qsize-too-big", "ring-desc-misaligned", "ring-avail-odd",
          "ring-used-misaligned", "ring-outside-ram", "ring-mmio", "ring-ram-end"}) {
      (*m)[name] = {"queue_enable reads 0", "-> 0x4b", "WRITE FUA + READ verified"};
    }
    (*m)["status-order"] = {"DRIVER_OK without FEATURES_OK -> status 0x4",
                            "WRITE FUA + READ verified"};
    (*m)["short-header"] = {"no header at all -> virtio response FAILURE (9)",
                            "18-byte header (need 51) -> virtio response FAILURE (9)",
                            "50-byte header (need 51) -> virtio response FAILURE (9)",
                            "queue 2 still works"};
    (*m)["bad-lun"] = {"lun[0]=0 -> virtio response BAD_TARGET (3)",
                       "unknown target 9 -> virtio response BAD_TARGET (3)", "queue 2 still works"};
    (*m)["bidirectional"] = {"virtio response FAILURE (9)", "queue 2 still works"};
    (*m)["read-overrun"] = {"READ(10) 16 blocks into 4 KiB -> virtio response OVERRUN (1)",
                            "queue 2 still works"};
    (*m)["cdb-fuzz-disk"] = {"1280 commands", "05/20/00", "queue 2 still works"};
    (*m)["cdb-fuzz-cd"] = {"1280 commands", "05/20/00", "queue 2 still works"};
    (*m)["ctrl"] = {"TMF ABORT TASK lun[0]=0 -> 3 (BAD_TARGET)", "control type 0x77 ->",
                    "control queue still answers"};
    (*m)["transport-junk"] = {"queue_size 0, queue_enable 0", "status 0x0f",
                              "queue 3 READ verified"};
    (*m)["cfg-sizes"] = {
        "cdb_size 64 (reads 64) sense_size 96 (reads 96): TUR -> response 0 status 0x00",
        "block written with cdb_size 64 / sense_size 96 reads back right",
        "block written with cdb_size 32 / sense_size 300 reads back right", "queue 2 still works"};
    (*m)["head-twice"] = {"NEEDS_RESET after", "queue 3 READ verified",
                          "WRITE FUA + READ verified"};
    (*m)["dma-into-ring"] = {"READ into the descriptor table", "READ into the available ring",
                             "NEEDS_RESET"};
    (*m)["ring-overlap"] = {"used ring = available ring", "used ring = descriptor table",
                            "WRITE FUA + READ verified"};
    (*m)["msix-junk"] = {"entry restored: READ verified", "queue 3 READ verified"};
    (*m)["pci-junk"] = {"restored; status 0x0f", "queue 3 READ verified"};
    (*m)["sg-tiny"] = {"WRITE(10) FUA in 138 descriptors: GOOD",
                       "READ(10) in 138 descriptors: GOOD", "plain READ agrees"};
    (*m)["late-queue-enable"] = {"queue_enable reads 0", "NEEDS_RESET after"};
    (*m)["reset-in-flight"] = {"WRITE FUA + READ verified"};
    return m;
  }();
  return *expectations;
}

std::string HostileLine(const std::string& out, const std::string& name) {
  const std::string prefix = "hostile: " + name + ": ";
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, prefix) && line != prefix + "FAIL") return std::string(line);
  }
  return "";
}

TEST_F(ScsiTest, HostileGuestEveryCaseOnItsOwn) {
  const std::string disk = FreshDisk();
  ProcessResult list = Run("test=scsi-hostile case=list", Drives(disk));
  std::vector<std::string> cases;
  for (absl::string_view line : absl::StrSplit(list.out, '\n')) {
    if (absl::ConsumePrefix(&line, "scsi-hostile: cases:")) {
      cases = absl::StrSplit(line, ' ', absl::SkipEmpty());
    }
  }
  // Every case this test knows about must still exist in the guest.
  const std::set<std::string> listed(cases.begin(), cases.end());
  for (const auto& [name, unused] : HostileExpectations()) {
    EXPECT_TRUE(listed.count(name)) << "the guest no longer has case " << name << "\n" << list.out;
  }
  ASSERT_GE(cases.size(), HostileExpectations().size()) << list.out;

  std::vector<std::string> failed;
  for (const std::string& name : cases) {
    SCOPED_TRACE("scsi-hostile case=" + name);
    FreshDisk();
    const int failures_before =
        ::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count();
    ProcessResult r =
        Run(absl::StrCat("test=scsi-hostile case=", name, " seed=", kDiskSeed), Drives(disk));
    const std::string line = HostileLine(r.out, name);
    EXPECT_FALSE(line.empty()) << "no report line for " << name;
    EXPECT_THAT(line, Not(HasSubstr("UNEXPECTED")));
    auto it = HostileExpectations().find(name);
    if (it != HostileExpectations().end()) {
      for (const std::string& want : it->second) EXPECT_THAT(line, HasSubstr(want));
    }
    if (::testing::UnitTest::GetInstance()->current_test_info()->result()->total_part_count() !=
        failures_before) {
      failed.push_back(name);
    }
  }
  EXPECT_TRUE(failed.empty()) << "failed cases: " << absl::StrJoin(failed, " ");
}

// All cases in one boot, with one request queue on one iothread: the resets follow each other, and
// there is no second request queue (the guest says so and checks the control queue instead).
TEST_F(ScsiTest, HostileGuestAllCasesWithOneQueue) {
  const std::string disk = FreshDisk();
  ProcessResult r = Run(absl::StrCat("test=scsi-hostile seed=", kDiskSeed),
                        {"--disk=" + disk + ",cache=" + Cache("none"), "--cdrom=" + images().cd,
                         "--scsi-queues=1", "--iothreads=1"},
                        0, absl::Seconds(90));
  EXPECT_THAT(r.out, Not(HasSubstr("UNEXPECTED")));
  EXPECT_THAT(r.out, HasSubstr("hostile: desc-loop-self: NEEDS_RESET after"));
  EXPECT_THAT(r.out, HasSubstr("(one request queue: no other request queue to check)"));
  EXPECT_THAT(r.out, HasSubstr("hostile: cfg-sizes: "));
  // The VMM reports each broken queue on stderr.
  EXPECT_THAT(r.err, HasSubstr("a request queue needs a reset"));
}

}  // namespace
}  // namespace tests

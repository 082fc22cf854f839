#include "vmm/command_line.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

// Flags of this test binary, as a launcher defines its own.
ABSL_FLAG(uint32_t, test_count, 1, "How many (a number).");
ABSL_FLAG(std::string, test_name, "", "A name.");
ABSL_FLAG(bool, test_switch, true, "A switch that is on by default.");
ABSL_FLAG(bool, test_off_switch, false, "A switch that is off by default.");
ABSL_FLAG(int64_t, test_unlisted, 7, "A flag no help group lists.");
ABSL_FLAG(uint32_t, test_ranged, 4, "vCPUs, 1 to 40 (checked after parsing).");

namespace vmm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Runs ParseFlagsAndDrives over `args` (the program name first) after resetting the test flags.
absl::StatusOr<ParsedCommandLine> Parse(std::vector<std::string> args) {
  absl::SetFlag(&FLAGS_test_count, 1);
  absl::SetFlag(&FLAGS_test_name, "");
  absl::SetFlag(&FLAGS_test_switch, true);
  absl::SetFlag(&FLAGS_test_off_switch, false);
  args.insert(args.begin(), "launcher");
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  return ParseFlagsAndDrives(static_cast<int>(argv.size()), argv.data());
}

std::string Message(const absl::StatusOr<ParsedCommandLine>& parsed) {
  return parsed.ok() ? std::string("(parsed)") : std::string(parsed.status().message());
}

std::string Cwd() {
  char cwd[PATH_MAX];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? std::string(cwd) : std::string();
}

TEST(MemorySizeTest, SuffixesUpToTheMaximum) {
  EXPECT_EQ(*ParseMemorySize("256"), 256ull << 20);  // MiB, as QEMU's -m
  EXPECT_EQ(*ParseMemorySize("256M"), 256ull << 20);
  EXPECT_EQ(*ParseMemorySize("2g"), 2ull << 30);
  EXPECT_EQ(*ParseMemorySize("65536K"), 64ull << 20);
  EXPECT_EQ(*ParseMemorySize("1T"), 1ull << 40);  // issue 17: it was "not a size"
  EXPECT_EQ(*ParseMemorySize("8T"), kMaxMemoryBytes);
}

TEST(MemorySizeTest, ErrorsNameTheFlagAndSayTheLimit) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"lots",
       "--memory=lots: not a size (a number of MiB, or with K, M, G or T: 256, 512M, 2G, 1T)"},
      {"", "--memory=: not a size"},
      {"-1", "--memory=-1: not a size"},
      {"1P", "--memory=1P: not a size"},
      {"9T", "--memory=9T: more than the maximum, 8T (KVM's largest memory slot)"},
      {"99999999999999G", "--memory=99999999999999G: more than the maximum, 8T"},
      {"8M", "--memory=8M: less than the minimum, 16M"},
      {"0", "--memory=0: less than the minimum, 16M"},
      {"65535K", "--memory=65535K: not a multiple of 4K (the page size)"},
  };
  for (const auto& c : cases) {
    auto parsed = ParseMemorySize(c.text);
    ASSERT_FALSE(parsed.ok()) << c.text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(parsed.status().message(), c.message)) << parsed.status();
  }
}

TEST(CheckRangeTest, SaysTheRangeAndWhy) {
  EXPECT_TRUE(CheckRange("--vcpus", 40, 1, 40).ok());
  EXPECT_EQ(CheckRange("--scsi-queues", 0, 1, 1024, "virtio-scsi request queues").message(),
            "--scsi-queues=0: must be 1 to 1024 (virtio-scsi request queues)");
  EXPECT_EQ(CheckRange("--poll-max-ns", -5, 0, 10).message(), "--poll-max-ns=-5: must be 0 to 10");
}

class InputFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/input-files";
    mkdir(dir_.c_str(), 0700);
  }
  std::string dir_;
};

TEST_F(InputFileTest, NamesTheFlagAndTheValueAsTyped) {
  const std::string kernel = dir_ + "/kernel";
  std::ofstream(kernel) << "not empty";
  EXPECT_TRUE(CheckInputFile("--kernel", "kernel", kernel).ok());
  EXPECT_EQ(CheckInputFile("--kernel", "nope", dir_ + "/nope").message(),
            "--kernel=nope: no such file");
  EXPECT_EQ(CheckInputFile("--kernel", "nope", dir_ + "/nope").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckInputFile("--initrd", "dir", dir_).message(),
            "--initrd=dir: a directory, not a file");
  const std::string empty = dir_ + "/empty";
  std::ofstream(empty).flush();
  EXPECT_EQ(CheckInputFile("--kernel", "empty", empty).message(),
            "--kernel=empty: the file is empty");
  // A FIFO is refused without waiting for a writer.
  const std::string fifo = dir_ + "/fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(CheckInputFile("--kernel", "fifo", fifo).message(),
            "--kernel=fifo: not a regular file");
}

TEST(ParseFlagsTest, DashesUnderscoresSwitchesAndDrives) {
  auto parsed =
      Parse({"--test-count=3", "--test_name", "alpha", "--notest-switch", "--test-off-switch",
             "--disk=d.img,cache=none", "--cdrom", "--ide-cdrom", "/isos/./a.iso"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->request, ParsedCommandLine::Request::kRun);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_count), 3u);
  EXPECT_EQ(absl::GetFlag(FLAGS_test_name), "alpha");
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_switch));
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_off_switch));
  ASSERT_EQ(parsed->drives.size(), 3u);
  // Paths are absolute from here on; messages keep what was typed.
  EXPECT_EQ(parsed->drives[0].path, Cwd() + "/d.img");
  EXPECT_EQ(parsed->drives[0].given_path, "d.img");
  EXPECT_TRUE(parsed->drives[1].path.empty());
  EXPECT_EQ(parsed->drives[2].path, "/isos/a.iso");
  EXPECT_EQ(parsed->drives[2].bus, DriveSpec::Bus::kIde);

  parsed = Parse(
      {"--io-group=tenant,iops=100", "--disk=d.img,group=tenant", "--io-group", "other,bps=1M"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->io_groups.size(), 2u);
  EXPECT_EQ(parsed->io_groups[0].name, "tenant");
  EXPECT_EQ(parsed->io_groups[1].limits.bytes_per_second, 1u << 20);
  EXPECT_EQ(Message(Parse({"--io-group=a,iops=1", "--io-group=a,iops=2"})),
            "--io-group=a,iops=2: the group a is already defined");

  parsed = Parse({"--no-test-switch", "--test_off_switch=true"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_switch));
  EXPECT_TRUE(absl::GetFlag(FLAGS_test_off_switch));
  parsed = Parse({"--test-switch=false"});
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(absl::GetFlag(FLAGS_test_switch));
}

TEST(ParseFlagsTest, HelpWinsOverEverythingElse) {
  for (const char* help : {"--help", "-h", "--helpshort"}) {
    auto parsed = Parse({"--test-count=oops", help, "--no-such-flag"});
    ASSERT_TRUE(parsed.ok()) << help << ": " << parsed.status();
    EXPECT_EQ(parsed->request, ParsedCommandLine::Request::kHelp);
  }
  EXPECT_EQ(Parse({"--test-count=oops", "--helpfull"})->request,
            ParsedCommandLine::Request::kHelpFull);
  EXPECT_EQ(Parse({"--bogus", "--version"})->request, ParsedCommandLine::Request::kVersion);
  // After "--", "--help" is an argument (and refused as one).
  EXPECT_THAT(Message(Parse({"--", "--help"})), HasSubstr("unexpected argument \"--help\""));
}

TEST(ParseFlagsTest, ErrorsNameTheFlagAndTheValue) {
  const struct {
    std::vector<std::string> args;
    const char* message;
  } cases[] = {
      {{"--test-cuont=2"},
       "--test-cuont: unknown flag (did you mean --test-count? launcher --help lists them all)"},
      {{"--bogus"}, "--bogus: unknown flag (launcher --help lists them all)"},
      {{"--test-count=abc"}, "--test-count=abc: expected a whole number from 0 to 4294967295"},
      {{"--test-count=-1"}, "--test-count=-1: expected a whole number from 0 to 4294967295"},
      {{"--test-switch=maybe"}, "--test-switch=maybe: expected true or false"},
      {{"--notest-switch=1"}, "--notest-switch=1: takes no value (it turns a switch off)"},
      {{"--test-name"},
       "--test-name: needs a value (--test-name=VALUE; launcher --help says which)"},
      {{"stray"},
       "unexpected argument \"stray\" (settings are --flag=value; launcher --help lists them)"},
      {{"--disk=d.img,turbo"},
       "--disk=d.img,turbo: unknown option \"turbo\" (--disk takes cache=, fua=, readonly, id=, "
       "iops=, bps=, burst=, group=)"},
      {{"--ide-cdrom=a.iso,unit=2"}, "--ide-cdrom=a.iso,unit=2: unit must be 0 or 1, not \"2\""},
      // The range a flag's help states, not its type's.
      {{"--test-ranged=-1"}, "--test-ranged=-1: expected a whole number from 1 to 40"},
      // A setting twice is refused, whatever the spelling; drives repeat.
      {{"--test-count=2", "--test_count", "3"},
       "--test-count is given twice (--test-count=2, then --test-count=3): give each setting once"},
      {{"--notest-switch", "--test-switch"},
       "--test-switch is given twice (--notest-switch, then --test-switch=true): give each setting "
       "once"},
      // QEMU's spellings: a drive flag with one dash would give a VM without the drive.
      {{"-cdrom", "disc.iso"},
       "-cdrom: a drive flag takes two dashes here (--cdrom=PATH; -cdrom is QEMU's spelling)"},
      {{"-ide-disk", "d.img"},
       "-ide-disk: a drive flag takes two dashes here (--ide-disk=PATH; -ide-disk is QEMU's "
       "spelling)"},
      {{"-smp", "2"},
       "--smp: unknown flag (QEMU's -smp is --vcpus here; launcher --help lists them all)"},
  };
  for (const auto& c : cases) {
    auto parsed = Parse(c.args);
    ASSERT_FALSE(parsed.ok()) << c.args[0];
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(parsed.status().message()), c.message);
  }
}

TEST(HelpTextTest, EveryFlagWithDashesHelpAndDefault) {
  const ProgramHelp help{
      .program = "launcher",
      .summary = "does things.",
      .usage = "launcher --test-name=NAME",
      .groups = {{"Things",
                  {{"test-count", "N"},
                   {"test-name", "NAME"},
                   {"test-switch", ""},
                   {"test-ranged", "N"}}},
                 {"Drives", {{"test-off-switch", ""}}}},
      .epilogue = "Exit status: 0.",
  };
  const std::string text = HelpText(help);
  EXPECT_TRUE(
      absl::StartsWith(text, "launcher: does things.\n\nusage: launcher --test-name=NAME\n"));
  EXPECT_THAT(text,
              HasSubstr("\nThings:\n  --test-count=N\n      How many (a number). Default: 1.\n"));
  EXPECT_THAT(text, HasSubstr("  --test-name=NAME\n      A name.\n"));  // no empty default
  EXPECT_THAT(
      text,
      HasSubstr(
          "  --test-switch=true|false\n      A switch that is on by default. Default: true.\n"));
  EXPECT_THAT(
      text, HasSubstr("\nDrives:\n  --test-off-switch\n      A switch that is off by default.\n"));
  // A flag no group lists is still shown, apart; Abseil's own are not.
  EXPECT_THAT(text, HasSubstr("\nOther flags:\n  --test-unlisted=VALUE\n"));
  EXPECT_THAT(text, Not(HasSubstr("flagfile")));
  EXPECT_THAT(text, Not(HasSubstr("test_")));
  EXPECT_THAT(text, HasSubstr("\nHelp:\n  -h, --help\n      This text.\n  --helpfull\n"));
  EXPECT_THAT(text, HasSubstr("\n  --version\n      The version and the build"));
  EXPECT_TRUE(absl::EndsWith(text, "\nExit status: 0.\n"));
}

TEST(HelpTextTest, DefinedFlagNamesAreOursWithDashes) {
  const std::vector<std::string> names = DefinedFlagNames();
  EXPECT_NE(std::find(names.begin(), names.end(), "test-off-switch"), names.end());
  EXPECT_EQ(std::find(names.begin(), names.end(), "flagfile"), names.end());
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

}  // namespace
}  // namespace vmm

// The launchers and vmmctl as a user meets them, no /dev/kvm needed (issue 17):
//   - `microvm --help` and `vhost-user-scsi --help` list every flag, with dashes, exit 0; every
//     flag README.md (and docs/vhost-user-scsi.md) names is among them;
//   - every row of docs/errors.md is checked: rows marked "run" are run here (message and exit
//     status), the others name a test, which must exist.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"

namespace tests {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Runfile(const std::string& path) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/", std::getenv("TEST_WORKSPACE"), "/", path);
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// The binaries the docs' commands name.
const std::map<std::string, std::string>& Binaries() {
  static const auto* binaries = new std::map<std::string, std::string>{
      {"microvm", Runfile("vmm/microvm")},
      {"vhost-user-scsi", Runfile("vmm/vhost-user-scsi")},
      {"vmmctl", Runfile("api/vmmctl")},
  };
  return *binaries;
}

// The flags a --help text lists: "  --name" at the start of a line, up to '=', '[' or the end.
std::set<std::string> HelpFlags(const std::string& help) {
  std::set<std::string> flags;
  static const std::regex kFlagLine(R"(^  (?:-h, )?--([a-z0-9-]+))");
  for (absl::string_view line : absl::StrSplit(help, '\n')) {
    std::smatch match;
    const std::string text(line);
    if (std::regex_search(text, match, kFlagLine)) flags.insert(match[1]);
  }
  return flags;
}

// The flags the first column of a markdown flag table names ("| `--boot-report [--boot-marker
// TEXT]` | ..."): every "--name" in it.
std::set<std::string> TableFlags(const std::string& markdown) {
  std::set<std::string> flags;
  static const std::regex kFlag(R"(--([a-z0-9][a-z0-9-]*))");
  for (absl::string_view line : absl::StrSplit(markdown, '\n')) {
    if (!absl::StartsWith(line, "| `--")) continue;
    const std::string first(line.substr(1, line.find(" | ") - 1));
    for (auto it = std::sregex_iterator(first.begin(), first.end(), kFlag);
         it != std::sregex_iterator(); ++it) {
      flags.insert((*it)[1]);
    }
  }
  return flags;
}

class HelpTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HelpTest, ListsEveryFlagWithDashesAndExitsZero) {
  const std::string binary = Binaries().at(GetParam());
  for (const char* help : {"--help", "-h"}) {
    ProcessResult result = RunProcess({binary, help});
    ASSERT_TRUE(result.exited) << help;
    EXPECT_EQ(result.exit_status, 0) << help << "\n" << result.err;
    EXPECT_TRUE(absl::StartsWith(result.out, absl::StrCat(GetParam(), ": "))) << result.out;
    EXPECT_THAT(result.out, Not(HasSubstr("Other flags"))) << "a flag no help group lists";
    EXPECT_THAT(result.out, Not(HasSubstr("(not defined in this binary)")));
    const std::set<std::string> flags = HelpFlags(result.out);
    for (const char* flag :
         {"api-socket", "api-tcp", "api-token-file", "api-tcp-insecure", "media-dir", "disk",
          "cdrom", "scsi-queues", "iothreads", "poll-max-ns", "seccomp", "jail", "jail-user",
          "jail-cgroup", "help"}) {
      EXPECT_EQ(flags.count(flag), 1u)
          << "--" << flag << " missing from " << GetParam() << " --help";
    }
    for (const std::string& flag : flags) EXPECT_EQ(flag.find('_'), std::string::npos) << flag;
  }
}

INSTANTIATE_TEST_SUITE_P(Launchers, HelpTest, ::testing::Values("microvm", "vhost-user-scsi"));

// --helpfull adds Abseil's own flags to --help's text, and exits 0 like it.
TEST_P(HelpTest, HelpfullAddsAbseilsFlagsAndExitsZero) {
  ProcessResult result = RunProcess({Binaries().at(GetParam()), "--helpfull"});
  ASSERT_TRUE(result.exited);
  EXPECT_EQ(result.exit_status, 0) << result.err;
  EXPECT_TRUE(absl::StartsWith(result.out, absl::StrCat(GetParam(), ": "))) << result.out;
  EXPECT_THAT(result.out, HasSubstr("\nAbseil's own flags:\n  --flagfile\n"));
}

// Every binary says which version and which build it is, and exits 0.
TEST(VersionTest, EveryBinaryPrintsItsVersionAndBuild) {
  for (const char* program : {"microvm", "vhost-user-scsi", "vmmctl"}) {
    ProcessResult result = RunProcess({Binaries().at(program), "--version"});
    ASSERT_TRUE(result.exited) << program;
    EXPECT_EQ(result.exit_status, 0) << program << ": " << result.err;
    EXPECT_THAT(result.out,
                ::testing::MatchesRegex(absl::StrCat(
                    program, " [0-9][0-9.]* \\((opt|fastbuild|dbg)(, ASan)? build\\)\n")));
  }
}

// Acceptance of issue 17: `microvm --help | grep -c -- '--'` lists every flag the README names.
TEST(DocFlagsTest, EveryFlagTheReadmeNamesIsInMicrovmHelp) {
  const std::set<std::string> readme = TableFlags(Read(Runfile("README.md")));
  ASSERT_GE(readme.size(), 25u) << "README's flag table was not found";
  ProcessResult result = RunProcess({Binaries().at("microvm"), "--help"});
  const std::set<std::string> help = HelpFlags(result.out);
  for (const std::string& flag : readme) {
    EXPECT_EQ(help.count(flag), 1u)
        << "README names --" << flag << "; microvm --help does not list it";
  }
}

TEST(DocFlagsTest, EveryFlagItsDocNamesIsInVhostUserScsiHelp) {
  const std::set<std::string> doc = TableFlags(Read(Runfile("docs/vhost-user-scsi.md")));
  ASSERT_GE(doc.size(), 10u) << "docs/vhost-user-scsi.md's flag table was not found";
  ProcessResult result = RunProcess({Binaries().at("vhost-user-scsi"), "--help"});
  const std::set<std::string> help = HelpFlags(result.out);
  for (const std::string& flag : doc) {
    EXPECT_EQ(help.count(flag), 1u)
        << "the doc names --" << flag << "; vhost-user-scsi --help does not";
  }
}

// One row of a docs/errors.md table.
struct Row {
  int line = 0;
  std::string input, message, exit, checked_by;
};

// The first `code span` of a cell, or "".
std::string Code(const std::string& cell) {
  const size_t open = cell.find('`');
  if (open == std::string::npos) return "";
  const size_t close = cell.find('`', open + 1);
  if (close == std::string::npos) return "";
  // In a table, a bar inside a code span is written "\|" (GitHub renders it as "|").
  return absl::StrReplaceAll(cell.substr(open + 1, close - open - 1), {{"\\|", "|"}});
}

std::vector<Row> ErrorRows() {
  std::vector<Row> rows;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(Read(Runfile("docs/errors.md")), '\n')) {
    ++number;
    if (!absl::StartsWith(line, "| ") || absl::StartsWith(line, "| Input") ||
        absl::StartsWith(line, "| ---")) {
      continue;
    }
    // Cells are separated by " | "; a "\|" inside a cell is a literal bar.
    std::string text(absl::StripSuffix(absl::StripPrefix(line, "| "), " |"));
    std::vector<std::string> cells = absl::StrSplit(text, " | ");
    EXPECT_EQ(cells.size(), 4u) << "docs/errors.md:" << number << ": not four columns";
    if (cells.size() != 4) continue;
    rows.push_back({number, cells[0], cells[1], cells[2], cells[3]});
  }
  return rows;
}

class ErrorsDocTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(std::getenv("TEST_TMPDIR"), "/errors-doc");
    ASSERT_EQ(std::system(("rm -rf " + dir_ + " && mkdir -p " + dir_ + "/dir").c_str()), 0);
    Write("kernel", std::string(8192, 'x'));
    Write("disk.img", std::string(1 << 20, '\0'));
    Write("disc.iso", std::string(64 << 10, '\0'));
    Write("small.iso", std::string(100, '\0'));
    Write("empty.iso", "");
    Write("token", "not-a-secret\n");
    ASSERT_EQ(chmod((dir_ + "/token").c_str(), 0644), 0);
    unsetenv("VMMCTL_API");
    unsetenv("MICROVM_API_TOKEN_FILE");
  }

  void Write(const std::string& name, const std::string& contents) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << contents;
  }

  std::string dir_;
};

TEST_F(ErrorsDocTest, EveryRowIsChecked) {
  const std::vector<Row> rows = ErrorRows();
  ASSERT_GE(rows.size(), 60u) << "docs/errors.md's tables were not found";
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  int run = 0;
  for (const Row& row : rows) {
    SCOPED_TRACE(absl::StrCat("docs/errors.md:", row.line, ": ", row.input));
    if (row.checked_by == "run") {
      const std::string command = Code(row.input);
      std::vector<std::string> argv = absl::StrSplit(command, ' ', absl::SkipEmpty());
      ASSERT_FALSE(argv.empty());
      ASSERT_EQ(Binaries().count(argv[0]), 1u) << "not one of the binaries: " << argv[0];
      argv[0] = Binaries().at(argv[0]);
      std::string expected = Code(row.message);
      ASSERT_FALSE(expected.empty()) << "no `message`";
      // Every run in a fresh directory state: nothing a row leaves behind (a socket) is seen by
      // the next.
      ASSERT_EQ(chdir(dir_.c_str()), 0);
      ProcessOptions options;
      options.timeout = absl::Seconds(30);
      ProcessResult result = RunProcess(argv, options);
      ASSERT_EQ(chdir(cwd), 0);
      unlink((dir_ + "/s.sock").c_str());
      EXPECT_FALSE(result.timed_out);
      EXPECT_TRUE(result.exited) << "signal " << result.term_signal;
      EXPECT_EQ(std::to_string(result.exit_status), row.exit) << result.err;
      EXPECT_TRUE(absl::StartsWith(result.err, expected))
          << "stderr:   " << result.err << "expected: " << expected;
      ++run;
      continue;
    }
    // "`//pkg:target` Name" or "`//pkg:target` Suite.Name": the test exists in pkg/target.cc.
    const std::string label = Code(row.checked_by);
    ASSERT_TRUE(absl::StartsWith(label, "//") && absl::StrContains(label, ':'))
        << "Checked by must be \"run\" or `//package:test` TestName: " << row.checked_by;
    const std::vector<std::string> parts = absl::StrSplit(label.substr(2), ':');
    const std::string source = Read(Runfile(absl::StrCat(parts[0], "/", parts[1], ".cc")));
    ASSERT_FALSE(source.empty()) << label << ".cc is not among the test's data";
    std::string name(
        absl::StripLeadingAsciiWhitespace(row.checked_by.substr(row.checked_by.rfind('`') + 1)));
    name = name.substr(0, name.find(' '));
    std::string suite;
    if (const size_t dot = name.find('.'); dot != std::string::npos) {
      suite = name.substr(0, dot);
      name = name.substr(dot + 1);
    }
    const std::string declared =
        suite.empty() ? absl::StrCat(", ", name, ")") : absl::StrCat("(", suite, ", ", name, ")");
    EXPECT_THAT(source, HasSubstr(declared)) << label << " has no test " << name;
  }
  EXPECT_GE(run, 50);
}

// --serial=file:PATH is created or truncated only by a start that succeeds: a start that fails
// (here: no KVM device) leaves an earlier run's console output, and creates no file.
TEST_F(ErrorsDocTest, AFailedStartLeavesTheSerialFileAlone) {
  Write("console.txt", "the last run's console\n");
  for (const char* file : {"console.txt", "new-console.txt"}) {
    ProcessResult result = RunProcess({Binaries().at("microvm"), "--kernel=" + dir_ + "/kernel",
                                       absl::StrCat("--serial=file:", dir_, "/", file),
                                       "--kvm-device=" + dir_ + "/no-kvm", "--jail=off"});
    EXPECT_EQ(result.exit_status, 1) << result.err;
    EXPECT_THAT(result.err, HasSubstr("no-kvm"));
  }
  EXPECT_EQ(Read(dir_ + "/console.txt"), "the last run's console\n");
  EXPECT_NE(access((dir_ + "/new-console.txt").c_str(), F_OK), 0);
}

// Starts vhost-user-scsi on `socket` with `disk`, stdin and stdout on /dev/null, stderr into
// `stderr_path` (created or truncated) or the test's own; the child's pid, or -1.
// `extra` flags follow --socket and --disk.
pid_t SpawnVhostUserScsi(const std::string& socket, const std::string& disk,
                         const std::string& stderr_path = "",
                         const std::vector<std::string>& extra = {}) {
  const std::string binary = Binaries().at("vhost-user-scsi");
  std::vector<std::string> args = {"vhost-user-scsi", "--socket=" + socket, "--disk=" + disk};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    const int null = open("/dev/null", O_RDWR);
    dup2(null, 0);
    dup2(null, 1);
    if (!stderr_path.empty()) {
      dup2(open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600), 2);
    }
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  return pid;
}

// Whether the launcher whose stderr goes to `log` said it is listening, within 30 s.
bool WaitForListening(const std::string& log) {
  for (int i = 0; i < 3000; ++i) {
    if (absl::StrContains(Read(log), "listening on")) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A back end killed with SIGKILL leaves its socket behind: the next one on the same path replaces
// it under the default seccomp filter (the check that tells a stale socket from a live one needs
// connect(), which the filter refuses, so it runs before the filter), and refuses a live one.
TEST(StaleSocketTest, VhostUserScsiReplacesAStaleSocketAndRefusesALiveOne) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/stale-socket");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string disk = dir + "/disk.img";
  std::ofstream(disk, std::ios::binary) << std::string(1 << 20, '\0');
  // Short: sockaddr_un holds 108 bytes, and TEST_TMPDIR is long.
  char socket_dir[] = "/tmp/stale-socket.XXXXXX";
  ASSERT_NE(mkdtemp(socket_dir), nullptr);
  const std::string path = std::string(socket_dir) + "/s.sock";
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  auto connects = [&] {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    return ok;
  };
  {
    // Stale: bound, then its owner gone.
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    close(fd);
  }
  ASSERT_FALSE(connects());

  const std::string binary = Binaries().at("vhost-user-scsi");
  const pid_t pid = SpawnVhostUserScsi(path, disk);
  ASSERT_GE(pid, 0);
  bool listening = false;
  for (int i = 0; i < 3000 && !listening; ++i) {
    listening = connects();
    if (!listening) {
      int status = 0;
      if (waitpid(pid, &status, WNOHANG) == pid) {
        FAIL() << "vhost-user-scsi exited (status " << status
               << ") instead of taking the stale socket";
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  EXPECT_TRUE(listening) << "vhost-user-scsi never listened on " << path;

  // A second back end on the live socket: refused, and the first one keeps it.
  ProcessResult second = RunProcess({binary, "--socket=" + path, "--disk=" + disk});
  EXPECT_EQ(second.exit_status, 1);
  EXPECT_THAT(second.err, HasSubstr("another process is listening on it"));
  EXPECT_THAT(second.err, Not(HasSubstr("remove it")));
  EXPECT_TRUE(connects());

  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  std::filesystem::remove_all(socket_dir);
}

// SIGINT, SIGTERM and SIGHUP (a closed terminal) each stop a launcher cleanly: exit status 0, the
// signal named on stderr, its socket removed. vhost-user-scsi shares the launch sequence and the
// stop signals with microvm (vmm/launch_sequence.h) and needs no KVM to run.
TEST(StopSignalTest, EachStopSignalEndsTheLauncherCleanly) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/stop-signals");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string disk = dir + "/disk.img";
  std::ofstream(disk, std::ios::binary) << std::string(1 << 20, '\0');
  for (const auto& [signal_number, name] : std::vector<std::pair<int, std::string>>{
           {SIGINT, "Interrupt"}, {SIGTERM, "Terminated"}, {SIGHUP, "Hangup"}}) {
    SCOPED_TRACE(name);
    // Short: sockaddr_un holds 108 bytes, and TEST_TMPDIR is long.
    char socket_dir[] = "/tmp/stop-signal.XXXXXX";
    ASSERT_NE(mkdtemp(socket_dir), nullptr);
    const std::string path = std::string(socket_dir) + "/s.sock";
    const std::string log = dir + "/" + name + ".log";  // a new file: no earlier run's lines
    const pid_t pid = SpawnVhostUserScsi(path, disk, log);
    ASSERT_GE(pid, 0);
    EXPECT_TRUE(WaitForListening(log)) << Read(log);
    kill(pid, signal_number);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    EXPECT_THAT(Read(log), HasSubstr("vhost-user-scsi: " + name + ", stopping"));
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the socket outlived the back end";
    std::filesystem::remove_all(socket_dir);
  }
}

// The control API over TCP (--api-tcp) under the default sandbox: the listener is bound before the
// sandbox, whose filter allows no internet socket at all, and the VMM serves on it. vmmctl
// reaches the API with the token and not without it. (Jailed, in a network namespace of its own:
// live_filter_test, which runs outside Bazel's sandbox.)
TEST(TcpApiTest, VhostUserScsiServesItsApiOverTcp) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/tcp-api");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string disk = dir + "/disk.img";
  std::ofstream(disk, std::ios::binary) << std::string(1 << 20, '\0');
  const std::string token = dir + "/token";
  std::ofstream(token) << "tcp-api-test-token\n";
  ASSERT_EQ(chmod(token.c_str(), 0600), 0);
  // A port free a moment ago (the kernel's pick for port 0).
  const int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(probe, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(probe, reinterpret_cast<sockaddr*>(&address), &length), 0);
  close(probe);
  const std::string api = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  char socket_dir[] = "/tmp/tcp-api.XXXXXX";  // short: sockaddr_un holds 108 bytes
  ASSERT_NE(mkdtemp(socket_dir), nullptr);
  const std::string log = dir + "/vhost-user-scsi.log";
  const pid_t pid = SpawnVhostUserScsi(std::string(socket_dir) + "/s.sock", disk, log,
                                       {"--api-tcp=" + api, "--api-token-file=" + token});
  ASSERT_GE(pid, 0);
  ASSERT_TRUE(WaitForListening(log)) << Read(log);
  const std::string vmmctl = Binaries().at("vmmctl");
  ProcessResult info = RunProcess({vmmctl, "--api", api, "--api-token-file", token, "vm", "info"});
  EXPECT_EQ(info.exit_status, 0) << info.err;
  EXPECT_THAT(info.out, HasSubstr("disk0"));
  ProcessResult no_token = RunProcess({vmmctl, "--api", api, "vm", "info"});
  EXPECT_EQ(no_token.exit_status, 1) << no_token.err;
  EXPECT_THAT(no_token.err, HasSubstr("UNAUTHENTICATED"));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << Read(log);
  EXPECT_THAT(Read(log), Not(HasSubstr("seccomp")));
  std::filesystem::remove_all(socket_dir);
}

// README.md and docs/ link only to documents in the repository, by relative paths: no link to a
// file that is not there (PLATFORM.md was one), none to a path on some machine.
TEST(DocLinksTest, MarkdownLinksNameDocumentsInTheRepository) {
  std::vector<std::string> documents = {"README.md"};
  const std::string docs = Runfile("docs");
  for (const auto& entry : std::filesystem::directory_iterator(docs)) {
    if (entry.path().extension() == ".md") {
      documents.push_back("docs/" + entry.path().filename().string());
    }
  }
  ASSERT_GE(documents.size(), 10u);
  static const std::regex kLink(R"(\]\(([^)\s#]+)(#[^)]*)?\))");
  for (const std::string& document : documents) {
    const std::string text = Read(Runfile(document));
    EXPECT_EQ(text.find("/work/"), std::string::npos)
        << document << " names a path on a build machine";
    const std::string directory = std::filesystem::path(document).parent_path().string();
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kLink);
         it != std::sregex_iterator(); ++it) {
      const std::string target = (*it)[1];
      if (absl::StartsWith(target, "http://") || absl::StartsWith(target, "https://")) continue;
      EXPECT_NE(target[0], '/') << document << " links to the absolute path " << target;
      // Sources and scripts: not among this test's data.
      if (!absl::EndsWith(target, ".md")) continue;
      const std::string resolved =
          std::filesystem::path(directory.empty() ? target : directory + "/" + target)
              .lexically_normal();
      // Only README.md and docs/ are among this test's data (a package's own README is not).
      if (resolved != "README.md" && !absl::StartsWith(resolved, "docs/")) continue;
      EXPECT_TRUE(std::filesystem::exists(Runfile(resolved)))
          << document << " links to " << target << ", which is not in the repository";
    }
  }
}

}  // namespace
}  // namespace tests

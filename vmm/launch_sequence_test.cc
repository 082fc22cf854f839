// The launch sequence's order and its error paths, with a program that records its steps. Each
// case runs in a child (a death test): the sequence closes inherited descriptors, installs the
// process's sandbox and blocks signals, none of which a test process can take back.
#include "vmm/launch_sequence.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "api/vm_control.h"
#include "gtest/gtest.h"
#include "tests/support/raw_http2.h"
#include "vmm/sys_util/scoped_fd.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {
namespace {

// What ApiControl hands the sequence: a VM with nothing in it (no call reaches it here).
class IdleVm : public api::VmControl {
 public:
  std::vector<api::DriveEntry> Drives() const override { return {}; }
  absl::StatusOr<std::shared_ptr<block::BlockBackend>> OpenMedium(const std::string&) override {
    return absl::UnimplementedError("no media");
  }
  api::VmStatus Status() const override { return {}; }
  absl::Status Pause() override { return absl::OkStatus(); }
  absl::Status Resume() override { return absl::OkStatus(); }
  absl::Status Shutdown(bool, absl::Duration) override { return absl::OkStatus(); }
};

class RecordingProgram : public LauncherProgram {
 public:
  // `fail_at`: the step that returns an error ("" for none).
  explicit RecordingProgram(std::string fail_at, Next after_build = Next::kRun, int status = 7)
      : fail_at_(std::move(fail_at)), after_build_(after_build), status_(status) {}

  const char* name() const override { return "recorder"; }
  const ProgramHelp& help() const override {
    static const auto* help = new ProgramHelp{.program = "recorder", .summary = "records steps"};
    return *help;
  }
  absl::Status Configure(const ParsedCommandLine&) override { return Step("Configure"); }
  absl::Status BeforeSandbox(const LaunchContext&) override { return Step("BeforeSandbox"); }
  absl::StatusOr<Next> Build(const LaunchContext& context) override {
    // What the sequence promises a program by now.
    if (context.sandbox == nullptr || context.stop_signal_fd < 0) return absl::InternalError("no");
    RETURN_IF_ERROR(Step("Build"));
    return after_build_;
  }
  api::VmControl& ApiControl(const LaunchContext&) override {
    steps_.push_back("ApiControl");
    return vm_;
  }
  absl::Status BeforeJail(const LaunchContext&) override { return Step("BeforeJail"); }
  absl::StatusOr<int> Run(const LaunchContext&) override {
    RETURN_IF_ERROR(Step("Run"));
    return status_;
  }
  // Runs at each step after it is recorded; an error fails the step.
  void set_probe(std::function<absl::Status(const std::string& step)> probe) {
    probe_ = std::move(probe);
  }
  void Stop() override { steps_.push_back("Stop"); }
  int Finish(int status) override {
    steps_.push_back("Finish");
    return status + 1;
  }

  // The whole record on one line, so that a test can match it exactly.
  void Report() const { fprintf(stderr, "steps: %s.\n", absl::StrJoin(steps_, ",").c_str()); }

 private:
  absl::Status Step(const std::string& step) {
    steps_.push_back(step);
    if (step == fail_at_) return absl::InvalidArgumentError(step + " refused");
    if (probe_) return probe_(step);
    return absl::OkStatus();
  }

  std::string fail_at_;
  Next after_build_;
  int status_;
  std::vector<std::string> steps_;
  IdleVm vm_;
  std::function<absl::Status(const std::string&)> probe_;
};

// A raw HTTP/2 client of the API's unix socket: it connects and sends the client preface and an
// empty SETTINGS frame (RFC 9113, 3.4); a server that has accepted the connection answers with
// SETTINGS of its own. A connection the server has not accepted waits in the listen backlog and
// gets nothing.
class RawHttp2Client {
 public:
  absl::Status Connect(const std::string& path) {
    socket_ = sys_util::ScopedFd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    if (!socket_.valid() || path.size() >= sizeof(address.sun_path)) {
      return absl::InternalError("no socket");
    }
    memcpy(address.sun_path, path.data(), path.size());
    if (connect(socket_.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      return absl::ErrnoToStatus(errno, "connect to the API socket");
    }
    return tests::SendHttp2Preface(socket_.get());
  }
  // Whether the server sent anything within `wait`.
  bool Answered(absl::Duration wait) { return tests::ServerAnswered(socket_.get(), wait); }

 private:
  sys_util::ScopedFd socket_;
};

// Runs the sequence with these arguments after the program's name and exits with its status.
[[noreturn]] void Launch(RecordingProgram& program, std::vector<std::string> args) {
  // Off: the test is about the order; the filters and the jail have tests of their own.
  args.insert(args.begin(), {"recorder", "--seccomp=off", "--jail=off"});
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const int status = RunLauncher(program, static_cast<int>(args.size()), argv.data());
  program.Report();
  std::exit(status);
}

TEST(LaunchSequenceTest, StepsRunInOrderAndFinishGivesTheExitStatus) {
  EXPECT_EXIT(
      {
        RecordingProgram program("");
        Launch(program, {});
      },
      testing::ExitedWithCode(8),
      "steps: Configure,BeforeSandbox,Build,BeforeJail,Run,Stop,Finish\\.");
}

TEST(LaunchSequenceTest, HelpStopsBeforeTheProgramsFirstStep) {
  EXPECT_EXIT(
      {
        RecordingProgram program("");
        Launch(program, {"--help"});
      },
      testing::ExitedWithCode(0), "steps: \\.");
}

TEST(LaunchSequenceTest, AConfigurationErrorOpensNothing) {
  EXPECT_EXIT(
      {
        RecordingProgram program("Configure");
        Launch(program, {});
      },
      testing::ExitedWithCode(1), "recorder: Configure refused\nsteps: Configure\\.");
}

TEST(LaunchSequenceTest, ABuildErrorStopsNothingThatNeverStarted) {
  EXPECT_EXIT(
      {
        RecordingProgram program("Build");
        Launch(program, {});
      },
      testing::ExitedWithCode(1),
      "recorder: Build refused\nsteps: Configure,BeforeSandbox,Build\\.");
}

TEST(LaunchSequenceTest, DoneAfterBuildExitsWithoutRunning) {
  EXPECT_EXIT(
      {
        RecordingProgram program("", LauncherProgram::Next::kDone);
        Launch(program, {});
      },
      testing::ExitedWithCode(0), "steps: Configure,BeforeSandbox,Build\\.");
}

TEST(LaunchSequenceTest, AnErrorAfterBuildStopsTheProgramFirst) {
  EXPECT_EXIT(
      {
        RecordingProgram program("BeforeJail");
        Launch(program, {});
      },
      testing::ExitedWithCode(1),
      "recorder: BeforeJail refused\nsteps: Configure,BeforeSandbox,Build,BeforeJail,Stop\\.");
  EXPECT_EXIT(
      {
        RecordingProgram program("Run");
        Launch(program, {});
      },
      testing::ExitedWithCode(1),
      "recorder: Run refused\nsteps: Configure,BeforeSandbox,Build,BeforeJail,Run,Stop\\.");
}

// The control API's server (the plugin beside the binary) listens from after Build, and serves
// only from the jail on: a caller that connected before the jail gets its answer in Run.
TEST(LaunchSequenceTest, TheApiListensBeforeTheJailAndServesAfterIt) {
  EXPECT_EXIT(
      {
        RecordingProgram program("");
        // Unix socket paths are short (108 bytes): Bazel's TEST_TMPDIR is too deep for one.
        char dir[] = "/tmp/launch_sequence_test.XXXXXX";
        const std::string socket_path = absl::StrCat(mkdtemp(dir), "/api.sock");
        RawHttp2Client early_caller;
        program.set_probe([&](const std::string& step) -> absl::Status {
          if (step == "BeforeJail") {
            RETURN_IF_ERROR(early_caller.Connect(socket_path));
            if (early_caller.Answered(absl::Milliseconds(500))) {
              return absl::InternalError("the API answered before the jail");
            }
          }
          if (step == "Run" && !early_caller.Answered(absl::Seconds(20))) {
            return absl::InternalError("the API did not answer once jailed");
          }
          return absl::OkStatus();
        });
        Launch(program, {absl::StrCat("--api-socket=", socket_path)});
      },
      testing::ExitedWithCode(8),
      "recorder: control API on unix:/tmp/launch_sequence_test.*\n"
      "steps: Configure,BeforeSandbox,Build,ApiControl,BeforeJail,Run,Stop,Finish\\.");
}

}  // namespace
}  // namespace vmm

// The launch sequence's order and its error paths, with a program that records its steps. Each
// case runs in a child (a death test): the sequence closes inherited descriptors, installs the
// process's sandbox and blocks signals, none of which a test process can take back.
#include "vmm/launch_sequence.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "api/vm_control.h"
#include "gtest/gtest.h"
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
    return absl::OkStatus();
  }

  std::string fail_at_;
  Next after_build_;
  int status_;
  std::vector<std::string> steps_;
  IdleVm vm_;
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

// The control API's server (the plugin beside the binary) serves between Build and the jail.
TEST(LaunchSequenceTest, TheApiServesBetweenBuildAndTheJail) {
  EXPECT_EXIT(
      {
        RecordingProgram program("");
        // Unix socket paths are short (108 bytes): Bazel's TEST_TMPDIR is too deep for one.
        char dir[] = "/tmp/launch_sequence_test.XXXXXX";
        Launch(program, {absl::StrCat("--api-socket=", mkdtemp(dir), "/api.sock")});
      },
      testing::ExitedWithCode(8),
      "recorder: control API on unix:/tmp/launch_sequence_test.*\n"
      "steps: Configure,BeforeSandbox,Build,ApiControl,BeforeJail,Run,Stop,Finish\\.");
}

}  // namespace
}  // namespace vmm

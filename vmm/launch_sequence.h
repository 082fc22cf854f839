#ifndef VMM_LAUNCH_SEQUENCE_H_
#define VMM_LAUNCH_SEQUENCE_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "api/vm_control.h"
#include "vmm/command_line.h"
#include "vmm/media_directory.h"
#include "vmm/sandbox/sandbox_flags.h"
#include "vmm/sandbox/socket_janitor.h"

namespace vmm {

// What the launch sequence has set up by the time a program builds its machine.
struct LaunchContext {
  absl::Time launch_time;
  // The process's sandbox: ThreadStart(role) for every thread the program starts; the VMM's host
  // pid (jailed, the VMM runs in its own PID namespace).
  const sandbox::SandboxFromFlags* sandbox = nullptr;
  // SIGINT, SIGTERM and SIGHUP, blocked in every thread, read here (StopSignalFd).
  int stop_signal_fd = -1;
  // --media-dir, or in the jail without it a directory that says why inserts fail; nullptr when
  // there is no control API.
  MediaDirectory* media_dir = nullptr;
  // Removes the unix sockets the launch made once the process has ended (the VMM's filter allows
  // no unlink): Register each right after its bind, before the sequence seals it (step 7). Set
  // when the program has a UnixSocketPath() or the API listens on one; nullptr otherwise.
  sandbox::SocketJanitor* socket_janitor = nullptr;
};

// One launcher program (microvm, vhost-user-scsi): what it does at each step of the one launch
// sequence both binaries share (RunLauncher). The program owns what it builds; the sequence owns
// the order, the sandbox, the control API's server and the error path.
class LauncherProgram {
 public:
  enum class Next { kRun, kDone };

  virtual ~LauncherProgram() = default;

  // "microvm": the prefix of every message, the jail's cgroup name.
  virtual const char* name() const = 0;
  virtual const ProgramHelp& help() const = 0;
  // Checks the program's own flags before anything is opened; errors name the flag and value.
  // `parsed` is read-only: the sequence hands the same drives to the sandbox afterwards (a
  // passed-through host drive keeps its device node and the host's uevents in the jail).
  virtual absl::Status Configure(const ParsedCommandLine& parsed) = 0;
  // The path of the unix socket the program binds itself, if any (after Configure): the sequence
  // starts the socket janitor for it (context.socket_janitor), which may remove no other path.
  virtual std::string UnixSocketPath() const { return ""; }
  // What must happen before the filter forbids it (a socket path told stale from live with a
  // connect()), with one thread: only socket_janitor is set in `context`.
  virtual absl::Status BeforeSandbox(const LaunchContext& context) { return absl::OkStatus(); }
  // Opens the files and builds the machine, its threads started through context.sandbox. kDone:
  // the program's work is done without running (microvm's --dump-dtb), exit 0.
  virtual absl::StatusOr<Next> Build(const LaunchContext& context) = 0;
  // What the control API serves, when a listener is configured (after Build). Lives as long as
  // the program.
  virtual api::VmControl& ApiControl(const LaunchContext& context) = 0;
  // The last steps before the jail, with everything open (microvm's console file; vhost-user-scsi's
  // signal watcher).
  virtual absl::Status BeforeJail(const LaunchContext& context) { return absl::OkStatus(); }
  // Runs until the guest or the front end ends it, or a stop signal; the process's exit status.
  virtual absl::StatusOr<int> Run(const LaunchContext& context) = 0;
  // Stops what Build and BeforeJail started, on every path once Build has succeeded (after Run,
  // a no-op where Run already stopped it). The API's server stops after it.
  virtual void Stop() {}
  // After a Run that returned a status, with the API stopped: the program's last words.
  virtual int Finish(int status) { return status; }
};

// The launch sequence, the same for both launchers and in this order:
//   1. StartLauncher: inherited descriptors closed, the umask 0177, small thread stacks, argv
//      parsed (--help, --version: exit 0 here);
//   2. program.Configure: the flags checked before anything is opened;
//   3. the API's flags (token, media directory, socket paths readied); the socket janitor
//      started when a unix socket will be made (vmm/sandbox/socket_janitor.h); the API's
//      sockets bound (vmm/control_api.h BindLauncherApi); program.BeforeSandbox;
//   4. the stop signals blocked and read through a signalfd; the sandbox before any thread
//      starts: the jail's namespaces and the process's filter (docs/security.md);
//   5. program.Build: files opened, the machine built, its threads started;
//   6. the control API's server (vmm/control_api.h) for program.ApiControl: listening, not yet
//      serving;
//   7. the socket janitor sealed; program.BeforeJail; then into the jail with everything open;
//      the API's server starts accepting connections (no caller's input is read before this);
//   8. program.Run; then program.Stop, the API's server stopped (no call reaches a stopping
//      machine), program.Finish.
// An error at any step is printed as "NAME: message" and gives exit status 1; from step 6 on,
// program.Stop and the API's Stop run first.
int RunLauncher(LauncherProgram& program, int argc, char** argv);

}  // namespace vmm

#endif  // VMM_LAUNCH_SEQUENCE_H_

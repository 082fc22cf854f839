#include "vmm/launch_sequence.h"

#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "api/control_server.h"
#include "vmm/api_flags.h"
#include "vmm/control_api.h"
#include "vmm/launcher_sandbox.h"
#include "vmm/sys_util/status_macros.h"

namespace vmm {
namespace {

constexpr int kExitError = 1;

int Fail(const LauncherProgram& program, const absl::Status& status) {
  absl::FPrintF(stderr, "%s: %s\n", program.name(), status.message());
  return kExitError;
}

// Steps 6 to 8 (RunLauncher): everything after Build, whose result the caller stops either way.
absl::StatusOr<int> ServeAndRun(LauncherProgram& program, const LaunchContext& context,
                                sandbox::SandboxFromFlags& sandbox, const ApiFlags& api_flags,
                                api::ApiListeners&& api_listeners,
                                std::unique_ptr<api::ControlServer>& api_server) {
  if (api_flags.enabled()) {
    auto started = StartLauncherApi(program.name(), api_flags.options, std::move(api_listeners),
                                    program.ApiControl(context));
    if (!started.ok()) return started.status();
    api_server = *std::move(started);
  }
  // What the janitor removes is settled as soon as the last socket is bound: before the guest, a
  // front end or the jail.
  if (context.socket_janitor != nullptr) RETURN_IF_ERROR(context.socket_janitor->Seal());
  if (absl::Status ready = program.BeforeJail(context); !ready.ok()) return ready;
  // Everything is open (images, /dev/kvm, sockets, the API's plugin): into the jail before the
  // guest runs a single instruction or a front end connects.
  if (absl::Status jailed = EnterLauncherJail(sandbox, context.media_dir); !jailed.ok()) {
    return jailed;
  }
  // The API has listened since before the jail (its sockets had to be made outside it); only now
  // does it accept a connection, so no caller's byte reaches gRPC while the process was root with
  // the jail's mount calls allowed. A caller that connected earlier waits in the backlog.
  if (api_server != nullptr) RETURN_IF_ERROR(api_server->Serve());
  return program.Run(context);
}

}  // namespace

int RunLauncher(LauncherProgram& program, int argc, char** argv) {
  LaunchContext context{.launch_time = absl::Now()};
  auto parsed = StartLauncher(argc, argv, program.help());
  if (!parsed.ok()) return Fail(program, parsed.status());
  if (parsed->request != ParsedCommandLine::Request::kRun) return 0;
  if (absl::Status configured = program.Configure(*parsed); !configured.ok()) {
    return Fail(program, configured);
  }
  // The API's options, token and media directory, its socket path readied: before the sandbox,
  // whose filter refuses the connect() that tells a stale socket from a live one. Declared before
  // the machine: the media directory is destroyed last.
  auto api_flags = ApiFlagsFromCommandLine();
  if (!api_flags.ok()) return Fail(program, api_flags.status());
  // One reading of --seccomp for the socket janitor's filter and the process's.
  auto seccomp = sandbox::SeccompSettingFromFlags();
  if (!seccomp.ok()) return Fail(program, seccomp.status());
  // Forked while the process has one thread, before the sandbox; destroyed after the API's server
  // and the program have stopped (declared before them), which lets it remove the sockets then.
  std::optional<sandbox::SocketJanitor> socket_janitor;
  std::vector<std::string> socket_paths;
  for (const std::string& path : {program.UnixSocketPath(), api_flags->options.unix_socket_path}) {
    if (!path.empty()) socket_paths.push_back(path);
  }
  if (!socket_paths.empty()) {
    // The paths it may remove are fixed now, from the command line (SocketJanitor::Start).
    auto started = sandbox::SocketJanitor::Start(socket_paths, *seccomp);
    if (!started.ok()) return Fail(program, started.status());
    socket_janitor.emplace(*std::move(started));
    context.socket_janitor = &*socket_janitor;
  }
  // The API's server leaves its socket to the janitor: the filter refuses unlink.
  api_flags->options.remove_socket_on_stop = false;
  // The API's sockets, bound now, before the sandbox: the jail gets a network namespace of its
  // own and the filters no internet socket, --api-tcp or not. The server is built on them after
  // Build and accepts only inside the jail (step 7).
  auto api_listeners = BindLauncherApi(api_flags->options);
  if (!api_listeners.ok()) return Fail(program, api_listeners.status());
  if (api_listeners->unix_identity.has_value()) {
    struct stat bound {};
    bound.st_dev = api_listeners->unix_identity->device;
    bound.st_ino = api_listeners->unix_identity->inode;
    bound.st_ctim = api_listeners->unix_identity->changed;
    if (absl::Status registered =
            context.socket_janitor->Register(api_flags->options.unix_socket_path, bound);
        !registered.ok()) {
      return Fail(program, registered);
    }
  }
  if (absl::Status ready = program.BeforeSandbox(context); !ready.ok()) {
    return Fail(program, ready);
  }
  // Blocked before the first thread starts, so that every thread inherits the mask and only the
  // signalfd reads them; and before the jail's fork: its supervisor forwards a stop signal at
  // once, and the VMM, PID 1 of its namespace, would drop one it neither blocks nor handles.
  auto stop_signals = StopSignalFd();
  if (!stop_signals.ok()) return Fail(program, stop_signals.status());
  context.stop_signal_fd = stop_signals->get();
  // Before any thread starts: the jail's namespaces (they belong to threads), and the process's
  // filter, which every thread inherits (docs/security.md).
  auto sandbox = EnableLauncherSandbox(program.name(), *seccomp, parsed->drives, *api_flags);
  if (!sandbox.ok()) return Fail(program, sandbox.status());
  context.sandbox = &*sandbox;
  context.media_dir = api_flags->media_dir.get();

  auto next = program.Build(context);
  if (!next.ok()) return Fail(program, next.status());
  if (*next == LauncherProgram::Next::kDone) return 0;
  std::unique_ptr<api::ControlServer> api_server;
  const absl::StatusOr<int> ran =
      ServeAndRun(program, context, *sandbox, *api_flags, *std::move(api_listeners), api_server);
  program.Stop();
  // No API call may reach the machine once it is stopping (Watch streams end here).
  if (api_server != nullptr) api_server->Stop();
  if (!ran.ok()) return Fail(program, ran.status());
  return program.Finish(*ran);
}

}  // namespace vmm

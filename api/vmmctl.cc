// vmmctl: the command-line client of the microvm control API. See docs/api.md ("vmmctl") and
// `vmmctl --help`. The work is in api/vmmctl_lib.cc.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "api/vmmctl_lib.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // `media watch` runs until interrupted: take SIGINT/SIGTERM on a thread of our own (blocked before
  // gRPC starts its threads, so they inherit the mask) and end the stream cleanly, exit status 0.
  bool watch = false;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "media" && args[i + 1] == "watch") watch = true;
  }
  if (watch) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::thread([stop] {
      int signal_number = 0;
      sigwait(&stop, &signal_number);
      vmmctl::CancelWatch();
      // The watch ends now and main() returns, unless the main thread is blocked writing an event
      // to a stdout nobody reads (a full pipe): no cancellation reaches a blocked write(2). It gets
      // a moment to finish and flush; then, or at a second signal, the process ends here, with
      // the status an interrupted watch has.
      const timespec grace{.tv_sec = 1, .tv_nsec = 0};
      sigtimedwait(&stop, nullptr, &grace);
      _exit(vmmctl::kExitOk);
    }).detach();
  }
  const int status = vmmctl::Run(args, std::cout, std::cerr);
  std::cout.flush();
  std::cerr.flush();
  return status;
}

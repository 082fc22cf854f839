#include "vmm/sys_util/thread.h"

#include <pthread.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace sys_util {

absl::StatusOr<std::thread> StartThread(ThreadOptions options, absl::AnyInvocable<void() &&> body) {
  absl::Notification started;
  absl::Status start_status;
  std::thread thread([&options, &started, &start_status, body = std::move(body)]() mutable {
    // The kernel's limit is 16 bytes with the terminating NUL (pthread_setname_np: ERANGE).
    pthread_setname_np(pthread_self(), options.name.substr(0, 15).c_str());
    if (options.on_start) start_status = options.on_start();
    const bool run = start_status.ok();
    // After Notify() the caller's `options`, `started` and `start_status` may be gone.
    started.Notify();
    if (run) std::move(body)();
  });
  started.WaitForNotification();
  if (!start_status.ok()) {
    thread.join();
    return absl::Status(
        start_status.code(),
        absl::StrCat(options.name, ": starting the thread: ", start_status.message()));
  }
  return thread;
}

}  // namespace sys_util

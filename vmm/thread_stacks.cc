#include "vmm/thread_stacks.h"

#include <pthread.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace vmm {

absl::Status UseSmallThreadStacks() {
  pthread_attr_t attributes;
  int error = pthread_attr_init(&attributes);
  if (error == 0) error = pthread_attr_setstacksize(&attributes, kThreadStackBytes);
  if (error == 0) error = pthread_setattr_default_np(&attributes);
  pthread_attr_destroy(&attributes);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("thread stack size: ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace vmm

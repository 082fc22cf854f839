#include "tests/support/skip.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tests {

std::string NoKvmReason() {
  if (access("/dev/kvm", R_OK | W_OK) == 0) return "";
  return std::string("/dev/kvm is not usable here (") + strerror(errno) +
         "): tools/test runs the tests tagged \"kvm\" in L1 on such hosts";
}

}  // namespace tests

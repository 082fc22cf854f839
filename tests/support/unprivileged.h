#ifndef TESTS_SUPPORT_UNPRIVILEGED_H_
#define TESTS_SUPPORT_UNPRIVILEGED_H_

#include <sys/types.h>

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace tests {

// A user and group id that no account, group or process on this machine has (from 4000000 up).
uid_t UnusedId();

// Runs `check` in a child process that is an ordinary caller: as root, the child drops to
// UnusedId() for every user and group id with no supplementary groups (setresuid after
// setresgid and setgroups, so no capability is left); otherwise the child keeps the caller's own
// ids, which are already unprivileged. Returns what `check` returned (what it saw, for the test
// to assert on), or an error when the ids could not be dropped or the child died. For checks that
// root would pass through CAP_DAC_OVERRIDE: a file the caller cannot read, a socket of mode 0600.
// The child may use what the parent set up (descriptors, memory), but must not touch gtest.
absl::StatusOr<std::string> RunUnprivileged(absl::FunctionRef<std::string()> check);

}  // namespace tests

#endif  // TESTS_SUPPORT_UNPRIVILEGED_H_

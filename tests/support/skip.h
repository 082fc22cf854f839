#ifndef TESTS_SUPPORT_SKIP_H_
#define TESTS_SUPPORT_SKIP_H_

#include <string>

#include "gtest/gtest.h"

// The one way a C++ test skips (docs/testing.md): MICROVM_SKIP(reason) in a test body or SetUp().
// gtest marks the case skipped in the test's XML, which is what tools/test counts, and under
// CI=true tools/test fails a run with any skip that docs/testing.md does not list. A check that
// can be made here is made, never skipped: a caller without privileges comes from
// tests::RunUnprivileged (unprivileged.h), not from "skip unless we happen to be an ordinary user".
#define MICROVM_SKIP(reason) GTEST_SKIP() << "SKIPPED: " << (reason)

namespace tests {

// Empty when /dev/kvm can be opened for reading and writing, else why not (the reason to skip a
// test that needs KVM: tools/test runs such tests, tagged "kvm", where KVM is, in L1 if not here).
std::string NoKvmReason();

}  // namespace tests

#endif  // TESTS_SUPPORT_SKIP_H_

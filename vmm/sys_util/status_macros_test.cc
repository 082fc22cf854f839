#include "vmm/sys_util/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace {

absl::Status Counted(absl::Status status, int* calls) {
  ++*calls;
  return status;
}

absl::Status Chain(absl::Status first, absl::Status second, std::string* trail, int* calls) {
  RETURN_IF_ERROR(Counted(first, calls));
  *trail += "first ok;";
  RETURN_IF_ERROR(Counted(second, calls));
  *trail += "second ok;";
  return absl::OkStatus();
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheFirstFailureAndEvaluatesOnce) {
  std::string trail;
  int calls = 0;
  EXPECT_TRUE(Chain(absl::OkStatus(), absl::OkStatus(), &trail, &calls).ok());
  EXPECT_EQ(trail, "first ok;second ok;");
  EXPECT_EQ(calls, 2);
  trail.clear();
  calls = 0;
  absl::Status status = Chain(absl::NotFoundError("a"), absl::OkStatus(), &trail, &calls);
  EXPECT_EQ(status, absl::NotFoundError("a"));
  EXPECT_EQ(trail, "");
  EXPECT_EQ(calls, 1);
}

absl::StatusOr<std::unique_ptr<int>> MakeInt(bool ok) {
  if (!ok) return absl::InvalidArgumentError("no int");
  return std::make_unique<int>(7);
}

absl::StatusOr<int> Sum(bool first_ok, bool second_ok) {
  ASSIGN_OR_RETURN(std::unique_ptr<int> a, MakeInt(first_ok));  // move-only values
  ASSIGN_OR_RETURN(auto b, MakeInt(second_ok));                 // two on one function
  return *a + *b;
}

TEST(StatusMacrosTest, AssignOrReturnMovesTheValueOrReturnsTheStatus) {
  EXPECT_EQ(Sum(true, true).value(), 14);
  EXPECT_EQ(Sum(false, true).status(), absl::InvalidArgumentError("no int"));
  EXPECT_EQ(Sum(true, false).status(), absl::InvalidArgumentError("no int"));
}

}  // namespace

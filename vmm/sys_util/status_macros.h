#ifndef VMM_SYS_UTIL_STATUS_MACROS_H_
#define VMM_SYS_UTIL_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status) once and returns it from the enclosing
// function when it is not OK.
#define RETURN_IF_ERROR(expr)                                               \
  do {                                                                      \
    if (::absl::Status sys_util_status_ = (expr); !sys_util_status_.ok()) { \
      return sys_util_status_;                                              \
    }                                                                       \
  } while (false)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>) once; returns its status
// from the enclosing function when it is not OK, else moves the value into `lhs`, which may be a
// declaration (`auto fd`, `const Foo& foo` is not allowed: the value is a temporary's).
#define ASSIGN_OR_RETURN(lhs, expr) \
  SYS_UTIL_ASSIGN_OR_RETURN_IMPL_(SYS_UTIL_CONCAT_(sys_util_statusor_, __LINE__), lhs, expr)

#define SYS_UTIL_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = *std::move(statusor)

#define SYS_UTIL_CONCAT_INNER_(a, b) a##b
#define SYS_UTIL_CONCAT_(a, b) SYS_UTIL_CONCAT_INNER_(a, b)

#endif  // VMM_SYS_UTIL_STATUS_MACROS_H_

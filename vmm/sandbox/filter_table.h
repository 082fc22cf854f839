#ifndef VMM_SANDBOX_FILTER_TABLE_H_
#define VMM_SANDBOX_FILTER_TABLE_H_

#include <string>

#include "vmm/sandbox/thread_policy.h"

namespace vmm::sandbox {

// What each kind of thread may do, as a Markdown table generated from the allowlists themselves
// (AllowlistFor): one row per system call any role names, one column per role, each cell the
// role's rules for that call in the order the filter tests them ("allowed", an errno, conditions
// on arguments), "trap" where the role names it not. docs/security.md carries it;
// tools/check-filter-table keeps the two the same.
std::string FilterTable(const SandboxOptions& options);

}  // namespace vmm::sandbox

#endif  // VMM_SANDBOX_FILTER_TABLE_H_

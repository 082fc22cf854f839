#include "vmm/sandbox/filter_table.h"

#include <string>

#include "gtest/gtest.h"

namespace vmm::sandbox {
namespace {

TEST(FilterTableTest, NamesEveryCallAndSaysWhatEachRoleGets) {
  SandboxOptions options;
  options.jail = true;
  const std::string table = FilterTable(options);
  // Every call any role names has a name in the violation reporter's table too.
  EXPECT_EQ(table.find("`unknown`"), std::string::npos) << table;
  EXPECT_NE(table.find("| `io_uring_setup` | EPERM | trap | EPERM |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `openat` | allowed | EACCES | EACCES |"), std::string::npos) << table;
  EXPECT_NE(table.find("| `connect` | EACCES | trap | trap |"), std::string::npos) << table;
  // Conditions on arguments, in the order the filter tests them, then what is left. (Not under
  // AddressSanitizer, whose LeakSanitizer needs a plain clone: thread_policy.cc.)
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_NE(table.find("| `clone` | arg0 & 0x10000 = 0x10000: allowed; else trap |"),
            std::string::npos)
      << table;
#endif
  EXPECT_NE(table.find("| `tgkill` | arg0 = own process: allowed; else trap |"), std::string::npos)
      << table;
  EXPECT_EQ(table.find("`execve`"), std::string::npos) << "no role names execve: it traps";
  // Files are never re-moded, linked or renamed by anyone (H18), and removed only by the socket
  // janitor: the VMM's threads are refused.
  for (const char* call : {"`chmod`", "`fchmod`", "`fchmodat`", "`link`", "`linkat`", "`rename`",
                           "`renameat2`", "`umask`"}) {
    EXPECT_EQ(table.find(call), std::string::npos) << call << " is named: " << table;
  }
  EXPECT_NE(table.find("| `unlink` | EPERM | trap | trap | trap | allowed |"), std::string::npos)
      << table;
}

}  // namespace
}  // namespace vmm::sandbox

// Prints the per-thread filter table of docs/security.md (vmm/sandbox/filter_table.h), as the
// filters stand with a jail (the default as root). tools/check-filter-table compares it with the
// document.
#include <cstdio>

#include "vmm/sandbox/filter_table.h"

int main() {
  vmm::sandbox::SandboxOptions options;
  options.jail = true;
  std::fputs(vmm::sandbox::FilterTable(options).c_str(), stdout);
  return 0;
}

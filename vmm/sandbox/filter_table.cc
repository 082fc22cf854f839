#include "vmm/sandbox/filter_table.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "vmm/sandbox/pid_namespace.h"
#include "vmm/sandbox/socket_janitor.h"

namespace vmm::sandbox {
namespace {

std::string DescribeCondition(int number, const ArgCondition& condition) {
  // tgkill's thread group is the process's own id, a different number in every process.
  if (number == __NR_tgkill && condition.index == 0 &&
      condition.value == static_cast<uint32_t>(getpid())) {
    return "arg0 = own process";
  }
  if (condition.mask == 0xffffffff) {
    return absl::StrFormat("arg%d = %#x", condition.index, condition.value);
  }
  return absl::StrFormat("arg%d & %#x = %#x", condition.index, condition.mask, condition.value);
}

std::string DescribeVerdict(int errno_value) {
  if (errno_value == 0) return "allowed";
  const char* name = strerrorname_np(errno_value);
  return name != nullptr ? name : absl::StrCat("errno ", errno_value);
}

// The rules of one role for one system call, in order; "trap" when it has none.
std::string DescribeRules(const SyscallAllowlist& list, int number) {
  std::vector<std::string> parts;
  bool unconditional = false;
  for (const SyscallRule& rule : list.rules()) {
    if (rule.number != number || unconditional) continue;
    if (rule.conditions.empty()) {
      parts.push_back(parts.empty() ? DescribeVerdict(rule.errno_value)
                                    : absl::StrCat("else ", DescribeVerdict(rule.errno_value)));
      unconditional = true;  // later rules for this call are never reached
      continue;
    }
    std::vector<std::string> conditions;
    for (const ArgCondition& condition : rule.conditions) {
      conditions.push_back(DescribeCondition(number, condition));
    }
    parts.push_back(
        absl::StrCat(absl::StrJoin(conditions, ", "), ": ", DescribeVerdict(rule.errno_value)));
  }
  if (parts.empty()) return "trap";
  if (!unconditional) parts.push_back("else trap");
  return absl::StrJoin(parts, "; ");
}

}  // namespace

std::string FilterTable(const SandboxOptions& options) {
  const std::pair<const char*, SyscallAllowlist> roles[] = {
      {"every thread (the process's filter)", AllowlistFor(ThreadRole::kControl, options)},
      {"vCPU threads (also bound by the process's)", AllowlistFor(ThreadRole::kVcpu, options)},
      {"iothreads (also bound by the process's)", AllowlistFor(ThreadRole::kIo, options)},
      {"the jail's supervisor (a process of its own)", SupervisorAllowlist()},
      {"the socket janitor (a process of its own)", JanitorAllowlist()}};
  std::vector<SyscallAllowlist> lists;
  std::map<std::string, int> calls;  // by name: the table reads alphabetically
  for (const auto& [title, list] : roles) {
    lists.push_back(list);
    for (const SyscallRule& rule : list.rules()) calls[SyscallName(rule.number)] = rule.number;
  }
  std::string table = "| system call";
  for (const auto& [title, list] : roles) absl::StrAppend(&table, " | ", title);
  absl::StrAppend(&table, " |\n|---");
  for (size_t column = 0; column < lists.size(); ++column) absl::StrAppend(&table, "|---");
  absl::StrAppend(&table, "|\n");
  for (const auto& [name, number] : calls) {
    absl::StrAppend(&table, "| `", name, "`");
    for (const SyscallAllowlist& list : lists)
      absl::StrAppend(&table, " | ", DescribeRules(list, number));
    absl::StrAppend(&table, " |\n");
  }
  return table;
}

}  // namespace vmm::sandbox

#include "vmm/host_kvm.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace vmm {

bool CpuinfoHasFlag(std::string_view cpuinfo, std::string_view flag) {
  const absl::string_view wanted(flag.data(), flag.size());
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(cpuinfo.data(), cpuinfo.size()), '\n')) {
    // "flags\t\t: fpu vme ..." (x86's /proc/cpuinfo; every CPU repeats it, the first is enough).
    if (!absl::ConsumePrefix(&line, "flags")) continue;
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, ":")) continue;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (word == wanted) return true;
    }
    return false;
  }
  return false;
}

HostKvmKind DetectHostKvmKind() {
  HostKvmKind kind;
  struct stat st {};
  kind.pvm = stat("/sys/module/kvm_pvm", &st) == 0;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::stringstream text;
  text << cpuinfo.rdbuf();
  kind.cpuid_faulting = CpuinfoHasFlag(text.str(), "cpuid_fault");
  return kind;
}

std::optional<std::string> Ring3CpuidNotice(const HostKvmKind& kind) {
  if (!kind.pvm || kind.cpuid_faulting) return std::nullopt;
  return "note: /dev/kvm is PVM on a CPU without CPUID faulting: CPUID executed in guest user "
         "space returns the host's values, not the VMM's (--cpu-features and the topology apply "
         "to the guest kernel only)";
}

}  // namespace vmm

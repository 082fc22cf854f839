// microvm_testing: the microvm launcher with what only tests and benchmarks need, so that the
// product binary carries none of it: the simulated host CD-ROM drive of probe-delay-us
// (block/simulated_cdrom.h), whose every status probe costs the given delay and is counted.
#include <memory>

#include "block/simulated_cdrom.h"
#include "vmm/microvm_launcher.h"

int main(int argc, char** argv) {
  vmm::LauncherExtensions extensions;
  extensions.simulated_drive =
      [](const std::string& path,
         std::chrono::microseconds probe_delay) -> std::unique_ptr<block::CdromDevice> {
    return std::make_unique<block::SimulatedCdromDevice>(path, probe_delay);
  };
  return vmm::RunMicrovm(argc, argv, extensions);
}

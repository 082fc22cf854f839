#ifndef VMM_MICROVM_LAUNCHER_H_
#define VMM_MICROVM_LAUNCHER_H_

#include "vmm/storage.h"

namespace vmm {

// What only a test build of the launcher adds (//vmm:microvm_testing); the product passes none.
struct LauncherExtensions {
  // The simulated host drive of --ide-cdrom/--cdrom=ISO,probe-delay-us=N (benchmarks and tests of
  // the host CD-ROM path where no /dev/sr* exists). Without it the option is refused.
  SimulatedDriveFactory simulated_drive;
};

// The microvm command: parses argv (README.md, --help), runs the VM, returns the exit status.
int RunMicrovm(int argc, char** argv, const LauncherExtensions& extensions);

}  // namespace vmm

#endif  // VMM_MICROVM_LAUNCHER_H_

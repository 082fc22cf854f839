// microvm: launches a KVM microVM (README.md, docs/machine.md). The product build: no test hooks.
#include "vmm/microvm_launcher.h"

int main(int argc, char** argv) { return vmm::RunMicrovm(argc, argv, {}); }

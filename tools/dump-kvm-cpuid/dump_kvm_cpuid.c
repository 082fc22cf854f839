// Prints KVM_GET_SUPPORTED_CPUID as text, one entry a line:
//   function index flags eax ebx ecx edx      (all hex, 0x-prefixed)
// after "# " header lines naming the source. Captures the unit-test fixtures in vmm/x86/testdata/
// from hosts (or nested L1 guests) whose KVM the VMM's CPUID shaping must handle.
// C, not C++: Linux 6.1's uapi <linux/kvm.h> declares kvm_cpuid2's entries with
// __DECLARE_FLEX_ARRAY, which C++ lays out differently (see vmm/kvm_abi.h); C gets the kernel ABI.
// Linked statically so it runs from a bare busybox initramfs.
#define _GNU_SOURCE  // O_CLOEXEC under strict -std=c11
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <unistd.h>

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "/dev/kvm";
  const int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "dump-kvm-cpuid: open %s: %s\n", path, strerror(errno));
    return 1;
  }
  // KVM fails with E2BIG until the buffer is large enough (Documentation/virt/kvm/api.rst).
  for (unsigned capacity = 128; capacity <= 4096; capacity *= 2) {
    struct kvm_cpuid2* cpuid =
        calloc(1, sizeof(struct kvm_cpuid2) + capacity * sizeof(struct kvm_cpuid_entry2));
    if (cpuid == NULL) return 1;
    cpuid->nent = capacity;
    if (ioctl(fd, KVM_GET_SUPPORTED_CPUID, cpuid) < 0) {
      const int error = errno;
      free(cpuid);
      if (error == E2BIG) continue;
      fprintf(stderr, "dump-kvm-cpuid: KVM_GET_SUPPORTED_CPUID: %s\n", strerror(error));
      return 1;
    }
    struct utsname uts;
    memset(&uts, 0, sizeof(uts));
    uname(&uts);
    printf("# KVM_GET_SUPPORTED_CPUID from %s, kernel %s %s\n", path, uts.release, uts.machine);
    printf("# function index flags eax ebx ecx edx\n");
    for (unsigned i = 0; i < cpuid->nent; ++i) {
      const struct kvm_cpuid_entry2* e = &cpuid->entries[i];
      printf("0x%08x 0x%x 0x%x 0x%08x 0x%08x 0x%08x 0x%08x\n", e->function, e->index, e->flags,
             e->eax, e->ebx, e->ecx, e->edx);
    }
    free(cpuid);
    return 0;
  }
  fprintf(stderr, "dump-kvm-cpuid: KVM_GET_SUPPORTED_CPUID: more than 4096 entries\n");
  return 1;
}

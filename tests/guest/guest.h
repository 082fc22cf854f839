/*
 * Runtime API of the freestanding test guest (see docs/test-guest.md).
 *
 * Test code runs in ring 3 with an identity map of 0-4 GiB that ring 3 may access: MMIO and DMA
 * buffers work directly, at native speed apart from the VM exits of MMIO. Port I/O and cli/sti/hlt
 * are plain instructions too: native where IOPL = 3 takes, emulated by the ring-0 #GP entry under
 * PVM (see "Port I/O" below). Only interrupt handlers (irq_register) run in ring 0, which PVM
 * emulates at about 1 us per instruction: keep them tiny.
 * Physical address == virtual address for everything below 4 GiB.
 */
#ifndef TESTS_GUEST_GUEST_H_
#define TESTS_GUEST_GUEST_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/guest/dtb.h"
#include "tests/guest/layout.h"

/* ================================================================================================
 * Tests. A test is a function registered with GUEST_TEST and selected by `test=NAME` on the
 * command line. Returning from it prints "TEST NAME: PASS" and exits with GUEST_EXIT_PASS;
 * test_fail() prints "TEST NAME: FAIL <reason>" and exits with GUEST_EXIT_FAIL.
 *
 *   GUEST_TEST(my_device, "drives my device") {
 *     if (!thing_works()) test_fail("thing returned %d", err);
 *   }
 */
struct guest_test {
  const char *name;
  const char *description;
  void (*run)(void);
};

#define GUEST_TEST(test_name, test_description) \
  GUEST_TEST_NAMED(test_name, #test_name, test_description)

/* The same with a command-line name that is not a C identifier (e.g. "scsi-rw"):
 *   GUEST_TEST_NAMED(scsi_rw, "scsi-rw", "...") { ... } */
#define GUEST_TEST_NAMED(fn_name, name_string, test_description)                                  \
  static void guest_test_fn_##fn_name(void);                                                      \
  static const struct guest_test guest_test_entry_##fn_name                                       \
      __attribute__((used, section("guest_tests"), aligned(8))) = {name_string, test_description, \
                                                                   guest_test_fn_##fn_name};      \
  static void guest_test_fn_##fn_name(void)

/* Exit statuses (the VMM exits with them; QEMU's isa-debug-exit with (status << 1) | 1). */
#define GUEST_EXIT_PASS 0
#define GUEST_EXIT_FAIL 1
#define GUEST_EXIT_USAGE 2     /* unknown test name or bad arguments */
#define GUEST_EXIT_EXCEPTION 3 /* unexpected CPU exception (vector, error, RIP, CR2 are printed) */

__attribute__((noreturn, format(printf, 1, 2))) void test_fail(const char *fmt, ...);
/* Name of the running test ("" before one was selected). */
const char *test_name(void);

/* Ends the VM: writes `status` to the debug-exit port (0xf4 or the FDT's microvm,debug-exit). */
__attribute__((noreturn)) void guest_exit(unsigned status);
/* Prints "PANIC: <message>" and exits with GUEST_EXIT_FAIL. */
__attribute__((noreturn, format(printf, 1, 2))) void guest_panic(const char *fmt, ...);
/* Resets the machine the way Linux's reboot=k does: once the i8042's input buffer is empty (at
 * most 100 ms), prints `announcement` and writes command 0xFE (pulse the reset line) to port 0x64.
 * The VMM stops or restarts the guest; still running 1 s later fails the test. */
__attribute__((noreturn)) void i8042_reset(const char *announcement);

/* ================================================================================================
 * Command line and boot information.
 * The PVH command line is "test=NAME key=value ...". Values are whitespace-delimited.
 */
const char *boot_cmdline(void);
/* Value of `key=value` (last occurrence wins); "" for a bare `key`; NULL when absent. */
const char *arg_get(const char *key);
/* Numeric argument (decimal, or hex with 0x); `fallback` when absent or malformed. */
uint64_t arg_u64(const char *key, uint64_t fallback);

/* The flattened device tree: the last PVH module whose command line is "fdt" (machine.md).
 * NULL when there is none (e.g. under QEMU). */
const struct dtb *boot_dtb(void);

/* Number of CPUs: cpu nodes under /cpus in the FDT, else `cpus=N`, else 1. */
unsigned cpu_count(void);
/* APIC ID of CPU number `index` (0 <= index < cpu_count()): the FDT's cpu reg, else the index. */
unsigned cpu_apic_id(unsigned index);

/* Usable RAM from the PVH memory map (e820 type 1). */
struct ram_region {
  uint64_t base;
  uint64_t size;
};
unsigned ram_regions(const struct ram_region **regions);

/* ================================================================================================
 * Port I/O: plain IN/OUT. Ring 3 runs with IOPL = 3; where the CPU does not honour that (PVM, the
 * KVM of our machines), the instruction raises #GP and the guest's ring-0 #GP entry performs it
 * (boot.S, gp_entry), so the same code works everywhere. Measured under PVM + QEMU: about 100 us
 * per IN/OUT (the #GP round trip through emulated ring 0 plus the VM exit), against about 30 us
 * for an MMIO access from ring 3. Poll sparingly; prefer MMIO registers where a device has both.
 */
static inline void outb(uint16_t port, uint8_t value) {
  __asm__ volatile("outb %0, %1" : : "a"(value), "Nd"(port) : "memory");
}
static inline void outw(uint16_t port, uint16_t value) {
  __asm__ volatile("outw %0, %1" : : "a"(value), "Nd"(port) : "memory");
}
static inline void outl(uint16_t port, uint32_t value) {
  __asm__ volatile("outl %0, %1" : : "a"(value), "Nd"(port) : "memory");
}
static inline uint8_t inb(uint16_t port) {
  uint8_t value;
  __asm__ volatile("inb %1, %0" : "=a"(value) : "Nd"(port) : "memory");
  return value;
}
static inline uint16_t inw(uint16_t port) {
  uint16_t value;
  __asm__ volatile("inw %1, %0" : "=a"(value) : "Nd"(port) : "memory");
  return value;
}
static inline uint32_t inl(uint16_t port) {
  uint32_t value;
  __asm__ volatile("inl %1, %0" : "=a"(value) : "Nd"(port) : "memory");
  return value;
}

/* ================================================================================================
 * MMIO (anything below 4 GiB; 0xc0000000-0xffffffff is mapped uncached) and barriers. x86 keeps stores ordered with other stores and loads with loads, and UC
 * accesses are not reordered at all; the compiler barrier stops GCC from moving ordinary memory
 * accesses (descriptor rings) across a device access. Use mb()/wmb()/rmb() between a DMA buffer
 * and its doorbell when the buffer is in write-back RAM.
 */
#define compiler_barrier() __asm__ volatile("" : : : "memory")
static inline void mb(void) { __asm__ volatile("mfence" : : : "memory"); }
static inline void rmb(void) { __asm__ volatile("lfence" : : : "memory"); }
static inline void wmb(void) { __asm__ volatile("sfence" : : : "memory"); }
static inline void cpu_relax(void) { __asm__ volatile("pause" : : : "memory"); }

static inline uint8_t mmio_read8(uint64_t addr) {
  compiler_barrier();
  uint8_t v = *(volatile uint8_t *)(uintptr_t)addr;
  compiler_barrier();
  return v;
}
static inline uint16_t mmio_read16(uint64_t addr) {
  compiler_barrier();
  uint16_t v = *(volatile uint16_t *)(uintptr_t)addr;
  compiler_barrier();
  return v;
}
static inline uint32_t mmio_read32(uint64_t addr) {
  compiler_barrier();
  uint32_t v = *(volatile uint32_t *)(uintptr_t)addr;
  compiler_barrier();
  return v;
}
static inline uint64_t mmio_read64(uint64_t addr) {
  compiler_barrier();
  uint64_t v = *(volatile uint64_t *)(uintptr_t)addr;
  compiler_barrier();
  return v;
}
static inline void mmio_write8(uint64_t addr, uint8_t v) {
  compiler_barrier();
  *(volatile uint8_t *)(uintptr_t)addr = v;
  compiler_barrier();
}
static inline void mmio_write16(uint64_t addr, uint16_t v) {
  compiler_barrier();
  *(volatile uint16_t *)(uintptr_t)addr = v;
  compiler_barrier();
}
static inline void mmio_write32(uint64_t addr, uint32_t v) {
  compiler_barrier();
  *(volatile uint32_t *)(uintptr_t)addr = v;
  compiler_barrier();
}
static inline void mmio_write64(uint64_t addr, uint64_t v) {
  compiler_barrier();
  *(volatile uint64_t *)(uintptr_t)addr = v;
  compiler_barrier();
}

/* ================================================================================================
 * Serial console (16550 at COM1 0x3f8 or the FDT's ns16550a). Output lines end in "\n" only.
 * printf/puts hold a lock for the whole call, so lines from different CPUs do not interleave.
 * Output goes out 128 bytes per syscall when ring 3 lacks IOPL (SYS_SERIAL_WRITE); input is polled
 * (one LSR read per poll).
 */
void serial_write(const char *s, size_t n);
/* Blocking read of one byte. */
int serial_getc(void);
/* One byte, or -1 when nothing arrived within timeout_us microseconds. */
int serial_getc_timeout(uint64_t timeout_us);
/* Reads up to '\n' or '\r' (not stored; the line is NUL-terminated and truncated to size-1).
 * Returns the length, or -1 on timeout (timeout_us == 0: wait forever). */
int serial_read_line(char *buf, size_t size, uint64_t timeout_us);

/* printf subset: %d %i %u %x %X %o %c %s %p %%, flags '-' '0' '#' '+' ' ', width and precision
 * (digits or *), length modifiers hh h l ll z j t. No floating point. */
__attribute__((format(printf, 1, 2))) int printf(const char *fmt, ...);
int vprintf(const char *fmt, va_list ap);
__attribute__((format(printf, 3, 4))) int snprintf(char *buf, size_t size, const char *fmt, ...);
int vsnprintf(char *buf, size_t size, const char *fmt, va_list ap);
int puts(const char *s); /* appends "\n" */

/* ================================================================================================
 * Strings and memory.
 */
void *memcpy(void *dst, const void *src, size_t n);
void *memmove(void *dst, const void *src, size_t n);
void *memset(void *dst, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);
char *strchr(const char *s, int c);
/* Parses decimal or 0x-prefixed hex; true when the whole string was a number. */
bool parse_u64(const char *s, uint64_t *out);

/* ================================================================================================
 * Time (TSC). tsc_hz() finds the TSC frequency on first use: CPUID leaf 0x40000010 if the
 * hypervisor offers it, else KVM's pvclock (tsc_to_system_mul), else 10 ms of PIT channel 2, else
 * it assumes 2 GHz (with a warning). Call it once on the boot CPU before APs use the helpers below.
 */
static inline uint64_t rdtsc(void) {
  uint32_t lo, hi;
  __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return ((uint64_t)hi << 32) | lo;
}
uint64_t tsc_hz(void);
void udelay(uint64_t microseconds);
/* A TSC deadline `microseconds` from now, and whether it has passed:
 *   uint64_t deadline = deadline_after_us(100000);
 *   while (!done()) { if (deadline_passed(deadline)) test_fail("timeout"); cpu_relax(); } */
uint64_t deadline_after_us(uint64_t microseconds);
static inline bool deadline_passed(uint64_t deadline) { return rdtsc() >= deadline; }
uint64_t tsc_to_us(uint64_t ticks);

/* ================================================================================================
 * PCI configuration space, mechanism #1 (ports 0xCF8/0xCFC; PCI Local Bus Spec 3.0, 3.2.2.3.2).
 */
uint32_t pci_cfg_read32(unsigned bus, unsigned dev, unsigned fn, unsigned offset);
uint16_t pci_cfg_read16(unsigned bus, unsigned dev, unsigned fn, unsigned offset);
uint8_t pci_cfg_read8(unsigned bus, unsigned dev, unsigned fn, unsigned offset);
void pci_cfg_write32(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint32_t value);
void pci_cfg_write16(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint16_t value);
void pci_cfg_write8(unsigned bus, unsigned dev, unsigned fn, unsigned offset, uint8_t value);

/* ================================================================================================
 * DMA memory: a bump allocator over guest RAM above the image (below 3 GiB, skipping PVH modules).
 * Memory is zeroed, write-back cached (emulated devices are coherent) and identity mapped (the
 * address is the physical address). Never freed. Panics when out of memory. Safe on any CPU.
 */
void *dma_alloc(size_t size);                       /* page (4 KiB) aligned */
void *dma_alloc_aligned(size_t size, size_t align); /* align: power of two */
static inline uint64_t dma_addr(const void *p) { return (uint64_t)(uintptr_t)p; }

/* ================================================================================================
 * Interrupts. Vectors 0x20..0xfe except SYSCALL_VECTOR (0x81) are free for drivers; 0xff is the
 * LAPIC spurious vector. The handler runs in ring 0 with interrupts off, on the interrupted CPU,
 * and the runtime writes the LAPIC EOI after it returns. Ring-0 code is emulated under PVM
 * (~1 us per instruction): count, record, return; do the work in ring 3. Handlers must not call
 * irq_enable/irq_disable/cpu_wait_for_interrupt (ring-3 helpers).
 *
 * Test code starts with interrupts off (RFLAGS.IF = 0). irq_enable()/irq_disable() are STI/CLI:
 * native with IOPL 3, emulated by the #GP entry under PVM (~100 us each; PVM does honour the guest's
 * IF in ring 3). cpu_wait_for_interrupt() is HLT: in ring 3 it traps and the #GP entry does
 * "sti; hlt; cli", so it returns, interrupts off, after one interrupt has been handled.
 */
typedef void (*irq_handler_fn)(unsigned vector, void *context);
void irq_register(unsigned vector, irq_handler_fn handler, void *context);
void irq_unregister(unsigned vector);
static inline void irq_enable(void) { __asm__ volatile("sti" : : : "memory"); }
static inline void irq_disable(void) { __asm__ volatile("cli" : : : "memory"); }
/* Halts until one interrupt has been handled; interrupts are off again on return. Cheaper than
 * spinning when a test just waits for an interrupt. */
void cpu_wait_for_interrupt(void);

/* Local APIC (xAPIC MMIO, Intel SDM Vol. 3A chapter 11), at lapic_base (0xfee00000 or the FDT's
 * intel,ce4100-lapic). */
#define LAPIC_ID 0x020
#define LAPIC_TPR 0x080
#define LAPIC_EOI 0x0b0
#define LAPIC_SVR 0x0f0
#define LAPIC_ICR_LOW 0x300
#define LAPIC_ICR_HIGH 0x310
#define LAPIC_LVT_TIMER 0x320
#define LAPIC_LVT_LINT0 0x350
#define LAPIC_TIMER_INITIAL 0x380
#define LAPIC_TIMER_CURRENT 0x390
#define LAPIC_TIMER_DIVIDE 0x3e0
extern uint64_t lapic_base;
static inline uint32_t lapic_read(unsigned reg) { return mmio_read32(lapic_base + reg); }
static inline void lapic_write(unsigned reg, uint32_t v) { mmio_write32(lapic_base + reg, v); }
/* Software-enables this CPU's LAPIC (SVR bit 8, spurious vector 0xff) and masks LINT0 (no
 * ExtINT from a legacy 8259 PIC). Each CPU must call it before it can take LAPIC interrupts. */
void lapic_enable(void);
/* This CPU's APIC ID (also its index for per-CPU data), from the stack it runs on. */
unsigned this_cpu(void);

/* CPUID as the VMM configured it: executed in ring 0 (a syscall from ring 3). A ring-3 CPUID traps
 * to the hypervisor only where the host CPU has CPUID faulting or the KVM is hardware-assisted;
 * under PVM on a host without it, ring 3 sees the host's values (docs/test-guest.md). */
void vmm_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *eax, uint32_t *ebx, uint32_t *ecx,
               uint32_t *edx);

/* ================================================================================================
 * SMP. smp_start_aps() starts every CPU but the caller with INIT-SIPI-SIPI; each runs `fn(apic_id)`
 * in ring 3 on its own stack (interrupts off, LAPIC software-disabled until it calls lapic_enable),
 * then parks (halts forever). Returns the number of APs that reached ring 3 within timeout_us.
 * Call once. Up to GUEST_MAX_CPUS CPUs with APIC IDs below GUEST_MAX_CPUS.
 */
unsigned smp_start_aps(void (*fn)(unsigned apic_id), uint64_t timeout_us);

/* A spinlock usable from ring 3 on any CPU. */
typedef struct {
  volatile uint32_t locked;
} spinlock_t;
static inline bool spin_trylock(spinlock_t *lock) {
  return __atomic_exchange_n(&lock->locked, 1, __ATOMIC_ACQUIRE) == 0;
}
static inline void spin_lock(spinlock_t *lock) {
  while (!spin_trylock(lock)) {
    while (lock->locked) cpu_relax();
  }
}
static inline void spin_unlock(spinlock_t *lock) {
  __atomic_store_n(&lock->locked, 0, __ATOMIC_RELEASE);
}

/* MSR access (a syscall from ring 3, direct in ring 0). A #GP on a bad MSR is reported like any
 * exception. */
uint64_t rdmsr(uint32_t msr);
void wrmsr(uint32_t msr, uint64_t value);

/* Privilege level of the running code (3 for test code, 0 in interrupt handlers). */
static inline unsigned current_ring(void) {
  uint16_t cs;
  __asm__ volatile("mov %%cs, %0" : "=r"(cs));
  return cs & 3;
}

#endif /* TESTS_GUEST_GUEST_H_ */

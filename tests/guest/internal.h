/*
 * Declarations shared by the runtime's own files (not part of the test-author API in guest.h).
 */
#ifndef TESTS_GUEST_INTERNAL_H_
#define TESTS_GUEST_INTERNAL_H_

#include "tests/guest/guest.h"

/* boot.S */
extern uint32_t boot_start_info_paddr;
extern uint64_t gdt[];
extern char kernel_stacks[], ist_stacks[], user_stacks[];
extern const char ap_trampoline_start[], ap_trampoline_end[];
/* guest.ld */
extern char __image_start[], __image_end[];
extern const struct guest_test __start_guest_tests[], __stop_guest_tests[];

/* Entry points called from boot.S. */
uint64_t ring0_cpu_init(unsigned cpu); /* ring 0, once per CPU */
struct interrupt_frame;
void interrupt_dispatch(struct interrupt_frame *frame);  /* ring 0 */
__attribute__((noreturn)) void guest_main(unsigned cpu); /* ring 3, boot CPU */
__attribute__((noreturn)) void ap_main(unsigned cpu);    /* ring 3, application processors */

/* runtime.c */
extern uint16_t debug_exit_port;
void serial_init(uint16_t port);
/* Console bytes straight to the UART with IN/OUT; the caller holds the console lock (ring 3) or is
 * the SYS_SERIAL_WRITE handler (ring 0). */
void serial_write_direct(const char *s, size_t n);
/* True when ring 3 really has IOPL 3 (not under PVM): then IN/OUT need no ring-0 help. */
extern bool port_io_native;
void dma_init(uint64_t start, uint64_t end);
/* The allocator's remaining window [*next, *end). */
void dma_window(uint64_t *next, uint64_t *end);
/* Stop this CPU for good (cli; hlt in ring 0). */
__attribute__((noreturn)) void cpu_park(void);
/* Printing from a context that may have interrupted a printf on the same CPU (exceptions): do not
 * wait for the console lock. */
void console_break_lock(void);

/* main.c */
void set_test_name(const char *name);
/* The registered tests sorted by name; returns how many (at most `max`). */
unsigned sorted_tests(const struct guest_test **tests, unsigned max);

/* Ring 3 -> ring 0 through the DPL-3 gate at SYSCALL_VECTOR (layout.h). interrupt_common saves and
 * restores every general register except RAX, which carries the result. Never from ring 0: PVM
 * cannot emulate INT n there ("emulation failure"). */
static inline uint64_t syscall1(uint64_t function, uint64_t arg) {
  uint64_t result;
  __asm__ volatile("int %[vector]"
                   : "=a"(result)
                   : [vector] "i"(SYSCALL_VECTOR), "a"(function), "D"(arg)
                   : "memory");
  return result;
}

static inline uint64_t syscall2(uint64_t function, uint64_t arg0, uint64_t arg1) {
  uint64_t result;
  __asm__ volatile("int %[vector]"
                   : "=a"(result)
                   : [vector] "i"(SYSCALL_VECTOR), "a"(function), "D"(arg0), "S"(arg1)
                   : "memory");
  return result;
}

static inline void cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *eax, uint32_t *ebx,
                         uint32_t *ecx, uint32_t *edx) {
  __asm__ volatile("cpuid"
                   : "=a"(*eax), "=b"(*ebx), "=c"(*ecx), "=d"(*edx)
                   : "a"(leaf), "c"(subleaf));
}

#endif /* TESTS_GUEST_INTERNAL_H_ */

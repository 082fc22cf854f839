/*
 * The only C code of the guest that runs in ring 0: per-CPU TSS set-up, interrupt dispatch,
 * exception reports and the three syscalls. Under PVM ring-0 instructions are emulated (~1 us
 * each), so every path here is kept short.
 */
#include "tests/guest/guest.h"
#include "tests/guest/internal.h"

/* 64-bit TSS (Intel SDM Vol. 3A 7.7, figure 7-11). */
struct tss64 {
  uint32_t reserved0;
  uint64_t rsp[3];
  uint64_t reserved1;
  uint64_t ist[7];
  uint64_t reserved2;
  uint16_t reserved3;
  uint16_t iomap_base;
} __attribute__((packed));

/* 128-byte slots in one 4 KiB-aligned page: no TSS crosses a page boundary (SDM 7.2.1). In .data,
 * not .bss: the boot CPU fills its TSS before ring 3 zeroes .bss. */
struct tss_slot {
  struct tss64 tss;
  uint8_t padding[128 - sizeof(struct tss64)];
};
static struct tss_slot tss_slots[GUEST_MAX_CPUS]
    __attribute__((section(".data.tss"), aligned(4096)));

/* Saved by interrupt_common in boot.S (lowest address first), then the stub's vector and error
 * code, then the frame the CPU pushed (SDM 6.14.2). */
struct interrupt_frame {
  uint64_t r15, r14, r13, r12, r11, r10, r9, r8, rbp, rdi, rsi, rdx, rcx, rbx, rax;
  uint64_t vector, error_code;
  uint64_t rip, cs, rflags, rsp, ss;
};

struct irq_slot {
  irq_handler_fn handler;
  void *context;
};
static struct irq_slot irq_table[256];
static uint64_t unexpected_interrupts;
static volatile uint32_t exception_in_progress;

uint64_t lapic_base = 0xfee00000;

uint64_t ring0_cpu_init(unsigned cpu) {
  struct tss64 *tss = &tss_slots[cpu].tss;
  tss->rsp[0] = (uint64_t)(uintptr_t)(kernel_stacks + (uint64_t)(cpu + 1) * KERNEL_STACK_SIZE);
  tss->ist[0] = (uint64_t)(uintptr_t)(ist_stacks + (uint64_t)(cpu + 1) * IST_STACK_SIZE);
  /* Base beyond the limit: no I/O permission bitmap (SDM Vol. 1 19.5.2). Ring 3 gets IOPL 3; where
   * that does not take (PVM), #GP emulation in boot.S does the I/O. */
  tss->iomap_base = sizeof(struct tss64);

  /* 16-byte system-segment descriptor, type 9 = available 64-bit TSS (SDM Vol. 3A 7.2.3). */
  uint64_t base = (uint64_t)(uintptr_t)tss;
  uint64_t limit = sizeof(struct tss64) - 1;
  unsigned index = TSS_SEL_BASE / 8 + cpu * 2;
  gdt[index] = (limit & 0xffff) | ((base & 0xffffff) << 16) | (0x89ull << 40) |
               (((limit >> 16) & 0xf) << 48) | (((base >> 24) & 0xff) << 56);
  gdt[index + 1] = base >> 32;
  uint16_t selector = (uint16_t)(TSS_SEL_BASE + cpu * 16);
  __asm__ volatile("ltr %0" : : "r"(selector) : "memory");

  return (uint64_t)(uintptr_t)(user_stacks + (uint64_t)(cpu + 1) * USER_STACK_SIZE);
}

static const char *const exception_names[32] = {
    "#DE divide error",
    "#DB debug",
    "NMI",
    "#BP breakpoint",
    "#OF overflow",
    "#BR bound range",
    "#UD invalid opcode",
    "#NM device not available",
    "#DF double fault",
    "coprocessor segment overrun",
    "#TS invalid TSS",
    "#NP segment not present",
    "#SS stack fault",
    "#GP general protection",
    "#PF page fault",
    "reserved 15",
    "#MF x87 error",
    "#AC alignment check",
    "#MC machine check",
    "#XM SIMD exception",
    "#VE virtualization exception",
    "#CP control protection",
    "reserved 22",
    "reserved 23",
    "reserved 24",
    "reserved 25",
    "reserved 26",
    "reserved 27",
    "#HV hypervisor injection",
    "#VC VMM communication",
    "#SX security exception",
    "reserved 31",
};

__attribute__((noreturn)) static void report_exception(const struct interrupt_frame *frame) {
  /* A fault while reporting (or two CPUs faulting at once): stop right away. */
  if (__atomic_exchange_n(&exception_in_progress, 1, __ATOMIC_ACQ_REL)) {
    guest_exit(GUEST_EXIT_EXCEPTION);
  }
  uint64_t cr2;
  __asm__ volatile("mov %%cr2, %0" : "=r"(cr2));
  console_break_lock();
  unsigned vector = (unsigned)frame->vector & 0xff;
  printf("EXCEPTION: vector %u (%s) on cpu %u in ring %u: error 0x%lx rip 0x%lx cr2 0x%lx\n",
         vector, exception_names[vector], this_cpu(), (unsigned)(frame->cs & 3), frame->error_code,
         frame->rip, cr2);
  printf("  rsp 0x%lx rflags 0x%lx cs 0x%lx ss 0x%lx\n", frame->rsp, frame->rflags, frame->cs,
         frame->ss);
  printf("  rax 0x%lx rbx 0x%lx rcx 0x%lx rdx 0x%lx rsi 0x%lx rdi 0x%lx rbp 0x%lx\n", frame->rax,
         frame->rbx, frame->rcx, frame->rdx, frame->rsi, frame->rdi, frame->rbp);
  printf("  r8 0x%lx r9 0x%lx r10 0x%lx r11 0x%lx r12 0x%lx r13 0x%lx r14 0x%lx r15 0x%lx\n",
         frame->r8, frame->r9, frame->r10, frame->r11, frame->r12, frame->r13, frame->r14,
         frame->r15);
  if (test_name()[0])
    printf("TEST %s: FAIL exception %u (%s)\n", test_name(), vector, exception_names[vector]);
  guest_exit(GUEST_EXIT_EXCEPTION);
}

static void handle_syscall(struct interrupt_frame *frame) {
  switch (frame->rax) {
    case SYS_PARK:
      for (;;) __asm__ volatile("cli; hlt");
    case SYS_TRIPLE_FAULT: {
      /* With a zero-limit IDT, #UD cannot be delivered (-> #GP), nor #GP (-> #DF), nor #DF: the
       * CPU shuts down (SDM Vol. 3A 6.15, interrupt 8). */
      static const struct {
        uint16_t limit;
        uint64_t base;
      } __attribute__((packed)) empty_idt = {0, 0};
      __asm__ volatile("lidt %0; ud2" : : "m"(empty_idt) : "memory");
      for (;;) __asm__ volatile("cli; hlt");
    }
    case SYS_RDMSR: {
      uint32_t lo, hi;
      __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"((uint32_t)frame->rdi));
      frame->rax = ((uint64_t)hi << 32) | lo;
      return;
    }
    case SYS_WRMSR:
      __asm__ volatile("wrmsr"
                       :
                       : "c"((uint32_t)frame->rdi), "a"((uint32_t)frame->rsi),
                         "d"((uint32_t)(frame->rsi >> 32))
                       : "memory");
      frame->rax = 0;
      return;
    case SYS_SERIAL_WRITE:
      serial_write_direct((const char *)(uintptr_t)frame->rdi, frame->rsi);
      frame->rax = 0;
      return;
    case SYS_CPUID: {
      /* interrupt_common restores RBX, RCX and RDX from the frame: ring 3 gets all four. */
      uint32_t eax, ebx, ecx, edx;
      cpuid((uint32_t)frame->rdi, (uint32_t)frame->rsi, &eax, &ebx, &ecx, &edx);
      frame->rax = eax;
      frame->rbx = ebx;
      frame->rcx = ecx;
      frame->rdx = edx;
      return;
    }
    default: frame->rax = (uint64_t)-1; return;
  }
}

void interrupt_dispatch(struct interrupt_frame *frame) {
  unsigned vector = (unsigned)frame->vector & 0xff; /* pushq imm8 sign-extends; keep 8 bits */
  if (vector < 32) report_exception(frame);
  if (vector == SYSCALL_VECTOR) {
    handle_syscall(frame);
    return;
  }
  /* Spurious interrupts are not acknowledged with an EOI (SDM Vol. 3A 11.9). */
  if (vector == SPURIOUS_VECTOR) return;
  irq_handler_fn handler = __atomic_load_n(&irq_table[vector].handler, __ATOMIC_ACQUIRE);
  if (handler) {
    handler(vector, irq_table[vector].context);
  } else if (__atomic_fetch_add(&unexpected_interrupts, 1, __ATOMIC_RELAXED) < 4) {
    printf("interrupt: no handler for vector %u on cpu %u\n", vector, this_cpu());
  }
  lapic_write(LAPIC_EOI, 0);
}

void irq_register(unsigned vector, irq_handler_fn handler, void *context) {
  if (vector < 32 || vector > 0xfe || vector == SYSCALL_VECTOR) {
    guest_panic("irq_register: vector %u is reserved", vector);
  }
  irq_table[vector].context = context;
  __atomic_store_n(&irq_table[vector].handler, handler, __ATOMIC_RELEASE);
}

void irq_unregister(unsigned vector) {
  if (vector < 256) __atomic_store_n(&irq_table[vector].handler, NULL, __ATOMIC_RELEASE);
}

/* HLT in ring 3 raises #GP (CPL > 0); gp_entry in boot.S turns it into sti; hlt; cli. */
void cpu_wait_for_interrupt(void) { __asm__ volatile("hlt" : : : "memory"); }

void cpu_park(void) {
  if (current_ring() == 0) {
    for (;;) __asm__ volatile("cli; hlt");
  }
  for (;;) syscall1(SYS_PARK, 0);
}

uint64_t rdmsr(uint32_t msr) {
  if (current_ring() == 0) {
    uint32_t lo, hi;
    __asm__ volatile("rdmsr" : "=a"(lo), "=d"(hi) : "c"(msr));
    return ((uint64_t)hi << 32) | lo;
  }
  return syscall1(SYS_RDMSR, msr);
}

void wrmsr(uint32_t msr, uint64_t value) {
  if (current_ring() == 0) {
    __asm__ volatile("wrmsr"
                     :
                     : "c"(msr), "a"((uint32_t)value), "d"((uint32_t)(value >> 32))
                     : "memory");
    return;
  }
  syscall2(SYS_WRMSR, msr, value);
}

void lapic_enable(void) {
  uint32_t svr = lapic_read(LAPIC_SVR);
  lapic_write(LAPIC_SVR, (svr & ~0xffu) | 0x100 | SPURIOUS_VECTOR); /* bit 8: APIC enable */
  /* Mask LINT0. Firmware (SeaBIOS under QEMU -M pc) leaves it in ExtINT mode with the 8259 PIC's
   * base at vector 8, so the PIT's IRQ 0 would arrive as "vector 8" (taken for a #DF) as soon as
   * a CPU enables interrupts. This guest uses LAPIC/MSI vectors only. */
  lapic_write(LAPIC_LVT_LINT0, 1u << 16);
}

/* Index of the per-CPU stack area [base, base + count * size) holding `sp`, or -1. */
static int stack_index(uintptr_t sp, const char *base, uint64_t size) {
  uintptr_t start = (uintptr_t)base;
  if (sp < start || sp >= start + GUEST_MAX_CPUS * size) return -1;
  return (int)((sp - start) / size);
}

void vmm_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *eax, uint32_t *ebx, uint32_t *ecx,
               uint32_t *edx) {
  if (current_ring() == 0) {
    cpuid(leaf, subleaf, eax, ebx, ecx, edx);
    return;
  }
  uint64_t a, b, c, d;
  __asm__ volatile("int %[vector]"
                   : "=a"(a), "=b"(b), "=c"(c), "=d"(d)
                   : [vector] "i"(SYSCALL_VECTOR), "a"((uint64_t)SYS_CPUID), "D"((uint64_t)leaf),
                     "S"((uint64_t)subleaf)
                   : "memory");
  *eax = (uint32_t)a;
  *ebx = (uint32_t)b;
  *ecx = (uint32_t)c;
  *edx = (uint32_t)d;
}

/* Every CPU runs on stacks of its own, chosen by its APIC ID when it booted (boot.S), so the stack
 * pointer names the CPU without an exit: no CPUID (ring 3 may see the host's where CPUID is not
 * trapped) and no LAPIC MMIO read (an exit, ~25 us under PVM) on the interrupt paths. */
unsigned this_cpu(void) {
  uintptr_t sp;
  __asm__("mov %%rsp, %0" : "=r"(sp));
  int index = stack_index(sp, user_stacks, USER_STACK_SIZE);
  if (index < 0) index = stack_index(sp, kernel_stacks, KERNEL_STACK_SIZE);
  if (index < 0) index = stack_index(sp, ist_stacks, IST_STACK_SIZE);
  if (index >= 0) return (unsigned)index;
  return lapic_read(LAPIC_ID) >> 24; /* xAPIC ID register, bits 31:24 (SDM Vol. 3A 11.4.6) */
}

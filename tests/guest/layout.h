/*
 * Boot-time layout constants of the test guest, shared by the assembly (boot.S, preprocessed by
 * cpp) and the C code. Plain #defines only: this file is included from assembly.
 */
#ifndef TESTS_GUEST_LAYOUT_H_
#define TESTS_GUEST_LAYOUT_H_

/* Physical (= virtual, everything is identity mapped) load address; the PVH ABI loads the ELF
 * segments at their physical addresses. guest.ld places the image here. */
#define GUEST_LOAD_ADDR 0x100000

/* The 256 interrupt entry stubs sit at a fixed address (the first bytes of the image, checked by an
 * ASSERT in guest.ld) so that the IDT can be emitted as static data by the assembler: a gate splits
 * the handler address into three fields, which a linker relocation cannot do. Each stub is padded
 * to ISR_STUB_SIZE bytes. */
#define ISR_STUBS_ADDR GUEST_LOAD_ADDR
#define ISR_STUB_SIZE 16

/* GDT selectors (guest.S builds the table). The TSS descriptors (16 bytes each in long mode, Intel
 * SDM Vol. 3A 7.2.3) follow, one per CPU, indexed by APIC ID. */
#define KERNEL_CS 0x08   /* 64-bit code, DPL 0 */
#define KERNEL_DS 0x10   /* flat data, DPL 0 (also valid in 32-bit protected mode) */
#define KERNEL_CS32 0x18 /* 32-bit flat code, DPL 0: used by the AP trampoline */
#define USER_DS 0x20     /* flat data, DPL 3; selector USER_DS | 3 */
#define USER_CS 0x28     /* 64-bit code, DPL 3; selector USER_CS | 3 */
#define TSS_SEL_BASE 0x30

/* Per-CPU resources are indexed by the local APIC ID, read from the xAPIC ID register at the
 * architectural base (Intel SDM Vol. 3A 11.4.1, 11.4.6); machine.md promises APIC IDs 0..N-1. A
 * CPU with a larger ID parks itself. */
#define LAPIC_DEFAULT_BASE 0xfee00000
#define LAPIC_ID_REGISTER 0x20
#define GUEST_MAX_CPUS 32
#define KERNEL_STACK_SIZE 8192 /* ring-0 stack (TSS.RSP0): interrupts and syscalls */
#define IST_STACK_SIZE 4096    /* TSS.IST1: double fault, so a bad RSP still gets reported */
#define USER_STACK_SIZE 32768  /* ring-3 stack: all test code runs here */

/* Real-mode start-up code for the application processors is copied here (4 KiB aligned, below
 * 1 MiB; the SIPI vector is the page number). machine.md leaves 0x8000 unused for PVH boots. */
#define AP_TRAMPOLINE_ADDR 0x8000

/* Ring 3 -> ring 0: INT SYSCALL_VECTOR, RAX = function, RDI = argument, result in RAX.
 * Under PVM (the KVM of our machines) guest ring 3 runs with the underlying IOPL forced to 0 and an
 * underlying IDT of its own: IN/OUT/CLI/STI/HLT raise #GP, INT n raises #UD (seen for 0x80 and
 * 0x81). The guest's #GP/#UD entry (boot.S) therefore emulates I/O instructions,
 * CLI/STI/HLT and INT SYSCALL_VECTOR coming from ring 3; on a CPU that honours IOPL = 3 and the
 * DPL-3 gate they simply run. */
#define SYSCALL_VECTOR 0x81
#define SYS_PARK 1         /* cli; hlt forever (idle an AP) */
#define SYS_TRIPLE_FAULT 2 /* load an empty IDT and raise #UD */
#define SYS_RDMSR 3        /* RDI = MSR; result = value */
#define SYS_WRMSR 4        /* RDI = MSR, RSI = value */
#define SYS_SERIAL_WRITE 5 /* RDI = bytes, RSI = count: console output in one round trip */
#define SYS_CPUID 6        /* RDI = leaf, RSI = subleaf; result in RAX, RBX, RCX, RDX */

/* The spurious-interrupt vector programmed into the LAPIC SVR (Intel SDM Vol. 3A 11.9). */
#define SPURIOUS_VECTOR 0xff

/* POST code written to port 0x80 by the first ring-3 instruction (machine.md). */
#define POST_PORT 0x80
#define POST_FIRST_RING3 0x03

/* RFLAGS for ring 3: IOPL = 3 (bits 12-13, so in/out and cli/sti are allowed in ring 3, Intel SDM
 * Vol. 1 19.5.1, where the CPU honours it; not under PVM, see above), reserved bit 1 set, IF clear
 * (a test enables interrupts when it wants them). */
#define RING3_RFLAGS 0x3002

#endif /* TESTS_GUEST_LAYOUT_H_ */

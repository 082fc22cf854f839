/*
 * Test guest boot path: PVH 32-bit entry -> long mode -> ring 3.
 *
 * Under the project's KVM (PVM, software nested virtualization) ring-0 code is emulated at about
 * 1 us per instruction, while ring-3 code runs natively. So everything that can be static data is:
 * the page tables, the GDT and the IDT are emitted here by the assembler, and the ring-0 path of a
 * CPU is a few dozen instructions before it drops to ring 3 with IOPL=3. PVM does not let guest
 * ring 3 have IOPL 3, so the #GP entry below emulates IN/OUT, CLI/STI/HLT and INT from ring 3.
 *
 * References: Xen PVH boot ABI (docs/misc/pvh.pandoc, include/public/arch-x86/hvm/start_info.h,
 * include/public/elfnote.h); Intel SDM Vol. 3A chapters 3-7 (segmentation, paging, interrupts,
 * tasks) and 9.8.5 (switching to IA-32e mode), Vol. 3A 8.4.4 (MP initialization).
 */
#include "tests/guest/layout.h"

#define CR0_PE (1 << 0)
#define CR0_PG (1 << 31)
#define CR4_PAE (1 << 5)
#define MSR_EFER 0xc0000080
#define EFER_LME (1 << 8)

/* Page-table entry bits (Intel SDM Vol. 3A 4.5). */
#define PTE_P 0x001
#define PTE_W 0x002
#define PTE_U 0x004 /* user-accessible: ring-3 test code touches RAM, MMIO and the LAPIC directly */
#define PTE_PWT 0x008
#define PTE_PCD 0x010
#define PTE_PS 0x080 /* 2 MiB page in a page-directory entry */

/* ------------------------------------------------------------------------------------------------
 * PVH ELF note (Xen elfnote.h, XEN_ELFNOTE_PHYS32_ENTRY = 18): name "Xen", descriptor = physical
 * address of the 32-bit entry point. The descriptor is 8 bytes, as Linux emits it; QEMU's loader
 * reads a 64-bit value from 64-bit ELF files, and a 4-byte reader sees the same low half.
 * The note must be 4-byte aligned (QEMU aligns the name by the PT_NOTE p_align).
 */
	.section .note.pvh, "a", @note
	.balign 4
	.long 4		/* namesz: "Xen\0" */
	.long 8		/* descsz */
	.long 18	/* type: XEN_ELFNOTE_PHYS32_ENTRY */
	.asciz "Xen"
	.balign 4
	.quad pvh_entry

/* ------------------------------------------------------------------------------------------------
 * 32-bit entry. PVH ABI: protected mode, paging off, flat CS/DS, EBX = physical address of
 * struct hvm_start_info. Application processors arrive at ap_entry32 from the real-mode trampoline.
 */
	.section .text.boot, "ax"
	.code32
	.globl pvh_entry
pvh_entry:
	cli
	cld
	movl %ebx, boot_start_info_paddr
	xorl %esi, %esi			/* ESI = 0: boot CPU */
	jmp enter_long_mode

	.globl ap_entry32
ap_entry32:
	movw $KERNEL_DS, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	cld
	movl $1, %esi			/* ESI = 1: application processor */

/* Intel SDM Vol. 3A 9.8.5: PAE on, CR3, EFER.LME, then CR0.PG activates IA-32e mode; a far jump to
 * a 64-bit code segment leaves compatibility mode. */
enter_long_mode:
	lgdt gdt_descriptor
	movl $pml4, %eax
	movl %eax, %cr3
	movl %cr4, %eax
	orl $CR4_PAE, %eax
	movl %eax, %cr4
	movl $MSR_EFER, %ecx
	rdmsr
	orl $EFER_LME, %eax
	wrmsr
	movl %cr0, %eax
	orl $(CR0_PG | CR0_PE), %eax
	movl %eax, %cr0
	ljmp $KERNEL_CS, $long_mode_entry

	.code64
long_mode_entry:
	movw $KERNEL_DS, %ax
	movw %ax, %ds
	movw %ax, %es
	movw %ax, %ss
	xorl %eax, %eax
	movw %ax, %fs
	movw %ax, %gs
	movl %esi, %r12d		/* R12 = 0 boot CPU, 1 AP (callee-saved across the C call) */

	/* CPU index = this CPU's local APIC ID: the xAPIC ID register (SDM Vol. 3A 11.4.6, bits 31:24)
	 * at the architectural base, where every CPU's APIC sits after reset. Not CPUID: where the host
	 * CPU lacks CPUID faulting a nested hypervisor may not trap it (docs/test-guest.md). */
	movl $(LAPIC_DEFAULT_BASE + LAPIC_ID_REGISTER), %ebx
	movl (%rbx), %ebx
	shrl $24, %ebx
	cmpl $GUEST_MAX_CPUS, %ebx
	jae park_cpu
	movl %ebx, %r13d		/* R13 = CPU index */

	/* This CPU's ring-0 stack (also its TSS.RSP0). */
	leal 1(%ebx), %eax
	imull $KERNEL_STACK_SIZE, %eax
	leaq kernel_stacks(%rax), %rsp

	lidt idt_descriptor
	movl %r13d, %edi
	call ring0_cpu_init		/* TSS + its GDT descriptor + LTR; returns the ring-3 stack top */

	/* iretq to ring 3 (SDM Vol. 3A 6.14.3: SS, RSP, RFLAGS, CS, RIP). */
	pushq $(USER_DS | 3)
	pushq %rax
	pushq $RING3_RFLAGS
	pushq $(USER_CS | 3)
	leaq ring3_ap_entry(%rip), %rax
	leaq ring3_boot_entry(%rip), %rcx
	testl %r12d, %r12d
	cmovzq %rcx, %rax
	pushq %rax
	movl %r13d, %edi		/* argument of the ring-3 entry: CPU index */
	movl $POST_FIRST_RING3, %eax	/* AL and DX for the first ring-3 instruction below */
	movl $POST_PORT, %edx
	iretq

park_cpu:
	cli
	hlt
	jmp park_cpu

/* ------------------------------------------------------------------------------------------------
 * Ring 3.
 */
	.globl ring3_boot_entry
ring3_boot_entry:
	outb %al, %dx			/* POST 0x03: the very first ring-3 instruction (machine.md) */
	/* Zero .bss here, natively, rather than in (emulated) ring 0. Nothing written before this point
	 * lives in .bss: the page tables, GDT, IDT, TSSs and boot_start_info_paddr are in .data, the
	 * stacks in .stacks. */
	movl %edi, %r12d
	movl $__bss_start, %edi
	movl $__bss_end, %ecx
	subl %edi, %ecx
	xorl %eax, %eax
	rep stosb
	movl %r12d, %edi
	call guest_main
	ud2

	.globl ring3_ap_entry
ring3_ap_entry:
	call ap_main
	ud2

/* ------------------------------------------------------------------------------------------------
 * AP real-mode trampoline, copied to AP_TRAMPOLINE_ADDR by smp.c. A SIPI with vector
 * AP_TRAMPOLINE_ADDR >> 12 starts the AP in real mode at CS = vector << 8, IP = 0
 * (SDM Vol. 3A 8.4.4). It loads the GDT, sets CR0.PE and far-jumps to ap_entry32 above.
 * Position-independent: data is addressed relative to the trampoline start through DS = CS.
 */
	.code16
	.globl ap_trampoline_start
ap_trampoline_start:
	cli
	movw %cs, %ax
	movw %ax, %ds
	lgdtl (ap_trampoline_gdt_descriptor - ap_trampoline_start)
	movl %cr0, %eax
	orl $CR0_PE, %eax
	movl %eax, %cr0
	ljmpl $KERNEL_CS32, $ap_entry32
	.balign 8
ap_trampoline_gdt_descriptor:
	.word gdt_end - gdt - 1
	.long gdt
	.globl ap_trampoline_end
ap_trampoline_end:
	.code64

/* ------------------------------------------------------------------------------------------------
 * Interrupt entry. Stub N pushes a zero error code when the CPU does not push one (SDM Vol. 3A
 * 6.15, table 6-1: 8, 10-14, 17, 21, 29, 30 push one), then N, then joins interrupt_common, which
 * saves the general registers (struct interrupt_frame in kernel.c) and calls
 * interrupt_dispatch(frame). All stubs are ISR_STUB_SIZE apart from ISR_STUBS_ADDR.
 * #UD (6) and #GP (13) first go to ud_entry/gp_entry, which emulate what PVM refuses ring 3.
 */
	.section .text.isr, "ax"
	.globl isr_stubs
isr_stubs:
	.set vector, 0
	.rept 256
	.balign ISR_STUB_SIZE, 0xcc
	.if vector == 6
	jmp ud_entry
	.elseif vector == 13
	jmp gp_entry
	.else
	.if (vector == 8) || (vector == 10) || (vector == 11) || (vector == 12) || (vector == 13) || (vector == 14) || (vector == 17) || (vector == 21) || (vector == 29) || (vector == 30)
	.else
	pushq $0
	.endif
	pushq $vector
	jmp interrupt_common
	.endif
	.set vector, vector + 1
	.endr
	.balign ISR_STUB_SIZE, 0xcc
	.globl isr_stubs_end
isr_stubs_end:

	.text
/* #GP from ring 3. Under PVM this is how IN/OUT and CLI/STI/HLT arrive (see layout.h), and a CPU
 * may also raise it for INT n: emulate those here, in as few (emulated) instructions as possible,
 * and report anything else.
 * Stack: error code, RIP, CS, RFLAGS, RSP, SS. */
gp_entry:
	testb $3, 16(%rsp)
	jz gp_report
	pushq %rcx
	pushq %rdx			/* now: RDX, RCX, error code, RIP (24), CS, RFLAGS (40) */
	movq 24(%rsp), %rcx		/* faulting instruction */
	movzbl (%rcx), %edx
	cmpl $0x66, %edx
	je gp_operand16
	cmpl $0xcd, %edx
	je gp_int
	cmpl $0xf3, %edx
	je gp_rep
	cmpl $0x6f, %edx
	jbe gp_string
	subl $0xe4, %edx
	cmpl $(0xfb - 0xe4), %edx
	ja gp_not_emulated
	jmp *gp_opcode_table(, %rdx, 8)

gp_in_al_imm8:
	movzbl 1(%rcx), %edx
	inb %dx, %al
	movl $2, %ecx
	jmp gp_done
gp_in_eax_imm8:
	movzbl 1(%rcx), %edx
	inl %dx, %eax
	movl $2, %ecx
	jmp gp_done
gp_out_imm8_al:
	movzbl 1(%rcx), %edx
	outb %al, %dx
	movl $2, %ecx
	jmp gp_done
gp_out_imm8_eax:
	movzbl 1(%rcx), %edx
	outl %eax, %dx
	movl $2, %ecx
	jmp gp_done
gp_in_al_dx:
	movq (%rsp), %rdx
	inb %dx, %al
	movl $1, %ecx
	jmp gp_done
gp_in_eax_dx:
	movq (%rsp), %rdx
	inl %dx, %eax
	movl $1, %ecx
	jmp gp_done
gp_out_dx_al:
	movq (%rsp), %rdx
	outb %al, %dx
	movl $1, %ecx
	jmp gp_done
gp_out_dx_eax:
	movq (%rsp), %rdx
	outl %eax, %dx
	movl $1, %ecx
	jmp gp_done
gp_hlt:					/* ring-3 HLT: wait for one interrupt */
	sti
	hlt
	cli
	movl $1, %ecx
	jmp gp_done
gp_cli:
	andq $~0x200, 40(%rsp)		/* RFLAGS.IF of the interrupted code */
	movl $1, %ecx
	jmp gp_done
gp_sti:
	orq $0x200, 40(%rsp)
	movl $1, %ecx
	jmp gp_done

gp_operand16:				/* 66h prefix: 16-bit IN/OUT */
	movzbl 1(%rcx), %edx
	cmpl $0xef, %edx
	je gp_out_dx_ax
	cmpl $0xed, %edx
	je gp_in_ax_dx
	cmpl $0xe7, %edx
	je gp_out_imm8_ax
	cmpl $0xe5, %edx
	je gp_in_ax_imm8
	cmpl $0x6d, %edx
	je gp_insw
	cmpl $0x6f, %edx
	je gp_outsw
	cmpl $0xf3, %edx
	jne gp_not_emulated
	movzbl 2(%rcx), %edx		/* 66 f3: REP with 16-bit operands */
	cmpl $0x6d, %edx
	je gp_rep_insw_3
	cmpl $0x6f, %edx
	je gp_rep_outsw_3
	jmp gp_not_emulated
gp_out_dx_ax:
	movq (%rsp), %rdx
	outw %ax, %dx
	movl $2, %ecx
	jmp gp_done
gp_in_ax_dx:
	movq (%rsp), %rdx
	inw %dx, %ax
	movl $2, %ecx
	jmp gp_done
gp_out_imm8_ax:
	movzbl 2(%rcx), %edx
	outw %ax, %dx
	movl $3, %ecx
	jmp gp_done
gp_in_ax_imm8:
	movzbl 2(%rcx), %edx
	inw %dx, %ax
	movl $3, %ecx
	jmp gp_done

/* String I/O (INS/OUTS, optionally REP, optionally 66h): run the same instruction here with the
 * interrupted code's RCX/RDX (saved on our stack) and its live RDI/RSI and RFLAGS.DF, then store
 * the updated RCX back, so the caller sees exactly what the instruction would have done. The
 * ring-3 buffer is reachable from ring 0 (U pages, no SMAP). A REP runs to completion here with
 * interrupts off: one #GP for a whole block instead of one per word. */
gp_string:				/* 6c-6f without prefix */
	subl $0x6c, %edx
	jb gp_not_emulated
	jmp *gp_string_table(, %rdx, 8)
gp_rep:					/* f3 6c-6f, f3 66 6d/6f */
	movzbl 1(%rcx), %edx
	cmpl $0x66, %edx
	je gp_rep_operand16
	subl $0x6c, %edx
	jb gp_not_emulated
	cmpl $3, %edx
	ja gp_not_emulated
	jmp *gp_rep_string_table(, %rdx, 8)
gp_rep_operand16:
	movzbl 2(%rcx), %edx
	cmpl $0x6d, %edx
	je gp_rep_insw_3
	cmpl $0x6f, %edx
	je gp_rep_outsw_3
	jmp gp_not_emulated

.macro GP_STRING name, insn, length
\name:
	movq (%rsp), %rdx
	movq 8(%rsp), %rcx
	\insn
	movq %rcx, 8(%rsp)
	movl $\length, %ecx
	jmp gp_done
.endm
	GP_STRING gp_insb, "insb", 1
	GP_STRING gp_insl, "insl", 1
	GP_STRING gp_outsb, "outsb", 1
	GP_STRING gp_outsl, "outsl", 1
	GP_STRING gp_insw, "insw", 2
	GP_STRING gp_outsw, "outsw", 2
	GP_STRING gp_rep_insb, "rep insb", 2
	GP_STRING gp_rep_insl, "rep insl", 2
	GP_STRING gp_rep_outsb, "rep outsb", 2
	GP_STRING gp_rep_outsl, "rep outsl", 2
	GP_STRING gp_rep_insw_3, "rep insw", 3
	GP_STRING gp_rep_outsw_3, "rep outsw", 3

gp_done:
	addq %rcx, 24(%rsp)		/* skip the emulated instruction */
	popq %rdx
	popq %rcx
	addq $8, %rsp			/* error code */
	iretq

gp_int:
	cmpb $SYSCALL_VECTOR, 1(%rcx)
	jne gp_not_emulated
	/* Continue as if the gate had been taken: RIP after the INT, no error code. */
	addq $2, 24(%rsp)
	popq %rdx
	popq %rcx
	addq $8, %rsp
	jmp syscall_entry

gp_not_emulated:
	popq %rdx
	popq %rcx
gp_report:
	pushq $13
	jmp interrupt_common

/* #UD: PVM answers INT n from ring 3 with #UD (RIP at the INT). Stack: RIP, CS, ... */
ud_entry:
	testb $3, 8(%rsp)
	jz ud_report
	pushq %rcx
	movq 8(%rsp), %rcx
	cmpw $(0xcd | (SYSCALL_VECTOR << 8)), (%rcx)
	popq %rcx
	jne ud_report
	addq $2, (%rsp)
	jmp syscall_entry
ud_report:
	pushq $0
	pushq $6
	jmp interrupt_common

syscall_entry:
	pushq $0
	pushq $SYSCALL_VECTOR
	jmp interrupt_common

interrupt_common:
	pushq %rax
	pushq %rbx
	pushq %rcx
	pushq %rdx
	pushq %rsi
	pushq %rdi
	pushq %rbp
	pushq %r8
	pushq %r9
	pushq %r10
	pushq %r11
	pushq %r12
	pushq %r13
	pushq %r14
	pushq %r15
	movq %rsp, %rdi			/* 16-byte aligned: 15 registers + 7 frame words = 176 bytes */
	cld
	call interrupt_dispatch
	popq %r15
	popq %r14
	popq %r13
	popq %r12
	popq %r11
	popq %r10
	popq %r9
	popq %r8
	popq %rbp
	popq %rdi
	popq %rsi
	popq %rdx
	popq %rcx
	popq %rbx
	popq %rax
	addq $16, %rsp			/* vector and error code */
	iretq

/* ------------------------------------------------------------------------------------------------
 * Static tables.
 */
	.section .rodata
	.balign 8
gp_opcode_table:			/* indexed by opcode - 0xe4 */
	.quad gp_in_al_imm8, gp_in_eax_imm8, gp_out_imm8_al, gp_out_imm8_eax	/* e4-e7 */
	.quad gp_not_emulated, gp_not_emulated, gp_not_emulated, gp_not_emulated	/* e8-eb */
	.quad gp_in_al_dx, gp_in_eax_dx, gp_out_dx_al, gp_out_dx_eax		/* ec-ef */
	.quad gp_not_emulated, gp_not_emulated, gp_not_emulated, gp_not_emulated	/* f0-f3 */
	.quad gp_hlt, gp_not_emulated, gp_not_emulated, gp_not_emulated		/* f4-f7 */
	.quad gp_not_emulated, gp_not_emulated, gp_cli, gp_sti			/* f8-fb */
gp_string_table:			/* 6c-6f */
	.quad gp_insb, gp_insl, gp_outsb, gp_outsl
gp_rep_string_table:			/* f3 6c-6f */
	.quad gp_rep_insb, gp_rep_insl, gp_rep_outsb, gp_rep_outsl

	.section .data.boot, "aw"
	.balign 4
	.globl boot_start_info_paddr
boot_start_info_paddr:			/* EBX at the PVH entry (struct hvm_start_info) */
	.long 0

/* GDT (SDM Vol. 3A 3.4.5). Long mode ignores base and limit of code/data segments; the flat 4 GiB
 * limits make KERNEL_DS and KERNEL_CS32 usable from the AP trampoline's protected mode too. */
	.balign 16
	.globl gdt
gdt:
	.quad 0
	.quad 0x00af9a000000ffff	/* 0x08 KERNEL_CS: P, DPL 0, code exec/read, L */
	.quad 0x00cf92000000ffff	/* 0x10 KERNEL_DS: P, DPL 0, data read/write, D/B, G */
	.quad 0x00cf9a000000ffff	/* 0x18 KERNEL_CS32: P, DPL 0, code exec/read, D, G */
	.quad 0x00cff2000000ffff	/* 0x20 USER_DS: P, DPL 3, data read/write */
	.quad 0x00affa000000ffff	/* 0x28 USER_CS: P, DPL 3, code exec/read, L */
	.globl gdt_tss_descriptors
gdt_tss_descriptors:			/* 0x30: filled by ring0_cpu_init, 16 bytes per CPU */
	.fill GUEST_MAX_CPUS * 2, 8, 0
	.globl gdt_end
gdt_end:

	.balign 8
gdt_descriptor:
	.word gdt_end - gdt - 1
	.quad gdt

/* IDT (SDM Vol. 3A 6.14.1): 64-bit interrupt gates (type 0xE) to KERNEL_CS. DPL 3 for the syscall
 * vector and #BP so ring 3 may raise them with INT n; #DF runs on IST1. */
	.balign 16
	.globl idt
idt:
	.set vector, 0
	.rept 256
	.set stub, ISR_STUBS_ADDR + vector * ISR_STUB_SIZE
	.word stub & 0xffff
	.word KERNEL_CS
	.if vector == 8
	.byte 1				/* IST1 */
	.else
	.byte 0
	.endif
	.if (vector == 3) || (vector == 4) || (vector == SYSCALL_VECTOR)
	.byte 0xee			/* P, DPL 3, 64-bit interrupt gate */
	.else
	.byte 0x8e			/* P, DPL 0, 64-bit interrupt gate */
	.endif
	.word (stub >> 16) & 0xffff
	.long stub >> 32
	.long 0
	.set vector, vector + 1
	.endr
idt_end:

	.balign 8
idt_descriptor:
	.word idt_end - idt - 1
	.quad idt

/* Identity map of 0-4 GiB with 2 MiB pages (SDM Vol. 3A 4.5): one PML4 entry, four PDPT entries,
 * four page directories. Every level has U set so ring 3 can reach RAM, MMIO and the LAPIC.
 * 0xc0000000-0xffffffff (device MMIO, IOAPIC, LAPIC; machine.md) is uncached: PCD|PWT selects
 * PAT entry 3, UC with the power-on PAT (SDM Vol. 3A 11.12.4). */
	.section .data.pagetables, "aw"
	.balign 4096
	.globl pml4
pml4:
	.quad pdpt + (PTE_P | PTE_W | PTE_U)
	.fill 511, 8, 0
pdpt:
	.quad page_directories + 0x0000 + (PTE_P | PTE_W | PTE_U)
	.quad page_directories + 0x1000 + (PTE_P | PTE_W | PTE_U)
	.quad page_directories + 0x2000 + (PTE_P | PTE_W | PTE_U)
	.quad page_directories + 0x3000 + (PTE_P | PTE_W | PTE_U)
	.fill 508, 8, 0
page_directories:
	.set page, 0
	.rept 2048
	.if page >= 1536		/* 1536 * 2 MiB = 3 GiB */
	.quad (page << 21) | (PTE_P | PTE_W | PTE_U | PTE_PS | PTE_PCD | PTE_PWT)
	.else
	.quad (page << 21) | (PTE_P | PTE_W | PTE_U | PTE_PS)
	.endif
	.set page, page + 1
	.endr

/* ------------------------------------------------------------------------------------------------
 * Stacks: not zeroed by anyone (no need), so kept out of .bss.
 */
	.section .stacks, "aw", @nobits
	.balign 4096
	.globl kernel_stacks
kernel_stacks:
	.skip GUEST_MAX_CPUS * KERNEL_STACK_SIZE
	.globl ist_stacks
ist_stacks:
	.skip GUEST_MAX_CPUS * IST_STACK_SIZE
	.globl user_stacks
user_stacks:
	.skip GUEST_MAX_CPUS * USER_STACK_SIZE

	.section .note.GNU-stack, "", @progbits

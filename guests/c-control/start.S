/*
 * start.S - the C partition's first instructions: the arm64 Image header, EL1 set-up, its
 * exception vectors, and the entry of its real-time tasks.
 *
 * The header follows the Linux arm64 boot protocol (Documentation/arch/arm64/booting.rst,
 * "Call the kernel image"), as the Rust SDK's guests/sdk/src/boot.rs: Keel (or QEMU -kernel)
 * places the image at RAM base + text_offset and enters its first instruction at EL1 with the
 * MMU off, interrupts masked and x0 = the device tree's address.
 */
#include "keel.h"

/* text_offset: the image sits 2 MiB above the RAM base (see link.ld). */
#define TEXT_OFFSET 0x200000
/* Header flags: little-endian, 4 KiB pages (bits 1-2 = 1), placed near the base of DRAM. */
#define HEADER_FLAGS 0x2
/* The header magic, "ARM\x64" read little-endian. */
#define HEADER_MAGIC 0x644d5241
/*
 * SCTLR_EL1 as the Rust SDK sets it (SCTLR_EL1_AT_ENTRY, Arm ARM D17.2.118): RES1 bits 29,
 * 28, 23, 22, 20, 11, plus I (bit 12) and SA (bit 3); M (MMU), C (data cache) and A
 * (alignment check) off. With the MMU off every data access is to Device memory, which must
 * be aligned whatever A says: the C code is compiled with -mstrict-align.
 */
#define SCTLR_EL1_VALUE 0x30d01808

	.section .text.head, "ax"
	.global _start
_start:
	b	1f			/* code0: branch over the header */
	.long	0			/* code1 */
	.quad	TEXT_OFFSET		/* text_offset */
	.quad	__image_size		/* image_size, BSS and boot stack included */
	.quad	HEADER_FLAGS		/* flags */
	.quad	0, 0, 0			/* res2..res4 */
	.long	HEADER_MAGIC		/* magic */
	.long	0			/* res5 (PE/COFF offset: none) */
1:	msr	daifset, #0xf
	mov	x19, x0			/* the device tree address, kept in a callee-saved register */
	msr	spsel, #1
	ldr	x1, =SCTLR_EL1_VALUE
	msr	sctlr_el1, x1
	isb
	adrp	x1, __boot_stack_top
	add	x1, x1, :lo12:__boot_stack_top
	mov	sp, x1
	adrp	x1, __bss_start
	add	x1, x1, :lo12:__bss_start
	adrp	x2, __bss_end
	add	x2, x2, :lo12:__bss_end
2:	cmp	x1, x2
	b.hs	3f
	str	xzr, [x1], #8
	b	2b
3:	adrp	x1, vectors
	add	x1, x1, :lo12:vectors
	msr	vbar_el1, x1
	isb
	mov	x0, x19
	bl	main
4:	wfe				/* main does not return */
	b	4b

/*
 * A task's first instruction (the entry given to keel_task_create): Keel starts it at EL1h
 * with SP = its stack, x0 = its argument, interrupts masked and the MMU off. As the Rust
 * SDK's keel_task_entry, it sets SCTLR_EL1 and VBAR_EL1 as the boot code does, then runs
 * task_main(x0), which does not return.
 */
	.section .text.task_entry, "ax"
	.global task_entry
task_entry:
	msr	daifset, #0xf
	msr	spsel, #1
	ldr	x1, =SCTLR_EL1_VALUE
	msr	sctlr_el1, x1
	adrp	x1, vectors
	add	x1, x1, :lo12:vectors
	msr	vbar_el1, x1
	isb
	bl	task_main
1:	wfe
	b	1b

/*
 * The EL1 vector table (Arm ARM D1.10.2: 16 entries of 0x80 bytes, 2 KiB aligned). Nothing
 * here takes interrupts (they stay masked; the virtual timer's is polled), so every entry is
 * fatal: KEEL_FN_CRASH with ESR_EL1, ELR_EL1 and FAR_EL1, and Keel stops the VM with a
 * diagnostic line. x4 = the vector's index (0-15), for a debugger; the stack is not touched.
 */
	.section .text.vectors, "ax"
	.balign	0x800
vectors:
	.irp	index, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
	.balign	0x80
	mov	x4, #\index
	b	fatal
	.endr

fatal:
	mrs	x1, esr_el1
	mrs	x2, elr_el1
	mrs	x3, far_el1
	ldr	w0, =KEEL_FN_CRASH
	hvc	#0
1:	wfi				/* KEEL_FN_CRASH does not return */
	b	1b

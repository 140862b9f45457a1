//! `memcpy` and `memset` for Keel, in place of `compiler_builtins`' portable ones.
//!
//! The portable versions assume no unaligned access: a copy between differently aligned
//! buffers (a console line from a ring into the UART's line, a diagnostic into Keel's queue)
//! assembles each word from eight byte loads, about 2.7 instructions a byte, with interrupts
//! masked. Keel's memory is Normal and SCTLR_EL2.A is clear, so once the MMU is on any
//! alignment may be loaded and stored sixteen bytes at a time; before that (device memory
//! only: building the page tables) these copy byte by byte. Neither is used on MMIO: Keel's
//! device accesses are volatile single accesses ([`super::mmio`]).

core::arch::global_asm!(
    r#"
    .pushsection .text.memcpy, "ax"
    .balign 4
    .global memcpy
    .type memcpy, %function
// x0 = destination (returned), x1 = source, x2 = length; the buffers do not overlap.
memcpy:
    mov     x3, x0
    cbz     x2, 9f
    mrs     x4, sctlr_el2
    tbz     x4, #0, 8f
    subs    x2, x2, #16
    b.lo    2f
1:  ldp     x4, x5, [x1], #16
    stp     x4, x5, [x3], #16
    subs    x2, x2, #16
    b.hs    1b
// The 0-15 bytes left are the low four bits of x2 (16 was subtracted once too often).
2:  tbz     x2, #3, 3f
    ldr     x4, [x1], #8
    str     x4, [x3], #8
3:  tbz     x2, #2, 4f
    ldr     w4, [x1], #4
    str     w4, [x3], #4
4:  tbz     x2, #1, 5f
    ldrh    w4, [x1], #2
    strh    w4, [x3], #2
5:  tbz     x2, #0, 9f
    ldrb    w4, [x1]
    strb    w4, [x3]
    ret
8:  ldrb    w4, [x1], #1
    strb    w4, [x3], #1
    subs    x2, x2, #1
    b.ne    8b
9:  ret
    .size memcpy, . - memcpy
    .popsection

    .pushsection .text.memset, "ax"
    .balign 4
    .global memset
    .type memset, %function
// x0 = destination (returned), w1 = byte, x2 = length.
memset:
    mov     x3, x0
    cbz     x2, 9f
    and     w1, w1, #0xff
    mrs     x4, sctlr_el2
    tbz     x4, #0, 8f
    orr     w1, w1, w1, lsl #8
    orr     w1, w1, w1, lsl #16
    orr     x1, x1, x1, lsl #32
    subs    x2, x2, #16
    b.lo    2f
1:  stp     x1, x1, [x3], #16
    subs    x2, x2, #16
    b.hs    1b
2:  tbz     x2, #3, 3f
    str     x1, [x3], #8
3:  tbz     x2, #2, 4f
    str     w1, [x3], #4
4:  tbz     x2, #1, 5f
    strh    w1, [x3], #2
5:  tbz     x2, #0, 9f
    strb    w1, [x3]
    ret
8:  strb    w1, [x3], #1
    subs    x2, x2, #1
    b.ne    8b
9:  ret
    .size memset, . - memset
    .popsection
"#
);

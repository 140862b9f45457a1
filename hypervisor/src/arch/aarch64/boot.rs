//! Boot: the arm64 Image header, the entry points of the primary and secondary pCPUs,
//! and the per-pCPU stacks.
//!
//! The header (Linux `Documentation/arch/arm64/booting.rst`) makes QEMU `-kernel` and U-Boot
//! `booti` load Keel at a 2 MiB boundary + 2 MiB and pass the DTB address in x0, as for Xen.
//! Keel is linked for its configuration's hypervisor region + 2 MiB (the board's RAM base +
//! 2 MiB when the region starts there): loaded anywhere else, it stops at once, before
//! any absolute address is used.

use keel_core::placement::KeelImage;

use super::{mmu, psci};

/// Most pCPUs Keel drives.
pub const MAX_CPUS: usize = 8;
/// Stack size of each pCPU.
pub const STACK_SIZE: usize = 32 * 1024;

core::arch::global_asm!(
    r#"
    .section .text.head, "ax"
    .global _start
_start:
    b       keel_primary_entry      // code0
    .long   0                       // code1
    .quad   0x200000                // text_offset
    .quad   __image_size            // image_size, BSS included
    .quad   0x2                     // flags: little-endian, 4 KiB pages, 2 MiB-aligned base
    .quad   0                       // res2
    .quad   0                       // res3
    .quad   0                       // res4
    .ascii  "ARM\x64"               // magic
    .long   0                       // res5

keel_primary_entry:
    mov     x19, x0                 // DTB address
    msr     daifset, #0xf
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    keel_not_el2
    adr     x1, _start              // where the loader put Keel...
    ldr     x2, =_start             // ...is where it is linked (the board's, from its
    cmp     x1, x2                  // configuration), or its absolute addresses are wrong
    b.ne    keel_not_el2
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
1:  cmp     x1, x2
    b.hs    2f
    stp     xzr, xzr, [x1], #16
    b       1b
2:  msr     tpidr_el2, xzr      // pCPU index 0, before any Rust code (cpu::index)
    mov     x0, #0
    bl      keel_set_stack
    mov     x0, x19
    bl      keel_primary_main
    b       keel_not_el2

    .global keel_secondary_entry
keel_secondary_entry:
    msr     daifset, #0xf
    // PSCI's context id: the pCPU index, and a coloured Keel's map above bit 12. With one,
    // the MMU goes on before any access to memory: Keel's data are in the map's frames, not
    // where this code was loaded (and its constants are moved in, not loaded).
    and     x1, x0, #0xfffffffffffff000
    cbz     x1, 3f
    movz    x2, #{mair_lo}
    movk    x2, #{mair_hi}, lsl #16
    msr     mair_el2, x2
    movz    x2, #{tcr_lo}
    movk    x2, #{tcr_hi}, lsl #16
    msr     tcr_el2, x2
    msr     ttbr0_el2, x1
    isb
    tlbi    alle2
    dsb     nsh
    isb
    movz    x2, #{sctlr_lo}
    movk    x2, #{sctlr_hi}, lsl #16
    msr     sctlr_el2, x2
    isb
3:  and     x0, x0, #0xfff
    mov     x19, x0                 // pCPU index
    msr     tpidr_el2, x0           // before any Rust code (cpu::index)
    bl      keel_set_stack
    mov     x0, x19
    bl      keel_secondary_main
    b       keel_not_el2

// x0 = pCPU index: SP = top of that pCPU's stack. Clobbers x1, x2.
keel_set_stack:
    adrp    x1, keel_stacks
    add     x1, x1, :lo12:keel_stacks
    add     x2, x0, #1
    mov     x0, #{stack_size}
    madd    x1, x2, x0, x1
    mov     sp, x1
    ret

keel_not_el2:
    wfe
    b       keel_not_el2
    .ltorg

    .section .bss.stacks, "aw", %nobits
    .balign 4096
    .global keel_stacks
keel_stacks:
    .space  {stacks_size}
"#,
    stack_size = const STACK_SIZE,
    stacks_size = const STACK_SIZE * MAX_CPUS,
    mair_lo = const mmu::SECONDARY_MAIR & 0xffff,
    mair_hi = const (mmu::SECONDARY_MAIR >> 16) & 0xffff,
    tcr_lo = const mmu::SECONDARY_TCR & 0xffff,
    tcr_hi = const (mmu::SECONDARY_TCR >> 16) & 0xffff,
    sctlr_lo = const mmu::SECONDARY_SCTLR & 0xffff,
    sctlr_hi = const (mmu::SECONDARY_SCTLR >> 16) & 0xffff,
);

const _: () = assert!(
    mmu::SECONDARY_MAIR >> 32 == 0 && mmu::SECONDARY_TCR >> 32 == 0,
    "the secondary entry moves 32-bit MMU registers in"
);
const _: () = assert!(mmu::SECONDARY_SCTLR >> 32 == 0);
const _: () = assert!(
    MAX_CPUS <= 0x1000,
    "the pCPU index shares PSCI's context id"
);

unsafe extern "C" {
    static keel_stacks: u8;
    static __image_start: u8;
    static __coloured_end: u8;
    static __guest_images_start: u8;
    static __guest_images_end: u8;
    static __image_end: u8;
    fn keel_secondary_entry();
}

/// Keel's image as it is linked: its coloured range, to `.bss_contiguous`, the guests' images
/// in it, and its end, `.bss_contiguous` included.
pub fn keel_image() -> KeelImage {
    KeelImage {
        start: core::ptr::addr_of!(__image_start) as u64,
        coloured_end: core::ptr::addr_of!(__coloured_end) as u64,
        guest_images: (
            core::ptr::addr_of!(__guest_images_start) as u64,
            core::ptr::addr_of!(__guest_images_end) as u64,
        ),
        end: core::ptr::addr_of!(__image_end) as u64,
    }
}

/// The top of pCPU `index`'s stack.
pub fn stack_top(index: usize) -> u64 {
    let base = core::ptr::addr_of!(keel_stacks) as u64;
    base + ((index + 1) * STACK_SIZE) as u64
}

/// Starts the secondary pCPU `index` (affinity `mpidr`) at Keel's secondary entry, with a
/// coloured Keel's map (4 KiB aligned) in the same context id.
pub fn start_secondary(index: usize, mpidr: u64) -> Result<(), i64> {
    psci::cpu_on(
        mpidr,
        keel_secondary_entry as *const () as u64,
        mmu::coloured_root() | index as u64,
    )
}

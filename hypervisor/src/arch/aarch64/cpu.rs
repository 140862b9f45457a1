//! CPU-level operations: identity, barriers, waiting, cache maintenance.

use super::regs::read_sysreg;

/// This pCPU's MPIDR affinity fields (Aff3..Aff0).
pub fn mpidr() -> u64 {
    read_sysreg!("mpidr_el1") & 0xff_00ff_ffff
}

/// The pCPU index Keel gave this CPU at boot (kept in TPIDR_EL2).
pub fn index() -> usize {
    read_sysreg!("tpidr_el2") as usize
}

/// Records this CPU's index.
pub fn set_index(index: usize) {
    // SAFETY: TPIDR_EL2 is a scratch register reserved for Keel's pCPU index.
    unsafe { super::regs::write_sysreg!("tpidr_el2", index) };
}

/// Waits for an interrupt (or any other wake-up event).
pub fn wait_for_interrupt() {
    // SAFETY: WFI only suspends execution until a wake-up event.
    unsafe { core::arch::asm!("wfi", options(nomem, nostack, preserves_flags)) };
}

/// Masks IRQs at EL2.
pub fn disable_irqs() {
    // SAFETY: masking interrupts has no memory effects.
    unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
}

/// Instruction synchronization barrier.
pub fn isb() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("isb", options(nostack, preserves_flags)) };
}

/// Data synchronization barrier, full system.
pub fn dsb_sy() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
}

/// Copies `source` into `destination` (of the same length) sixteen bytes per load/store pair,
/// whatever either's alignment. Keel allows unaligned accesses to normal memory
/// (SCTLR_EL2.A = 0) but its Rust target assumes strict alignment, so `copy_from_slice` copies
/// a misaligned source byte by byte (~3 instructions a byte), as it would the guest images,
/// which are embedded at byte alignment.
pub fn copy_bytes(destination: &mut [u8], source: &[u8]) {
    assert_eq!(
        destination.len(),
        source.len(),
        "copy_bytes: lengths differ"
    );
    let pairs = source.len() / 16;
    if pairs > 0 {
        // SAFETY: reads `pairs * 16` bytes of `source` and writes as many of `destination`,
        // both inside their slices; both are normal memory, where unaligned LDP/STP are allowed.
        unsafe {
            core::arch::asm!(
                "1: ldp {a}, {b}, [{source}], #16",
                "stp {a}, {b}, [{destination}], #16",
                "subs {pairs}, {pairs}, #1",
                "b.ne 1b",
                source = inout(reg) source.as_ptr() => _,
                destination = inout(reg) destination.as_mut_ptr() => _,
                pairs = inout(reg) pairs => _,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack),
            )
        };
    }
    let copied = pairs * 16;
    destination[copied..].copy_from_slice(&source[copied..]);
}

/// Cleans and invalidates one data cache line by set/way (`DC CISW`; `set_way` as the
/// instruction's operand: level in bits 3:1, set and way above). Keel performs a guest's trapped
/// set/way operations this way: set/way operations act on this pCPU's caches, and a clean
/// before the invalidate never discards data written by anyone else.
pub fn clean_invalidate_set_way(set_way: u64) {
    // SAFETY: cleaning before invalidating writes dirty data back first, so memory contents
    // are unchanged whatever line the operand names.
    unsafe { core::arch::asm!("dc cisw, {}", in(reg) set_way, options(nostack, preserves_flags)) };
}

/// Cleans `[start, start + len)` from the data cache to the point of coherency and
/// invalidates the instruction cache, so a guest starting with its MMU and caches off
/// sees what Keel copied.
pub fn clean_to_poc(start: usize, len: usize) {
    let line = 4usize << ((read_sysreg!("ctr_el0") >> 16) & 0xf);
    let mut address = start & !(line - 1);
    while address < start + len {
        // SAFETY: DC CVAC on an address Keel maps only cleans a cache line; memory is unchanged.
        unsafe {
            core::arch::asm!("dc cvac, {}", in(reg) address, options(nostack, preserves_flags))
        };
        address += line;
    }
    dsb_sy();
    // SAFETY: invalidating the instruction cache has no architectural effect on data.
    unsafe {
        core::arch::asm!(
            "ic iallu",
            "dsb sy",
            "isb",
            options(nostack, preserves_flags)
        )
    };
}

/// Parks this CPU for good.
pub fn halt() -> ! {
    disable_irqs();
    loop {
        wait_for_interrupt();
    }
}

//! CPU-level operations: identity, barriers, waiting, cache maintenance.

use super::regs::read_sysreg;

/// This pCPU's MPIDR affinity fields (Aff3..Aff0).
pub fn mpidr() -> u64 {
    read_sysreg!("mpidr_el1") & 0xff_00ff_ffff
}

/// The pCPU index Keel gave this CPU at boot (kept in TPIDR_EL2).
#[inline(always)]
pub fn index() -> usize {
    let value: u64;
    // SAFETY: reading TPIDR_EL2 has no side effect. The boot code sets it to the pCPU's index
    // before any Rust code runs (keel_primary_entry, keel_secondary_entry) and nothing
    // changes it after, so the read is `pure`: the compiler may reuse one read for several
    // calls, as it does on the trap paths.
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el2", out(reg) value, options(pure, nomem, nostack, preserves_flags));
    }
    value as usize
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

/// Data memory barrier, inner shareable: the memory accesses before it are observed by the
/// other CPUs before those after it.
pub fn dmb_ish() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("dmb ish", options(nostack, preserves_flags)) };
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

core::arch::global_asm!(
    r#"
// Zeroes V0-V31, FPCR and FPSR. Keel is built soft-float and never uses these registers, so
// the instructions are enabled for this function alone.
    .pushsection .text.keel_zero_fp_simd, "ax"
    .balign 4
    .arch_extension fp
    .arch_extension simd
    .global keel_zero_fp_simd
keel_zero_fp_simd:
    movi    v0.2d, #0
    movi    v1.2d, #0
    movi    v2.2d, #0
    movi    v3.2d, #0
    movi    v4.2d, #0
    movi    v5.2d, #0
    movi    v6.2d, #0
    movi    v7.2d, #0
    movi    v8.2d, #0
    movi    v9.2d, #0
    movi    v10.2d, #0
    movi    v11.2d, #0
    movi    v12.2d, #0
    movi    v13.2d, #0
    movi    v14.2d, #0
    movi    v15.2d, #0
    movi    v16.2d, #0
    movi    v17.2d, #0
    movi    v18.2d, #0
    movi    v19.2d, #0
    movi    v20.2d, #0
    movi    v21.2d, #0
    movi    v22.2d, #0
    movi    v23.2d, #0
    movi    v24.2d, #0
    movi    v25.2d, #0
    movi    v26.2d, #0
    movi    v27.2d, #0
    movi    v28.2d, #0
    movi    v29.2d, #0
    movi    v30.2d, #0
    movi    v31.2d, #0
    msr     fpcr, xzr
    msr     fpsr, xzr
    ret
    .arch_extension nosimd
    .arch_extension nofp
    .popsection
"#
);

unsafe extern "C" {
    fn keel_zero_fp_simd();
}

/// Zeroes the FP/SIMD registers (V0-V31, FPCR, FPSR), part of a vCPU's entry state. Needs
/// FP/SIMD untrapped at EL2 (CPTR_EL2.TFP = 0, as [`super::guest::prepare`] leaves it).
pub fn zero_fp_simd() {
    // SAFETY: the function only writes FP/SIMD registers, which Keel never uses and which
    // belong to the vCPU about to start on this pCPU; it follows the C calling convention.
    unsafe { keel_zero_fp_simd() }
}

/// How Keel's spin locks wait: `yield`, the architecture's spin-wait hint (Linux's
/// `cpu_relax()` on arm64). Under QEMU's single-threaded round-robin emulation it also ends the
/// waiting CPU's turn, so the lock holder runs instead of the waiter spinning out a whole time
/// slice (100 ms of virtual time).
pub struct YieldRelax;

impl spin::RelaxStrategy for YieldRelax {
    #[inline(always)]
    fn relax() {
        // SAFETY: `yield` has no architectural effect.
        unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
    }
}

/// One step of a wait loop for another pCPU ([`YieldRelax`]'s `yield`).
pub fn spin_wait() {
    <YieldRelax as spin::RelaxStrategy>::relax();
}

/// Keel's lock: a spin lock that waits with [`YieldRelax`].
pub type Mutex<T> = spin::mutex::SpinMutex<T, YieldRelax>;

/// What locking a [`Mutex`] gives.
pub type MutexGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

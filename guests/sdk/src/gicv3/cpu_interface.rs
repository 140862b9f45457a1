//! The GICv3 CPU interface through its system registers (GICv3 spec 12.2, ICC_*_EL1).
//!
//! Registers are named by their encodings (`s3_0_c12_c12_5` is ICC_SRE_EL1, and so on) so
//! that any assembler accepts them.

use core::arch::asm;

use super::{IntId, SPURIOUS_INTID_FIRST};

/// ICC_SRE_EL1.SRE: system-register interface enabled.
const SRE_ENABLE: u64 = 1 << 0;
/// ICC_CTLR_EL1.EOImode: 0 = an EOIR write both drops priority and deactivates.
const CTLR_EOI_MODE: u64 = 1 << 1;
/// ICC_PMR_EL1 value letting every priority through.
const PRIORITY_MASK_ALL: u64 = 0xFF;
/// ICC_IGRPEN1_EL1.Enable.
const GROUP1_ENABLE: u64 = 1 << 0;

/// Enables the system-register interface, unmasks every priority, selects EOImode 0 and
/// enables Group 1 interrupts at this CPU.
pub fn init_cpu_interface() {
    // SAFETY: configures this CPU's GIC interface only; IRQs stay masked in PSTATE until the
    // caller unmasks them, and the SDK's IRQ vector handles them then.
    unsafe {
        asm!(
            "mrs {tmp}, s3_0_c12_c12_5", // ICC_SRE_EL1
            "orr {tmp}, {tmp}, {sre}",
            "msr s3_0_c12_c12_5, {tmp}",
            "isb",
            "msr s3_0_c4_c6_0, {pmr}",   // ICC_PMR_EL1
            "mrs {tmp}, s3_0_c12_c12_4", // ICC_CTLR_EL1
            "bic {tmp}, {tmp}, {eoi_mode}",
            "msr s3_0_c12_c12_4, {tmp}",
            "msr s3_0_c12_c12_7, {grp1}", // ICC_IGRPEN1_EL1
            "isb",
            tmp = out(reg) _,
            sre = const SRE_ENABLE,
            pmr = in(reg) PRIORITY_MASK_ALL,
            eoi_mode = const CTLR_EOI_MODE,
            grp1 = in(reg) GROUP1_ENABLE,
            options(nostack, preserves_flags),
        )
    };
}

/// Acknowledges the highest-priority pending Group 1 interrupt (ICC_IAR1_EL1); `None` if
/// the answer is a special INTID.
pub fn acknowledge() -> Option<IntId> {
    let intid: u64;
    // SAFETY: reading ICC_IAR1_EL1 activates the interrupt; the caller ends it with
    // `end_of_interrupt`. No memory is touched.
    unsafe {
        asm!("mrs {}, s3_0_c12_c12_0", out(reg) intid, options(nomem, nostack, preserves_flags))
    };
    let intid = (intid & 0xFF_FFFF) as IntId;
    (intid < SPURIOUS_INTID_FIRST).then_some(intid)
}

/// Drops the priority of and deactivates `intid` (ICC_EOIR1_EL1, EOImode 0).
pub fn end_of_interrupt(intid: IntId) {
    // SAFETY: ends an interrupt this CPU acknowledged. No memory is touched.
    unsafe {
        asm!(
            "msr s3_0_c12_c12_1, {}",
            in(reg) u64::from(intid),
            options(nomem, nostack, preserves_flags),
        )
    };
}

/// Sends SGI `intid` (0-15) to the CPUs of affinity 0.0.0.n for each bit n of `targets`
/// (ICC_SGI1R_EL1, GICv3 spec 12.2.22: TargetList with Aff1-3 = 0 and RS = 0).
pub fn send_sgi(intid: IntId, targets: u16) {
    let value = (u64::from(intid & 0xf) << 24) | u64::from(targets);
    // SAFETY: raises an SGI; the receiving CPUs' handlers deal with it. No memory is touched.
    unsafe {
        asm!(
            "msr s3_0_c12_c11_5, {}",
            "isb",
            in(reg) value,
            options(nomem, nostack, preserves_flags),
        )
    };
}

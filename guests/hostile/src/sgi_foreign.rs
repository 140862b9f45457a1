//! SGIs at vCPUs the VM does not have, and (on a GICv2) one vCPU's banked distributor
//! registers written to silence another's SGIs: neither may reach past what the VM owns.
//!
//! The VM has vCPUs 0 and 1. On a GICv3 the SGIs name vCPUs 2-15 (ICC_SGI1R_EL1's TargetList
//! at Aff1 0), every vCPU of cluster 1 (Aff1 1), and Aff0 18-31 (RS 1; TargetList bits 0 and
//! 1 left clear, as a GIC without range selectors may take RS as 0); on a GICv2, CPU
//! interfaces 2-7 (GICD_SGIR's CPUTargetList), and once with the reserved TargetListFilter
//! 0b11. No vCPU of the VM may take any of them (the reserved filter's is
//! reported, not judged: the architecture leaves it undefined), and the victim VM keeps its
//! ticks (the scenario checks it).
//!
//! A GICv2's registers of SGIs and PPIs (GICD_ISENABLER0, GICD_ICENABLER0,
//! GICD_IPRIORITYR0-7, GICD_ITARGETSR0-7) are banked per CPU: vCPU 0 disables every SGI and
//! PPI, sets every priority to 0xFF (which the priority mask never lets through) and writes
//! the read-only targets there, then sends vCPU 1 an SGI, which vCPU 1 must take (its own bank
//! untouched) while vCPU 0 reads its own virtual timer PPI disabled. (Whether SGIs can be
//! disabled at all is IMPLEMENTATION DEFINED on GICv2, so only the PPI's bit is judged.) A GICv3 has no banked
//! distributor registers (each vCPU has a redistributor frame of its own, which any vCPU of
//! the VM may program), so that part is skipped there with a line saying so.

use core::arch::asm;
use core::ptr::{read_volatile, write_volatile};

use keel_guest::abi::layout;
use keel_guest::cpu::{disable_irqs, enable_irqs};
use keel_guest::gic::{self, send_sgi, Version, DISTRIBUTOR};
use keel_guest::println;

use crate::lifecycle::{start_secondary, stop_secondary, SecondaryTask, TASK};
use crate::probe;
use crate::shared::{init_interrupts, sgi_taken, spin_for, Mailbox};

/// How long a vCPU waits, IRQs unmasked, for SGIs to arrive.
const ARRIVAL_WINDOW_US: u64 = 5_000;
/// The SGI sent with GICv2's reserved TargetListFilter (reported, not judged).
const RESERVED_FILTER_SGI: u32 = 15;
/// The SGI vCPU 0 sends vCPU 1 after writing its own banked registers.
const BANKED_SGI: u32 = 9;

/// GICD_ISENABLER0's offset (banked on GICv2).
const ISENABLER0: usize = 0x100;
/// GICD_ICENABLER0's offset (banked on GICv2).
const ICENABLER0: usize = 0x180;
/// GICD_IPRIORITYR0's offset; IPRIORITYR0-7 (INTIDs 0-31) are banked on GICv2.
const IPRIORITYR0: usize = 0x400;
/// GICD_ITARGETSR0's offset; ITARGETSR0-7 are banked and read-only on GICv2.
const ITARGETSR0: usize = 0x800;
/// GICD_SGIR's offset (GICv2).
const SGIR: usize = 0xF00;
/// GICD_SGIR.TargetListFilter 0b11: reserved (GICv2 spec 4.3.15).
const SGIR_RESERVED_FILTER: u32 = 0b11 << 24;
/// The virtual timer's bit in GICD_ISENABLER0.
const TIMER_BIT: u64 = 1 << layout::VTIMER_INTID;

/// vCPU 1 has its interrupts up, IRQs masked, and has read its bank.
static READY: Mailbox = Mailbox::new();
/// vCPU 1's GICD_ISENABLER0 as it read it before (low 32 bits) and after vCPU 0's writes.
static BEFORE: Mailbox = Mailbox::new();
static AFTER: Mailbox = Mailbox::new();
/// vCPU 0 has written its bank and sent the SGI.
static SENT: Mailbox = Mailbox::new();
/// vCPU 1 has waited for the SGI.
static COUNTED: Mailbox = Mailbox::new();

/// Runs both parts.
pub fn sgi_foreign() {
    no_such_vcpu();
    match gic::version() {
        Version::V2 => banked_registers(),
        Version::V3 => println!(
            "hostile: banked-registers skipped: a GICv3 has no banked distributor registers \
             (each vCPU has a redistributor of its own)"
        ),
    }
}

/// SGIs 0-13 at vCPUs the VM does not have, with IRQs masked; then unmasked, none may come.
fn no_such_vcpu() {
    init_interrupts(0);
    disable_irqs();
    for intid in 0..14 {
        match gic::version() {
            Version::V3 => {
                send_sgi(intid, 0xFFFC);
                // Aff1 = 1 (another cluster), every Aff0; then RS = 1, Aff0 18-31 (RS is RES0
                // on a GIC without range selectors, ICC_CTLR_EL1.RSS = 0: bits 0 and 1 would
                // then name this VM's vCPUs).
                write_sgi1r(u64::from(intid) << 24 | 1 << 16 | 0xFFFF);
                write_sgi1r(u64::from(intid) << 24 | 1 << 44 | 0xFFFC);
            }
            Version::V2 => send_sgi(intid, 0xFC),
        }
    }
    if gic::version() == Version::V2 {
        write_distributor(SGIR, SGIR_RESERVED_FILTER | RESERVED_FILTER_SGI);
    }
    enable_irqs();
    spin_for(ARRIVAL_WINDOW_US);
    disable_irqs();
    let taken: u32 = (0..14).map(|intid| sgi_taken(0, intid)).sum();
    probe!(
        "sgi-no-such-vcpu",
        taken == 0,
        "{taken} of the SGIs sent only to vCPUs the VM does not have reached vCPU 0"
    );
    if gic::version() == Version::V2 {
        println!(
            "hostile: GICD_SGIR with the reserved TargetListFilter: SGI {RESERVED_FILTER_SGI} taken {} times by vCPU 0",
            sgi_taken(0, RESERVED_FILTER_SGI as usize)
        );
    }
}

/// GICv2: vCPU 0 writes its banked registers; vCPU 1's must be untouched.
fn banked_registers() {
    if !start_secondary(SecondaryTask::BankedTarget) {
        return;
    }
    if !READY.wait_for(1, 100_000) {
        probe!("banked-registers", false, "vCPU 1 never got ready");
        return;
    }
    write_distributor(ICENABLER0, u32::MAX);
    for register in 0..8 {
        write_distributor(IPRIORITYR0 + 4 * register, u32::MAX);
        write_distributor(ITARGETSR0 + 4 * register, u32::MAX);
    }
    let own = read_distributor(ISENABLER0);
    send_sgi(BANKED_SGI, 1 << 1);
    SENT.set(1);
    if !COUNTED.wait_for(1, 100_000) {
        probe!("banked-registers", false, "vCPU 1 never reported");
        return;
    }
    let (before, after) = (BEFORE.get(), AFTER.get());
    let taken = sgi_taken(1, BANKED_SGI as usize);
    probe!(
        "banked-registers",
        u64::from(own) & TIMER_BIT == 0 && before & TIMER_BIT != 0 && after == before && taken == 1,
        "vCPU 0 reads its own GICD_ISENABLER0 as {own:#x} after disabling all; vCPU 1 reads \
         {before:#x} before and {after:#x} after, and took SGI {BANKED_SGI} {taken} times"
    );
    stop_secondary();
}

/// vCPU 1's side of [`banked_registers`].
pub fn banked_target() {
    init_interrupts(1);
    disable_irqs();
    BEFORE.set(u64::from(read_distributor(ISENABLER0)));
    READY.set(1);
    if !SENT.wait_for(1, 100_000) {
        println!("hostile: vCPU 1: vCPU 0 never wrote its bank");
    }
    AFTER.set(u64::from(read_distributor(ISENABLER0)));
    enable_irqs();
    spin_for(ARRIVAL_WINDOW_US);
    disable_irqs();
    COUNTED.set(1);
    TASK.set(SecondaryTask::Idle as u64);
}

fn read_distributor(offset: usize) -> u32 {
    // SAFETY: a single aligned load of a distributor register (the device tree's), not memory.
    unsafe { read_volatile((DISTRIBUTOR.base() + offset) as *const u32) }
}

fn write_distributor(offset: usize, value: u32) {
    // SAFETY: a single aligned store to a distributor register (the device tree's), not memory.
    unsafe { write_volatile((DISTRIBUTOR.base() + offset) as *mut u32, value) }
}

/// A raw write of ICC_SGI1R_EL1 (GICv3 only).
fn write_sgi1r(value: u64) {
    // SAFETY: raises SGIs (Keel traps the write and picks the targets); no memory is touched.
    unsafe {
        asm!(
            "msr s3_0_c12_c11_5, {}",
            "isb",
            in(reg) value,
            options(nomem, nostack, preserves_flags),
        )
    };
}

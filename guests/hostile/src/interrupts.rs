//! Interrupt floods: more pending SGIs than the list registers hold, on one vCPU and across two.
//!
//! GICv3 (spec 4.1): an SGI made pending again before it is taken is still one interrupt;
//! distinct INTIDs are distinct. So 16 distinct SGIs raised while IRQs are masked must all be
//! taken, each exactly once, soon after the vCPU unmasks IRQs, however many list registers
//! the hardware has.

use core::fmt::Write;

use keel_guest::cpu::{disable_irqs, enable_irqs};
use keel_guest::gic::send_sgi;
use keel_guest::println;

use crate::lifecycle::{start_secondary, stop_secondary, SecondaryTask, TASK};
use crate::probe;
use crate::shared::{init_interrupts, sgi_taken, spin_for, this_vcpu, Mailbox};

/// How long a vCPU waits, IRQs unmasked, for the SGIs to arrive (a few timer periods of a
/// 1 kHz guest: far longer than delivery takes).
const ARRIVAL_WINDOW_US: u64 = 5_000;

/// vCPU 1 is masked and ready for the SGIs.
static READY: Mailbox = Mailbox::new();
/// vCPU 0 has sent them.
static SENT: Mailbox = Mailbox::new();
/// vCPU 1 has counted them.
static COUNTED: Mailbox = Mailbox::new();

/// A line listing, for `vcpu`, each SGI taken a number of times other than once.
fn judge(name: &str, vcpu: usize) {
    let mut wrong = Line::new();
    let mut arrived = 0;
    for intid in 0..16 {
        let taken = sgi_taken(vcpu, intid);
        if taken == 1 {
            arrived += 1;
        } else {
            let _ = write!(wrong, " SGI{intid}x{taken}");
        }
    }
    probe!(
        name,
        arrived == 16,
        "{arrived} of 16 distinct SGIs taken exactly once{}",
        wrong.as_str()
    );
}

/// 16 distinct SGIs, and SGI 5 a second time, raised at itself while masked.
pub fn sgi_self() {
    let vcpu = this_vcpu();
    init_interrupts(vcpu);
    disable_irqs();
    for intid in 0..16 {
        send_sgi(intid, 1 << vcpu);
    }
    send_sgi(5, 1 << vcpu);
    enable_irqs();
    spin_for(ARRIVAL_WINDOW_US);
    disable_irqs();
    judge("sgi-self-16-masked", vcpu);
}

/// vCPU 0 raises 16 distinct SGIs at vCPU 1 while vCPU 1 has IRQs masked.
pub fn sgi_cross() {
    init_interrupts(0);
    if !start_secondary(SecondaryTask::SgiTarget) {
        return;
    }
    if !READY.wait_for(1, 100_000) {
        probe!("sgi-cross-16-masked", false, "vCPU 1 never got ready");
        return;
    }
    for intid in 0..16 {
        send_sgi(intid, 1 << 1);
    }
    SENT.set(1);
    if !COUNTED.wait_for(1, 100_000) {
        probe!("sgi-cross-16-masked", false, "vCPU 1 never reported");
        return;
    }
    judge("sgi-cross-16-masked", 1);
    stop_secondary();
}

/// vCPU 1's side of [`sgi_cross`].
pub fn sgi_target() {
    init_interrupts(1);
    disable_irqs();
    READY.set(1);
    if !SENT.wait_for(1, 100_000) {
        println!("hostile: vCPU 1: the SGIs were never sent");
    }
    enable_irqs();
    spin_for(ARRIVAL_WINDOW_US);
    disable_irqs();
    COUNTED.set(1);
    TASK.set(SecondaryTask::Idle as u64);
}

/// A short line built with `write!`.
struct Line {
    bytes: [u8; 160],
    len: usize,
}

impl Line {
    const fn new() -> Self {
        Self {
            bytes: [0; 160],
            len: 0,
        }
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let take = s.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

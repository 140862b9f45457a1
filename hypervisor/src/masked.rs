//! The longest stretch each pCPU runs at EL2 with interrupts masked, and where it ended.
//!
//! Keel runs with IRQs masked from every exception entry until it returns to a guest, waits
//! for an interrupt (WFI), or polls for pending interrupts between two bounded steps of a
//! long operation (a VM reload): an interrupt arriving in a stretch waits for its end. A
//! stretch [`Record::begin`]s at those points and [`Record::end`]s at the next; the longest one per pCPU is
//! kept with its [`MaskedSite`], for KEEL_MASKED_STRETCH ([`query`]). Timestamps are the
//! system counter's; nothing is recorded before a pCPU's first stretch begins (boot).
//!
//! Each pCPU writes its own record only; the query reads another pCPU's with relaxed loads
//! (a figure a few instructions old at worst). A record's ESR_EL2 and ELR_EL2 are a trap and a
//! PC of whichever vCPU ran there, so a VM reads (and resets) only the records of the pCPUs it
//! alone uses, unless its configuration makes it a monitor
//! ([`keel_core::system::SystemDesc::may_read_masked_record`]).

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use keel_core::abi::{CallError, MaskedSite};

use crate::arch::regs::read_sysreg;
use crate::arch::timer;
use crate::arch::vectors::GuestRegs;
use crate::config::SYSTEM;

/// One pCPU's record. It lives in that pCPU's state (`vm::PerCpu`), beside what a trap reads
/// first, so that a trap finds both with one address.
pub struct Record {
    /// Counter value at the start of the current stretch (0: none begun yet).
    start: AtomicU64,
    /// Where the current stretch is.
    site: AtomicU8,
    /// The longest stretch so far, in counter ticks.
    longest: AtomicU64,
    /// Where it was.
    longest_site: AtomicU8,
    /// ESR_EL2 and ELR_EL2 when it ended: the trap (or the guest instruction an interrupt
    /// came after) it was spent on.
    longest_esr: AtomicU64,
    longest_elr: AtomicU64,
}

impl Record {
    /// No stretch begun, none recorded (all zero).
    pub const fn new() -> Self {
        Self {
            start: AtomicU64::new(0),
            site: AtomicU8::new(0),
            longest: AtomicU64::new(0),
            longest_site: AtomicU8::new(0),
            longest_esr: AtomicU64::new(0),
            longest_elr: AtomicU64::new(0),
        }
    }

    /// A stretch with interrupts masked begins now, at `site` (this pCPU's record).
    #[inline(always)]
    pub fn begin(&self, site: MaskedSite) {
        self.start.store(timer::now(), Ordering::Relaxed);
        self.site.store(site as u8, Ordering::Relaxed);
    }

    /// Where the current stretch is (this pCPU's record).
    pub fn site(&self) -> MaskedSite {
        MaskedSite::from_u64(u64::from(self.site.load(Ordering::Relaxed)))
    }

    /// The current stretch is (from now on) at `site` (this pCPU's record).
    #[inline(always)]
    pub fn at(&self, site: MaskedSite) {
        self.site.store(site as u8, Ordering::Relaxed);
    }

    /// The current stretch ends now (Keel enters a guest, waits, or polls for interrupts; this
    /// pCPU's record). On every exit: a counter read, two loads and a comparison. With no
    /// stretch begun yet (`start` 0), the length is the counter itself, which passes the
    /// comparison as a rule: the out-of-line [`Record::record_longest`] tells that case apart.
    #[inline(always)]
    pub fn end(&self) {
        let now = timer::now();
        let start = self.start.load(Ordering::Relaxed);
        let length = now.wrapping_sub(start);
        if length > self.longest.load(Ordering::Relaxed) {
            self.record_longest(start, length);
        }
    }

    /// Keeps a stretch of `length` ticks from `start` as the longest, unless no stretch had
    /// begun. Out of line: it was copied into each of the nine places [`Record::end`] is
    /// inlined.
    #[cold]
    #[inline(never)]
    fn record_longest(&self, start: u64, length: u64) {
        if start == 0 {
            return;
        }
        self.longest.store(length, Ordering::Relaxed);
        self.longest_site
            .store(self.site.load(Ordering::Relaxed), Ordering::Relaxed);
        self.longest_esr
            .store(read_sysreg!("esr_el2"), Ordering::Relaxed);
        self.longest_elr
            .store(read_sysreg!("elr_el2"), Ordering::Relaxed);
    }
}

/// KEEL_MASKED_STRETCH from VM `caller`: pCPU `pcpu`'s longest stretch in nanoseconds (x0),
/// its site (x1), and ESR_EL2 and ELR_EL2 when it ended (x2, x3); with `reset`, the record
/// starts again from zero. NOT_SUPPORTED if there is no such pCPU, DENIED (nothing read or
/// reset) if another VM's vCPUs may run there and the caller is not a monitor, or if a monitor
/// would reset the record of a pCPU that is another VM's alone. `record_of` gives the record
/// of a pCPU of the configuration.
pub fn query(
    caller: usize,
    pcpu: u64,
    reset: bool,
    regs: &mut GuestRegs,
    record_of: impl FnOnce(usize) -> &'static Record,
) -> u64 {
    if pcpu >= u64::from(SYSTEM.pcpus) {
        return CallError::NotSupported.to_x0();
    }
    let record = record_of(pcpu as usize);
    let allowed = if reset {
        SYSTEM.may_reset_masked_record(caller, pcpu as u32)
    } else {
        SYSTEM.may_read_masked_record(caller, pcpu as u32)
    };
    if !allowed {
        return CallError::Denied.to_x0();
    }
    let longest = record.longest.load(Ordering::Relaxed);
    regs.x[1] = u64::from(record.longest_site.load(Ordering::Relaxed));
    regs.x[2] = record.longest_esr.load(Ordering::Relaxed);
    regs.x[3] = record.longest_elr.load(Ordering::Relaxed);
    if reset {
        record.longest.store(0, Ordering::Relaxed);
        record
            .longest_site
            .store(MaskedSite::None as u8, Ordering::Relaxed);
    }
    timer::ticks_to_ns(longest)
}

//! The end of a guest that cannot go on: report on the console, then KEEL_CRASH or SYSTEM_OFF.

use core::sync::atomic::{AtomicBool, Ordering};

use crate::environment::{environment, Environment};
use crate::{keel, println, psci};

/// Set once a fatal report began, so that a fault while reporting does not recurse.
static REPORTING: AtomicBool = AtomicBool::new(false);

/// Reports a fatal exception and stops the guest: under Keel with KEEL_CRASH (Keel stops
/// the VM with its own diagnostic), otherwise (natively, or not yet declared) with PSCI
/// SYSTEM_OFF, which works in both places.
pub fn fatal_exception(kind: &str, esr: u64, elr: u64, far: u64) -> ! {
    if REPORTING.load(Ordering::Relaxed) {
        psci::system_off();
    }
    REPORTING.store(true, Ordering::Relaxed);
    println!("exception: {kind} esr={esr:#x} elr={elr:#x} far={far:#x}");
    match environment() {
        Environment::Keel => keel::crash(esr, elr, far),
        Environment::Native | Environment::Unknown => psci::system_off(),
    }
}

/// Reports a Rust panic and stops the guest like [`fatal_exception`] (with ESR, ELR and FAR
/// all zero for KEEL_CRASH). Call it from the guest's `#[panic_handler]`.
pub fn fatal_panic(info: &core::panic::PanicInfo<'_>) -> ! {
    crate::cpu::disable_irqs();
    if REPORTING.load(Ordering::Relaxed) {
        psci::system_off();
    }
    REPORTING.store(true, Ordering::Relaxed);
    println!("panic: {info}");
    match environment() {
        Environment::Keel => keel::crash(0, 0, 0),
        Environment::Native | Environment::Unknown => psci::system_off(),
    }
}

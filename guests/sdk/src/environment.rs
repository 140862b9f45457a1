//! Whether the guest runs on Keel or natively on bare QEMU, as the guest declares it.
//!
//! The SDK cannot probe this safely (natively, a Keel hypercall is an UNDEFINED instruction),
//! so the guest says so, typically from its boot arguments, before using Keel services.

use core::sync::atomic::{AtomicU8, Ordering};

/// Where the guest runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Environment {
    /// Not declared yet: only services that work everywhere (PSCI) are used.
    Unknown = 0,
    /// At EL1 on a machine without a hypervisor: Keel hypercalls are unavailable.
    Native = 1,
    /// As a Keel VM.
    Keel = 2,
}

static CURRENT: AtomicU8 = AtomicU8::new(Environment::Unknown as u8);

/// Declares where the guest runs.
pub fn set_environment(environment: Environment) {
    CURRENT.store(environment as u8, Ordering::Relaxed);
}

/// Where the guest runs, as declared.
pub fn environment() -> Environment {
    match CURRENT.load(Ordering::Relaxed) {
        1 => Environment::Native,
        2 => Environment::Keel,
        _ => Environment::Unknown,
    }
}

//! The SMC Calling Convention as seen from a guest: `HVC #0`, its result codes and versions.
//!
//! SMCCC 1.1 (Arm DEN0028): function id in w0, arguments in x1..x3 (as far as this SDK needs),
//! results in x0..x3; x4..x17 are preserved by an SMCCC 1.1 implementation.

use core::arch::asm;

use keel_core::abi::{self, CallError};

/// What a call left in x0..x3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallResult {
    /// x0: the result or a negative error code.
    pub x0: u64,
    /// x1.
    pub x1: u64,
    /// x2.
    pub x2: u64,
    /// x3.
    pub x3: u64,
}

impl CallResult {
    /// x0 as an error, if it holds one of the error codes Keel returns.
    pub fn error(&self) -> Option<CallError> {
        error_from_x0(self.x0)
    }
}

/// Decodes a negative SMCCC/PSCI result code (sign-extended in x0).
pub fn error_from_x0(x0: u64) -> Option<CallError> {
    [
        CallError::NotSupported,
        CallError::InvalidParameters,
        CallError::Denied,
        CallError::AlreadyOn,
        CallError::OnPending,
        CallError::InvalidAddress,
    ]
    .into_iter()
    .find(|error| error.to_x0() == x0)
}

/// A `major.minor` version as SMCCC_VERSION, PSCI_VERSION and KEEL_VERSION return it
/// (bits 30:16 major, bits 15:0 minor).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// Major version.
    pub major: u16,
    /// Minor version.
    pub minor: u16,
}

impl Version {
    /// Decodes x0 of a version call; a negative x0 is an error code.
    pub fn from_x0(x0: u64) -> Result<Self, CallError> {
        match error_from_x0(x0) {
            Some(error) => Err(error),
            None if x0 >> 31 != 0 => Err(CallError::NotSupported),
            None => Ok(Self {
                major: (x0 >> 16) as u16,
                minor: x0 as u16,
            }),
        }
    }
}

impl core::fmt::Display for Version {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Issues `HVC #0` with `function` in w0 and `args` in x1..x3.
///
/// # Safety
/// The call's effect must be sound for the running program: for example CPU_ON's entry
/// point and context must be valid, and a call that does not return must not be relied on
/// to return.
pub unsafe fn hvc_call(function: u32, args: [u64; 3]) -> CallResult {
    let (x0, x1, x2, x3);
    // SAFETY: the caller vouches for the call's effect; SMCCC 1.1 changes only x0..x3.
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") u64::from(function) => x0,
            inout("x1") args[0] => x1,
            inout("x2") args[1] => x2,
            inout("x3") args[2] => x3,
            options(nostack),
        )
    };
    CallResult { x0, x1, x2, x3 }
}

/// Issues `HVC #0` with `function` in w0 and `args` in x1..x7; returns x0..x5 (Keel's task
/// services take up to seven arguments and return up to six results, as SMCCC 1.2 allows).
///
/// # Safety
/// As [`hvc_call`].
pub unsafe fn hvc_call7(function: u32, args: [u64; 7]) -> [u64; 6] {
    let (x0, x1, x2, x3, x4, x5);
    // SAFETY: the caller vouches for the call's effect; Keel changes only x0..x5.
    unsafe {
        asm!(
            "hvc #0",
            inout("x0") u64::from(function) => x0,
            inout("x1") args[0] => x1,
            inout("x2") args[1] => x2,
            inout("x3") args[2] => x3,
            inout("x4") args[3] => x4,
            inout("x5") args[4] => x5,
            in("x6") args[5],
            in("x7") args[6],
            options(nostack),
        )
    };
    [x0, x1, x2, x3, x4, x5]
}

/// SMCCC_VERSION (SMCCC 1.1 section 7.2).
pub fn smccc_version() -> Result<Version, CallError> {
    // SAFETY: SMCCC_VERSION has no side effect.
    let result = unsafe { hvc_call(abi::SMCCC_VERSION, [0; 3]) };
    Version::from_x0(result.x0)
}

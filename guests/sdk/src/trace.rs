//! Keel's trace from a guest: a mark of its own in it (KEEL_TRACE_MARK), and, for a VM the
//! configuration makes a `trace_reader`, a copy of a pCPU's ring (KEEL_TRACE_READ), in the
//! ring's own record format (`keel_core::trace`).

use keel_core::abi::{self, CallError};
pub use keel_core::trace::{Event, Kind, RECORD_BYTES};

use crate::smccc::{hvc_call, hvc_call7};

/// KEEL_TRACE_MARK: writes `value` into the trace of the caller's pCPU (nothing when the
/// system has no trace).
pub fn mark(value: u32) {
    // SAFETY: a mark only adds a record to Keel's trace.
    unsafe { hvc_call(abi::KEEL_TRACE_MARK, [u64::from(value), 0, 0]) };
}

/// What a KEEL_TRACE_READ copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copied {
    /// Valid records copied.
    pub count: u64,
    /// The index (since boot) of the first.
    pub first: u64,
    /// The ring's head when the copy ended: records written since boot.
    pub head: u64,
    /// Where the first is in the buffer, in bytes.
    pub offset: usize,
}

/// KEEL_TRACE_READ: copies the records of pCPU `pcpu`'s ring from index `from` on into
/// `buffer` (at most `abi::TRACE_READ_MAX`); `Denied` unless this VM is a trace reader,
/// `NotSupported` without a trace or for no such pCPU.
pub fn read(pcpu: u64, from: u64, buffer: &mut [u8]) -> Result<Copied, CallError> {
    // SAFETY: Keel writes only into `buffer`, which this call borrows mutably; its IPA is its
    // address (the test guests run with their MMU off, identity mapped).
    let x = unsafe {
        hvc_call7(
            abi::KEEL_TRACE_READ,
            [
                pcpu,
                from,
                buffer.as_mut_ptr() as u64,
                buffer.len() as u64,
                0,
                0,
                0,
            ],
        )
    };
    match x[0] as i64 {
        code if code == CallError::Denied as i64 => Err(CallError::Denied),
        code if code == CallError::InvalidAddress as i64 => Err(CallError::InvalidAddress),
        code if code < 0 => Err(CallError::NotSupported),
        _ => Ok(Copied {
            count: x[0],
            first: x[1],
            head: x[2],
            offset: x[3] as usize,
        }),
    }
}

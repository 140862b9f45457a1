//! Messages between VMs through Keel (KEEL_MSG_SEND, KEEL_MSG_RECV; see `keel_core::ipc`):
//! each vCPU and task of a VM with a `messages` table has a bounded queue of its own; a send
//! copies the message into the destination's queue and raises its message interrupt; a
//! receive copies the next one out, waiting for it if asked.

use keel_core::abi;
pub use keel_core::ipc::MessageError;

use crate::smccc::{hvc_call, hvc_call7};

/// A message taken by [`receive`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// Its length (the bytes written at the buffer's start).
    pub len: usize,
    /// The sender's VM.
    pub vm: u64,
    /// The sender's vCPU.
    pub vcpu: u64,
    /// Messages still queued.
    pub left: u64,
}

/// Why a receive took nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReceiveError {
    /// The next message is `len` bytes, more than the buffer holds; it stays queued.
    BufferTooSmall {
        /// Its length.
        len: usize,
    },
    /// Any other refusal.
    Refused(MessageError),
}

/// The refusal `x0` holds; a code Keel does not give is reported as an unknown destination.
fn refusal(x0: u64) -> MessageError {
    MessageError::from_x0(x0).unwrap_or(MessageError::UnknownDestination)
}

/// Sends `message` to vCPU `vcpu` of VM `vm` (a task: the VM's configured vCPUs plus its
/// index). Returns the number of messages now queued there.
pub fn send(vm: u64, vcpu: u64, message: &[u8]) -> Result<u64, MessageError> {
    let address = message.as_ptr() as u64;
    // SAFETY: Keel only reads the message's bytes, which `message` lends for the call.
    let x = unsafe {
        hvc_call7(
            abi::KEEL_MSG_SEND,
            [vm, vcpu, address, message.len() as u64, 0, 0, 0],
        )
    };
    if (x[0] as i64) < 0 {
        return Err(refusal(x[0]));
    }
    Ok(x[0])
}

/// Sends `len` bytes at guest-physical `address`, unchecked: for probes of Keel's checks.
pub fn send_raw(vm: u64, vcpu: u64, address: u64, len: u64) -> Result<u64, MessageError> {
    // SAFETY: Keel reads guest memory only after checking the range is the caller's; it
    // writes nothing of the caller's.
    let x = unsafe { hvc_call7(abi::KEEL_MSG_SEND, [vm, vcpu, address, len, 0, 0, 0]) };
    if (x[0] as i64) < 0 {
        return Err(refusal(x[0]));
    }
    Ok(x[0])
}

/// Receives the next message into `buffer`. `wait_until`: 0 not to wait, otherwise the
/// virtual counter value until which to wait for one (`u64::MAX`: for ever), the vCPU's
/// pCPU given to others meanwhile.
pub fn receive(buffer: &mut [u8], wait_until: u64) -> Result<Message, ReceiveError> {
    // SAFETY: `buffer` is lent for the call, and is exactly what Keel may write.
    unsafe { receive_raw(buffer.as_mut_ptr() as u64, buffer.len() as u64, wait_until) }
}

/// [`receive`] into `capacity` bytes at guest-physical `address`: for probes of Keel's
/// checks (addresses outside the caller's memory).
///
/// # Safety
/// Keel may write up to `capacity` bytes at `address` (when they are the caller's memory):
/// nothing the program uses may live there.
pub unsafe fn receive_raw(
    address: u64,
    capacity: u64,
    wait_until: u64,
) -> Result<Message, ReceiveError> {
    // SAFETY: Keel writes at most `capacity` bytes at `address`, which the caller lends.
    let result = unsafe { hvc_call(abi::KEEL_MSG_RECV, [address, capacity, wait_until]) };
    match MessageError::from_x0(result.x0) {
        Some(MessageError::BufferTooSmall) => Err(ReceiveError::BufferTooSmall {
            len: result.x1 as usize,
        }),
        Some(error) => Err(ReceiveError::Refused(error)),
        None if (result.x0 as i64) < 0 => Err(ReceiveError::Refused(refusal(result.x0))),
        None => Ok(Message {
            len: result.x0 as usize,
            vm: result.x1,
            vcpu: result.x2,
            left: result.x3,
        }),
    }
}

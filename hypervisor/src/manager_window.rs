//! The management window ([`layout::MANAGER_BASE`], registers in [`abi::manager_window`]): a
//! manager's services as 64-bit registers, for a guest that cannot make hypercalls where it
//! runs (Linux's `keel` command maps the window from `/dev/mem`). A write of a function id to
//! FUNCTION makes the call with ARGS as x1..x6 and leaves x0..x7 in RESULTS: the KEEL_VM_*
//! services and KEEL_VM_ID are [`crate::manager`]'s, KEEL_MSG_RECV takes the next message of
//! the VM's vCPU 0 queue into RESULTS (x4..x7 its bytes), any other function is NOT_SUPPORTED.
//!
//! Only a VM that manages another (some VM's `health.managers` names it) has the window; in any
//! other VM an access there faults as at any address without memory or device. An access
//! that is not a 64-bit load or store of a register (another width, an offset without a
//! register, a load of FUNCTION, a store to RESULTS) is refused as a device refuses one: the
//! VM stops with the window's name, the offset and the width. Each access is bounded work: one
//! register, or one call (one service, or one copy of at most
//! [`MESSAGE_BYTES`](abi::manager_window::MESSAGE_BYTES)).
//!
//! Ownership and locks: each VM's registers sit behind a lock of their own, taken by its vCPUs'
//! traps for one register, never held across a call (a FUNCTION write copies the arguments
//! out under it, makes the call holding nothing, and takes it again to store the results), so
//! they come before any lock the services take (the crate's [lock order](crate#lock-order)). The registers are one set per VM, not per
//! vCPU: two vCPUs calling at once may see each other's arguments and results (the guest
//! serialises its calls; `keel` locks `/dev/mem`). They are all zero in `.bss`, and read as zero
//! again in each new generation of the VM (after every restart or reset), so that nothing of a
//! previous run of the VM is left in them.

use keel_core::abi::{self, layout, manager_window, CallError};
use keel_core::devices::DeviceError;
use keel_core::ipc::MessageError;

use crate::arch::cpu::{Mutex, MutexGuard};
use crate::config::SYSTEM;
use crate::devices::virtio;
use crate::ipc::Outcome;
use crate::vm::{self, MAX_VMS};
use crate::{health, manager, trace};

/// The window's name in diagnostics.
pub const NAME: &str = "management window";

/// Arguments (x1..x6).
const ARG_COUNT: usize = manager_window::ARG_COUNT as usize;
/// Results (x0..x7).
const RESULT_COUNT: usize = manager_window::RESULT_COUNT as usize;

/// One VM's registers, and the generation of the VM they were written in.
struct Registers {
    generation: u32,
    args: [u64; ARG_COUNT],
    results: [u64; RESULT_COUNT],
}

impl Registers {
    /// As at boot, in `generation`.
    const fn zero(generation: u32) -> Registers {
        Registers {
            generation,
            args: [0; ARG_COUNT],
            results: [0; RESULT_COUNT],
        }
    }
}

/// Every VM's registers (those of a VM without the window are never touched): all zero bytes,
/// in `.bss`.
static WINDOWS: [Mutex<Registers>; MAX_VMS] = [const { Mutex::new(Registers::zero(0)) }; MAX_VMS];

/// VM `id`'s registers, locked; zeroed first if the VM has restarted since they were written.
fn registers(id: usize) -> MutexGuard<'static, Registers> {
    let mut registers = vm::entry(&WINDOWS, id).lock_cold();
    let generation = vm::vm(id).generation();
    if registers.generation != generation {
        *registers = Registers::zero(generation);
    }
    registers
}

/// A register of the window.
#[derive(Clone, Copy)]
enum Register {
    Function,
    Arg(usize),
    Result(usize),
}

impl Register {
    /// The register at byte `offset`, if one is there.
    fn at(offset: u64) -> Option<Register> {
        if !offset.is_multiple_of(8) {
            return None;
        }
        let index = |first: u64, count: usize| {
            let index = usize::try_from(offset.checked_sub(first)? / 8).ok()?;
            (index < count).then_some(index)
        };
        if offset == manager_window::FUNCTION {
            Some(Register::Function)
        } else if let Some(index) = index(manager_window::ARGS, ARG_COUNT) {
            Some(Register::Arg(index))
        } else {
            index(manager_window::RESULTS, RESULT_COUNT).map(Register::Result)
        }
    }
}

/// Whether VM `id` has the window: it manages another VM.
pub fn has_window(id: usize) -> bool {
    (0..SYSTEM.vms.len()).any(|other| other != id && health::manages(id, other))
}

/// Serves a data abort of `size` bytes at `ipa` (`write`: a store's value, cut to `size`) from
/// vCPU `vcpu` of VM `id`: a load's value (0 for a store), or the refusal; `None` if `ipa` is
/// not in a window of this VM (the access faults as at any unmapped address). Out of line and
/// cold: the trap's path to the devices, tried first, carries none of it.
#[cold]
#[inline(never)]
pub fn access(
    id: usize,
    vcpu: usize,
    ipa: u64,
    size: u8,
    write: Option<u64>,
) -> Option<Result<u64, DeviceError>> {
    if !crate::health::ON {
        // No VM manages another: no window anywhere.
        return None;
    }
    let offset = ipa
        .checked_sub(layout::MANAGER_BASE)
        .filter(|&offset| offset < layout::MANAGER_SIZE)?;
    if !has_window(id) {
        return None;
    }
    let no_register = DeviceError::NoSuchRegister {
        offset,
        write: write.is_some(),
    };
    if size != 8 {
        return Some(Err(DeviceError::BadWidth { offset, size }));
    }
    let Some(register) = Register::at(offset) else {
        return Some(Err(no_register));
    };
    Some(match (register, write) {
        (Register::Function, Some(function)) => {
            call(id, vcpu, function);
            Ok(0)
        }
        (Register::Arg(index), Some(value)) => {
            registers(id).args[index] = value;
            Ok(0)
        }
        (Register::Arg(index), None) => Ok(registers(id).args[index]),
        (Register::Result(index), None) => Ok(registers(id).results[index]),
        (Register::Function, None) | (Register::Result(_), Some(_)) => Err(no_register),
    })
}

/// The call `function` makes for vCPU `vcpu` of VM `id` with the window's arguments; its
/// results are stored unless the VM restarted meanwhile (then they belong to no one).
fn call(id: usize, vcpu: usize, function: u64) {
    let (generation, args) = {
        let registers = registers(id);
        (registers.generation, registers.args)
    };
    let results = match u32::try_from(function) {
        Ok(
            function @ (abi::KEEL_VM_ID
            | abi::KEEL_VM_STATUS
            | abi::KEEL_VM_START
            | abi::KEEL_VM_STOP
            | abi::KEEL_VM_RESTART
            | abi::KEEL_VM_SCHED_STATS
            | abi::KEEL_VM_RESOURCES),
        ) => manager::call(id, vcpu, function, &args),
        Ok(abi::KEEL_MSG_RECV) => receive(id, vcpu),
        _ => refused(CallError::NotSupported.to_x0()),
    };
    let mut registers = registers(id);
    if registers.generation == generation {
        registers.results = results;
    }
}

/// Results with x0 = `x0` and the rest zero.
fn refused(x0: u64) -> [u64; RESULT_COUNT] {
    let mut results = [0; RESULT_COUNT];
    results[0] = x0;
    results
}

/// KEEL_MSG_RECV through the window (by vCPU `vcpu` of VM `id`): the next message of the VM's
/// vCPU 0 queue, taken if it fits x4..x7: x0 = its length, x1 = the sender's VM, x2 = its vCPU,
/// x3 = messages still queued, x4..x7 = its bytes (little-endian words, zero beyond it). A
/// longer one stays queued: BUFFER_TOO_SMALL with x1 = its length. Nothing queued: EMPTY.
fn receive(id: usize, vcpu: usize) -> [u64; RESULT_COUNT] {
    if vm::desc(id).messages.is_none() {
        return refused(MessageError::NotAllowed.code() as u64);
    }
    let mut bytes = [0; manager_window::MESSAGE_BYTES];
    match crate::ipc::receive(id, 0, &mut bytes, 0) {
        Ok(Outcome::Took(got)) => {
            // Room was made: a virtio console whose output waited for it goes on.
            virtio::peer_received(id);
            trace::record(trace::Kind::MessageReceive, id, vcpu, 0, got.len as u32);
            let mut results = [
                got.len as u64,
                u64::from(got.from.vm),
                u64::from(got.from.vcpu),
                got.left as u64,
                0,
                0,
                0,
                0,
            ];
            for (word, chunk) in results[4..].iter_mut().zip(bytes.chunks_exact(8)) {
                let mut le = [0; 8];
                le.copy_from_slice(chunk);
                *word = u64::from_le_bytes(le);
            }
            results
        }
        // Not waited for (a receive without a timeout): nothing queued.
        Ok(Outcome::Wait(_)) => refused(MessageError::Empty.code() as u64),
        Err((error, len)) => {
            let mut results = refused(error.code() as u64);
            results[1] = len;
            results
        }
    }
}

//! The virtio-mmio console of a VM (`virtio_console = { peer = "..." }`), for an unmodified
//! Linux: its port is backed by message queues ([`crate::ipc`]). What the driver transmits
//! goes, as messages from the VM's vCPU 0, into the peer's queue; what the peer sends to the
//! VM's vCPU 0 goes into the driver's receive buffers instead of waiting for KEEL_MSG_RECV
//! (the message service, [`crate::messages`], calls [`input_queued`]). The model
//! ([`keel_core::devices::virtio::console`]) walks the rings in bounded steps and checks every
//! address through [`VmMemory`].
//!
//! Ownership and locks: each VM's console state sits behind its own lock ([`console`]), which
//! its peer takes too (input queued, output retried). Lock order: the console's lock, then a
//! message queue's lock (taking input, or sending output), then the VM's vGIC lock (its
//! interrupt level); see the crate's [lock order](crate#lock-order). Output the peer's full queue cannot take
//! stays in the driver's ring and is retried when the peer receives a message
//! ([`peer_received`]): nothing is dropped.

use core::sync::atomic::{AtomicU32, Ordering};

use keel_core::abi::layout;
use keel_core::addr::GuestPhysAddr;
use keel_core::devices::virtio::console::{Effect, VirtioConsole};
use keel_core::devices::virtio::memory::{GuestMemory, MemoryError};
use keel_core::devices::DeviceError;
use keel_core::ipc::{Sender, MAX_MESSAGE};
use keel_core::system::VmDesc;

use super::{Access, Device};
use crate::arch::cpu::{self, Mutex};
use crate::config::SYSTEM;
use crate::ipc;
use crate::vm::{self, MAX_VMS};

/// Bytes of output one trap moves at most (one bounded step).
const STEP: usize = 4096;

/// A VM's console: the model, and the input taken from the VM's queue that the driver's
/// receive buffers have not taken yet.
pub struct Console {
    model: VirtioConsole,
    pending: [u8; MAX_MESSAGE],
    pending_at: usize,
    pending_len: usize,
    /// Output waits for room in the peer's queue.
    blocked: bool,
}

impl Console {
    /// A console in its reset state.
    pub const fn new() -> Self {
        Self {
            model: VirtioConsole::new(),
            pending: [0; MAX_MESSAGE],
            pending_at: 0,
            pending_len: 0,
            blocked: false,
        }
    }

    /// Puts this console in the state [`Console::new`] gives, in place: the 4 KiB of output
    /// waiting for room are forgotten by their length, not cleared (nothing reads a byte
    /// beyond `pending_len`), so a VM's reset does not build and copy a whole console with
    /// interrupts masked (see [`keel_core::devices::vgic::Vgic::reset`]).
    pub fn reset(&mut self) {
        self.model = VirtioConsole::new();
        self.pending_at = 0;
        self.pending_len = 0;
        self.blocked = false;
    }
}

/// For each VM, the consoles (a bit per VM id) whose output may wait for room in its queue:
/// a console's bit is set before its transmit tries the queue, and cleared after unless the
/// output was left blocked, so a receiver that took a message looks at those alone
/// ([`peer_received`]; none, almost always) instead of every VM. Set before the try, it
/// cannot be missed: a transmit that found the queue full released the queue's lock after
/// setting it, and the receiver takes that lock before it reads the bits.
static WAITING_FOR_ROOM: [AtomicU32; MAX_VMS] = [const { AtomicU32::new(0) }; MAX_VMS];

const _: () = assert!(MAX_VMS <= 32, "a bit per VM in WAITING_FOR_ROOM");

/// Each VM's console state (reset by `lifecycle` with the VM's other devices).
static CONSOLES: [Mutex<Console>; MAX_VMS] = [const { Mutex::new(Console::new()) }; MAX_VMS];

/// VM `id`'s console state, behind its lock.
pub fn console(id: usize) -> &'static Mutex<Console> {
    crate::vm::entry(&CONSOLES, id)
}

/// A VM's memory as the virtio model reaches it: every range checked against the VM's RAM.
struct VmMemory {
    desc: &'static VmDesc,
}

impl VmMemory {
    fn bytes(&self, ipa: GuestPhysAddr, len: usize) -> Result<&'static mut [u8], MemoryError> {
        let refused = MemoryError { ipa, len };
        if !self.desc.memory.contains_range(ipa, len as u64) {
            return Err(refused);
        }
        // The split ring's accesses must be observed in the order they are made.
        cpu::dmb_ish();
        vm::guest_bytes(self.desc, ipa, len).ok_or(refused)
    }
}

impl GuestMemory for VmMemory {
    fn read(&self, ipa: GuestPhysAddr, out: &mut [u8]) -> Result<(), MemoryError> {
        out.copy_from_slice(self.bytes(ipa, out.len())?);
        Ok(())
    }

    fn write(&mut self, ipa: GuestPhysAddr, bytes: &[u8]) -> Result<(), MemoryError> {
        self.bytes(ipa, bytes.len())?.copy_from_slice(bytes);
        Ok(())
    }
}

/// The device behind the [`Device`] interface.
pub struct VirtioConsoleDevice;

impl Device for VirtioConsoleDevice {
    fn name(&self) -> &'static str {
        "virtio console"
    }

    #[inline(always)]
    fn window(&self, desc: &VmDesc) -> Option<(u64, u64)> {
        desc.virtio_console
            .map(|_| (layout::VIRTIO_BASE, layout::VIRTIO_SIZE))
    }

    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        let mut console = console(id).lock();
        let value = match access.write {
            None => u64::from(console.model.mmio_read(access.offset, access.size)?),
            Some(value) => {
                let mut room_made = false;
                match console
                    .model
                    .mmio_write(access.offset, access.size, value)?
                {
                    Effect::None => {}
                    Effect::Transmit => transmit(id, &mut console),
                    Effect::ReceiveBuffers => room_made = fill(id, &mut console),
                    Effect::EmergencyWrite(byte) => {
                        let _ = send_output(id, &[byte]);
                    }
                }
                update_level(id, &console);
                drop(console);
                if room_made {
                    peer_received(id);
                }
                return Ok(0);
            }
        };
        update_level(id, &console);
        Ok(value)
    }
}

/// Sends output of VM `id` to its peer: as much of `bytes` as the peer's queue takes, in
/// messages of at most the peer's size. Returns the bytes taken.
fn send_output(id: usize, bytes: &[u8]) -> usize {
    let Some(peer) = vm::desc(id).virtio_console.map(usize::from) else {
        return 0;
    };
    let size = SYSTEM.vms[peer]
        .messages
        .map_or(0, |grant| usize::from(grant.size));
    let from = Sender {
        vm: id as u16,
        vcpu: 0,
    };
    let mut sent = 0;
    for chunk in bytes.chunks(size.max(1)) {
        match ipc::send_bytes(from, peer, 0, chunk) {
            Ok(()) => sent += chunk.len(),
            Err(_) => break,
        }
    }
    sent
}

/// Moves the driver's output to the peer, one bounded step. Called with the console's lock
/// held.
fn transmit(id: usize, console: &mut Console) {
    let peer = vm::desc(id).virtio_console.map(usize::from);
    let waiting = peer.and_then(|peer| WAITING_FOR_ROOM.get(peer));
    if let Some(waiting) = waiting {
        waiting.fetch_or(1 << id, Ordering::Relaxed);
    }
    let mut memory = VmMemory { desc: vm::desc(id) };
    let mut full = false;
    let mut sink = |bytes: &[u8]| {
        let taken = send_output(id, bytes);
        full |= taken < bytes.len();
        taken
    };
    console.model.transmit(&mut memory, STEP, &mut sink);
    console.blocked = full;
    if let Some(waiting) = waiting.filter(|_| !full) {
        waiting.fetch_and(!(1 << id), Ordering::Relaxed);
    }
}

/// Fills the driver's receive buffers with input: what is pending, then the messages queued
/// for the VM's vCPU 0, until the buffers or the input run out (bounded by the queue's depth).
/// Returns whether it took a message from the queue (the caller, its lock released, lets the
/// consoles waiting for room there go on: [`peer_received`]).
fn fill(id: usize, console: &mut Console) -> bool {
    let mut memory = VmMemory { desc: vm::desc(id) };
    let mut took = false;
    // At most a queue's worth of messages per call, whatever senders on other pCPUs add
    // meanwhile: each of those calls [`input_queued`] itself after queueing.
    let mut budget = vm::desc(id).messages.map_or(0, |grant| grant.depth);
    loop {
        if console.pending_at == console.pending_len {
            if budget == 0 {
                return took;
            }
            budget -= 1;
            match ipc::take(id, 0, &mut console.pending) {
                Some(len) => {
                    console.pending_at = 0;
                    console.pending_len = len;
                    took = true;
                }
                None => return took,
            }
        }
        let Console {
            model,
            pending,
            pending_at,
            pending_len,
            ..
        } = console;
        let taken = model.receive(&mut memory, &pending[*pending_at..*pending_len]);
        *pending_at += taken;
        if taken == 0 && *pending_at < *pending_len {
            return took;
        }
    }
}

/// Sets the console's interrupt line in the VM's vGIC (under the console's lock, so levels
/// apply in order) and tells the vCPU the interrupt is routed to.
fn update_level(id: usize, console: &Console) {
    let target = {
        let mut vgic = vm::vm(id).vgic.lock();
        vgic.set_level(layout::VIRTIO_INTID, console.model.interrupt_level());
        vgic.spi_target(layout::VIRTIO_INTID)
    };
    if console.model.interrupt_level() {
        vm::kick_vcpu(id, target);
    }
}

/// A message was queued for vCPU 0 of VM `id`, which has a console: it goes to the driver's
/// receive buffers if they have room.
pub fn input_queued(id: usize) {
    let mut console = console(id).lock();
    let took = fill(id, &mut console);
    update_level(id, &console);
    drop(console);
    if took {
        peer_received(id);
    }
}

/// VM `receiver` took a message from its queue: the consoles whose output waited for room
/// there try again. Called with no lock held, after the queue's lock was released.
pub fn peer_received(receiver: usize) {
    let Some(waiting) = WAITING_FOR_ROOM.get(receiver) else {
        return;
    };
    let mut consoles = waiting.load(Ordering::Relaxed);
    while consoles != 0 {
        let id = consoles.trailing_zeros() as usize;
        consoles &= consoles - 1;
        let mut console = console(id).lock();
        if console.blocked {
            transmit(id, &mut console);
            update_level(id, &console);
        }
    }
}

/// Whether a send to vCPU `vcpu` of VM `id` feeds its console rather than its queue's reader.
pub fn feeds_console(id: usize, vcpu: usize) -> bool {
    vcpu == 0 && vm::desc(id).virtio_console.is_some()
}

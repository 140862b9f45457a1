//! Inter-VM message queues: each vCPU and task of a VM with a `messages` table has its own
//! bounded queue in Keel's memory ([`keel_core::ipc::Queue`]). A message is copied into the
//! destination's queue and its message interrupt raised at that vCPU ([`enqueue`],
//! [`send_bytes`]); a receiver's next message is copied out ([`receive`], [`take`]). The
//! hypercalls that use them (KEEL_MSG_SEND, KEEL_MSG_RECV) are [`crate::messages`]'s; the
//! virtio console's device ([`crate::devices::virtio`]) sends and takes through them too.
//!
//! Ownership and locks: the queues' rings are carved once, at boot, out of one pool sized by
//! the configuration compiler (`config::MESSAGE_POOL`); each destination's queue and ring sit
//! behind a lock of their own, held for one bounded copy (at most one message, at most
//! [`keel_core::ipc::MAX_MESSAGE`] bytes) and never together with another queue's. Lock
//! order: a queue's lock alone; the destination VM's vGIC lock (to raise the interrupt) is
//! taken after it is released. Its senders are other VMs: its place among Keel's locks and
//! the bound of a wait for it are in the crate's [lock order](crate#lock-order).
//!
//! The bytes of a message are copied once and never interpreted, so a guest changing them
//! meanwhile changes nothing but what it sends.

use core::cell::UnsafeCell;

use keel_core::ipc::{MessageError, Queue, Received, Sender};

use crate::arch::cpu::{self, Mutex};
use crate::arch::timer;
use crate::config::{MESSAGE_POOL, SYSTEM};
use crate::irq::{self, Raised};
use crate::vm::{self, VcpuPower, VmState, MAX_VCPUS, MAX_VMS};

/// One destination's queue and the ring it keeps its messages in.
struct Destination {
    queue: Queue,
    /// None until [`init`] gives it one (so that [`QUEUES`] is all zeros, in .bss).
    ring: Option<&'static mut [u8]>,
}

impl Destination {
    /// The queue and its ring (an empty one if [`init`] gave it none).
    fn parts(&mut self) -> (&mut Queue, &mut [u8]) {
        (
            &mut self.queue,
            self.ring.as_deref_mut().unwrap_or_default(),
        )
    }
}

/// Every possible destination's queue; those of VMs without a `messages` table keep an empty
/// ring (they are never reached: a send to them is refused first). All zero bytes until
/// [`init`]: no image space.
static QUEUES: [[Mutex<Destination>; MAX_VCPUS]; MAX_VMS] = [const {
    [const {
        Mutex::new(Destination {
            queue: Queue::new(0, 0),
            ring: None,
        })
    }; MAX_VCPUS]
}; MAX_VMS];

/// The queues of VM `id`'s vCPUs (through [`vm::entry`]: an id out of range panics in the one
/// shared place).
fn queues(id: usize) -> &'static [Mutex<Destination>; MAX_VCPUS] {
    vm::entry(&QUEUES, id)
}

/// The rings' storage, handed out once by [`init`].
struct Pool(UnsafeCell<[u8; MESSAGE_POOL]>);

// SAFETY: the pool is only reached through the rings [`init`] carves out of it once, each
// behind its queue's lock.
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new([0; MESSAGE_POOL]));

/// Gives each destination its queue and its ring out of the pool, in the configuration
/// compiler's layout. Called once, by pCPU 0 at boot, before any other pCPU or any guest runs.
pub fn init() {
    // SAFETY: this is the only reference ever made to the pool (init runs once, alone), and it
    // is split into disjoint rings that live on behind their queues' locks.
    let mut rest: &'static mut [u8] = unsafe { &mut *POOL.0.get() };
    let mut offset = 0;
    for (id, desc) in SYSTEM.vms.iter().enumerate() {
        let Some(grant) = desc.messages else {
            continue;
        };
        assert!(grant.pool_offset == offset, "message pool layout");
        for queue in queues(id).iter().take(desc.vcpu_count()) {
            let (ring, tail) = rest.split_at_mut(keel_core::ipc::ring_len(&grant));
            rest = tail;
            offset += ring.len();
            *queue.lock_cold() = Destination {
                queue: Queue::new(usize::from(grant.depth), usize::from(grant.size)),
                ring: Some(ring),
            };
        }
    }
}

/// Forgets every message queued for vCPU `vcpu` of VM `id` (a new task in its place).
pub fn clear(id: usize, vcpu: usize) {
    if let Some(queue) = queues(id).get(vcpu) {
        queue.lock_cold().queue.clear();
    }
}

/// Forgets every message queued for VM `id` (reset). Its vCPUs were marked off first, so no
/// send accepted after this finds them running.
pub fn clear_vm(id: usize) {
    for vcpu in 0..vm::desc(id).vcpu_count() {
        clear(id, vcpu);
    }
}

/// Messages queued for VM `id`, over its vCPUs and tasks (a resource counter).
pub fn queued(id: usize) -> u64 {
    (0..vm::desc(id).vcpu_count())
        .filter_map(|vcpu| queues(id).get(vcpu))
        .map(|queue| queue.lock_cold().queue.len() as u64)
        .sum()
}

/// Copies `message` from `from` into the queue of vCPU `to_vcpu` of VM `to`, if it runs;
/// returns the number queued there. Raises nothing: the caller does.
pub fn enqueue(
    from: Sender,
    to: usize,
    to_vcpu: usize,
    message: &[u8],
) -> Result<u64, MessageError> {
    let queued = {
        let mut destination = vm::entry(queues(to), to_vcpu).lock();
        // Checked under the queue's lock: a reset marks the vCPUs off before it clears their
        // queues under the same lock, so nothing sent to the old incarnation survives it.
        if vm::vm(to).state() != VmState::Running
            || vm::vm(to).vcpu_power(to_vcpu) == VcpuPower::Off
        {
            return Err(MessageError::DestinationStopped);
        }
        let (queue, ring) = destination.parts();
        queue.send_with(ring, from, message, cpu::copy_bytes)?
    };
    Ok(queued as u64)
}

/// A message of Keel's own device (a virtio console's output, on behalf of vCPU `from`):
/// queued at vCPU `to_vcpu` of VM `to` and its message interrupt raised there. The caller
/// checked that `to` takes messages from `from.vm`, and `bytes` fit its size.
pub fn send_bytes(
    from: Sender,
    to: usize,
    to_vcpu: usize,
    bytes: &[u8],
) -> Result<(), MessageError> {
    enqueue(from, to, to_vcpu, bytes)?;
    if let Some(grant) = vm::desc(to).messages {
        let raised =
            irq::raise_and_kick(to, to_vcpu, grant.intid, usize::from(from.vm), usize::MAX);
        if matches!(raised, Raised::WokeHere) {
            // The receiver shares this pCPU and woke: the scheduler looks again at this
            // trap's exit (the kick is taken then).
            vm::kick_pcpu(cpu::index(), to);
        }
    }
    Ok(())
}

/// Takes the next message queued for vCPU `vcpu` of VM `id` into `out` (which holds the
/// largest), for Keel's own device (a virtio console's input); its length.
pub fn take(id: usize, vcpu: usize, out: &mut [u8]) -> Option<usize> {
    let mut destination = queues(id).get(vcpu)?.lock();
    let (queue, ring) = destination.parts();
    queue
        .receive_with(ring, out, cpu::copy_bytes)
        .ok()
        .map(|taken| taken.len)
}

/// What a receive asks of the receiver's trap exit.
pub enum Outcome {
    /// It took a message.
    Took(Received),
    /// Nothing is queued and the caller waits until the virtual counter reaches this value
    /// (`u64::MAX`: for ever): it gives its pCPU away, and repeats the call when it runs again.
    Wait(u64),
}

/// Takes the next message queued for vCPU `vcpu` of VM `id` into `buffer` (a receiver's
/// memory). Nothing queued: refused as [`MessageError::Empty`] if `wait_until` is 0 or has
/// passed, else the caller waits until then. A message longer than `buffer` is refused with
/// its length, and stays queued. Inlined like [`crate::messages::receive`].
#[inline(always)]
pub fn receive(
    id: usize,
    vcpu: usize,
    buffer: &mut [u8],
    wait_until: u64,
) -> Result<Outcome, (MessageError, u64)> {
    let mut destination = vm::entry(queues(id), vcpu).lock();
    let (queue, ring) = destination.parts();
    // One read of the header: the receive itself says why it took nothing.
    match queue.receive_with(ring, buffer, cpu::copy_bytes) {
        Ok(received) => Ok(Outcome::Took(received)),
        Err(MessageError::Empty) if wait_until != 0 && timer::now() < wait_until => {
            Ok(Outcome::Wait(wait_until))
        }
        Err(MessageError::BufferTooSmall) => {
            let len = queue.front(ring).map_or(0, |(_, len)| len);
            Err((MessageError::BufferTooSmall, len as u64))
        }
        Err(error) => Err((error, 0)),
    }
}

/// Whether vCPU `vcpu` of VM `id` has a message queued (a vCPU waiting in KEEL_MSG_RECV wakes).
pub fn has_message(id: usize, vcpu: usize) -> bool {
    queues(id)
        .get(vcpu)
        .is_some_and(|queue| !queue.lock().queue.is_empty())
}

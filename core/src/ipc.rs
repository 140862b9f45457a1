//! Inter-VM messages (M5150 section IV-B): each destination vCPU or task has its own bounded
//! incoming queue of whole messages; the hypervisor copies a message in on send and out on
//! receive. Nothing is ever dropped: a full queue refuses the send, a receive buffer too small
//! leaves the message queued.
//!
//! A [`Queue`] keeps messages in a byte ring the caller provides (statically allocated per
//! destination, [`Queue::storage_len`] bytes), each as an 8-byte header (length, sender VM,
//! sender vCPU) and its bytes. A queue of `n` messages of at most `m` bytes has room for `n`
//! such messages whatever their sizes, so only the count can make it full.

use crate::abi::CallError;
use crate::system::{MessageGrant, VmDesc};

/// Bytes of one ring of the queues `grant` describes (each vCPU and task of the VM has one).
pub const fn ring_len(grant: &MessageGrant) -> usize {
    Queue::storage_len(grant.depth as usize, grant.size as usize)
}

/// Longest message any queue takes: one bounded copy step of Keel's (4 KiB: about 1,300
/// instructions with interrupts masked).
pub const MAX_MESSAGE: usize = 4096;

/// Bytes of a message's header in the ring.
const HEADER: usize = 8;

/// Who sent a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sender {
    /// The sender's VM id.
    pub vm: u16,
    /// Its vCPU (a task's vCPU for a task).
    pub vcpu: u16,
}

/// Why a message operation is refused; each has its own code and changes nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageError {
    /// The destination's queue holds as many messages as it may: retry or wait.
    QueueFull,
    /// The message is longer than the destination's largest.
    TooLarge,
    /// The receive buffer is smaller than the next message (which stays queued).
    BufferTooSmall,
    /// No such VM, vCPU or task.
    UnknownDestination,
    /// The configuration does not let the sender send to that VM.
    NotAllowed,
    /// The buffer is not wholly in the caller's memory.
    BadBuffer,
    /// The destination is stopped (powered off, stopped by Keel, or its vCPU off).
    DestinationStopped,
    /// Nothing is queued (a receive that does not wait).
    Empty,
}

impl MessageError {
    /// Every refusal.
    pub const ALL: [MessageError; 8] = [
        MessageError::QueueFull,
        MessageError::TooLarge,
        MessageError::BufferTooSmall,
        MessageError::UnknownDestination,
        MessageError::NotAllowed,
        MessageError::BadBuffer,
        MessageError::DestinationStopped,
        MessageError::Empty,
    ];

    /// The refusal x0 holds, if it holds one.
    pub fn from_x0(x0: u64) -> Option<MessageError> {
        Self::ALL
            .into_iter()
            .find(|error| error.code() == x0 as i64)
    }

    /// The value returned in x0: PSCI's codes where one fits, the rest from -32 down.
    pub const fn code(self) -> i64 {
        match self {
            MessageError::NotAllowed => CallError::Denied as i64,
            MessageError::BadBuffer => CallError::InvalidAddress as i64,
            MessageError::QueueFull => -32,
            MessageError::TooLarge => -33,
            MessageError::BufferTooSmall => -34,
            MessageError::UnknownDestination => -35,
            MessageError::DestinationStopped => -36,
            MessageError::Empty => -37,
        }
    }
}

/// KEEL_MSG_SEND's arguments, as the guest gave them (every one unchecked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendRequest {
    /// Destination VM id.
    pub vm: u64,
    /// Destination vCPU (a task's vCPU for a task).
    pub vcpu: u64,
    /// Guest-physical address of the message.
    pub buffer: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// KEEL_MSG_RECV's arguments, as the guest gave them (every one unchecked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// Guest-physical address of the buffer.
    pub buffer: u64,
    /// Its capacity in bytes.
    pub capacity: u64,
    /// 0: do not wait; otherwise wait for a message until the virtual counter reaches this
    /// (`u64::MAX`: for ever).
    pub wait_until: u64,
}

impl ReceiveRequest {
    /// The arguments in a KEEL_MSG_RECV's registers x0..x7 (x1 buffer, x2 capacity, x3 end
    /// of the wait): the hypercall's decode, and the completion of a waiting receive when
    /// its vCPU is switched in.
    pub fn from_regs(regs: &[u64; 8]) -> Self {
        Self {
            buffer: regs[1],
            capacity: regs[2],
            wait_until: regs[3],
        }
    }
}

/// The destination a send names, once checked against the configuration: the VM's index,
/// the vCPU, and its queues' grant. Checked in this order, each refusal its own code:
/// unknown VM or vCPU, a VM the sender may not send to (no `messages` table, or the sender
/// not in its `from`), a message longer than its largest. Whether the buffer is the sender's
/// and whether the destination runs are the caller's to check.
pub fn destination<'a>(
    vms: &'a [VmDesc],
    sender: usize,
    request: &SendRequest,
) -> Result<(usize, usize, &'a MessageGrant), MessageError> {
    let id = usize::try_from(request.vm).map_err(|_| MessageError::UnknownDestination)?;
    let desc = vms.get(id).ok_or(MessageError::UnknownDestination)?;
    let vcpu = usize::try_from(request.vcpu)
        .ok()
        .filter(|&vcpu| vcpu < desc.vcpu_count())
        .ok_or(MessageError::UnknownDestination)?;
    let grant = desc
        .messages
        .as_ref()
        .filter(|grant| grant.allows(sender))
        .ok_or(MessageError::NotAllowed)?;
    if request.len > u64::from(grant.size) {
        return Err(MessageError::TooLarge);
    }
    Ok((id, vcpu, grant))
}

/// What a receive took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Who sent it.
    pub from: Sender,
    /// Its length (bytes written to the buffer).
    pub len: usize,
    /// Messages still queued.
    pub left: usize,
}

/// One destination's queue: the bookkeeping of a ring held by the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queue {
    max_messages: usize,
    max_size: usize,
    /// Bytes of the ring ([`Queue::storage_len`]), kept so that no call multiplies again.
    ring: usize,
    head: usize,
    used: usize,
    count: usize,
}

impl Queue {
    /// An empty queue of at most `max_messages` messages of at most `max_size` bytes
    /// (capped at [`MAX_MESSAGE`]).
    pub const fn new(max_messages: usize, max_size: usize) -> Queue {
        let max_size = if max_size > MAX_MESSAGE {
            MAX_MESSAGE
        } else {
            max_size
        };
        Queue {
            max_messages,
            max_size,
            ring: Self::storage_len(max_messages, max_size),
            head: 0,
            used: 0,
            count: 0,
        }
    }

    /// Bytes of ring storage such a queue needs.
    pub const fn storage_len(max_messages: usize, max_size: usize) -> usize {
        let max_size = if max_size > MAX_MESSAGE {
            MAX_MESSAGE
        } else {
            max_size
        };
        max_messages * (HEADER + max_size)
    }

    /// Messages queued.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The largest message it takes.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// Forgets every message (the destination was reset).
    pub fn clear(&mut self) {
        self.head = 0;
        self.used = 0;
        self.count = 0;
    }

    /// Queues `message` from `from` at the back; returns how many are queued now. `storage`
    /// is the queue's own ring, [`Queue::storage_len`] bytes (a shorter one holds nothing:
    /// every send is refused as full, and a receive finds nothing).
    pub fn send(
        &mut self,
        storage: &mut [u8],
        from: Sender,
        message: &[u8],
    ) -> Result<usize, MessageError> {
        self.send_with(storage, from, message, copy_slice)
    }

    /// [`Queue::send`], the header and the message's bytes copied with `copy` (Keel's: wide
    /// unaligned moves, where `copy_from_slice` copies a misaligned slice byte by byte).
    pub fn send_with(
        &mut self,
        storage: &mut [u8],
        from: Sender,
        message: &[u8],
        copy: impl Fn(&mut [u8], &[u8]) + Copy,
    ) -> Result<usize, MessageError> {
        if message.len() > self.max_size {
            return Err(MessageError::TooLarge);
        }
        let ring = match storage.get_mut(..self.ring) {
            Some(ring) if self.count < self.max_messages && !ring.is_empty() => ring,
            _ => return Err(MessageError::QueueFull),
        };
        let header = encode_header(from, message.len());
        let tail = wrap(self.head + self.used, ring.len());
        let body = put(ring, tail, &header, copy);
        put(ring, body, message, copy);
        self.used += HEADER + message.len();
        self.count += 1;
        Ok(self.count)
    }

    /// The next message's sender and length, if any.
    pub fn front(&self, storage: &[u8]) -> Option<(Sender, usize)> {
        if self.count == 0 {
            return None;
        }
        let ring = storage.get(..self.ring)?;
        let mut header = [0u8; HEADER];
        get(ring, self.head, &mut header, copy_slice);
        Some(decode_header(header))
    }

    /// Moves the next message into `out` (which must hold it whole: otherwise it stays
    /// queued and the error says so).
    pub fn receive(&mut self, storage: &[u8], out: &mut [u8]) -> Result<Received, MessageError> {
        self.receive_with(storage, out, copy_slice)
    }

    /// [`Queue::receive`], the header and the message's bytes copied with `copy`; the header
    /// is read once. An empty queue is answered in the caller (a receive that will wait),
    /// without the frame of the copy.
    #[inline(always)]
    pub fn receive_with(
        &mut self,
        storage: &[u8],
        out: &mut [u8],
        copy: impl Fn(&mut [u8], &[u8]) + Copy,
    ) -> Result<Received, MessageError> {
        if self.count == 0 {
            return Err(MessageError::Empty);
        }
        self.take_front(storage, out, copy)
    }

    /// [`Queue::receive_with`] of a queue that holds a message.
    #[inline(never)]
    fn take_front(
        &mut self,
        storage: &[u8],
        out: &mut [u8],
        copy: impl Fn(&mut [u8], &[u8]) + Copy,
    ) -> Result<Received, MessageError> {
        let ring = storage.get(..self.ring).ok_or(MessageError::Empty)?;
        let mut header = [0u8; HEADER];
        let body = get(ring, self.head, &mut header, copy);
        let (from, len) = decode_header(header);
        let out = out.get_mut(..len).ok_or(MessageError::BufferTooSmall)?;
        self.head = get(ring, body, out, copy);
        self.used -= HEADER + len;
        self.count -= 1;
        if self.count == 0 {
            self.head = 0;
        }
        Ok(Received {
            from,
            len,
            left: self.count,
        })
    }
}

/// A message's header as it lies in the ring: its length in the low 32 bits, the sender's VM
/// and vCPU in the two 16-bit halves above, little-endian (one 64-bit word, moved whole).
fn encode_header(from: Sender, len: usize) -> [u8; HEADER] {
    (len as u32 as u64 | u64::from(from.vm) << 32 | u64::from(from.vcpu) << 48).to_le_bytes()
}

/// The sender and length of a header [`encode_header`] made.
fn decode_header(header: [u8; HEADER]) -> (Sender, usize) {
    let word = u64::from_le_bytes(header);
    let from = Sender {
        vm: (word >> 32) as u16,
        vcpu: (word >> 48) as u16,
    };
    (from, word as u32 as usize)
}

fn copy_slice(destination: &mut [u8], source: &[u8]) {
    destination.copy_from_slice(source);
}

/// `at` brought back into a ring of `len` bytes (`at` < 2 `len`): no division.
fn wrap(at: usize, len: usize) -> usize {
    if at >= len {
        at - len
    } else {
        at
    }
}

/// Writes `bytes` into `ring` from `at` (inside it), wrapping at its end; returns where they
/// end. One copy unless they wrap.
fn put(ring: &mut [u8], at: usize, bytes: &[u8], copy: impl Fn(&mut [u8], &[u8])) -> usize {
    let end = at + bytes.len();
    if end <= ring.len() {
        copy(&mut ring[at..end], bytes);
        return wrap(end, ring.len());
    }
    let (first, rest) = bytes.split_at(ring.len() - at);
    copy(&mut ring[at..], first);
    copy(&mut ring[..rest.len()], rest);
    rest.len()
}

/// Reads `out.len()` bytes of `ring` from `at` (inside it), wrapping at its end; returns
/// where they end. One copy unless they wrap.
fn get(ring: &[u8], at: usize, out: &mut [u8], copy: impl Fn(&mut [u8], &[u8])) -> usize {
    let end = at + out.len();
    if end <= ring.len() {
        copy(out, &ring[at..end]);
        return wrap(end, ring.len());
    }
    let (first, rest) = out.split_at_mut(ring.len() - at);
    copy(first, &ring[at..]);
    let rest_len = rest.len();
    copy(rest, &ring[..rest_len]);
    rest_len
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use std::collections::VecDeque;
    use std::vec::Vec;

    const A: Sender = Sender { vm: 1, vcpu: 0 };
    const B: Sender = Sender { vm: 2, vcpu: 3 };

    #[test]
    fn messages_come_out_whole_in_order_with_their_senders() {
        let mut queue = Queue::new(3, 16);
        let mut ring = vec![0u8; Queue::storage_len(3, 16)];
        assert_eq!(queue.send(&mut ring, A, b"hello"), Ok(1));
        assert_eq!(queue.send(&mut ring, B, b""), Ok(2));
        assert_eq!(queue.send(&mut ring, A, &[7; 16]), Ok(3));
        // Full: refused, nothing dropped.
        assert_eq!(queue.send(&mut ring, B, b"x"), Err(MessageError::QueueFull));
        assert_eq!(
            queue.send(&mut ring, B, &[0; 17]),
            Err(MessageError::TooLarge)
        );
        let mut out = [0u8; 16];
        // Too small a buffer: the message stays queued.
        assert_eq!(
            queue.receive(&ring, &mut out[..4]),
            Err(MessageError::BufferTooSmall)
        );
        assert_eq!(queue.len(), 3);
        let got = queue.receive(&ring, &mut out).unwrap();
        assert_eq!((got.from, got.len, got.left), (A, 5, 2));
        assert_eq!(&out[..5], b"hello");
        assert_eq!(queue.receive(&ring, &mut out).unwrap().len, 0);
        let got = queue.receive(&ring, &mut out).unwrap();
        assert_eq!((got.from, got.len, got.left, out), (A, 16, 0, [7; 16]));
        assert_eq!(queue.receive(&ring, &mut out), Err(MessageError::Empty));
    }

    /// Random sends and receives of random sizes across the ring's wrap-around, against a
    /// plain queue: every message comes out once, whole, in order; refusals change nothing.
    #[test]
    fn the_ring_matches_a_model() {
        ring_matches_model(copy_slice);
    }

    /// The same with Keel's way of copying: wide moves that overlap, the last block first
    /// (as `cpu::copy_bytes` does), the header too, wherever the wrap-around cuts them.
    #[test]
    fn the_ring_matches_a_model_with_wide_overlapping_copies() {
        ring_matches_model(wide_copy);
    }

    /// What `cpu::copy_bytes` does, in safe Rust: at least 16 bytes, the last 16 first, then
    /// 16-byte blocks from the start up to them; 8 to 15, the first 8 and the last 8; 4 to 7,
    /// the first 4 and the last 4; 1 to 3, bytes 0, len / 2 and len - 1.
    fn wide_copy(destination: &mut [u8], source: &[u8]) {
        assert_eq!(destination.len(), source.len());
        let len = source.len();
        let mut moved = vec![false; len];
        let mut mv = |at: usize, width: usize| {
            destination[at..at + width].copy_from_slice(&source[at..at + width]);
            moved[at..at + width].fill(true);
        };
        match len {
            16.. => {
                mv(len - 16, 16);
                for block in 0..(len - 1) / 16 {
                    mv(block * 16, 16);
                }
            }
            8..=15 => {
                mv(0, 8);
                mv(len - 8, 8);
            }
            4..=7 => {
                mv(0, 4);
                mv(len - 4, 4);
            }
            1..=3 => {
                mv(0, 1);
                mv(len / 2, 1);
                mv(len - 1, 1);
            }
            0 => {}
        }
        assert!(moved.iter().all(|&m| m), "{len} bytes: some not moved");
    }

    #[test]
    fn wide_copies_move_every_byte_of_every_length() {
        for len in 0..300 {
            let source: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
            let mut destination = vec![0u8; len];
            wide_copy(&mut destination, &source);
            assert_eq!(destination, source);
        }
    }

    /// A header cut by the wrap-around: its bytes at the ring's end and its start.
    #[test]
    fn a_header_cut_by_the_wrap_around_reads_whole() {
        // Two messages of at most 7 bytes: a 30-byte ring. 5 + 8 bytes, then 5 + 8 more: the
        // third header starts at byte 26 and wraps after 4 of its 8 bytes.
        let mut queue = Queue::new(2, 7);
        let mut ring = vec![0u8; Queue::storage_len(2, 7)];
        let mut out = [0u8; 7];
        for (i, from) in [A, B, A, B, A].into_iter().enumerate() {
            let message = [i as u8 + 1; 5];
            assert_eq!(queue.send_with(&mut ring, from, &message, wide_copy), Ok(1));
            let got = queue.receive_with(&ring, &mut out, wide_copy).unwrap();
            assert_eq!((got.from, got.len, got.left), (from, 5, 0), "message {i}");
            assert_eq!(out[..5], message);
            // Left at 0 once empty: send two to reach the end of the ring.
            assert_eq!(queue.send_with(&mut ring, B, &[9; 7], wide_copy), Ok(1));
            assert_eq!(
                queue.send_with(&mut ring, A, &[i as u8; 3], wide_copy),
                Ok(2)
            );
            assert_eq!(
                queue.receive_with(&ring, &mut out, wide_copy).unwrap().len,
                7
            );
            assert_eq!(
                queue.send_with(&mut ring, B, &[i as u8; 6], wide_copy),
                Ok(2)
            );
            assert_eq!(queue.front(&ring), Some((A, 3)));
            assert_eq!(
                queue.receive_with(&ring, &mut out, wide_copy).unwrap().len,
                3
            );
            // The 6-byte message's header began at 15 + 11 = 26: cut by the wrap.
            assert_eq!(queue.front(&ring), Some((B, 6)));
            let got = queue.receive_with(&ring, &mut out, wide_copy).unwrap();
            assert_eq!(
                (got.from, got.len, got.left, &out[..6]),
                (B, 6, 0, &[i as u8; 6][..])
            );
        }
    }

    fn ring_matches_model(copy: fn(&mut [u8], &[u8])) {
        let mut rng = Rng::new(0x1bc);
        for (max_messages, max_size) in [(1, 1), (2, 7), (3, 13), (4, 64), (8, 100)] {
            let mut queue = Queue::new(max_messages, max_size);
            let mut ring = vec![0u8; Queue::storage_len(max_messages, max_size)];
            let mut model: VecDeque<(Sender, Vec<u8>)> = VecDeque::new();
            for step in 0..5_000u32 {
                if rng.below(2) == 0 {
                    let len = rng.below(max_size as u64 + 2) as usize;
                    let message: Vec<u8> = (0..len).map(|i| (step as usize + i) as u8).collect();
                    let from = if rng.below(2) == 0 { A } else { B };
                    let result = queue.send_with(&mut ring, from, &message, copy);
                    let expected = if len > max_size {
                        Err(MessageError::TooLarge)
                    } else if model.len() == max_messages {
                        Err(MessageError::QueueFull)
                    } else {
                        model.push_back((from, message));
                        Ok(model.len())
                    };
                    assert_eq!(result, expected);
                } else {
                    let mut out = vec![0u8; rng.below(max_size as u64 + 1) as usize];
                    let result = queue.receive_with(&ring, &mut out, copy);
                    match model.front() {
                        None => assert_eq!(result, Err(MessageError::Empty)),
                        Some((_, m)) if m.len() > out.len() => {
                            assert_eq!(result, Err(MessageError::BufferTooSmall))
                        }
                        Some(_) => {
                            let (from, message) = model.pop_front().unwrap();
                            let got = result.unwrap();
                            assert_eq!(
                                (got.from, got.len, got.left),
                                (from, message.len(), model.len())
                            );
                            assert_eq!(&out[..got.len], &message[..]);
                        }
                    }
                }
                assert_eq!(queue.len(), model.len());
            }
        }
    }

    /// A VM of `vcpus` vCPUs and `tasks` tasks, taking messages as `messages` says.
    fn vm(id: u16, vcpus: usize, tasks: u8, messages: Option<MessageGrant>) -> VmDesc {
        VmDesc {
            tasks: (tasks > 0).then_some(crate::system::TaskGrant {
                max: tasks,
                utilisation_ppm: 100_000,
                managers: &[],
            }),
            messages,
            ..crate::system::test_vm(id, 0x5000_0000 + u64::from(id) * 0x100_0000, vcpus)
        }
    }

    #[test]
    fn destinations_are_checked_in_order_each_refusal_its_own() {
        let grant = |senders: &'static [u8]| MessageGrant {
            depth: 4,
            size: 100,
            intid: 9,
            senders,
            pool_offset: 0,
        };
        // VM 0 takes messages from 1 and itself; VM 1 (2 vCPUs, 2 tasks) from 0; VM 2 none.
        let vms = [
            vm(0, 1, 0, Some(grant(&[1, 0]))),
            vm(1, 2, 2, Some(grant(&[0]))),
            vm(2, 1, 0, None),
        ];
        let send = |sender: usize, vm: u64, vcpu: u64, len: u64| {
            let request = SendRequest {
                vm,
                vcpu,
                buffer: 0x4000_0000,
                len,
            };
            destination(&vms, sender, &request).map(|(id, vcpu, grant)| (id, vcpu, grant.size))
        };
        assert_eq!(send(0, 1, 0, 100), Ok((1, 0, 100)));
        // A task's vCPU: after the configured ones, within the grant's max.
        assert_eq!(send(0, 1, 3, 0), Ok((1, 3, 100)));
        assert_eq!(send(0, 1, 4, 0), Err(MessageError::UnknownDestination));
        assert_eq!(send(0, 3, 0, 0), Err(MessageError::UnknownDestination));
        assert_eq!(
            send(0, u64::MAX, 0, 0),
            Err(MessageError::UnknownDestination)
        );
        assert_eq!(
            send(0, 0, u64::MAX, 0),
            Err(MessageError::UnknownDestination)
        );
        // Not a sender it lists, or a VM that takes none: before the size is looked at.
        assert_eq!(send(2, 1, 0, 1_000), Err(MessageError::NotAllowed));
        assert_eq!(send(0, 2, 0, 1), Err(MessageError::NotAllowed));
        assert_eq!(send(0, 0, 0, 1), Ok((0, 0, 100)));
        assert_eq!(send(1, 0, 0, 101), Err(MessageError::TooLarge));
        assert_eq!(send(1, 0, 0, u64::MAX), Err(MessageError::TooLarge));
    }

    #[test]
    fn codes_are_distinct_and_negative() {
        let codes = MessageError::ALL.map(MessageError::code);
        for (i, code) in codes.iter().enumerate() {
            assert!(*code < 0);
            assert_eq!(
                MessageError::from_x0(*code as u64),
                Some(MessageError::ALL[i])
            );
            assert!(!codes[..i].contains(code), "code {code} used twice");
        }
    }

    #[test]
    fn sizes_are_capped_at_one_copy_step() {
        assert_eq!(Queue::new(2, 1 << 20).max_size(), MAX_MESSAGE);
        assert_eq!(Queue::storage_len(2, 1 << 20), 2 * (HEADER + MAX_MESSAGE));
        let mut queue = Queue::new(0, 8);
        assert_eq!(queue.send(&mut [], A, b"x"), Err(MessageError::QueueFull));
        let mut queue = Queue::new(2, 8);
        assert_eq!(
            queue.send(&mut [0; 4], A, b"x"),
            Err(MessageError::QueueFull)
        );
        assert_eq!(
            queue.receive(&[0; 4], &mut [0; 8]),
            Err(MessageError::Empty)
        );
    }
}

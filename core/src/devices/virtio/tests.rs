//! Host tests of the virtio console: a driver written here the way Linux's `virtio_mmio` and
//! `virtio_console` drive the device, every refusal, and a randomized run of hostile register
//! writes and ring contents.

use std::collections::VecDeque;
use std::vec::Vec;

use super::console::{Effect, VirtioConsole, DEVICE_FEATURES, FEATURE_MULTIPORT, FEATURE_SIZE};
use super::memory::{GuestMemory, TestMemory};
use super::mmio::register::*;
use super::mmio::*;
use super::queue::{max_accesses, QueueError, MAX_QUEUE_SIZE};
use super::MemoryError;
use crate::addr::GuestPhysAddr;
use crate::devices::DeviceError;
use crate::rng::Rng;

/// The test VM's memory: 128 KiB at 1 GiB.
const BASE: u64 = 0x4000_0000;
const MEMORY_SIZE: usize = 0x2_0000;

/// Descriptor flags the driver sets (virtio 1.2 section 2.7.5).
const NEXT: u16 = 1;
const WRITE: u16 = 2;
const INDIRECT: u16 = 4;
/// Bytes of buffer the driver gives each descriptor at most.
const BUFFER: u64 = 256;

/// Features Linux's console driver and virtio core know, as it would accept them: its
/// feature table (F_SIZE, F_MULTIPORT) and the transport's (VERSION_1, indirect descriptors,
/// event indices).
const LINUX_FEATURES: u64 =
    FEATURE_VERSION_1 | FEATURE_SIZE | FEATURE_MULTIPORT | 1 << 28 | 1 << 29;

/// Where the driver keeps queue `queue`: 64 KiB of its own.
#[derive(Clone, Copy)]
struct Layout {
    descriptors: u64,
    available: u64,
    used: u64,
    buffers: u64,
}

fn layout(queue: u16) -> Layout {
    let base = BASE + 0x1_0000 * u64::from(queue);
    Layout {
        descriptors: base,
        available: base + 0x1000,
        used: base + 0x2000,
        buffers: base + 0x4000,
    }
}

/// The driver's side of one queue.
struct DriverQueue {
    size: u16,
    layout: Layout,
    /// The available index the driver published last.
    available: u16,
    /// The used index the driver read up to.
    used_seen: u16,
    /// Next descriptor to hand out (descriptors come back in order: the device uses chains
    /// in order).
    next_descriptor: u16,
    /// Descriptors not given back.
    outstanding: u16,
    /// Chains given to the device: head, descriptors, total buffer length.
    chains: VecDeque<(u16, u16, u32)>,
}

/// A guest driver, as Linux's.
struct Driver {
    console: VirtioConsole,
    memory: TestMemory,
    queues: [DriverQueue; 2],
}

impl Driver {
    fn new(size: u16) -> Self {
        let queue = |index| DriverQueue {
            size,
            layout: layout(index),
            available: 0,
            used_seen: 0,
            next_descriptor: 0,
            outstanding: 0,
            chains: VecDeque::new(),
        };
        Self {
            console: VirtioConsole::new(),
            memory: TestMemory::new(BASE, MEMORY_SIZE),
            queues: [queue(0), queue(1)],
        }
    }

    fn read(&self, offset: u64) -> u32 {
        self.console.mmio_read(offset, 4).unwrap()
    }

    fn write(&mut self, offset: u64, value: u32) -> Effect {
        self.console.mmio_write(offset, 4, value.into()).unwrap()
    }

    /// Reset, ACKNOWLEDGE, DRIVER, then features (3.1.1, Linux's `virtio_dev_probe`):
    /// accepts the offered ones among `known`; returns whether FEATURES_OK stuck.
    fn negotiate(&mut self, known: u64) -> bool {
        self.write(STATUS, 0);
        assert_eq!(self.read(STATUS), 0);
        assert_eq!(self.read(MAGIC_VALUE), MAGIC);
        assert_eq!(self.read(VERSION), TRANSPORT_VERSION);
        assert_eq!(self.read(DEVICE_ID), 3);
        self.write(STATUS, STATUS_ACKNOWLEDGE);
        self.write(STATUS, STATUS_ACKNOWLEDGE | STATUS_DRIVER);
        self.write(DEVICE_FEATURES_SEL, 1);
        let mut offered = u64::from(self.read(register::DEVICE_FEATURES)) << 32;
        self.write(DEVICE_FEATURES_SEL, 0);
        offered |= u64::from(self.read(register::DEVICE_FEATURES));
        let accepted = offered & known;
        self.write(DRIVER_FEATURES_SEL, 1);
        self.write(DRIVER_FEATURES, (accepted >> 32) as u32);
        self.write(DRIVER_FEATURES_SEL, 0);
        self.write(DRIVER_FEATURES, accepted as u32);
        let status = self.read(STATUS) | STATUS_FEATURES_OK;
        self.write(STATUS, status);
        self.read(STATUS) & STATUS_FEATURES_OK != 0
    }

    /// Sets queue `index` up (Linux's `vm_setup_vq`); returns whether it reads ready.
    fn setup_queue(&mut self, index: u16) -> bool {
        let DriverQueue { size, layout, .. } = self.queues[usize::from(index)];
        self.write(QUEUE_SEL, index.into());
        assert_eq!(self.read(QUEUE_READY), 0, "not set up yet");
        assert_eq!(self.read(QUEUE_NUM_MAX), u32::from(MAX_QUEUE_SIZE));
        self.write(QUEUE_NUM, size.into());
        for (low, address) in [
            (QUEUE_DESC_LOW, layout.descriptors),
            (QUEUE_DRIVER_LOW, layout.available),
            (QUEUE_DEVICE_LOW, layout.used),
        ] {
            self.write(low, address as u32);
            self.write(low + 4, (address >> 32) as u32);
        }
        self.write(QUEUE_READY, 1);
        self.read(QUEUE_READY) == 1
    }

    /// The whole probe, both queues of `size`, DRIVER_OK.
    fn start(size: u16) -> Self {
        let mut driver = Self::new(size);
        assert!(driver.negotiate(LINUX_FEATURES));
        assert!(driver.setup_queue(0) && driver.setup_queue(1));
        let status = driver.read(STATUS);
        driver.write(STATUS, status | STATUS_DRIVER_OK);
        assert_eq!(
            driver.read(STATUS),
            STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK | STATUS_DRIVER_OK
        );
        driver
    }

    fn poke(&mut self, address: u64, bytes: &[u8]) {
        self.memory.write(GuestPhysAddr(address), bytes).unwrap();
    }

    fn peek(&self, address: u64, len: usize) -> Vec<u8> {
        let mut bytes = vec![0; len];
        self.memory
            .read(GuestPhysAddr(address), &mut bytes)
            .unwrap();
        bytes
    }

    /// Writes descriptor `index` of queue `queue`.
    fn descriptor(&mut self, queue: u16, index: u16, addr: u64, len: u32, flags: u16, next: u16) {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&addr.to_le_bytes());
        bytes[8..12].copy_from_slice(&len.to_le_bytes());
        bytes[12..14].copy_from_slice(&flags.to_le_bytes());
        bytes[14..].copy_from_slice(&next.to_le_bytes());
        let table = self.queues[usize::from(queue)].layout.descriptors;
        self.poke(table + 16 * u64::from(index), &bytes);
    }

    /// Sets the available ring's index of `queue` to `index` (and its flags to `flags`).
    fn publish(&mut self, queue: u16, index: u16, flags: u16) {
        let ring = self.queues[usize::from(queue)].layout.available;
        let mut header = [0u8; 4];
        header[..2].copy_from_slice(&flags.to_le_bytes());
        header[2..].copy_from_slice(&index.to_le_bytes());
        self.poke(ring, &header);
    }

    /// Makes the chain from `head` available on `queue` and notifies the device.
    fn make_available(&mut self, queue: u16, head: u16) -> Effect {
        let state = &mut self.queues[usize::from(queue)];
        let slot = u64::from(state.available % state.size);
        let ring = state.layout.available;
        state.available = state.available.wrapping_add(1);
        let index = state.available;
        self.poke(ring + 4 + 2 * slot, &head.to_le_bytes());
        self.publish(queue, index, 0);
        self.write(QUEUE_NOTIFY, queue.into())
    }

    /// Queues one chain of buffers (readable ones for transmit, writable for receive), each
    /// of the given contents or length; returns false if there are not enough descriptors.
    fn add_chain(&mut self, queue: u16, pieces: &[&[u8]], writable: bool) -> bool {
        let state = &self.queues[usize::from(queue)];
        let count = pieces.len() as u16;
        if state.size - state.outstanding < count {
            return false;
        }
        let head = state.next_descriptor;
        let (size, layout) = (state.size, state.layout);
        let mut total = 0;
        for (i, piece) in pieces.iter().enumerate() {
            let index = (head + i as u16) % size;
            let address = layout.buffers + BUFFER * u64::from(index);
            let last = i + 1 == pieces.len();
            let flags = if writable { WRITE } else { 0 } | if last { 0 } else { NEXT };
            if !writable {
                self.poke(address, piece);
            }
            self.descriptor(
                queue,
                index,
                address,
                piece.len() as u32,
                flags,
                (index + 1) % size,
            );
            total += piece.len() as u32;
        }
        let state = &mut self.queues[usize::from(queue)];
        state.next_descriptor = (head + count) % size;
        state.outstanding += count;
        state.chains.push_back((head, count, total));
        let expected = if queue == 0 {
            Effect::ReceiveBuffers
        } else {
            Effect::Transmit
        };
        assert_eq!(self.make_available(queue, head), expected);
        true
    }

    /// Takes the interrupt (Linux's `vm_interrupt`): reads and acknowledges its causes.
    fn interrupt(&mut self) -> u32 {
        let status = self.read(INTERRUPT_STATUS);
        self.write(INTERRUPT_ACK, status);
        assert!(!self.console.interrupt_level());
        status
    }

    /// The chains the device used since the driver last looked: head, bytes written, and
    /// (for received ones) the bytes.
    fn take_used(&mut self, queue: u16) -> Vec<(u16, u32, Vec<u8>)> {
        let layout = self.queues[usize::from(queue)].layout;
        let index = u16::from_le_bytes(self.peek(layout.used + 2, 2).try_into().unwrap());
        let mut used = Vec::new();
        while self.queues[usize::from(queue)].used_seen != index {
            let state = &self.queues[usize::from(queue)];
            let slot = u64::from(state.used_seen % state.size);
            let element = self.peek(layout.used + 4 + 8 * slot, 8);
            let head = u32::from_le_bytes(element[..4].try_into().unwrap());
            let len = u32::from_le_bytes(element[4..].try_into().unwrap());
            let state = &mut self.queues[usize::from(queue)];
            let (expected, count, capacity) = state.chains.pop_front().expect("a chain was used");
            assert_eq!(head, u32::from(expected), "chains are used in order");
            assert!(len <= if queue == 0 { capacity } else { 0 });
            state.outstanding -= count;
            state.used_seen = state.used_seen.wrapping_add(1);
            // A receive chain is one buffer here (as Linux's): its bytes are the input.
            let bytes = if queue == 0 {
                let address = layout.buffers + BUFFER * u64::from(expected);
                self.peek(address, len as usize)
            } else {
                Vec::new()
            };
            used.push((expected, len, bytes));
        }
        used
    }

    /// Sends `bytes` as a one-buffer chain (as Linux's console does).
    fn send(&mut self, bytes: &[u8]) -> bool {
        self.add_chain(1, &[bytes], false)
    }

    /// Gives the device a receive buffer of `len` bytes (as Linux's console does).
    fn post_buffer(&mut self, len: usize) -> bool {
        self.add_chain(0, &[&[0; BUFFER as usize][..len]], true)
    }

    /// The device's transmit call with a sink taking everything, as much as `budget`.
    fn transmit_all(&mut self, budget: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let count = self
            .console
            .transmit(&mut self.memory, budget, &mut |bytes: &[u8]| {
                out.extend_from_slice(bytes);
                bytes.len()
            });
        assert_eq!(count, out.len());
        out
    }

    /// Asserts the device broke with `error` and needs a reset, and told the driver.
    fn assert_needs_reset(&self, error: QueueError) {
        assert_eq!(self.console.queue_error(), Some(error));
        assert_ne!(self.read(STATUS) & STATUS_DEVICE_NEEDS_RESET, 0);
        assert_ne!(self.read(INTERRUPT_STATUS) & INTERRUPT_CONFIG_CHANGE, 0);
        assert!(self.console.interrupt_level());
    }
}

/// Random bytes of a random length up to `max`.
fn random_bytes(rng: &mut Rng, max: u64) -> Vec<u8> {
    (0..rng.below(max + 1))
        .map(|_| rng.next_u64() as u8)
        .collect()
}

#[test]
fn a_linux_style_driver_transmits_across_the_index_wrap() {
    let mut driver = Driver::start(8);
    let mut rng = Rng::new(0x7478);
    let mut sink_rng = Rng::new(0x5e);
    let (mut sent, mut out) = (Vec::new(), Vec::new());
    let mut chains = 0u32;
    // More than 2^16 chains: both free-running indices wrap.
    while chains < 70_000 {
        loop {
            let pieces: Vec<Vec<u8>> = (0..1 + rng.below(3))
                .map(|_| random_bytes(&mut rng, 40))
                .collect();
            let pieces: Vec<&[u8]> = pieces.iter().map(|p| &p[..]).collect();
            if !driver.add_chain(1, &pieces, false) {
                break;
            }
            pieces.iter().for_each(|p| sent.extend_from_slice(p));
            chains += 1;
        }
        // A sink that takes a random part of what it is offered; a random budget.
        let budget = 1 + rng.below(300) as usize;
        let before = out.len();
        let count = driver
            .console
            .transmit(&mut driver.memory, budget, &mut |bytes: &[u8]| {
                let taken = (sink_rng.below(bytes.len() as u64 + 8) as usize).min(bytes.len());
                out.extend_from_slice(&bytes[..taken]);
                taken
            });
        assert_eq!(count, out.len() - before);
        assert!(count <= budget);
        if driver.console.interrupt_level() {
            assert_eq!(driver.interrupt(), INTERRUPT_USED_BUFFER);
        }
        driver.take_used(1);
    }
    while !driver.queues[1].chains.is_empty() {
        out.extend(driver.transmit_all(4096));
        driver.take_used(1);
    }
    assert_eq!(out, sent, "every byte once, in order");
    assert_eq!(driver.console.queue_error(), None);
}

#[test]
fn a_linux_style_driver_receives_across_the_index_wrap() {
    let mut driver = Driver::start(16);
    let mut rng = Rng::new(0x7278);
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    let (mut offered, mut received) = (0, Vec::new());
    let mut chains = 0u32;
    while chains < 70_000 {
        // Linux fills the receive queue with buffers (one writable descriptor each).
        while driver.post_buffer(1 + rng.below(40) as usize) {}
        let end = (offered + rng.below(120) as usize).min(input.len());
        let taken = driver
            .console
            .receive(&mut driver.memory, &input[offered..end]);
        assert!(taken <= end - offered);
        offered += taken;
        if driver.console.interrupt_level() {
            driver.interrupt();
        }
        for (_, _, bytes) in driver.take_used(0) {
            received.extend(bytes);
            chains += 1;
        }
    }
    assert_eq!(received, input[..offered], "every byte once, in order");
    assert!(
        driver.queues[0].used_seen < 10_000,
        "the used index wrapped"
    );
}

#[test]
fn a_chain_the_sink_cannot_take_stays_available() {
    let mut driver = Driver::start(8);
    let message: Vec<u8> = (0..100).collect();
    driver.add_chain(1, &[&message[..60], &message[60..]], false);
    let taken = driver
        .console
        .transmit(&mut driver.memory, 4096, &mut |_: &[u8]| 0);
    assert_eq!(taken, 0);
    assert!(driver.take_used(1).is_empty() && !driver.console.interrupt_level());
    // A budget of 30 bytes a call: the chain is used only when its last byte went out.
    let mut out = Vec::new();
    for _ in 0..3 {
        out.extend(driver.transmit_all(30));
        assert!(driver.take_used(1).is_empty());
    }
    out.extend(driver.transmit_all(30));
    assert_eq!(out, message);
    assert_eq!(driver.take_used(1).len(), 1);
    assert_eq!(driver.interrupt(), INTERRUPT_USED_BUFFER);
}

#[test]
fn the_driver_may_ask_for_no_used_buffer_notification() {
    let mut driver = Driver::start(8);
    driver.send(b"quiet");
    driver.publish(1, 1, 1);
    assert_eq!(driver.transmit_all(4096), b"quiet");
    assert!(!driver.console.interrupt_level());
    assert_eq!(driver.take_used(1).len(), 1);
}

#[test]
fn identification_features_and_configuration() {
    let mut driver = Driver::new(8);
    assert_eq!(driver.read(VENDOR_ID), VENDOR);
    driver.write(DEVICE_FEATURES_SEL, 0);
    assert_eq!(
        driver.read(register::DEVICE_FEATURES),
        1 << 2,
        "EMERG_WRITE"
    );
    driver.write(DEVICE_FEATURES_SEL, 1);
    assert_eq!(driver.read(register::DEVICE_FEATURES), 1, "VERSION_1");
    driver.write(DEVICE_FEATURES_SEL, 2);
    assert_eq!(driver.read(register::DEVICE_FEATURES), 0);
    assert_eq!(DEVICE_FEATURES, FEATURE_VERSION_1 | 1 << 2);
    // No shared memory region: length -1 (4.2.2).
    driver.write(SHM_SEL, 0);
    for offset in [SHM_LEN_LOW, SHM_LEN_HIGH, SHM_BASE_LOW, SHM_BASE_HIGH] {
        assert_eq!(driver.read(offset), 0xffff_ffff);
    }
    assert_eq!(driver.read(CONFIG_GENERATION), 0);
    // cols, rows (0: no F_SIZE), max_nr_ports 1, emerg_wr reads 0; bytes, halves, words.
    let console = &driver.console;
    assert_eq!(console.mmio_read(CONFIG, 2), Ok(0));
    assert_eq!(console.mmio_read(CONFIG + 2, 2), Ok(0));
    assert_eq!(console.mmio_read(CONFIG + 4, 4), Ok(1));
    assert_eq!(console.mmio_read(CONFIG + 4, 1), Ok(1));
    assert_eq!(console.mmio_read(CONFIG + 6, 2), Ok(0));
    assert_eq!(console.mmio_read(CONFIG + 8, 4), Ok(0));
    assert_eq!(console.mmio_read(CONFIG + 11, 1), Ok(0));
    // Emergency write works before anything is set up (5.3.6.1), at any width.
    assert_eq!(
        driver.console.mmio_write(CONFIG + 8, 4, 0x1234_5641),
        Ok(Effect::EmergencyWrite(b'A'))
    );
    assert_eq!(
        driver.console.mmio_write(CONFIG + 8, 1, u64::from(b'k')),
        Ok(Effect::EmergencyWrite(b'k'))
    );
    // A notification of a queue the device lacks does nothing.
    assert_eq!(driver.write(QUEUE_NOTIFY, 2), Effect::None);
}

#[test]
fn bad_widths_and_offsets_are_refused() {
    let mut console = VirtioConsole::new();
    let width = |offset, size| Some(DeviceError::BadWidth { offset, size });
    let none = |offset, write| Some(DeviceError::NoSuchRegister { offset, write });
    // Control registers: aligned 32-bit only.
    assert_eq!(console.mmio_read(STATUS, 8).err(), width(STATUS, 8));
    assert_eq!(console.mmio_read(STATUS, 1).err(), width(STATUS, 1));
    assert_eq!(console.mmio_read(MAGIC_VALUE + 2, 4).err(), width(2, 4));
    assert_eq!(console.mmio_read(STATUS, 3).err(), width(STATUS, 3));
    assert_eq!(console.mmio_write(STATUS, 2, 1).err(), width(STATUS, 2));
    assert_eq!(
        console.mmio_write(QUEUE_NOTIFY + 1, 4, 1).err(),
        width(0x51, 4)
    );
    // Gaps, legacy registers, QueueReset (not offered), wrong directions.
    for offset in [0x018, 0x028, 0x03c, 0x040, 0x0c0, 0x0f8] {
        assert_eq!(console.mmio_read(offset, 4).err(), none(offset, false));
        assert_eq!(console.mmio_write(offset, 4, 0).err(), none(offset, true));
    }
    assert_eq!(console.mmio_write(MAGIC_VALUE, 4, 0).err(), none(0, true));
    assert_eq!(
        console.mmio_write(INTERRUPT_STATUS, 4, 0).err(),
        none(0x60, true)
    );
    assert_eq!(console.mmio_read(QUEUE_NOTIFY, 4).err(), none(0x50, false));
    assert_eq!(
        console.mmio_read(DRIVER_FEATURES, 4).err(),
        none(0x20, false)
    );
    // Configuration space: 1, 2 or 4 bytes, aligned, inside; only emerg_wr is writable.
    assert_eq!(console.mmio_read(CONFIG, 8).err(), width(CONFIG, 8));
    assert_eq!(console.mmio_read(CONFIG + 1, 2).err(), width(CONFIG + 1, 2));
    assert_eq!(console.mmio_read(CONFIG + 2, 4).err(), width(CONFIG + 2, 4));
    assert_eq!(
        console.mmio_read(CONFIG + 12, 4).err(),
        none(CONFIG + 12, false)
    );
    assert_eq!(
        console.mmio_read(CONFIG + 12, 1).err(),
        none(CONFIG + 12, false)
    );
    assert_eq!(console.mmio_read(!3u64, 4).err(), none(!3u64, false));
    assert_eq!(console.mmio_write(CONFIG, 2, 80).err(), none(CONFIG, true));
    assert_eq!(
        console.mmio_write(CONFIG + 8, 8, 0).err(),
        width(CONFIG + 8, 8)
    );
    assert_eq!(
        console.mmio_write(CONFIG + 10, 2, 0).err(),
        none(CONFIG + 10, true)
    );
    assert_eq!(
        console,
        VirtioConsole::new(),
        "a refused access changes nothing"
    );
}

#[test]
fn features_ok_needs_version_1_and_offered_features_only() {
    let mut driver = Driver::new(8);
    // A legacy driver (no VERSION_1): FEATURES_OK does not stick.
    assert!(!driver.negotiate(FEATURE_SIZE));
    // A driver accepting a feature that was not offered (INDIRECT_DESC).
    driver.negotiate(0);
    driver.write(DRIVER_FEATURES_SEL, 1);
    driver.write(DRIVER_FEATURES, 1);
    driver.write(DRIVER_FEATURES_SEL, 0);
    driver.write(DRIVER_FEATURES, 1 << 28);
    driver.write(
        STATUS,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_FEATURES_OK,
    );
    assert_eq!(driver.read(STATUS), STATUS_ACKNOWLEDGE | STATUS_DRIVER);
    // Without FEATURES_OK, DRIVER_OK leaves the device inert.
    assert!(driver.setup_queue(0) && driver.setup_queue(1));
    driver.write(
        STATUS,
        STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_DRIVER_OK,
    );
    driver.send(b"lost?");
    assert_eq!(driver.transmit_all(4096), b"");
    // Accepted: VERSION_1 alone; later feature writes change nothing.
    assert!(driver.negotiate(FEATURE_VERSION_1));
    driver.write(DRIVER_FEATURES_SEL, 0);
    driver.write(DRIVER_FEATURES, 0xffff_ffff);
    driver.write(STATUS, 0xff);
    assert_eq!(
        driver.read(STATUS),
        0x8f,
        "every driver bit, not NEEDS_RESET"
    );
    assert_eq!(driver.console.queue_error(), None);
}

#[test]
fn a_queue_size_not_a_power_of_two_leaves_the_queue_unusable() {
    for (size, usable) in [
        (0, false),
        (1, true),
        (3, false),
        (48, false),
        (64, true),
        (128, false),
    ] {
        let mut driver = Driver::new(size);
        assert!(driver.negotiate(FEATURE_VERSION_1));
        assert_eq!(driver.setup_queue(1), usable, "size {size}");
    }
    let mut driver = Driver::new(8);
    driver.write(QUEUE_SEL, 1);
    driver.write(QUEUE_NUM, 0x1_0008);
    driver.write(QUEUE_READY, 1);
    assert_eq!(driver.read(QUEUE_READY), 0, "beyond 16 bits");
    // Misaligned areas (2.7: 16, 2 and 4 bytes).
    for (register, address) in [
        (QUEUE_DESC_LOW, 8),
        (QUEUE_DRIVER_LOW, 1),
        (QUEUE_DEVICE_LOW, 2),
    ] {
        let mut driver = Driver::new(8);
        driver.write(QUEUE_SEL, 1);
        driver.write(QUEUE_NUM, 8);
        driver.write(register, address);
        driver.write(QUEUE_READY, 1);
        assert_eq!(driver.read(QUEUE_READY), 0);
    }
    // A queue the device does not have: no size, never ready.
    driver.write(QUEUE_SEL, 2);
    assert_eq!(driver.read(QUEUE_NUM_MAX), 0);
    driver.write(QUEUE_NUM, 8);
    driver.write(QUEUE_READY, 1);
    assert_eq!(driver.read(QUEUE_READY), 0);
    driver.write(QUEUE_SEL, u32::MAX);
    assert_eq!(driver.read(QUEUE_READY), 0);
}

#[test]
fn an_enabled_queue_ignores_configuration_until_disabled() {
    let mut driver = Driver::start(8);
    driver.write(QUEUE_SEL, 1);
    driver.write(QUEUE_DESC_LOW, 0x10);
    driver.write(QUEUE_NUM, 3);
    driver.send(b"kept");
    assert_eq!(driver.transmit_all(4096), b"kept");
    driver.write(QUEUE_READY, 0);
    assert_eq!(driver.read(QUEUE_READY), 0);
    driver.send(b"off");
    assert_eq!(
        driver.transmit_all(4096),
        b"",
        "a disabled queue is left alone"
    );
}

#[test]
fn reset_forgets_queues_status_and_interrupt() {
    let mut driver = Driver::start(8);
    driver.send(b"x");
    driver.transmit_all(4096);
    assert!(driver.console.interrupt_level());
    driver.write(STATUS, 0);
    assert!(!driver.console.interrupt_level());
    assert_eq!(driver.console, VirtioConsole::new());
    // Set up again from scratch (fresh rings), it works again.
    let mut driver = Driver {
        console: driver.console,
        ..Driver::new(8)
    };
    assert!(driver.negotiate(LINUX_FEATURES));
    assert!(driver.setup_queue(0) && driver.setup_queue(1));
    driver.write(STATUS, 0xf);
    driver.send(b"again");
    assert_eq!(driver.transmit_all(4096), b"again");
}

/// A live console whose transmit queue (size 8) was given the chain from descriptor 0, the
/// descriptors as written here, and asked to transmit it.
fn transmit_with(descriptors: &[(u16, u64, u32, u16, u16)]) -> Driver {
    let mut driver = Driver::start(8);
    for &(index, addr, len, flags, next) in descriptors {
        driver.descriptor(1, index, addr, len, flags, next);
    }
    driver.make_available(1, 0);
    driver.transmit_all(4096);
    driver
}

/// As [`transmit_with`], for a chain that breaks a rule: nothing goes out, nothing is used.
fn refused_transmit(descriptors: &[(u16, u64, u32, u16, u16)]) -> Driver {
    let mut driver = Driver::start(8);
    for &(index, addr, len, flags, next) in descriptors {
        driver.descriptor(1, index, addr, len, flags, next);
    }
    driver.make_available(1, 0);
    assert_eq!(driver.transmit_all(4096), b"");
    assert_eq!(driver.peek(layout(1).used + 2, 2), [0, 0], "nothing used");
    driver
}

#[test]
fn buffers_and_rings_outside_memory_need_a_reset() {
    let end = BASE + MEMORY_SIZE as u64;
    let outside = |ipa, len| {
        QueueError::Memory(MemoryError {
            ipa: GuestPhysAddr(ipa),
            len,
        })
    };
    // A buffer past the end, one straddling it, one wrapping past 2^64.
    let driver = transmit_with(&[(0, end, 4, 0, 0)]);
    driver.assert_needs_reset(outside(end, 4));
    let driver = transmit_with(&[(0, end - 2, 4, 0, 0)]);
    driver.assert_needs_reset(outside(end - 2, 4));
    let driver = transmit_with(&[(0, u64::MAX - 1, 4, 0, 0)]);
    driver.assert_needs_reset(outside(u64::MAX - 1, 4));
    assert_eq!(driver.memory.refused(), 1);
    // A large buffer is read in chunks; the refusal comes where memory ends.
    let driver = transmit_with(&[(0, end - 300, 400, 0, 0)]);
    driver.assert_needs_reset(outside(end - 44, 144));
    // A receive buffer outside memory.
    let mut driver = Driver::start(8);
    driver.descriptor(0, 0, BASE - 16, 16, WRITE, 0);
    driver.make_available(0, 0);
    assert_eq!(driver.console.receive(&mut driver.memory, b"input"), 0);
    driver.assert_needs_reset(outside(BASE - 16, 5));
    // Rings outside memory: a descriptor table at the top of the address space.
    let mut driver = Driver::new(8);
    driver.queues[1].layout.descriptors = !15u64;
    driver.negotiate(FEATURE_VERSION_1);
    driver.setup_queue(1);
    driver.write(STATUS, 0xf);
    driver.make_available(1, 3);
    driver.transmit_all(4096);
    driver.assert_needs_reset(outside(!15u64, 16));
    // ... and a used ring just past the end of memory.
    let mut driver = Driver::new(8);
    driver.queues[1].layout.used = end;
    driver.negotiate(FEATURE_VERSION_1);
    driver.setup_queue(1);
    driver.write(STATUS, 0xf);
    driver.send(b"out");
    assert_eq!(driver.transmit_all(4096), b"out");
    driver.assert_needs_reset(outside(end + 4, 8));
}

#[test]
fn loops_and_chains_longer_than_the_queue_need_a_reset() {
    let buffer = layout(1).buffers;
    // Descriptor 0 pointing at itself.
    let driver = refused_transmit(&[(0, buffer, 1, NEXT, 0)]);
    driver.assert_needs_reset(QueueError::ChainTooLong { head: 0 });
    // A cycle through every descriptor: more links than the queue's 8, never an end.
    let ring: Vec<_> = (0..8).map(|i| (i, buffer, 1, NEXT, (i + 1) % 8)).collect();
    let driver = refused_transmit(&ring);
    driver.assert_needs_reset(QueueError::ChainTooLong { head: 0 });
    // A chain into a loop further on.
    let driver = refused_transmit(&[
        (0, buffer, 1, NEXT, 5),
        (5, buffer, 1, NEXT, 6),
        (6, buffer, 1, NEXT, 5),
    ]);
    driver.assert_needs_reset(QueueError::ChainTooLong { head: 0 });
}

#[test]
fn descriptor_indices_beyond_the_table_need_a_reset() {
    let buffer = layout(1).buffers;
    let driver = refused_transmit(&[(0, buffer, 1, NEXT, 8)]);
    driver.assert_needs_reset(QueueError::DescriptorOutOfRange { index: 8 });
    let mut driver = Driver::start(8);
    driver.make_available(1, 0xffff);
    driver.transmit_all(4096);
    driver.assert_needs_reset(QueueError::DescriptorOutOfRange { index: 0xffff });
}

#[test]
fn buffers_of_the_wrong_direction_need_a_reset() {
    let buffer = layout(1).buffers;
    // A writable buffer in a transmit chain, after a good one.
    let driver = refused_transmit(&[(0, buffer, 1, NEXT, 1), (1, buffer, 1, WRITE, 0)]);
    driver.assert_needs_reset(QueueError::WrongDirection { index: 1 });
    // A read-only buffer in a receive chain; the transmit queue still works.
    let mut driver = Driver::start(8);
    driver.descriptor(0, 0, layout(0).buffers, 8, 0, 0);
    driver.make_available(0, 0);
    assert_eq!(driver.console.receive(&mut driver.memory, b"in"), 0);
    driver.assert_needs_reset(QueueError::WrongDirection { index: 0 });
    driver.send(b"still");
    assert_eq!(driver.transmit_all(4096), b"still");
    // Indirect descriptors were not offered.
    let driver = refused_transmit(&[(0, buffer, 16, INDIRECT, 0)]);
    driver.assert_needs_reset(QueueError::IndirectDescriptor { index: 0 });
}

#[test]
fn an_available_index_jump_needs_a_reset_and_breaks_only_its_queue() {
    let mut driver = Driver::start(8);
    driver.send(b"ok");
    assert_eq!(driver.transmit_all(4096), b"ok");
    // 9 entries ahead of the one taken next, in a queue of 8.
    driver.publish(1, 10, 0);
    driver.transmit_all(4096);
    driver.assert_needs_reset(QueueError::AvailableIndexJump {
        available: 10,
        taken: 1,
    });
    // The broken queue is left alone, even once the index is sane again.
    driver.publish(1, 2, 0);
    let accesses = driver.memory.accesses();
    assert_eq!(driver.transmit_all(4096), b"");
    assert_eq!(driver.memory.accesses(), accesses);
    // The driver can still read input, and a reset repairs everything.
    driver.post_buffer(8);
    assert_eq!(driver.console.receive(&mut driver.memory, b"hi"), 2);
    driver.write(STATUS, 0);
    assert_eq!(driver.console.queue_error(), None);
    assert_eq!(driver.read(STATUS), 0);
}

/// A random descriptor for `queue` of `size`: mostly well formed (a buffer in the driver's
/// buffer area, the queue's direction, a `next` inside the table), otherwise anything: a
/// buffer at the edges of memory or of the address space, a huge length, a wrong or
/// indirect flag, an index beyond the table.
fn random_descriptor(rng: &mut Rng, driver: &mut Driver, queue: u16, size: u16) {
    let end = BASE + MEMORY_SIZE as u64;
    let addr = match rng.below(10) {
        0 => end - rng.below(600),
        1 => BASE - rng.below(16),
        2 => u64::MAX - rng.below(600),
        3 => rng.next_u64(),
        _ => layout(queue).buffers + rng.below(0x4000),
    };
    let len = match rng.below(10) {
        0 => rng.next_u64() as u32,
        1 => rng.below(5000) as u32,
        _ => rng.below(300) as u32,
    };
    let mut flags = if queue == 0 { WRITE } else { 0 };
    if rng.below(3) == 0 {
        flags |= NEXT;
    }
    if rng.below(12) == 0 {
        flags ^= [WRITE, INDIRECT, rng.next_u64() as u16][rng.below(3) as usize];
    }
    let table = u64::from(size) + 2 * u64::from(rng.below(8) == 0);
    let (index, next) = (rng.below(table) as u16, rng.below(table) as u16);
    driver.descriptor(queue, index, addr, len, flags, next);
}

/// Random register writes, descriptors and ring bytes, transmits and receives, thousands of
/// times: no panic; nothing outside the VM's memory touched (each attempt refused, and
/// followed by DEVICE_NEEDS_RESET); every call's work bounded; the interrupt line follows
/// InterruptStatus. The run must reach every outcome (bytes both ways, refusals, each kind
/// of broken rule), or it would prove little.
#[test]
fn random_registers_and_rings_stay_inside_memory_and_bounded() {
    let mut rng = Rng::new(0x7669_7274);
    let (mut transmitted, mut received, mut refused) = (0, 0, 0);
    let mut errors = [0u32; 6];
    for _ in 0..1000 {
        let size = 1 << rng.below(7);
        let mut driver = Driver::start(size);
        for _ in 0..60 {
            let status_before = driver.read(STATUS);
            let refused_before = driver.memory.refused();
            let queue = rng.below(2) as u16;
            match rng.below(20) {
                0 => {
                    // Any register, mostly the queue's, any width and value.
                    let offset = [rng.below(0x110), 0x30 + rng.below(0x80)][rng.below(2) as usize];
                    let value = match rng.below(3) {
                        0 => rng.below(70),
                        1 => BASE + rng.below(MEMORY_SIZE as u64 + 0x100),
                        _ => rng.next_u64(),
                    };
                    let width = [4, 4, 4, 1, 2, 8][rng.below(6) as usize];
                    let _ = driver.console.mmio_write(offset & !3, width, value);
                }
                1 | 2 => {
                    // Bytes anywhere in either queue's rings, often on the indices.
                    let queue = layout(queue);
                    let area = [queue.descriptors, queue.available, queue.used];
                    let span = [4, 1024][rng.below(2) as usize];
                    let at = area[rng.below(3) as usize] + rng.below(span);
                    let bytes = random_bytes(&mut rng, 16);
                    driver.poke(at, &bytes);
                }
                3..=7 => random_descriptor(&mut rng, &mut driver, queue, size),
                8..=10 => {
                    let head = rng.below(u64::from(size) + 1) as u16;
                    let _ = driver.make_available(queue, head);
                }
                11..=13 => {
                    let budget = rng.below(5000) as usize;
                    let accesses = driver.memory.accesses();
                    let mut out = 0;
                    let count = driver.console.transmit(
                        &mut driver.memory,
                        budget,
                        &mut |bytes: &[u8]| {
                            out += bytes.len();
                            bytes.len()
                        },
                    );
                    assert!(count <= budget && count == out);
                    assert!(driver.memory.accesses() - accesses <= max_accesses(budget) as u64);
                    transmitted += count;
                }
                14..=16 => {
                    let bytes = random_bytes(&mut rng, 5000);
                    let accesses = driver.memory.accesses();
                    let taken = driver.console.receive(&mut driver.memory, &bytes);
                    assert!(taken <= bytes.len());
                    assert!(driver.memory.accesses() - accesses <= max_accesses(0) as u64);
                    received += taken;
                }
                17 => {
                    let offset = rng.below(0x110);
                    let _ = driver
                        .console
                        .mmio_read(offset, [1, 2, 4][rng.below(3) as usize]);
                    let status = driver.read(INTERRUPT_STATUS);
                    driver.write(INTERRUPT_ACK, status);
                }
                _ => {
                    // The driver starts over (fresh rings): most of all after a broken rule.
                    if let Some(error) = driver.console.queue_error() {
                        errors[match error {
                            QueueError::AvailableIndexJump { .. } => 0,
                            QueueError::DescriptorOutOfRange { .. } => 1,
                            QueueError::ChainTooLong { .. } => 2,
                            QueueError::WrongDirection { .. } => 3,
                            QueueError::IndirectDescriptor { .. } => 4,
                            QueueError::Memory(_) => 5,
                        }] += 1;
                    }
                    refused += driver.memory.refused();
                    driver = Driver::start(size);
                    continue;
                }
            }
            if driver.memory.refused() > refused_before {
                assert_ne!(driver.read(STATUS) & STATUS_DEVICE_NEEDS_RESET, 0);
                assert!(driver.console.queue_error().is_some());
            }
            if status_before & STATUS_DEVICE_NEEDS_RESET != 0 && driver.read(STATUS) != 0 {
                assert_ne!(driver.read(STATUS) & STATUS_DEVICE_NEEDS_RESET, 0);
            }
            assert_eq!(
                driver.console.interrupt_level(),
                driver.read(INTERRUPT_STATUS) != 0
            );
        }
    }
    assert!(transmitted > 50_000 && received > 20_000 && refused > 40);
    assert!(errors.iter().all(|&count| count > 0), "{errors:?}");
}

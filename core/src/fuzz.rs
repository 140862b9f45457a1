//! Fuzz targets: every decoder that takes guest- or file-controlled input, driven by arbitrary
//! bytes. Each must never panic and must keep the invariants checked here. The same functions
//! serve the fixed-seed property tests (`tests/fuzz_properties.rs`, part of `cargo test`), the
//! stable-toolchain fuzzer of `cargo xtask fuzz`, and cargo-fuzz (`core/fuzz/`) on nightly.

use std::path::Path;

use crate::console::{ConsoleMux, Sink};
use crate::devices::virtio::memory::TestMemory;
use crate::devices::virtio::mmio::{register, STATUS_DEVICE_NEEDS_RESET};
use crate::devices::virtio::queue::max_accesses;
use crate::devices::virtio::VirtioConsole;
use crate::devices::{pl011::Pl011, sp805::Sp805, vgic::Vgic};
use crate::esr::{Esr, ExceptionClass};
use crate::fdt::Fdt;
use crate::hypercall::{self, Call};
pub use crate::rng::Rng;
use crate::smmu::{Event, EventKind};
use crate::text::{Out, Show};

/// A fuzz target: a name and the function that takes one input.
pub struct Target {
    /// Name, as `cargo xtask fuzz NAME` takes it.
    pub name: &'static str,
    /// Runs one input.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "esr",
        run: esr,
    },
    Target {
        name: "hypercall",
        run: hypercall,
    },
    Target {
        name: "vgic-mmio",
        run: vgic_mmio,
    },
    Target {
        name: "vgic2-mmio",
        run: vgic2_mmio,
    },
    Target {
        name: "pl011-mmio",
        run: pl011_mmio,
    },
    Target {
        name: "sp805-mmio",
        run: sp805_mmio,
    },
    Target {
        name: "virtio-mmio",
        run: virtio_mmio,
    },
    Target {
        name: "console",
        run: console,
    },
    Target {
        name: "device-tree",
        run: device_tree,
    },
    Target {
        name: "config",
        run: config,
    },
    Target {
        name: "smmu-event",
        run: smmu_event,
    },
];

/// Reads input as a sequence of little-endian fields, zero past its end.
struct Reader<'a> {
    data: &'a [u8],
}

impl Reader<'_> {
    fn u8(&mut self) -> u8 {
        let (&first, rest) = self.data.split_first().unwrap_or((&0, &[]));
        self.data = rest;
        first
    }
    fn u64(&mut self) -> u64 {
        (0..8).fold(0, |value, i| value | u64::from(self.u8()) << (8 * i))
    }
    fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// The ESR_EL2 decoder on any syndrome (`Esr`'s every accessor).
pub fn esr(data: &[u8]) {
    let mut input = Reader { data };
    while !input.is_empty() {
        let esr = Esr(input.u64());
        let _ = (esr.class(), esr.iss(), esr.iss2(), esr.il());
        assert!(matches!(esr.instruction_length(), 2 | 4));
        if let Some(abort) = esr.data_abort() {
            assert!(matches!(
                esr.class(),
                ExceptionClass::DataAbortLower | ExceptionClass::DataAbortSame
            ));
            if abort.isv {
                assert!(matches!(abort.access_size, 1 | 2 | 4 | 8));
                assert!(abort.register <= 31);
            }
        }
        let _ = esr.instruction_abort();
        if let Some(access) = esr.sysreg() {
            assert!(access.register <= 31);
            let _ = access.reg.name();
        }
        let _ = (esr.hvc_imm(), esr.smc_imm(), esr.wfx());
        let _ = esr.class().description();
    }
}

/// The hypercall decoder on any x0-x7.
pub fn hypercall(data: &[u8]) {
    let mut input = Reader { data };
    while !input.is_empty() {
        let regs = [(); 8].map(|_| input.u64());
        if let Call::Unknown(function) = hypercall::decode(&regs) {
            assert_eq!(u64::from(function), regs[0] & 0xffff_ffff);
        }
        let _ = hypercall::psci_features(regs[1] as u32);
        let _ = hypercall::smccc_arch_features(regs[1] as u32);
    }
}

/// A width a guest access may have, or any other (the models must refuse the others).
fn width(input: &mut Reader<'_>) -> u8 {
    match input.u8() % 6 {
        0 => 1,
        1 => 2,
        2 => 4,
        3 => 8,
        _ => input.u8(),
    }
}

/// The emulated GIC: distributor and redistributor reads and writes at any offset and width,
/// interleaved with interrupts raised, list registers filled and given back, vCPU restarts.
pub fn vgic_mmio(data: &[u8]) {
    let mut input = Reader { data };
    let vcpus = usize::from(input.u8() % 8) + 1;
    let mut gic = Vgic::new(vcpus, &FUZZ_OWNED_SPIS);
    let mut listed: Vec<(usize, u32)> = Vec::new();
    while !input.is_empty() {
        let op = input.u8();
        let size = width(&mut input);
        let offset = (input.u64() % 0x2_0000_0000) >> (op >> 6);
        let value = input.u64();
        match op % 8 {
            0 => {
                if let Ok(read) = gic.distributor_read(offset, size) {
                    assert!(size >= 8 || read >> (8 * u32::from(size)) == 0);
                }
            }
            1 => {
                let _ = gic.distributor_write(offset, size, value);
            }
            2 => {
                if let Ok(read) = gic.redistributor_read(offset, size) {
                    assert!(size >= 8 || read >> (8 * u32::from(size)) == 0);
                }
            }
            3 => {
                let _ = gic.redistributor_write(offset, size, value);
            }
            4 => gic.raise(value as usize % 9, (value >> 8) as u32 % 1100),
            5 => gic.set_level((value >> 8) as u32 % 1100, value & 1 != 0),
            6 => {
                let vcpu = value as usize % vcpus;
                let occupied = listed
                    .iter()
                    .enumerate()
                    .filter(|(_, (v, _))| *v == vcpu)
                    .fold(0u64, |mask, (i, _)| mask | 1 << (i % 4));
                let (now, _) = gic.fill_list_registers(vcpu, occupied, 4, |_, intid, _, _| {
                    listed.push((vcpu, intid));
                });
                assert_eq!(now & occupied, occupied);
            }
            _ => {
                if let Some((vcpu, intid)) = listed.pop() {
                    gic.unlisted(vcpu, intid, value & 1 != 0, value & 2 != 0);
                }
                if value & 0x100 != 0 {
                    gic.reset_vcpu(value as usize % 9);
                }
            }
        }
        for vcpu in 0..vcpus {
            if let Some((intid, _, _)) = gic.next_pending(vcpu) {
                assert!((intid as usize) < 1020);
            }
        }
    }
}

/// The SPIs the GIC fuzz targets' VMs own.
const FUZZ_OWNED_SPIS: [u32; 3] = [33, 40, 79];

/// The emulated GIC's GICv2 distributor view: reads and writes by any vCPU (and by one the VM
/// lacks) at any offset and width, mostly inside the frame's first 4 KiB, interleaved with
/// interrupts raised, list registers filled and given back, vCPU and VM resets. A read is no
/// wider than its access; a write names only existing vCPUs to kick, GICD_SGIR those its
/// filter selects; GICD_ITARGETSR0-7 read the reader's own mask; an SPI is offered only to
/// the lowest vCPU of its GICD_ITARGETSR byte, never when that byte is zero.
pub fn vgic2_mmio(data: &[u8]) {
    let mut input = Reader { data };
    let vcpus = usize::from(input.u8() % 8) + 1;
    let existing = (1u64 << vcpus) - 1;
    let mut gic = Vgic::new(vcpus, &FUZZ_OWNED_SPIS);
    let mut listed: Vec<(usize, u32)> = Vec::new();
    while !input.is_empty() {
        let op = input.u8();
        let vcpu = usize::from(input.u8() % 9);
        let size = width(&mut input);
        let low = u64::from(input.u8()) | u64::from(input.u8()) << 8;
        let offset = match op >> 6 {
            0 | 1 => low & 0xfff,
            2 => low,
            _ => low << 16 | low,
        };
        let value = input.u64();
        match op % 8 {
            0 => {
                if let Ok(read) = gic.v2_distributor_read(vcpu, offset, size) {
                    assert!(size >= 8 || read >> (8 * u32::from(size)) == 0);
                }
            }
            1 => {
                if let Ok(kick) = gic.v2_distributor_write(vcpu, offset, size, value) {
                    assert_eq!(kick & !existing, 0, "a vCPU the VM lacks to kick");
                    if offset == 0xf00 {
                        let itself = 1 << vcpu;
                        let expected = match value >> 24 & 3 {
                            0 => value >> 16 & 0xff,
                            1 => !itself,
                            2 => itself,
                            _ => 0,
                        } & existing;
                        assert_eq!(kick, expected, "GICD_SGIR's targets");
                    }
                }
            }
            2 => gic.raise(vcpu, value as u32 % 1100),
            3 => gic.set_level(value as u32 % 1100, value & 1 << 32 != 0),
            4 => {
                let vcpu = vcpu % vcpus;
                let occupied = listed
                    .iter()
                    .enumerate()
                    .filter(|(_, (v, _))| *v == vcpu)
                    .fold(0u64, |mask, (i, _)| mask | 1 << (i % 4));
                let (now, _) = gic.fill_list_registers(vcpu, occupied, 4, |_, intid, _, _| {
                    listed.push((vcpu, intid));
                });
                assert_eq!(now & occupied, occupied);
            }
            5 => {
                if let Some((vcpu, intid)) = listed.pop() {
                    gic.unlisted(vcpu, intid, value & 1 != 0, value & 2 != 0);
                }
            }
            6 => gic.reset_vcpu(vcpu),
            _ => {
                if value & 0xff == 0 {
                    gic.reset(vcpus, &FUZZ_OWNED_SPIS);
                    listed.clear();
                }
            }
        }
        for vcpu in 0..vcpus {
            assert_eq!(
                gic.v2_distributor_read(vcpu, 0x800, 4),
                Ok(0x0101_0101 << vcpu)
            );
            if let Some((intid, _, _)) = gic.next_pending(vcpu) {
                assert!((intid as usize) < 128);
                if intid >= 32 {
                    let targets = gic.v2_distributor_read(0, 0x800 + u64::from(intid), 1);
                    assert!(
                        matches!(targets, Ok(t) if t != 0 && t.trailing_zeros() as usize == vcpu),
                        "SPI {intid} offered to vCPU {vcpu}, its targets {targets:?}"
                    );
                }
            }
        }
    }
}

/// A seed for `vgic2_mmio` on two vCPUs: Linux's GICv2 distributor set-up (disabled,
/// SPIs to CPU 0, level, priority 0xa0, deactivated and disabled, enabled; each CPU's SGIs
/// enabled), SPI 33 enabled, its line raised, listed at CPU 0 and moved to CPU 1, an IPI
/// from CPU 1 to CPU 0, list registers filled and given back, and SPI 33 listed at CPU 1.
fn vgic2_mmio_seed() -> Vec<u8> {
    let mut seed = vec![1];
    let mut op = |op: u8, vcpu: u8, size: u8, offset: u16, value: u64| {
        let size_code = match size {
            1 => 0,
            _ => 2,
        };
        seed.extend([op, vcpu, size_code]);
        seed.extend(offset.to_le_bytes());
        seed.extend(value.to_le_bytes());
    };
    let (read, write) = (0, 1);
    op(write, 0, 4, 0x000, 0);
    op(read, 0, 4, 0x004, 0);
    op(read, 0, 4, 0x800, 0);
    for intid in (32..128).step_by(4) {
        op(write, 0, 4, 0x800 + intid, 0x0101_0101);
        op(write, 0, 4, 0x400 + intid, 0xa0a0_a0a0);
    }
    for intid in (32..128).step_by(16) {
        op(write, 0, 4, 0xc00 + intid / 4, 0);
    }
    for intid in (32..128).step_by(32) {
        op(write, 0, 4, 0x380 + intid / 8, 0xffff_ffff);
        op(write, 0, 4, 0x180 + intid / 8, 0xffff_ffff);
    }
    op(write, 0, 4, 0x000, 1);
    for vcpu in 0..2 {
        op(write, vcpu, 4, 0x380, 0xffff_ffff);
        op(write, vcpu, 4, 0x180, 0xffff_ffff);
        op(write, vcpu, 4, 0x400, 0xa0a0_a0a0);
        op(write, vcpu, 4, 0x100, 0xff);
    }
    op(write, 0, 4, 0x104, 1 << 1);
    op(3, 0, 4, 0, 33 | 1 << 32);
    op(4, 0, 4, 0, 0);
    op(write, 0, 1, 0x821, 2);
    op(write, 1, 4, 0xf00, 0x0001_0001);
    op(4, 0, 4, 0, 0);
    op(4, 1, 4, 0, 0);
    op(5, 0, 4, 0, 0);
    op(5, 0, 4, 0, 0);
    op(4, 1, 4, 0, 0);
    op(read, 1, 4, 0xf20, 0);
    seed
}

/// The emulated PL011: reads and writes at any offset and width, bytes received.
pub fn pl011_mmio(data: &[u8]) {
    let mut input = Reader { data };
    let mut uart = Pl011::new();
    while !input.is_empty() {
        let op = input.u8();
        let size = width(&mut input);
        let offset = u64::from(input.u8()) << (op >> 5) | u64::from(op & 3);
        let value = input.u64() as u32;
        match op % 3 {
            0 => {
                let _ = uart.read(offset, size);
            }
            1 => {
                let _ = uart.write(offset, size, value);
            }
            _ => {
                let _ = uart.receive(value as u8);
            }
        }
        let _ = uart.interrupt_level();
    }
}

/// The emulated SP805 watchdog, at any WDOGCLK and counter rates: reads and writes at any
/// offset and width (mostly its registers, with any values), time moving on by any amount.
/// The counter never exceeds WdogLoad; when the reset comes depends on the writes alone, not
/// on when it is asked; a locked watchdog takes no write but to WdogLock; a reload (WdogLoad,
/// WdogIntClr) puts the reset after the time of the write.
pub fn sp805_mmio(data: &[u8]) {
    use crate::devices::sp805::UNLOCK_KEY;
    const REGISTERS: [u64; 10] = [0, 4, 8, 0xc, 0x10, 0x14, 0xc00, 0xf00, 0xf04, 0xfe0];
    let mut input = Reader { data };
    let clock_hz = input.u64() as u32;
    let counter_hz = input.u64() as u32;
    let mut wdt = Sp805::new(clock_hz, counter_hz);
    let mut now = input.u64() >> (input.u8() % 64);
    while !input.is_empty() {
        let op = input.u8();
        let size = if op & 0x80 == 0 { 4 } else { width(&mut input) };
        let offset = match REGISTERS.get(usize::from(op & 0x0f)) {
            Some(&register) => register,
            None => u64::from(input.u8()) << 4 | u64::from(op >> 4 & 3) << 2,
        };
        let value = match input.u8() % 4 {
            0 => UNLOCK_KEY,
            1 => input.u8().into(),
            _ => input.u64() as u32,
        };
        now = now.saturating_add(input.u64() >> (input.u8() % 64));
        let reset_at = wdt.reset_at();
        assert_eq!(wdt.at(now).reset_at(), reset_at, "asking moved the reset");
        if op & 0x40 == 0 {
            let before = wdt;
            let locked = wdt.read(0xc00, 4, now) == Ok(1);
            let integration = wdt.read(0xf00, 4, now) == Ok(1);
            if wdt.write(offset, size, value, now).is_ok() {
                if locked && offset != 0xc00 {
                    assert_eq!(wdt, before, "a locked watchdog took a write");
                }
                if !locked && !integration && matches!(offset, 0 | 0xc) {
                    assert!(wdt.reset_at().is_none_or(|at| at > now || at == u64::MAX));
                }
            }
        } else {
            let _ = wdt.read(offset, size, now);
        }
        let load = wdt.read(0, 4, now).expect("a word read");
        assert!(wdt.value(now) <= load, "the counter above WdogLoad");
        let _ = (wdt.interrupt_level(now), wdt.interrupt_raised(now));
    }
}

/// Where the virtio fuzz target's guest memory starts, and its size.
const VIRTIO_BASE: u64 = 0x4000_0000;
const VIRTIO_MEMORY: usize = 0x1_0000;

/// The virtio console: register reads and writes at any offset and width (queue addresses,
/// sizes, status, all guest-chosen), 8-byte pokes anywhere in guest memory (rings,
/// descriptors, indices), transmits with any budget into a sink of any room, receives of any
/// length, interrupt acknowledgements. Every access outside the memory is refused and answered
/// by DEVICE_NEEDS_RESET; a call makes at most `max_accesses` accesses and moves at most its
/// budget; the interrupt line follows InterruptStatus.
pub fn virtio_mmio(data: &[u8]) {
    let mut input = Reader { data };
    let mut memory = TestMemory::new(VIRTIO_BASE, VIRTIO_MEMORY);
    let mut console = VirtioConsole::new();
    let u16 = |input: &mut Reader<'_>| u16::from_le_bytes([input.u8(), input.u8()]);
    while !input.is_empty() {
        let op = input.u8();
        let (accesses, refused) = (memory.accesses(), memory.refused());
        match op % 6 {
            0 => {
                let size = width(&mut input);
                let offset = u64::from(input.u8()) << 2 | u64::from(op >> 6);
                if let Ok(value) = console.mmio_read(offset, size) {
                    assert!(size >= 4 || value >> (8 * u32::from(size)) == 0);
                }
            }
            1 => {
                let size = width(&mut input);
                let offset = u64::from(input.u8()) << 2 | u64::from(op >> 6);
                let _ = console.mmio_write(offset, size, input.u64());
            }
            2 => {
                let at = usize::from(u16(&mut input)) % (VIRTIO_MEMORY - 8);
                memory.bytes[at..at + 8].copy_from_slice(&input.u64().to_le_bytes());
            }
            3 => {
                let budget = usize::from(u16(&mut input));
                let mut room = usize::from(u16(&mut input));
                let moved = console.transmit(&mut memory, budget, &mut |bytes: &[u8]| {
                    let taken = bytes.len().min(room);
                    room -= taken;
                    taken
                });
                assert!(moved <= budget);
                assert!(memory.accesses() - accesses <= max_accesses(budget) as u64);
            }
            4 => {
                let bytes: Vec<u8> = (0..u16(&mut input) % 5000).map(|i| i as u8).collect();
                let taken = console.receive(&mut memory, &bytes);
                assert!(taken <= bytes.len());
                assert!(memory.accesses() - accesses <= max_accesses(0) as u64);
            }
            _ => {
                let status = console.mmio_read(register::INTERRUPT_STATUS, 4).unwrap();
                let _ = console.mmio_write(register::INTERRUPT_ACK, 4, status.into());
            }
        }
        if memory.refused() > refused {
            let status = console.mmio_read(register::STATUS, 4).unwrap();
            assert_ne!(
                status & STATUS_DEVICE_NEEDS_RESET,
                0,
                "a refused access unnoticed"
            );
            assert!(console.queue_error().is_some());
        }
        let interrupt_status = console.mmio_read(register::INTERRUPT_STATUS, 4).unwrap();
        assert_eq!(console.interrupt_level(), interrupt_status != 0);
    }
}

/// A seed for `virtio_mmio`: a driver's setup as Linux does it (both queues of 8), "hello"
/// made available on the transmit queue and sent, a receive buffer given and filled.
fn virtio_mmio_seed() -> Vec<u8> {
    let mut seed = Vec::new();
    let mut write = |offset: u64, value: u64| {
        seed.extend([1, 2, (offset >> 2) as u8]);
        seed.extend(value.to_le_bytes());
    };
    for (offset, value) in [
        (register::STATUS, 0),
        (register::STATUS, 1),
        (register::STATUS, 3),
        (register::DRIVER_FEATURES_SEL, 1),
        (register::DRIVER_FEATURES, 1),
        (register::DRIVER_FEATURES_SEL, 0),
        (register::DRIVER_FEATURES, 0),
        (register::STATUS, 0xb),
    ] {
        write(offset, value);
    }
    // Queue q's descriptor table at 0x4000 * q, available ring 0x1000 on, used 0x2000 on.
    for queue in 0..2 {
        let base = VIRTIO_BASE + 0x4000 * queue;
        for (offset, value) in [
            (register::QUEUE_SEL, queue),
            (register::QUEUE_NUM, 8),
            (register::QUEUE_DESC_LOW, base),
            (register::QUEUE_DRIVER_LOW, base + 0x1000),
            (register::QUEUE_DEVICE_LOW, base + 0x2000),
            (register::QUEUE_READY, 1),
        ] {
            write(offset, value);
        }
    }
    write(register::STATUS, 0xf);
    let mut poke = |at: u16, bytes: [u8; 8]| {
        seed.push(2);
        seed.extend(at.to_le_bytes());
        seed.extend(bytes);
    };
    // Transmit: descriptor 0 = 5 bytes at 0x8000 (readable), available index 1, entry 0.
    poke(0x4000, (VIRTIO_BASE + 0x8000).to_le_bytes());
    poke(0x4008, [5, 0, 0, 0, 0, 0, 0, 0]);
    poke(0x5000, [0, 0, 1, 0, 0, 0, 0, 0]);
    poke(0x8000, *b"hello\0\0\0");
    // Receive: descriptor 0 = 64 writable bytes at 0x9000, available index 1, entry 0.
    poke(0x0000, (VIRTIO_BASE + 0x9000).to_le_bytes());
    poke(0x0008, [64, 0, 0, 0, 2, 0, 0, 0]);
    poke(0x1000, [0, 0, 1, 0, 0, 0, 0, 0]);
    seed.extend([
        1,
        2,
        (register::QUEUE_NOTIFY >> 2) as u8,
        1,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ]);
    seed.extend([3, 0, 0x10, 0xff, 0xff, 4, 8, 0, 5]);
    seed
}

/// A UART that takes a few bytes at a time.
struct Trickle {
    bytes: Vec<u8>,
    room: usize,
}

impl Sink for Trickle {
    fn write_some(&mut self, bytes: &[u8]) -> usize {
        let take = bytes.len().min(self.room);
        self.bytes.extend_from_slice(&bytes[..take]);
        take
    }
}

/// The console multiplexer: any bytes from three VMs (the second made raw by its configuration
/// if the first byte is odd), input keys, Keel lines, drains of any size. Every line on the
/// UART starts with a prefix (or continues an open one) and, while no VM was ever raw, carries
/// no control character.
pub fn console(data: &[u8]) {
    let mut input = Reader { data };
    let mut mux = ConsoleMux::new(&["a", "bb", "c"], &[true, true, false]);
    let mut uart = Trickle {
        bytes: Vec::new(),
        room: 0,
    };
    let mut raw_ever = input.u8() & 1 == 1;
    if raw_ever {
        mux.make_raw(1);
    }
    while !input.is_empty() {
        let op = input.u8();
        let byte = input.u8();
        match op % 6 {
            0..=2 => {
                mux.output(usize::from(op % 4), byte);
            }
            3 => {
                if let crate::console::Input::Raw(_, true) = mux.input(byte) {
                    raw_ever = true;
                }
            }
            4 => {
                mux.hypervisor_line(&[byte; 3]);
            }
            _ => {
                uart.room = usize::from(byte);
                if op & 0x80 != 0 {
                    mux.flush_partial(&mut uart);
                } else {
                    mux.drain(&mut uart);
                }
            }
        }
    }
    uart.room = usize::MAX;
    mux.flush_partial(&mut uart);
    if !raw_ever {
        for &byte in &uart.bytes {
            assert!(
                byte >= 0x20 || byte == b'\r' || byte == b'\n' || byte == b'\t',
                "control byte {byte:#04x} reached the UART"
            );
        }
        let text = String::from_utf8_lossy(&uart.bytes);
        for line in text.split("\r\n").filter(|line| !line.is_empty()) {
            assert!(
                ["[a] ", "[bb] ", "[c] ", "[keel] "]
                    .iter()
                    .any(|prefix| line.starts_with(prefix)),
                "a line without a prefix: {line:?}"
            );
            assert!(!line.contains('\r'), "a bare CR inside a line: {line:?}");
        }
    }
}

/// The device tree reader on any blob: every node, property and helper.
pub fn device_tree(data: &[u8]) {
    walk_device_tree(data);
}

/// Walks every node, property and helper of the device tree reader over `blob`; returns the
/// nodes visited (0 if the blob is refused), at most 10,000.
pub fn walk_device_tree(blob: &[u8]) -> usize {
    let _ = crate::fdt::total_size(blob);
    let Ok(fdt) = Fdt::new(blob) else {
        return 0;
    };
    let _ = fdt.reserved_memory().count();
    let mut stack = vec![fdt.root()];
    let mut visited = 0;
    while let Some(node) = stack.pop() {
        visited += 1;
        if visited >= 10_000 {
            break;
        }
        let _ = (node.name(), node.base_name(), node.unit_address());
        for property in node.properties() {
            let Ok(property) = property else { break };
            let _ = node.property(property.name);
            let _ = node.property_str(property.name);
            let _ = node.property_u32(property.name);
            let _ = node.property_u64(property.name);
            let _ = node.strings(property.name).map(|s| s.map(|s| s.count()));
            let _ = node
                .property_cells(property.name)
                .map(|c| c.map(|c| c.count()));
        }
        let _ = node.reg().map(|r| r.map(|r| r.count()));
        let _ = node.interrupts().map(|r| r.map(|r| r.count()));
        let _ = node.is_compatible("arm,pl011");
        for child in node.children() {
            let Ok(child) = child else { break };
            stack.push(child);
        }
    }
    for path in ["/", "/chosen", "/memory", "/cpus/cpu@1", "/soc/uart/x"] {
        let _ = fdt
            .find_node(path)
            .map(|n| n.map(|n| n.reg().map(|r| r.map(|r| r.count()))));
    }
    let _ = fdt.compatible_nodes("arm,cortex-a72").count();
    let _ = fdt.find_compatible("ns16550a");
    visited
}

/// The configuration compiler on any text: it answers with a system or an error, never a
/// panic, and an accepted system keeps the rules (no overlapping memory, no pinned pCPU twice,
/// scheduling parameters for every vCPU).
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let guest = |name: &str| {
        (name == "test-guest").then(|| Path::new("tests/fixtures/images/test-guest.bin").into())
    };
    let Ok(system) = crate::config::parse_str(text, Path::new("fuzz.toml"), &guest) else {
        return;
    };
    let mut pcpus = Vec::new();
    for vm in &system.vms {
        assert_eq!(vm.sched.len(), vm.pcpus.len(), "parameters for every vCPU");
        for &pcpu in &vm.pcpus {
            let shared = system.policies[pcpu as usize].is_shared();
            assert!(
                shared || !pcpus.contains(&pcpu),
                "pinned pCPU {pcpu} given twice"
            );
            pcpus.push(pcpu);
        }
    }
}

/// A line made of [`Show`] parts, for the targets that check one.
struct Line(Vec<u8>);

impl Out for Line {
    fn put_bytes(&mut self, text: &[u8]) {
        self.0.extend_from_slice(text);
    }
}

/// The SMMU's event record decoder on any records (32 bytes each, the last zero-padded): the
/// type, the stream and every field a type's layout carries, and Keel's diagnostic line.
pub fn smmu_event(data: &[u8]) {
    for chunk in data.chunks(32) {
        let mut bytes = [0u8; 32];
        bytes[..chunk.len()].copy_from_slice(chunk);
        let event = Event::from_bytes(&bytes);
        assert_eq!(event.kind, EventKind::from_number(bytes[0]));
        assert_eq!(event.kind.number(), bytes[0]);
        let stream = u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        assert_eq!(event.stream_id, stream);
        assert!(
            event.ipa.is_none() || event.stage2,
            "an IPA only for stage 2"
        );
        assert!(event.class < 4);
        let mut line = Line(Vec::new());
        event.show(&mut line);
        assert!(line.0.starts_with(event.kind.name().as_bytes()));
        assert!(line.0.iter().all(|&byte| (0x20..0x7f).contains(&byte)));
    }
}

/// A value below `bound`, as an index.
fn pick(rng: &mut Rng, bound: usize) -> usize {
    rng.below(bound as u64) as usize
}

/// Values that find edge cases: zero, ones, sign and size boundaries.
const INTERESTING: [u64; 10] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    u64::MAX,
];

/// Changes `input` in one to four random ways, sometimes splicing in part of a seed.
pub fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    for _ in 0..1 + pick(rng, 4) {
        let len = input.len();
        match pick(rng, 8) {
            0 if len > 0 => {
                let at = pick(rng, len);
                input[at] ^= 1 << pick(rng, 8);
            }
            1 if len > 0 => {
                let at = pick(rng, len);
                input[at] = INTERESTING[pick(rng, INTERESTING.len())] as u8;
            }
            2 if len >= 8 => {
                let at = pick(rng, len - 7);
                let value = INTERESTING[pick(rng, INTERESTING.len())];
                let bytes = if pick(rng, 2) == 0 {
                    value.to_le_bytes()
                } else {
                    value.to_be_bytes()
                };
                let width = [1, 2, 4, 8][pick(rng, 4)];
                input[at..at + width].copy_from_slice(&bytes[..width]);
            }
            3 => {
                let at = pick(rng, len + 1);
                let count = 1 + pick(rng, 16);
                for _ in 0..count {
                    input.insert(at, rng.next_u64() as u8);
                }
            }
            4 if len > 0 => {
                let at = pick(rng, len);
                let count = 1 + pick(rng, (len - at).min(32));
                input.drain(at..at + count);
            }
            5 if len > 0 => {
                let from = pick(rng, len);
                let count = 1 + pick(rng, (len - from).min(64));
                let chunk: Vec<u8> = input[from..from + count].to_vec();
                let at = pick(rng, len + 1);
                input.splice(at..at, chunk);
            }
            6 if !seeds.is_empty() => {
                let seed = &seeds[pick(rng, seeds.len())];
                if !seed.is_empty() {
                    let from = pick(rng, seed.len());
                    let count = 1 + pick(rng, (seed.len() - from).min(64));
                    let at = pick(rng, len + 1);
                    let end = (at + count).min(len);
                    input.splice(at..end, seed[from..from + count].iter().copied());
                }
            }
            _ => {
                if len > 0 {
                    input.truncate(pick(rng, len));
                }
            }
        }
        if input.len() > 64 * 1024 {
            input.truncate(64 * 1024);
        }
    }
}

/// Inputs to start each target from: well-formed examples of what it decodes. `device_tree`
/// and `config_files` come from the caller (a real blob and the configuration fixtures).
pub fn seeds(target: &str, device_tree: &[u8], config_files: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let words =
        |values: &[u64]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
    match target {
        // A 4-byte store with a valid syndrome, an MSR ICC_SGI1R_EL1, an HVC #0, a WFI.
        "esr" => vec![words(&[0x9380_0046, 0x6232_c3a2, 0x5a00_0000, 0x0600_0000])],
        "hypercall" => vec![
            words(&[0xC600_0000, 0, 0, 0, 0xC400_0003, 1, 0x4020_0000, 0]),
            words(&[
                0x8400_000A,
                0x8400_0003,
                0,
                0,
                0x8000_0001,
                0x8000_0000,
                0,
                0,
            ]),
        ],
        // Enable group 1, an SPI, its route; an SGI raised and listed.
        "vgic-mmio" => vec![vec![
            1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0x84, 0, 0, 0, 0, 0, 0,
            0, 2, 0, 0, 0, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 6, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        ]],
        "vgic2-mmio" => vec![vgic2_mmio_seed()],
        "pl011-mmio" => vec![vec![
            1, 2, 0x30, 1, 3, 0, 0, 0, 1, 2, 0, 0x41, 0, 0, 0, 0, 2, 0, 0, 0x42,
        ]],
        // Rates 1 MHz and 62.5 MHz, at 1 s: Linux's enable (unlock, load, clear, enable,
        // lock), a second later a ping, then time passing and the value read.
        "sp805-mmio" => {
            let mut seed = words(&[1_000_000, 62_500_000, 62_500_000]);
            seed.push(0);
            let key = u64::from(crate::devices::sp805::UNLOCK_KEY);
            for (register, value, later) in [
                (6, key, 0),
                (0, 14_999_999, 0),
                (3, 1, 0),
                (2, 3, 0),
                (6, 1, 0),
                (6, key, 62_500_000),
                (0, 14_999_999, 0),
                (3, 1, 0),
                (6, 1, 0),
                (0x41, 0, 2_000_000_000),
            ] {
                seed.extend([register, 2]);
                seed.extend(value.to_le_bytes());
                seed.extend(u64::to_le_bytes(later));
                seed.push(0);
            }
            vec![seed]
        }
        "virtio-mmio" => vec![virtio_mmio_seed()],
        "console" => vec![b"\x00h\x00i\x00\n\x01x\x02\r\x03\x01\x03r\x00\x1b\x05\x40".to_vec()],
        "device-tree" => vec![device_tree.to_vec()],
        "config" => config_files.to_vec(),
        // QEMU 7.2's translation fault (edu, stream 8, reading 0x4010_0000), a C_BAD_STE, a
        // stage-2 permission fault with a substream, an F_STE_FETCH.
        "smmu-event" => vec![
            words(&[0x8_0000_0010, 0x8_0000_0000, 0x4010_0000, 0]),
            words(&[
                0x10_0000_0004,
                0,
                0,
                0,
                0x18_0000_5813,
                0x282_0000_0000,
                0x1234_5000,
                0xab_cdef_1000,
                0x3,
                0,
                0,
                0x4100_0200,
            ]),
        ],
        _ => Vec::new(),
    }
}

/// Runs `target` on mutations of `seeds` until `keep_going(executions)` says stop, calling
/// `before` with each input just before it runs (to keep it if the target panics). Returns
/// the number of executions.
pub fn fuzz(
    target: &Target,
    seeds: &[Vec<u8>],
    rng_seed: u64,
    mut keep_going: impl FnMut(u64) -> bool,
    mut before: impl FnMut(&[u8]),
) -> u64 {
    let mut rng = Rng::new(rng_seed);
    let mut executions = 0;
    let mut input = Vec::new();
    while keep_going(executions) {
        // Half the time keep walking from the last input, else restart from a seed.
        if input.is_empty() || pick(&mut rng, 2) == 0 {
            input = seeds
                .get(pick(&mut rng, seeds.len()))
                .cloned()
                .unwrap_or_default();
        }
        mutate(&mut rng, &mut input, seeds);
        before(&input);
        (target.run)(&input);
        executions += 1;
    }
    executions
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The device tree walker reads every node of real blobs: dtc's and QEMU's.
    #[test]
    fn the_walker_reads_every_node_of_real_blobs() {
        assert_eq!(walk_device_tree(&crate::fdt::tests::dtc_compiled_blob()), 8);
        assert!(walk_device_tree(&crate::fdt::tests::qemu_virt_blob()) > 40);
    }

    #[test]
    fn mutated_blobs_never_panic() {
        let blob = crate::fdt::tests::sample();
        assert_eq!(walk_device_tree(&blob), 11);
        for position in 0..blob.len() {
            for mask in [0x01, 0x04, 0x80, 0xff] {
                let mut mutated = blob.clone();
                mutated[position] ^= mask;
                walk_device_tree(&mutated);
            }
        }
        for length in 0..blob.len() {
            walk_device_tree(&blob[..length]);
        }
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for _ in 0..4000 {
            let mut mutated = blob.clone();
            for _ in 0..1 + random() % 4 {
                let position = (random() % mutated.len() as u64) as usize;
                // Mostly small values, as header fields and lengths are where bugs hide.
                mutated[position] = match random() % 3 {
                    0 => random() as u8,
                    1 => (random() % 8) as u8,
                    _ => 0xff,
                };
            }
            if walk_device_tree(&mutated) > 0 {
                accepted += 1;
            }
        }
        assert!(accepted > 0, "some mutations should leave a valid blob");
    }

    /// The configuration fixtures (the tests run from the crate's directory).
    fn config_files() -> Vec<Vec<u8>> {
        let mut files: Vec<_> = std::fs::read_dir("tests/fixtures")
            .unwrap()
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        files
            .iter()
            .map(|path| std::fs::read(path).unwrap())
            .collect()
    }

    /// Every target, 20,000 inputs each from a fixed seed (repeatable): no panic, no broken
    /// invariant. `cargo xtask fuzz` runs the same for longer.
    #[test]
    fn every_target_survives_a_fixed_seed_run() {
        let device_tree = crate::fdt::tests::sample();
        let configs = config_files();
        assert!(
            configs.len() > 30,
            "the configuration fixtures are the seeds"
        );
        for target in TARGETS {
            let seeds = seeds(target.name, &device_tree, &configs);
            assert!(!seeds.is_empty(), "{} has no seeds", target.name);
            for seed in &seeds {
                (target.run)(seed);
            }
            let iterations = if target.name == "config" {
                3_000
            } else {
                20_000
            };
            let ran = fuzz(target, &seeds, 0x6b65_656c, |n| n < iterations, |_| {});
            assert_eq!(ran, iterations);
        }
    }

    #[test]
    fn an_escape_sequence_never_reaches_the_uart() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut uart = Trickle {
            bytes: Vec::new(),
            room: usize::MAX,
        };
        for &b in b"\x1b[2J\n" {
            mux.output(0, b);
        }
        mux.drain(&mut uart);
        assert!(!uart.bytes.contains(&0x1b));
    }
}

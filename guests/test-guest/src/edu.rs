//! edu mode (`keel.mode=edu`): drives QEMU's `edu` PCI test device (1234:11e8), found by
//! enumerating the PCI host bridge the configuration gave this VM (its ECAM, 32-bit window
//! and legacy interrupt map read from the device tree, as Linux's generic ECAM driver would):
//! BAR0 placed at the window's start, memory decoding and bus mastering on. On bus 0, or
//! behind the first PCI-PCI bridge of bus 0 (a PCIe root port), which it numbers as Linux
//! does (primary bus 0, secondary and subordinate 1) and opens (its memory window over BAR0,
//! memory decoding and bus mastering on): the edu is then at 01:00.0, and its DMA reaches the
//! SMMU as stream 256 (bus 1's requester IDs), not 8.
//!
//! With `keel.edu=bench` it first measures the device's interrupt in instructions (PMCCNTR_EL0
//! under `-icount`; a VM under Keel needs `pmu = true`): from the register write that raises
//! it to the IRQ vector's first instructions (`bench: edu-irq-entry`), and to the interrupted
//! loop's next instruction after the handler acknowledged it and ended it
//! (`bench: edu-irq-roundtrip`), 200 times each (`min=`, `avg=`, `max=`), then `bench: done`.
//!
//! Then, in order (`keel.edu=<attack>` picks the attack at the end):
//! 1. a DMA round trip through the device's buffer with its own memory (RAM to the device,
//!    back to another buffer, compared): `edu: own DMA round trip ok (64 bytes)`;
//! 2. its interrupt raised flat out for `keel.flood=<ms>` (default 300): a loop writes the
//!    raise register as fast as it can, the handler acknowledges each interrupt;
//!    `edu: interrupt flood: R raised, N taken in M ms`;
//! 3. the attack, at `keel.target=<hex>` (another VM's RAM, as a physical address, which is
//!    outside this VM's memory): `write` copies the device's buffer there, `read` copies from
//!    there into the device and back into its own memory and reports whether anything came.
//!    The SMMU refuses it and Keel stops this VM; if it comes back it prints `edu: ... done`.
//!
//! QEMU 7.2's edu (hw/misc/edu.c, docs/research/device-assignment.md section 3): BAR0 1 MiB;
//! 0x00 ID 0x010000ed, 0x60 raise interrupt, 0x64 acknowledge, 0x80 DMA source, 0x88 DMA
//! destination, 0x90 count, 0x98 command (bit 0 start, bit 1 device to RAM, bit 2 interrupt
//! when done); its buffer is at device address 0x40000, 4 KiB, and a transfer must stay
//! inside it (QEMU 7.2 aborts otherwise, so a count of at most 4095 from 0x40000). A DMA runs
//! 100 ms of virtual time after its command.

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use keel_guest::abi::layout;
use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{disable_irqs, enable_irqs, wait_for_interrupt};
use keel_guest::exceptions::set_irq_handler;
use keel_guest::fdt::{Fdt, Node};
use keel_guest::gic::{IntId, PrivateInterrupts, Trigger, DISTRIBUTOR, FIRST_SPI};
use keel_guest::mmio::MmioFrame;
use keel_guest::{println, system_off, timer};

use crate::interrupts::PRIORITY;

/// The edu device's vendor and device IDs (config space offset 0).
const EDU_ID: u32 = 0x11e8_1234;
/// Its identification register's value.
const EDU_IDENT: u32 = 0x0100_00ed;
const EDU_RAISE: usize = 0x60;
const EDU_ACK: usize = 0x64;
const EDU_STATUS: usize = 0x24;
const EDU_DMA_SOURCE: usize = 0x80;
const EDU_DMA_DESTINATION: usize = 0x88;
const EDU_DMA_COUNT: usize = 0x90;
const EDU_DMA_COMMAND: usize = 0x98;
/// DMA command: start.
const DMA_START: u64 = 1 << 0;
/// DMA command: device to RAM (otherwise RAM to device).
const DMA_TO_RAM: u64 = 1 << 1;
/// The device's buffer, as its DMA addresses it.
const EDU_BUFFER: u64 = 0x40000;
/// Bytes each DMA moves.
const DMA_BYTES: usize = 64;
/// PCI command register: memory space decoding and bus mastering.
const COMMAND_MEMORY_AND_MASTER: u32 = (1 << 1) | (1 << 2);
/// BAR0's size.
const EDU_BAR_SIZE: usize = 1 << 20;
/// A function's class code and revision (config offset 0x08): a PCI-PCI bridge's class is
/// 0x0604 (bits 31:16).
const CLASS_REVISION: usize = 0x08;
/// Class 0x0604: a PCI-PCI bridge (a PCIe root port is one).
const CLASS_BRIDGE: u32 = 0x0604;
/// A bridge's primary, secondary and subordinate bus numbers (bytes 0x18-0x1a).
const BRIDGE_BUSES: usize = 0x18;
/// A bridge's I/O base and limit (bytes 0x1c-0x1d).
const BRIDGE_IO: usize = 0x1c;
/// A bridge's memory base and limit (16 bits each at 0x20: address bits 31:20 in 15:4).
const BRIDGE_MEMORY: usize = 0x20;
/// A bridge's prefetchable memory base and limit (0x24).
const BRIDGE_PREFETCHABLE: usize = 0x24;
/// The bus this numbers behind the root port.
const SECONDARY_BUS: usize = 1;

/// The device's INTID (u32::MAX until known).
static EDU_INTID: AtomicU32 = AtomicU32::new(u32::MAX);
/// BAR0's address, for the handler.
static EDU_BASE: AtomicU64 = AtomicU64::new(0);
/// Interrupts taken; written by the handler only.
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// A buffer in this VM's memory that DMA reads or writes (its address is its IPA: the MMU is
/// off), 64-byte aligned.
#[repr(C, align(64))]
struct DmaBuffer(UnsafeCell<[u8; DMA_BYTES]>);

// SAFETY: one vCPU runs edu mode; it touches a buffer only while no DMA it started is in
// flight (each is waited for).
unsafe impl Sync for DmaBuffer {}

impl DmaBuffer {
    /// The buffer's address, as this VM's DMA names it.
    fn address(&self) -> u64 {
        self.0.get() as u64
    }
}

static SOURCE: DmaBuffer = DmaBuffer(UnsafeCell::new([0; DMA_BYTES]));
static SINK: DmaBuffer = DmaBuffer(UnsafeCell::new([0; DMA_BYTES]));

fn handle_irq(intid: IntId) {
    if intid == EDU_INTID.load(Ordering::Relaxed) {
        // SAFETY: BAR0's frame, set before the interrupt was enabled.
        let edu = unsafe { MmioFrame::new(EDU_BASE.load(Ordering::Relaxed) as usize) };
        // The line is level: acknowledged before the EOI, or it would come straight back.
        edu.write_u32(EDU_ACK, edu.read_u32(EDU_STATUS));
        TAKEN.fetch_add(1, Ordering::Relaxed);
    } else if intid == layout::VTIMER_INTID {
        timer::mask();
    }
}

/// The bridge: its ECAM's address, its 32-bit memory window's, and the edu's INTID found in
/// its interrupt map for device `slot`'s INTA.
struct Bridge {
    ecam: usize,
    window: usize,
    map: Node<'static>,
}

fn find_bridge(tree: &Fdt<'static>) -> Option<Bridge> {
    let node = tree.find_compatible("pci-host-ecam-generic").ok()??;
    let (ecam, _) = node.reg().ok()??.next()?;
    // ranges: <flags hi lo> <parent hi lo> <size hi lo>; 32-bit memory has space code 0b10.
    let cells: [u32; 64] = {
        let mut cells = [0; 64];
        for (slot, cell) in cells.iter_mut().zip(node.property_cells("ranges").ok()??) {
            *slot = cell;
        }
        cells
    };
    let window = cells
        .chunks_exact(7)
        .find(|entry| (entry[0] >> 24) & 0b11 == 0b10)
        .map(|entry| (u64::from(entry[3]) << 32 | u64::from(entry[4])) as usize)?;
    Some(Bridge {
        ecam: ecam as usize,
        window,
        map: node,
    })
}

/// The INTID of INTA of device `slot` on bus 0, from the bridge's `interrupt-map` (entries of
/// child address (3 cells), pin, GIC phandle, GIC address (2 cells), GIC specifier (3)).
fn inta_intid(map: &Node, slot: u32) -> Option<IntId> {
    let mask: [u32; 4] = {
        let mut cells = map.property_cells("interrupt-map-mask").ok()??;
        [cells.next()?, cells.next()?, cells.next()?, cells.next()?]
    };
    let mut cells = map.property_cells("interrupt-map").ok()??;
    loop {
        let mut entry = [0u32; 10];
        for cell in entry.iter_mut() {
            *cell = cells.next()?;
        }
        if entry[0] & mask[0] == (slot << 11) & mask[0] && entry[3] & mask[3] == 1 {
            return (entry[7] == 0).then_some(entry[8] + FIRST_SPI);
        }
    }
}

/// Runs edu mode on the device tree `tree`.
pub fn run(tree: &Fdt<'static>, args: BootArgs<'_>, interrupts: &PrivateInterrupts) -> ! {
    let number = |key: &str, default: u64| {
        args.value(key)
            .and_then(|value| {
                let digits = value.strip_prefix("0x");
                match digits {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => value.parse().ok(),
                }
            })
            .unwrap_or(default)
    };
    let Some(bridge) = find_bridge(tree) else {
        println!("edu: no pci-host-ecam-generic bridge with a 32-bit window in the device tree");
        system_off()
    };
    // SAFETY: the device tree describes the bridge's ECAM there (mapped by Keel as the board's).
    let ecam = unsafe { MmioFrame::new(bridge.ecam) };
    let Some(found) = find_edu(&ecam, bridge.window) else {
        println!("edu: no edu device (1234:11e8) on bus 0 or behind a bridge of bus 0");
        system_off()
    };
    let function = found.function;
    ecam.write_u32(function + 0x10, bridge.window as u32);
    ecam.write_u32(function + 0x04, COMMAND_MEMORY_AND_MASTER);
    // SAFETY: BAR0 now decodes at the window's start, 1 MiB; nothing else lives there.
    let edu = unsafe { MmioFrame::new(bridge.window) };
    // Behind a root port, INTA of its device 0 is the root port's INTA (swizzled by device 0).
    let intid = inta_intid(&bridge.map, found.root_port.unwrap_or(found.slot) as u32);
    let ident = if edu.read_u32(0) == EDU_IDENT {
        "ok"
    } else {
        "unexpected"
    };
    match found.root_port {
        None => println!(
            "edu: device at 00:{:02x}.0, BAR0 {:#x}, id {ident}, INTID {}",
            found.slot,
            bridge.window,
            intid.unwrap_or(0)
        ),
        Some(port) => println!(
            "edu: device at {SECONDARY_BUS:02x}:{:02x}.0 behind the root port at 00:{port:02x}.0 \
             (buses 0, {SECONDARY_BUS}, {SECONDARY_BUS}), BAR0 {:#x}, id {ident}, INTID {}",
            found.slot,
            bridge.window,
            intid.unwrap_or(0)
        ),
    }
    EDU_BASE.store(bridge.window as u64, Ordering::Relaxed);
    set_irq_handler(handle_irq);
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);
    if let Some(intid) = intid {
        EDU_INTID.store(intid, Ordering::Relaxed);
        DISTRIBUTOR.enable_spi(intid, PRIORITY, Trigger::Level);
    }
    enable_irqs();

    if args.value("keel.edu") == Some("bench") {
        interrupt_latency(&edu);
    }
    own_round_trip(&edu);
    flood(&edu, number("keel.flood", 300));
    let target = number("keel.target", 0);
    match args.value("keel.edu") {
        Some("write") => {
            println!("edu: DMA write of {DMA_BYTES} bytes to {target:#x}");
            dma(&edu, EDU_BUFFER, target, DMA_TO_RAM);
            println!("edu: DMA write to {target:#x} done");
        }
        Some("read") => {
            println!("edu: DMA read of {DMA_BYTES} bytes from {target:#x}");
            dma(&edu, target, EDU_BUFFER, 0);
            // SAFETY: no DMA is in flight (each is waited for); only this code touches SINK.
            unsafe { (*SINK.0.get()).fill(0) };
            dma(&edu, EDU_BUFFER, SINK.address(), DMA_TO_RAM);
            println!("edu: DMA read from {target:#x} done");
        }
        _ => {}
    }
    system_off()
}

/// Where the edu was found.
struct Found {
    /// Its function's offset in the ECAM.
    function: usize,
    /// Its device number on its bus.
    slot: usize,
    /// The device number of the root port it is behind (on bus 0), if it is behind one.
    root_port: Option<usize>,
}

/// Finds the edu on bus 0, or behind the first PCI-PCI bridge of bus 0: that bridge is given
/// bus numbers (primary 0, secondary and subordinate [`SECONDARY_BUS`]), a memory window
/// over the edu's BAR0 at `window` (I/O and prefetchable windows closed), and memory decoding
/// and bus mastering, so that the edu's registers and its DMA pass through it.
fn find_edu(ecam: &MmioFrame, window: usize) -> Option<Found> {
    let config = |bus: usize, slot: usize| bus << 20 | slot << 15;
    if let Some(slot) = (0..32).find(|&slot| ecam.read_u32(config(0, slot)) == EDU_ID) {
        return Some(Found {
            function: config(0, slot),
            slot,
            root_port: None,
        });
    }
    let port = (0..32).find(|&slot| {
        let id = ecam.read_u32(config(0, slot));
        id != u32::MAX && ecam.read_u32(config(0, slot) + CLASS_REVISION) >> 16 == CLASS_BRIDGE
    })?;
    let bridge = config(0, port);
    ecam.write_u32(
        bridge + BRIDGE_BUSES,
        (SECONDARY_BUS as u32) << 8 | (SECONDARY_BUS as u32) << 16,
    );
    // Memory base and limit: address bits 31:20 in bits 15:4 of each 16-bit half.
    let base = (window >> 16) as u32 & 0xfff0;
    let limit = ((window + EDU_BAR_SIZE - 1) >> 16) as u32 & 0xfff0;
    ecam.write_u32(bridge + BRIDGE_MEMORY, base | limit << 16);
    // Base above limit: closed.
    ecam.write_u32(bridge + BRIDGE_IO, 0x00f0);
    ecam.write_u32(bridge + BRIDGE_PREFETCHABLE, 0x0000_fff0);
    ecam.write_u32(bridge + 0x04, COMMAND_MEMORY_AND_MASTER);
    let slot = (0..32).find(|&slot| ecam.read_u32(config(SECONDARY_BUS, slot)) == EDU_ID)?;
    Some(Found {
        function: config(SECONDARY_BUS, slot),
        slot,
        root_port: Some(port),
    })
}

/// Copies a pattern from this VM's memory into the device and back into another buffer, and
/// compares.
fn own_round_trip(edu: &MmioFrame) {
    // SAFETY: no DMA is in flight (each is waited for); only this code touches the buffers.
    unsafe {
        for (i, byte) in (*SOURCE.0.get()).iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(7).wrapping_add(3);
        }
        (*SINK.0.get()).fill(0);
    }
    dma(edu, SOURCE.address(), EDU_BUFFER, 0);
    dma(edu, EDU_BUFFER, SINK.address(), DMA_TO_RAM);
    // SAFETY: as above; both transfers are complete.
    let same = unsafe { *SOURCE.0.get() == *SINK.0.get() };
    println!(
        "edu: own DMA round trip {} ({DMA_BYTES} bytes)",
        if same { "ok" } else { "FAILED" }
    );
}

/// One DMA of [`DMA_BYTES`] from `source` to `destination` (`direction`: [`DMA_TO_RAM`] or 0),
/// waited for (polling the command's start bit, sleeping in WFI between looks).
fn dma(edu: &MmioFrame, source: u64, destination: u64, direction: u64) {
    edu.write_u64(EDU_DMA_SOURCE, source);
    edu.write_u64(EDU_DMA_DESTINATION, destination);
    edu.write_u64(EDU_DMA_COUNT, DMA_BYTES as u64);
    edu.write_u64(EDU_DMA_COMMAND, DMA_START | direction);
    let deadline = timer::counter() + timer::frequency();
    while edu.read_u64(EDU_DMA_COMMAND) & DMA_START != 0 && timer::counter() < deadline {
        sleep_ms(10);
    }
}

/// Raises the device's interrupt flat out for `ms` milliseconds (the handler acknowledges
/// each).
fn flood(edu: &MmioFrame, ms: u64) {
    if EDU_INTID.load(Ordering::Relaxed) == u32::MAX || ms == 0 {
        return;
    }
    let before = TAKEN.load(Ordering::Relaxed);
    let start = timer::counter();
    let mut raised = 0u64;
    while timer::counter() - start < ms * timer::frequency() / 1000 {
        edu.write_u32(EDU_RAISE, 1);
        raised += 1;
    }
    let taken = TAKEN.load(Ordering::Relaxed) - before;
    println!("edu: interrupt flood: {raised} raised, {taken} taken in {ms} ms");
}

/// Sleeps about `ms` milliseconds in WFI (the virtual timer wakes it).
fn sleep_ms(ms: u64) {
    let deadline = timer::counter() + ms * timer::frequency() / 1000;
    timer::set_deadline(deadline);
    timer::enable();
    loop {
        disable_irqs();
        if timer::counter() >= deadline {
            break;
        }
        wait_for_interrupt();
        enable_irqs();
    }
    enable_irqs();
    timer::disable();
}

/// Samples of the interrupt latency.
const LATENCY_SAMPLES: u32 = 200;

/// The edu interrupt's latency, from the raising write to the vector and back: a loop keeps
/// reading PMCCNTR_EL0 into x9 after the write; the SDK's IRQ vector stamps the counter and
/// the interrupted x9 (feature `irq-entry-stamp`), so entry = stamp - the count just before
/// the write, round trip = the loop's first count after the return - that count. Each less
/// the cost of two back-to-back counter reads.
fn interrupt_latency(edu: &MmioFrame) {
    use core::arch::asm;
    use keel_guest::exceptions::{stamp_irq_entries, IRQ_ENTRY_STAMP};
    keel_guest::pmu::enable_cycle_counter();
    stamp_irq_entries();
    let back_to_back = crate::bench::minimum(crate::bench::back_to_back_reads);
    let raise = edu.base() + EDU_RAISE;
    let mut stats = [(u64::MAX, 0u64, 0u64); 2];
    let mut count = 0u64;
    for sample in 0..=LATENCY_SAMPLES {
        let seen = TAKEN.load(Ordering::Relaxed);
        IRQ_ENTRY_STAMP.interrupted_x9.store(0, Ordering::Relaxed);
        let (before, last_in_loop, after_loop): (u64, u64, u64);
        // SAFETY: unmasks IRQs only while spinning (the SDK's vector preserves every register
        // the loop uses) and masks them again; the store is to the edu's raise register.
        unsafe {
            asm!(
                "msr daifclr, #2",
                "isb",
                "mrs {before}, pmccntr_el0",
                "str {one:w}, [{raise}]",
                "2: mrs x9, pmccntr_el0",
                "ldr {taken}, [{counter}]",
                "cmp {taken}, {seen}",
                "b.eq 2b",
                "mrs {after}, pmccntr_el0",
                "mov {last}, x9",
                "msr daifset, #2",
                before = out(reg) before,
                one = in(reg) 1u32,
                raise = in(reg) raise,
                counter = in(reg) &TAKEN,
                seen = in(reg) seen,
                taken = out(reg) _,
                after = out(reg) after_loop,
                last = out(reg) last_in_loop,
                out("x9") _,
                options(nostack),
            )
        };
        let entry = IRQ_ENTRY_STAMP.cycle_counter.load(Ordering::Relaxed);
        // If the interrupt came after the loop's last counter read, the read after the loop
        // is the first after the return; otherwise the loop's last one is.
        let after = if last_in_loop > entry {
            last_in_loop
        } else {
            after_loop
        };
        // The first sample warms the path up.
        if sample == 0 || entry < before {
            continue;
        }
        for (figure, value) in stats.iter_mut().zip([entry - before, after - before]) {
            let value = value.saturating_sub(back_to_back);
            figure.0 = figure.0.min(value);
            figure.1 = figure.1.max(value);
            figure.2 += value;
        }
        count += 1;
    }
    for ((min, max, sum), name) in stats.iter().zip(["edu-irq-entry", "edu-irq-roundtrip"]) {
        if let Some(average) = sum.checked_div(count) {
            println!("bench: {name} min={min} avg={average} max={max}");
        }
    }
    println!("bench: done");
}

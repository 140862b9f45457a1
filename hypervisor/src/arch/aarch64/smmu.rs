//! The board's SMMUv3 (Arm IHI 0070), which Keel owns: its registers, and the memory it reads
//! and writes, all in Keel's own memory (.bss, identity-mapped), which no VM maps: the
//! two-level stream table over every 16-bit stream ID (its level-1 table, 2 KiB, and
//! [`MAX_STREAM_ARRAYS`] level-2 arrays of 16 KiB, as `keel_core::smmu::strtab` plans them
//! from the VMs' streams), one context descriptor per VM, the command queue and the event
//! queue; and the VMs' stage-1 tables (each VM's IPA to PA, as its stage 2 maps its memory:
//! QEMU 7.2's SMMU has stage 1 only), which the caller gives from its pool. What these hold
//! is built by `keel_core::smmu`; this file only places it and talks to the registers.
//!
//! Ownership: [`init`] writes everything once, on pCPU 0 at boot, before the SMMU is enabled
//! and before any other pCPU or VM runs. Afterwards the level-2 arrays and the queues are
//! touched only under [`SMMU`]'s lock (an STE switched to abort and back, commands, the event
//! queue's consumer); the level-1 table, the plan, the CDs and stage-1 tables are only read
//! (the plan by [`stream_owner`], the rest by the SMMU). The lock is a leaf, held for one
//! bounded step, never while Keel waits for the SMMU: a submitter queues its commands and a
//! CMD_SYNC under it, then looks at CMDQ_CONS under it once per poll, with the lock released
//! and its caller's poll point between looks, until the SMMU has consumed them (its CMD_SYNC
//! completes only after every command before it, other submitters' too). Its place among
//! Keel's locks: the crate's [lock order](crate#lock-order).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use keel_core::colour::Colours;
use keel_core::smmu::regs::{self, cr0, cr1, cr2, irq_ctrl};
use keel_core::smmu::strtab::{LEVEL1_ENTRIES, LEVEL2_ENTRIES, SPLIT, STREAM_BITS};
use keel_core::smmu::{
    command, Command, CommandError, ContextDescriptor, Event, Features, GlobalError, Level2, Queue,
    Stage1, Stage1Error, StreamAssignment, StreamConfig, StreamLayout, StreamTableError,
    SyncSignal, Unsupported,
};
use keel_core::stage2::{MemoryKind, Table};
use keel_core::system::{MAX_STREAM_ARRAYS, MAX_VMS};
use keel_core::text::{Out, Show};

use super::cpu::{self, Mutex};
use super::mmio::Mmio;
use super::mmu;

/// log2 of the command queue's entries.
const COMMAND_LOG2: u32 = 5;
/// log2 of the event queue's entries.
const EVENT_LOG2: u32 = 5;
/// The command queue's index arithmetic.
const COMMAND_QUEUE: Queue = match Queue::new(COMMAND_LOG2) {
    Some(queue) => queue,
    None => panic!("the command queue's size is out of range"),
};
/// The event queue's index arithmetic.
const EVENT_QUEUE: Queue = match Queue::new(EVENT_LOG2) {
    Some(queue) => queue,
    None => panic!("the event queue's size is out of range"),
};
/// Polls of a register before Keel gives up on the SMMU acknowledging (each a device read).
const ACK_POLLS: u32 = 1_000_000;

/// Memory the SMMU reads, aligned as the architecture asks (each table and queue to its
/// size). The stream table, the CDs and the queues are physically contiguous: they stay where
/// Keel was loaded even when Keel is coloured (`.bss_contiguous`); the stage-1 tables, the
/// caller's, are placed table by table (`mmu::place`).
#[repr(C, align(2048))]
struct Level1Table(UnsafeCell<[u64; LEVEL1_ENTRIES]>);
#[repr(C, align(16384))]
struct Level2Arrays(UnsafeCell<[Level2; MAX_STREAM_ARRAYS]>);
/// The stream table's plan: which array each block's descriptor points at, whose each STE is.
struct Layout(UnsafeCell<StreamLayout<MAX_STREAM_ARRAYS>>);
#[repr(C, align(64))]
struct Contexts(UnsafeCell<[[u64; 8]; MAX_VMS]>);
#[repr(C, align(512))]
struct CommandQueue(UnsafeCell<[Command; 1 << COMMAND_LOG2]>);
#[repr(C, align(1024))]
struct EventQueue(UnsafeCell<[[u64; 4]; 1 << EVENT_LOG2]>);

// SAFETY: written by pCPU 0 in `init` before any other pCPU runs and before the SMMU is
// enabled; afterwards only under SMMU's lock (the level-2 arrays' entries, the queues) or
// never again (the level-1 table, the plan, CDs), and read by the SMMU.
unsafe impl Sync for Level1Table {}
// SAFETY: as for Level1Table.
unsafe impl Sync for Level2Arrays {}
// SAFETY: as for Level1Table.
unsafe impl Sync for Layout {}
// SAFETY: as for Level1Table.
unsafe impl Sync for Contexts {}
// SAFETY: as for Level1Table.
unsafe impl Sync for CommandQueue {}
// SAFETY: as for Level1Table.
unsafe impl Sync for EventQueue {}

#[unsafe(link_section = ".bss_contiguous")]
static LEVEL1: Level1Table = Level1Table(UnsafeCell::new([0; LEVEL1_ENTRIES]));
#[unsafe(link_section = ".bss_contiguous")]
static ARRAYS: Level2Arrays = Level2Arrays(UnsafeCell::new(
    [[[0; 8]; LEVEL2_ENTRIES]; MAX_STREAM_ARRAYS],
));
static LAYOUT: Layout = Layout(UnsafeCell::new(StreamLayout::EMPTY));
#[unsafe(link_section = ".bss_contiguous")]
static CONTEXTS: Contexts = Contexts(UnsafeCell::new([[0; 8]; MAX_VMS]));
#[unsafe(link_section = ".bss_contiguous")]
static COMMANDS: CommandQueue = CommandQueue(UnsafeCell::new([[0; 2]; 1 << COMMAND_LOG2]));
#[unsafe(link_section = ".bss_contiguous")]
static EVENTS: EventQueue = EventQueue(UnsafeCell::new([[0; 4]; 1 << EVENT_LOG2]));

/// The SMMU once [`init`] enabled it: its registers, the entries Keel has written to the
/// command queue since it was enabled (its PROD pointer is that count's low bits), and the
/// consumer index of the event queue, which only Keel moves.
struct Driver {
    regs: Mmio,
    produced: u64,
    event_cons: u32,
}

/// The driver, once [`init`] succeeded. All zero until then (`None`: no SMMU).
static SMMU: Mutex<Option<Driver>> = Mutex::new(None);

/// Why Keel cannot use the SMMU; each variant's message is its [`Show`].
#[derive(Clone, Copy, Debug)]
pub enum SmmuError {
    /// The SMMU lacks what Keel needs.
    Unsupported(Unsupported),
    /// A VM's stage-1 tables could not be built.
    Stage1 {
        /// The VM.
        vm: usize,
        /// Why.
        error: Stage1Error,
    },
    /// The stream table could not be filled.
    Streams(StreamTableError),
    /// The SMMU did not acknowledge a CR0 or IRQ_CTRL write.
    NoAck(&'static str),
    /// A command failed.
    Command(CommandError),
}

impl Show for SmmuError {
    fn show(&self, out: &mut dyn Out) {
        match self {
            Self::Unsupported(why) => why.show(out),
            Self::Stage1 { vm, error } => {
                keel_core::text!(out, "VM ", *vm, "'s stage-1 tables: ", *error)
            }
            Self::Streams(error) => error.show(out),
            Self::NoAck(register) => keel_core::text!(out, register, " write not acknowledged"),
            Self::Command(error) => keel_core::text!(out, "command failed: ", *error),
        }
    }
}

/// A map of one region `(ipa, pa, size, colours)` into a VM's stage-1 tables: to `[pa, pa +
/// size)`, or with colours ([`Colours::NONE`] for none) page by page to their frames from `pa`.
pub type MapRegion<'a> = dyn FnMut(u64, u64, u64, Colours) -> Result<(), Stage1Error> + 'a;
/// Maps every region of VM `vm`'s memory with the function given.
pub type VmMemory = dyn Fn(usize, &mut MapRegion) -> Result<(), Stage1Error>;
/// The tables VM `vm`'s stage 1 is built in (None: no tables for it).
pub type VmTables = dyn FnMut(usize) -> Option<&'static mut [Table]>;

/// Sets the SMMU at `base` up and enables it: every stream in `assignments` translates with
/// its VM's stage-1 tables, each VM's built from `memory(vm, map)` (which calls `map(ipa, pa,
/// size, colours)` for each of its regions); every other stream of a level-2 array aborts, and a
/// stream of a block without one is out of range (a `C_BAD_STREAMID` event). Each VM's
/// tables are `tables(vm)` (a VM given none is refused, its stage 1 out of tables).
/// Before any VM runs, on pCPU 0.
///
/// # Safety
/// `base` must be the SMMUv3's register frame (two 64 KiB pages), mapped as device memory,
/// and this must run once, before any other pCPU runs.
pub unsafe fn init(
    base: u64,
    assignments: &[StreamAssignment],
    memory: &VmMemory,
    tables: &mut VmTables,
) -> Result<(), SmmuError> {
    // SAFETY: forwarded from this function's contract.
    let regs = unsafe { Mmio::new(base) };
    let features = Features::decode(
        regs.read32(regs::IDR0 as usize),
        regs.read32(regs::IDR1 as usize),
        regs.read32(regs::IDR5 as usize),
    );
    let max_stream = assignments.iter().map(|a| a.last).max().unwrap_or(0);
    regs::check(&features, max_stream, 40).map_err(SmmuError::Unsupported)?;
    write_acknowledged(&regs, regs::CR0 as usize, regs::CR0ACK as usize, 0, "CR0")?;

    // SAFETY: per this function's contract nothing else runs, and the SMMU is disabled: these
    // are the only references to the SMMU's memory until it is enabled.
    let (level1, arrays, layout, contexts) = unsafe {
        (
            &mut *LEVEL1.0.get(),
            &mut *ARRAYS.0.get(),
            &mut *LAYOUT.0.get(),
            &mut *CONTEXTS.0.get(),
        )
    };
    let mut context_addresses = [0u64; MAX_VMS];
    for vm in 0..MAX_VMS {
        if !assignments.iter().any(|assignment| assignment.vm == vm) {
            continue;
        }
        let mine = tables(vm).unwrap_or_default();
        let place = mmu::place(mine.as_ptr() as u64);
        let mut stage1 =
            Stage1::new(mine, place).map_err(|error| SmmuError::Stage1 { vm, error })?;
        memory(vm, &mut |ipa, pa, size, colours| {
            if colours.is_coloured() {
                stage1.map_coloured(ipa, pa, size, &colours)
            } else {
                stage1.map(ipa, pa, size, MemoryKind::Normal)
            }
        })
        .map_err(|error| SmmuError::Stage1 { vm, error })?;
        let context = ContextDescriptor {
            asid: vm as u16 + 1,
            ttb0: stage1.root_phys(),
            output_size: features.output_size,
        };
        contexts[vm] = context.encode();
        context_addresses[vm] = mmu::phys(contexts[vm].as_ptr() as u64);
    }
    layout
        .plan(assignments, MAX_VMS)
        .map_err(SmmuError::Streams)?;
    layout.fill(
        level1,
        arrays,
        mmu::phys(arrays.as_ptr() as u64),
        &context_addresses,
    );
    cpu::dsb_sy();

    regs.write32(regs::CR1 as usize, cr1::WRITE_BACK_INNER);
    // Streams beyond the table are recorded as C_BAD_STREAMID events, not aborted silently.
    regs.write32(regs::CR2 as usize, cr2::RECINVSID);
    regs.write64(
        regs::STRTAB_BASE as usize,
        regs::strtab_base(mmu::phys(level1.as_ptr() as u64)),
    );
    regs.write32(
        regs::STRTAB_BASE_CFG as usize,
        regs::strtab_base_cfg_two_level(STREAM_BITS, SPLIT),
    );
    regs.write64(
        regs::CMDQ_BASE as usize,
        regs::queue_base(mmu::phys(COMMANDS.0.get() as u64), COMMAND_LOG2),
    );
    regs.write32(regs::CMDQ_PROD as usize, 0);
    regs.write32(regs::CMDQ_CONS as usize, 0);
    regs.write64(
        regs::EVENTQ_BASE as usize,
        regs::queue_base(mmu::phys(EVENTS.0.get() as u64), EVENT_LOG2),
    );
    regs.write32(regs::EVENTQ_PROD as usize, 0);
    regs.write32(regs::EVENTQ_CONS as usize, 0);
    let queues = cr0::CMDQEN | cr0::EVENTQEN;
    write_acknowledged(
        &regs,
        regs::CR0 as usize,
        regs::CR0ACK as usize,
        queues,
        "CR0",
    )?;
    *SMMU.lock_cold() = Some(Driver {
        regs,
        produced: 0,
        event_cons: 0,
    });
    let enabled = enable(&regs, queues);
    if enabled.is_err() {
        *SMMU.lock_cold() = None;
    }
    enabled
}

/// The end of [`init`], its queues enabled and its driver in place: nothing of a reset's or a
/// firmware's configuration left cached, the interrupts on, then translation.
fn enable(regs: &Mmio, queues: u32) -> Result<(), SmmuError> {
    submit(&[command::cfgi_all(), command::tlbi_nsnh_all()], || {})?;
    write_acknowledged(
        regs,
        regs::IRQ_CTRL as usize,
        regs::IRQ_CTRLACK as usize,
        irq_ctrl::EVENTQ_IRQEN | irq_ctrl::GERROR_IRQEN,
        "IRQ_CTRL",
    )?;
    write_acknowledged(
        regs,
        regs::CR0 as usize,
        regs::CR0ACK as usize,
        queues | cr0::SMMUEN,
        "CR0",
    )
}

/// Writes `value` to the register at `offset` and waits (bounded) for its acknowledgement
/// register at `ack` to read the same.
fn write_acknowledged(
    regs: &Mmio,
    offset: usize,
    ack: usize,
    value: u32,
    name: &'static str,
) -> Result<(), SmmuError> {
    regs.write32(offset, value);
    for _ in 0..ACK_POLLS {
        if regs.read32(ack) == value {
            return Ok(());
        }
        cpu::spin_wait();
    }
    Err(SmmuError::NoAck(name))
}

impl Driver {
    /// Writes `commands` and a CMD_SYNC to the command queue and moves PROD past them, if the
    /// queue has room for them all: the count of entries produced up to the CMD_SYNC's end
    /// (`None`: no room yet). One bounded step: a register read, at most nine entries, a write.
    fn produce(&mut self, commands: &[Command]) -> Result<Option<u64>, SmmuError> {
        let queue = COMMAND_QUEUE;
        let cons = self.regs.read32(regs::CMDQ_CONS as usize);
        if let Some(error) = CommandError::from_cons(cons) {
            return Err(SmmuError::Command(error));
        }
        let prod = queue.pointer(self.produced as u32);
        if (queue.free(prod, cons) as usize) < commands.len() + 1 {
            return Ok(None);
        }
        let sync = command::sync(SyncSignal::None);
        for command in commands.iter().chain([&sync]) {
            let slot = queue.slot(queue.pointer(self.produced as u32));
            // SAFETY: the command queue is only written here, under SMMU's lock, in slots
            // the SMMU has consumed (the room was checked against CONS above); the SMMU reads
            // an entry only once PROD covers it.
            unsafe { (*COMMANDS.0.get())[slot] = *command };
            self.produced += 1;
        }
        cpu::dsb_sy();
        self.regs.write32(
            regs::CMDQ_PROD as usize,
            queue.pointer(self.produced as u32),
        );
        Ok(Some(self.produced))
    }

    /// Whether the SMMU has consumed every entry produced before the count `end` (read from
    /// CMDQ_CONS: one register read).
    fn has_consumed(&self, end: u64) -> Result<bool, SmmuError> {
        let queue = COMMAND_QUEUE;
        let cons = self.regs.read32(regs::CMDQ_CONS as usize);
        if let Some(error) = CommandError::from_cons(cons) {
            return Err(SmmuError::Command(error));
        }
        // CONS is at most a queue's length behind what was produced: exact in the count.
        let pending = queue.used(queue.pointer(self.produced as u32), cons);
        Ok(self.produced - u64::from(pending) >= end)
    }
}

/// Queues `commands` (at most eight) and a CMD_SYNC, and waits until the SMMU has consumed
/// them, or gives up after [`ACK_POLLS`] looks. SMMU's lock is held for each bounded step (the
/// queueing, each look at CMDQ_CONS) and released between them, where `between` (the caller's
/// poll point) runs: no lock is held while Keel waits for the SMMU, and other submitters queue
/// meanwhile. A queue without room for them (others' commands not consumed yet) is waited for
/// the same way. Nothing to do without an SMMU.
fn submit(commands: &[Command], between: fn()) -> Result<(), SmmuError> {
    debug_assert!(commands.len() < COMMAND_QUEUE.entries() as usize);
    let mut end = None;
    for _ in 0..ACK_POLLS {
        {
            let mut smmu = SMMU.lock_cold();
            let Some(driver) = smmu.as_mut() else {
                return Ok(());
            };
            if end.is_none() {
                end = driver.produce(commands)?;
            }
            // Looked at at once too: an SMMU that consumes as PROD is written (QEMU's) is
            // done here.
            if let Some(end) = end {
                if driver.has_consumed(end)? {
                    return Ok(());
                }
            }
        }
        between();
        cpu::spin_wait();
    }
    Err(SmmuError::NoAck("CMDQ_PROD"))
}

/// Entries of the stream table's level-2 arrays looked at (and, where VM's, rewritten) in one
/// step of [`set_vm_streams`]: under 1,000 instructions with interrupts masked for a step that
/// rewrites them all (64 bytes each), between two of the caller's poll points.
const POSITIONS_PER_STEP: usize = 32;

/// Each VM's streams as last asked for ([`set_vm_streams`]; true: translate), written under
/// SMMU's lock: every step writes what is wanted at that step, so that a cut-off and a
/// give-back that overlap leave every STE as the later one asks.
static WANTED: [AtomicBool; MAX_VMS] = [const { AtomicBool::new(false) }; MAX_VMS];

/// Makes every stream of VM `vm` abort (`translate` false) or translate again with its
/// context (`translate` true), and invalidates the SMMU's cached copies of `ranges` (the VM's
/// stream ranges). Bounded: the arrays in use (at most [`MAX_STREAM_ARRAYS`] x 256 STEs) are
/// looked at [`POSITIONS_PER_STEP`] at a time, with SMMU's lock released and `between` (the
/// caller's poll point) called before each step, then a command per range, eight at a time,
/// each batch's CMD_SYNC waited for with the lock released and `between` between looks
/// ([`submit`]). A VM that is stopped has its devices cut off this way (aborts record no
/// event); its restart gives them back.
pub fn set_vm_streams(
    vm: usize,
    translate: bool,
    ranges: &mut dyn Iterator<Item = (u32, u32)>,
    between: fn(),
) -> Result<(), SmmuError> {
    let Some(wanted) = WANTED.get(vm) else {
        return Ok(());
    };
    {
        let smmu = SMMU.lock_cold();
        if smmu.is_none() {
            return Ok(());
        }
        wanted.store(translate, Ordering::Relaxed);
    }
    // SAFETY: the plan is only written by `init`, before the lock exists; afterwards it is
    // only read.
    let layout = unsafe { &*LAYOUT.0.get() };
    let positions = layout.positions();
    let mut first = 0;
    while first < positions {
        // Before each step, the first too: what the caller did before (its line, its
        // interrupts' reset) is a stretch of its own.
        between();
        let _smmu = SMMU.lock_cold();
        let config = if wanted.load(Ordering::Relaxed) {
            // SAFETY: the CDs are only written by `init`, before the lock exists.
            let context = unsafe {
                (*CONTEXTS.0.get())
                    .get(vm)
                    .map(|cd| mmu::phys(cd.as_ptr() as u64))
            };
            StreamConfig::Stage1 {
                context: context.unwrap_or(0),
            }
        } else {
            StreamConfig::Abort
        };
        let entry = config.encode();
        // SAFETY: the level-2 arrays are written only under SMMU's lock, held here.
        let arrays = unsafe { &mut *ARRAYS.0.get() };
        for (array, index) in layout.entries_of_among(vm, first..first + POSITIONS_PER_STEP) {
            if let Some(ste) = arrays.get_mut(array).and_then(|a| a.get_mut(index)) {
                *ste = entry;
            }
        }
        first += POSITIONS_PER_STEP;
    }
    let mut commands = [[0u64; 2]; 8];
    let mut count = 0;
    for (first, last) in ranges {
        if let Some(slot) = commands.get_mut(count) {
            *slot = command::cfgi_ste_range(first, last);
            count += 1;
        }
        if count == commands.len() {
            submit(&commands, between)?;
            count = 0;
        }
    }
    submit(&commands[..count], between)
}

/// The VM that owns stream `stream` in the stream table (whose device's DMA it is), if any.
pub fn stream_owner(stream: u32) -> Option<usize> {
    // SAFETY: the plan is only written by `init`, on pCPU 0 before any other pCPU runs and
    // before the SMMU's interrupt is enabled; afterwards it is only read.
    unsafe { (*LAYOUT.0.get()).owner(stream) }
}

/// Hands each event the SMMU has queued to `each`, oldest first (at most a queue's worth per
/// call), and returns the global errors active since the last call (acknowledged).
pub fn take_events(each: &mut dyn FnMut(&Event)) -> Option<GlobalError> {
    let mut smmu = SMMU.lock_cold();
    let driver = smmu.as_mut()?;
    let queue = EVENT_QUEUE;
    let prod = queue.pointer(driver.regs.read32(regs::EVENTQ_PROD as usize));
    for _ in 0..queue.entries() {
        if queue.is_empty(prod, driver.event_cons) {
            break;
        }
        // SAFETY: the SMMU wrote this entry before moving PROD past it and writes it again
        // only once CONS has moved past it; only this consumer reads, under SMMU's lock.
        let record = unsafe { (*EVENTS.0.get())[queue.slot(driver.event_cons)] };
        each(&Event::decode(&record));
        driver.event_cons = queue.advance(driver.event_cons, 1);
    }
    driver
        .regs
        .write32(regs::EVENTQ_CONS as usize, driver.event_cons);
    let gerror = driver.regs.read32(regs::GERROR as usize);
    let gerrorn = driver.regs.read32(regs::GERRORN as usize);
    let first = GlobalError::active(gerror, gerrorn).next();
    // Acknowledged by making GERRORN equal GERROR.
    driver.regs.write32(regs::GERRORN as usize, gerror);
    first
}

//! Keel's console: the physical PL011 shared by the VMs' emulated consoles and Keel itself.
//!
//! Output: only the console pCPU ([`CONSOLE_CPU`], the one the UART's interrupt is routed to)
//! writes the UART. A VM's console bytes go into a bounded queue of its own
//! ([`keel_core::console_queue`]: one producer, its vCPUs under its PL011 lock; one consumer,
//! the holder of the console lock) with no lock shared with anyone else, so a VM's console
//! output never waits for another VM's output or for Keel's lines. A full queue refuses the
//! byte and counts it (its PL011 reads TXFF meanwhile, so a guest that looks first loses
//! nothing); the count is said in a line of Keel's. Keel's own lines are made without
//! `core::fmt` ([`keel_core::text`]) and copied into the multiplexer's buffer under the console
//! lock. Nothing tells the console pCPU (that would take a device the partitions share): it
//! looks every [`POLL_US`] from its EL2 timer's console deadline (at once for a line of its
//! own) and, from that deadline, moves the VMs' bytes into the
//! multiplexer ([`PULL_PER_STEP`] at a time) and writes what the UART takes
//! ([`BYTES_PER_DRAIN`] at a time), each in a masked stretch of its own, coming back while
//! output waits (see [`keel_core::console`]). Keel's diagnostics that a guest can trigger at
//! will are rate-limited per kind and VM ([`keel_println_limited`]); a line said without a
//! limit ([`keel_println`]) names a cause that is not a guest's, a pCPU's [`Boot`] or the
//! [`Operator`] at the console.
//!
//! Input: the physical UART's bytes are read under the console lock, Ctrl-A escapes taken
//! there ([`ConsoleMux::input`]), and delivered to the focused VM's emulated PL011 after the
//! lock is released (`irq::console_input`), into the input queue behind its receive FIFO
//! ([`keel_core::devices::pl011`]). Input its full queue refused is said once per episode
//! ([`input_refused`]): [`INPUT_QUIET_US`] after the last byte refused, or
//! [`INPUT_REPORT_MAX_US`] after the first one not yet said, from the EL2 timer's console
//! deadline (`irq::report_refused_input`), one line per VM with the count.
//!
//! Locks: the console lock (the multiplexer) is held for bounded work only: by the console
//! pCPU for one pull or one drain step, by any pCPU for the copy of one of Keel's lines (at
//! most 256 bytes). Keel's lock is fair (a ticket lock), so a pCPU waits at most one such hold
//! per other pCPU. It and the rate limiter's lock are leaves, never held together and never
//! held while a VM's device lock is taken; input is collected under the console lock and
//! delivered to VMs after it is released. A VM's output queue takes no lock.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use keel_core::console::{ConsoleMux, Input, Sink, MAX_VMS, TERMINAL_RESET};
use keel_core::console_queue::{OutputQueue, OUTPUT_QUEUE};
use keel_core::ratelimit::{DiagnosticKind, RateLimiter, Verdict};
use keel_core::table::at_mut;
use keel_core::text::{Decimal, Out, Show};

use crate::arch::boot::MAX_CPUS;
use crate::arch::cpu::{self, Mutex};
use crate::arch::{timer, uart::Uart};
use crate::timers::{self, Deadline};

/// How long a partial output line may wait before it is written anyway (a shell prompt), and
/// how soon output the UART could not take yet is tried again.
const PARTIAL_LINE_DELAY_US: u64 = 20_000;
/// Most bytes written to the UART in one go (a VM's console write, Keel's line, one timer
/// call): about 1,500 instructions with interrupts masked. The rest follows with the next
/// write or [`MORE_OUTPUT_DELAY_US`] later.
const BYTES_PER_DRAIN: usize = 48;
/// Most lines or line pieces composed for the UART in one go (about 400 instructions each,
/// however short the line).
const COMPOSES_PER_DRAIN: usize = 1;
/// How soon output left by [`BYTES_PER_DRAIN`] or [`COMPOSES_PER_DRAIN`] is written.
const MORE_OUTPUT_DELAY_US: u64 = 50;
/// How often the console pCPU looks at the VMs' output queues and Keel's lines from other
/// pCPUs when nothing is left to write: the longest a line waits before it starts out.
const POLL_US: u64 = 1_000;
/// Most bytes of the VMs' output queues moved into the multiplexer in one go (a few dozen
/// instructions each); the rest follows [`MORE_OUTPUT_DELAY_US`] later.
const PULL_PER_STEP: usize = 16;

/// The pCPU that writes the UART: the one its interrupt is routed to (`main` routes it to the
/// boot pCPU, index 0). A partition pinned there shares its pCPU with the console's work; the
/// others never do any of it.
pub const CONSOLE_CPU: usize = 0;

/// Each VM's console output on its way to the multiplexer (all zero bytes: in .bss).
static OUTPUT: [OutputQueue; MAX_VMS] = [const { OutputQueue::new() }; MAX_VMS];
/// The VM whose queue is pulled first next time (round robin: a VM printing flat out gets its
/// share of each pull and no more).
static PULL_NEXT: AtomicUsize = AtomicUsize::new(0);

struct Console {
    mux: ConsoleMux,
    /// Set by [`init`]; until then nothing is multiplexed.
    uart: Option<Uart>,
    /// Keel's waiting lines wait for each VM's output up to this position of its queue (what
    /// it had queued when the first of them was queued): see [`queue_line`].
    hold: Option<[usize; MAX_VMS]>,
}

/// The UART, taking at most [`BYTES_PER_DRAIN`] bytes and [`COMPOSES_PER_DRAIN`] lines or
/// pieces in all.
struct UartSink {
    uart: Uart,
    left: usize,
    composes: usize,
}

impl UartSink {
    fn new(uart: Uart) -> Self {
        Self {
            uart,
            left: BYTES_PER_DRAIN,
            composes: COMPOSES_PER_DRAIN,
        }
    }
}

impl Sink for UartSink {
    fn write_some(&mut self, bytes: &[u8]) -> usize {
        let take = bytes.len().min(self.left);
        let written = self.uart.write_some(&bytes[..take]);
        self.left -= written;
        written
    }

    fn may_compose(&mut self) -> bool {
        let may = self.composes > 0;
        self.composes = self.composes.saturating_sub(1);
        may
    }
}

/// All zero bytes until [`init`] (in .bss: the multiplexer's buffers take no image space).
static CONSOLE: Mutex<Console> = Mutex::new(Console {
    mux: ConsoleMux::EMPTY,
    uart: None,
    hold: None,
});

/// Rate limits of guest-triggered diagnostics, in windows of one second of counter time
/// (the window length is set by [`init`] from the counter frequency; until then windows of
/// no length, no limit, so that the limiter starts as zero bytes, in .bss).
static LIMITER: Mutex<RateLimiter> = Mutex::new(RateLimiter::new(0));
static EARLY_UART: Mutex<Option<Uart>> = Mutex::new(None);
/// The VMs' names, as [`init`] was given them.
static NAMES: cpu::Once<[&'static str; MAX_VMS]> = cpu::Once::new();

/// Uses `uart` for Keel's own messages until [`init`].
pub fn init_early(uart: Uart) {
    uart.init();
    *EARLY_UART.lock_cold() = Some(uart);
}

/// Starts multiplexing: `names[i]` is VM `i`, `has_console[i]` whether it may take input;
/// `raw_console` the VM whose output is raw while it has the input focus, which starts there.
pub fn init(uart: Uart, names: &[&'static str], has_console: &[bool], raw_console: Option<usize>) {
    uart.enable_rx_interrupt();
    LIMITER.lock_cold().set_window_ticks(timer::frequency());
    NAMES.call_once(|| {
        let mut all = ["?"; MAX_VMS];
        for (slot, name) in all.iter_mut().zip(names) {
            *slot = name;
        }
        all
    });
    let mut console = CONSOLE.lock_cold();
    console.mux.configure(names, has_console);
    if let Some(vm) = raw_console {
        console.mux.make_raw(vm);
    }
    console.uart = Some(uart);
    drop(console);
    // The console pCPU's looks begin (`main` calls this on it).
    if cpu::index() == CONSOLE_CPU {
        arm_flush_timer(false);
    }
}

/// A fixed buffer that makes one line; longer text is cut.
struct LineBuffer {
    bytes: [u8; 240],
    len: usize,
}

impl LineBuffer {
    const EMPTY: Self = Self {
        bytes: [0; 240],
        len: 0,
    };

    /// Appends `parts`.
    fn show(&mut self, parts: &[&dyn Show]) {
        for part in parts {
            part.show(self);
        }
    }

    fn text(&self) -> &[u8] {
        // `len` never exceeds the array; the `min` tells the compiler, which then leaves out
        // a bounds check (a panic call and its location in the image).
        &self.bytes[..self.len.min(self.bytes.len())]
    }
}

impl Out for LineBuffer {
    fn put_bytes(&mut self, text: &[u8]) {
        let room = self.bytes.len() - self.len;
        let take = text.len().min(room);
        at_mut(&mut self.bytes, self.len..self.len + take).copy_from_slice(&text[..take]);
        self.len += take;
    }
}

/// How Keel's lines name a VM: `vm 'name' (id N)`.
pub struct VmLabel<'a>(pub &'a str, pub usize);

impl Show for VmLabel<'_> {
    fn show(&self, out: &mut dyn Out) {
        // In parts, not from a template: the label is in lines made with interrupts masked
        // (a reset's, a power-off's), where a template's search for its places costs.
        keel_core::text!(out, "vm '", self.0, "' (id ", self.1, ")");
    }
}

/// A pCPU's bring-up, before any guest runs on it: what Keel says then (the board, the
/// configuration, the VMs' places, a boot error) the board and the configuration decide, not a
/// guest, so it is said whatever its number of lines ([`keel_println!`]). Made at each pCPU's
/// entry ([`Boot::bring_up`]) and handed to the boot code that speaks (by value: it is no byte,
/// where a reference is a register to set at each call).
#[derive(Clone, Copy)]
pub struct Boot(());

impl Boot {
    /// This pCPU's, at its bring-up: only the pCPUs' entry points in `main.rs` make one, and
    /// hand it on only to the boot code, not to what runs guests (`cargo xtask test` checks
    /// both in the source: `xtask/src/lines.rs`). No byte of the image: a check at run time
    /// (one per pCPU) cost 224 bytes.
    pub fn bring_up() -> Self {
        Boot(())
    }
}

/// The operator at the physical console: what Keel answers a `Ctrl-A` command (focus, raw, help,
/// power off) a person typed, not a guest, so it is said whatever its number of lines
/// ([`keel_println!`]). Made only from what [`receive`] read ([`Received::operator`]), in
/// `irq::console_input` (checked as [`Boot`] is).
#[derive(Clone, Copy)]
pub struct Operator(());

impl Received {
    /// Whose input this is: the physical UART's, the operator's (no guest writes to it).
    pub fn operator(&self) -> Operator {
        Operator(())
    }
}

mod sealed {
    /// Implemented only by [`super::Boot`] and [`super::Operator`].
    pub trait Sealed {}
    impl Sealed for super::Boot {}
    impl Sealed for super::Operator {}
}

/// What may say a line of Keel's without a limit ([`keel_println!`]'s first argument): a cause
/// that is not a guest's action, [`Boot`] or [`Operator`] (sealed: no other type is one). Every
/// other line names the kind and VM it is limited by ([`keel_println_limited!`]).
pub trait NotAGuest: sealed::Sealed {}
impl NotAGuest for Boot {}
impl NotAGuest for Operator {}

/// Prints one line of Keel's own made of `parts`, prefixed `[keel]`, whose `cause` is not a
/// guest's action: never limited.
#[inline(always)]
pub fn hypervisor_line(_cause: impl NotAGuest, parts: &[&dyn Show]) {
    print_line(parts);
}

/// Prints one line of Keel's own made of `parts`, prefixed `[keel]` (the caller has decided that
/// it is said: [`hypervisor_line`]'s cause, or [`limited_line`]'s limit).
fn print_line(parts: &[&dyn Show]) {
    // Made in place: a line returned by value is copied (about 100 instructions).
    let mut line = LineBuffer::EMPTY;
    line.show(parts);
    write_line(&line);
}

/// Queues `line` after the start line this pCPU may have waiting (lines stay in order).
fn write_line(line: &LineBuffer) {
    queue_pending_start(cpu::index());
    queue_line(line);
}

fn queue_line(line: &LineBuffer) {
    let text = line.text();
    let mut console = CONSOLE.lock_cold();
    if console.uart.is_some() {
        // After what the VMs have queued so far (a line about a VM comes after what it printed
        // before it): the console pCPU writes it once that output is in the multiplexer
        // ([`pull`]). Lines queued meanwhile wait with it.
        if console.hold.is_none() && queued_output() {
            let mut at = [0; MAX_VMS];
            for (position, queue) in at.iter_mut().zip(&OUTPUT) {
                *position = queue.pushed();
            }
            console.hold = Some(at);
            console.mux.hold_keel();
        }
        console.mux.hypervisor_line(text);
        drop(console);
        // Written by the console pCPU, in a masked stretch of its own ([`flush_partial`]):
        // written here, a 60-byte line cost 1,500 instructions more.
        line_queued();
    } else if let Some(uart) = *EARLY_UART.lock_cold() {
        uart.write(b"[keel] ");
        uart.write(text);
        uart.write(b"\r\n");
    }
}

/// Prints a diagnostic that VM `vm` can trigger at will, unless its kind has been printed too
/// often for that VM lately; the first line printed after some were left out says how many.
/// Returns whether it was printed.
pub fn limited_line(kind: DiagnosticKind, vm: usize, parts: &[&dyn Show]) -> bool {
    let verdict = LIMITER.lock_cold().check(kind, vm, timer::now());
    match verdict {
        Verdict::Print { suppressed: 0 } => print_line(parts),
        Verdict::Print { suppressed } => {
            let mut line = LineBuffer::EMPTY;
            line.show(parts);
            show_suppressed(&mut line, suppressed);
            write_line(&line);
        }
        Verdict::Suppress => return false,
    }
    true
}

/// How many bytes of a line made in steps ([`line_in_steps`]) are made between two of its poll
/// points: about 800 instructions of formatting.
const STEP_BYTES: usize = 48;

/// [`limited_line`] (`kind` of VM `vm`), made in steps for a caller that may serve interrupts
/// meanwhile (a health event's line, made with interrupts masked: a 180-byte restart line cost
/// 3,800 instructions in one stretch): `between` is called after each [`STEP_BYTES`] bytes made,
/// and before the line is queued. No lock is held meanwhile; the line is this call's own until
/// queued.
pub fn line_in_steps(kind: DiagnosticKind, vm: usize, parts: &[&dyn Show], between: fn()) {
    let suppressed = match LIMITER.lock_cold().check(kind, vm, timer::now()) {
        Verdict::Print { suppressed } => suppressed,
        Verdict::Suppress => return,
    };
    let mut line = LineBuffer::EMPTY;
    let mut steps = Steps {
        line: &mut line,
        made: 0,
        between,
    };
    for part in parts {
        part.show(&mut steps);
    }
    if suppressed > 0 {
        show_suppressed(&mut line, suppressed);
    }
    between();
    write_line(&line);
}

/// A line being made in steps ([`line_in_steps`]).
struct Steps<'a> {
    line: &'a mut LineBuffer,
    /// Bytes made since the last poll point.
    made: usize,
    between: fn(),
}

impl Out for Steps<'_> {
    fn put_bytes(&mut self, text: &[u8]) {
        self.line.put_bytes(text);
        self.made += text.len();
        if self.made >= STEP_BYTES {
            self.made = 0;
            (self.between)();
        }
    }
}

/// Ends a rate-limited line with how many like it were left out before it (in parts: these
/// lines are made with interrupts masked).
fn show_suppressed(line: &mut LineBuffer, suppressed: u64) {
    line.show(&[&" (", &suppressed, &" more like it suppressed)"]);
}

/// A vCPU start's line waiting for its pCPU's EL2 timer ([`start_line`]).
struct PendingStart {
    /// The VM's id + 1; 0: none waits.
    vm: AtomicUsize,
    /// Counter value at the start.
    at: AtomicU64,
    /// Lines like it left out before it.
    suppressed: AtomicU64,
}

/// Each pCPU's waiting start line, written by that pCPU only, and taken by the one powering the
/// machine off (all zeros: none, in .bss).
static PENDING_STARTS: [PendingStart; MAX_CPUS] = [const {
    PendingStart {
        vm: AtomicUsize::new(0),
        at: AtomicU64::new(0),
        suppressed: AtomicU64::new(0),
    }
}; MAX_CPUS];

/// Says that VM `vm` starts (its vCPU 0) at counter value `at`: `vm 'name' (id N) starts at
/// S.UUUUUU s`. A guest can start its vCPU 0 at will (reset, CPU_OFF and CPU_ON), so the line
/// is rate-limited. The start only records it; the line is made and queued from this pCPU's
/// EL2 timer ([`flush_partial`]), in a masked stretch of its own, and written out at the
/// next (made and written within the start, it cost about 1,500 and 1,500 instructions
/// more).
pub fn start_line(vm: usize, at: u64) {
    let suppressed = match LIMITER
        .lock_cold()
        .check(DiagnosticKind::Start, vm, timer::now())
    {
        Verdict::Print { suppressed } => suppressed,
        Verdict::Suppress => return,
    };
    let index = cpu::index();
    // One waits already (a second start within the timer's delay): it goes first.
    queue_pending_start(index);
    let pending = cpu::entry(&PENDING_STARTS, index);
    pending.at.store(at, Ordering::Relaxed);
    pending.suppressed.store(suppressed, Ordering::Relaxed);
    pending.vm.store(vm + 1, Ordering::Relaxed);
    // Due at once: the timer's interrupt is taken as the guest is entered, before its first
    // instruction, so the line's making falls in no measurement of the guest's.
    timers::set(Deadline::Console, timer::now());
}

/// Makes and queues the start line pCPU `index` has waiting, if any; whether it had one.
#[inline(never)]
fn queue_pending_start(index: usize) -> bool {
    queue_pending_start_between(index, || {})
}

/// [`queue_pending_start`], calling `between` after the line is made and before it is queued.
fn queue_pending_start_between(index: usize, between: fn()) -> bool {
    let pending = cpu::entry(&PENDING_STARTS, index);
    let Some(vm) = pending.vm.swap(0, Ordering::Relaxed).checked_sub(1) else {
        return false;
    };
    let at = pending.at.load(Ordering::Relaxed);
    let suppressed = pending.suppressed.load(Ordering::Relaxed);
    let frequency = timer::frequency().max(1);
    // The remainder is below the frequency (at most a few GHz): times 10^6 it fits 64 bits.
    let micros = at % frequency * 1_000_000 / frequency;
    // In parts, not from a template (made with interrupts masked: a template's search for
    // its places cost about 600 instructions here).
    let mut line = LineBuffer::EMPTY;
    line.show(&[
        &VmLabel(focus_name(vm), vm),
        &" starts at ",
        &(at / frequency),
        &".",
        &Decimal(micros, 6),
        &" s",
    ]);
    if suppressed > 0 {
        show_suppressed(&mut line, suppressed);
    }
    // Made and queued in two masked stretches where the caller can serve interrupts between
    // them.
    between();
    queue_line(&line);
    true
}

/// On the console pCPU, a line of Keel's just queued is written at once (its console deadline
/// now); from another pCPU it waits for that pCPU's next look ([`POLL_US`]): telling it would
/// take a device the partitions share (an SGI or the distributor).
fn line_queued() {
    if cpu::index() == CONSOLE_CPU {
        timers::set_earlier(Deadline::Console, timer::now());
    }
}

/// When a waiting partial line is written anyway (counter value; `u64::MAX`: none waits).
static PARTIAL_DUE: AtomicU64 = AtomicU64::new(u64::MAX);

fn ticks(us: u64) -> u64 {
    timer::frequency() * us / 1_000_000
}

/// Brings the console pCPU back to the console ([`flush_partial`]): soon if output is `left`
/// (cut by [`BYTES_PER_DRAIN`] or a full FIFO), at its next look ([`POLL_US`]) otherwise, and
/// by the time a waiting partial line or refused input is due ([`input_refused`]) at the
/// latest.
fn arm_flush_timer(left: bool) {
    let waiting = PARTIAL_DUE
        .load(Ordering::Relaxed)
        .min(INPUT_REPORT_DUE.load(Ordering::Relaxed));
    let after = if left { MORE_OUTPUT_DELAY_US } else { POLL_US };
    timers::set(
        Deadline::Console,
        (timer::now() + ticks(after)).min(waiting),
    );
}

/// How long after the last console input byte a VM's full queue refused the count is said: a
/// paste into a guest that does not read ends one episode, said in one line.
const INPUT_QUIET_US: u64 = 250_000;
/// How long after the first refused byte not yet said the count is said anyway, while input
/// keeps being refused: at most one line a second per VM (within the rate limit's burst).
const INPUT_REPORT_MAX_US: u64 = 1_000_000;

/// When refused console input is next said (counter value; `u64::MAX`: none waits), and
/// when the first refusal not yet said was (`u64::MAX`: none). Written by the pCPU taking
/// console input ([`input_refused`]) and by the one whose console deadline says it
/// ([`take_input_report`]).
static INPUT_REPORT_DUE: AtomicU64 = AtomicU64::new(u64::MAX);
static INPUT_REFUSALS_BEGAN: AtomicU64 = AtomicU64::new(u64::MAX);

/// A VM's full input queue refused console input just now (counted in its PL011 model):
/// the count is said [`INPUT_QUIET_US`] after the last such refusal, or [`INPUT_REPORT_MAX_US`]
/// after the first one not yet said, whichever comes first ([`take_input_report`], from this
/// pCPU's console deadline).
pub fn input_refused() {
    let now = timer::now();
    let mut began = INPUT_REFUSALS_BEGAN.load(Ordering::Relaxed);
    if began == u64::MAX {
        began = now;
        INPUT_REFUSALS_BEGAN.store(now, Ordering::Relaxed);
    }
    let due = (now + ticks(INPUT_QUIET_US)).min(began.saturating_add(ticks(INPUT_REPORT_MAX_US)));
    INPUT_REPORT_DUE.store(due, Ordering::Relaxed);
    timers::set_earlier(Deadline::Console, due);
}

/// Whether refused console input is due to be said at counter value `now` (then it is no
/// longer waiting: the caller says it, `irq::report_refused_input`). A cheap test, made at
/// each console deadline.
pub fn take_input_report(now: u64) -> bool {
    let due = INPUT_REPORT_DUE.load(Ordering::Relaxed);
    if due > now
        || INPUT_REPORT_DUE
            .compare_exchange(due, u64::MAX, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        return false;
    }
    INPUT_REFUSALS_BEGAN.store(u64::MAX, Ordering::Relaxed);
    true
}

/// The UART, waited for as needed.
struct Blocking(Uart);

impl Sink for Blocking {
    fn write_some(&mut self, bytes: &[u8]) -> usize {
        self.0.write(bytes);
        bytes.len()
    }
}

/// The machine is about to power off: everything still queued is written out, waiting for
/// the UART as needed (nothing runs any more that this could delay).
pub fn flush_before_power_off() {
    for index in 0..MAX_CPUS {
        queue_pending_start(index);
    }
    let mut console = CONSOLE.lock_cold();
    if let Some(uart) = console.uart {
        // The multiplexer's buffers are empty after each flush: the queues' bytes fit (a
        // bound all the same: the queues' size over a pull's least progress, and more).
        for _ in 0..4 * MAX_VMS * OUTPUT_QUEUE {
            let pulled = pull(&mut console, usize::MAX);
            let _ = console.mux.flush_partial(&mut Blocking(uart));
            if pulled == 0 && console.hold.is_none() {
                break;
            }
        }
    }
}

/// Prints a line from the panic path without waiting for a lock that may never be released.
pub fn emergency_line(parts: &[&dyn Show]) {
    let mut line = LineBuffer::EMPTY;
    line.show(parts);
    let mut raw_last = false;
    let uart = CONSOLE
        .try_lock()
        .and_then(|mut console| {
            // Keel's lines queued before this one come first (held ones too: the VMs' output
            // they wait for is not written here).
            let uart = console.uart?;
            console.hold = None;
            console.mux.release_keel();
            let _ = console.mux.flush_partial(&mut Blocking(uart));
            raw_last = console.mux.raw_output_last();
            Some(uart)
        })
        .or_else(|| *EARLY_UART.try_lock()?);
    if let Some(uart) = uart {
        if raw_last {
            uart.write(TERMINAL_RESET);
        }
        uart.write(b"\r\n[keel] ");
        uart.write(line.text());
        uart.write(b"\r\n");
    }
}

/// One byte VM `vm` wrote to its console: queued for the console pCPU (refused and counted if
/// its queue is full), never waiting for anyone. The caller holds the VM's PL011 lock: the
/// VM's vCPUs are its queue's one producer, one at a time.
pub fn vm_output(vm: usize, byte: u8) {
    if let Some(queue) = OUTPUT.get(vm) {
        queue.push(byte);
    }
}

/// Whether VM `vm`'s output queue is full (its PL011 reads TXFF).
pub fn output_full(vm: usize) -> bool {
    OUTPUT.get(vm).is_some_and(OutputQueue::is_full)
}

/// VM `vm` restarts: the line it was writing ends here, so that its next boot's output begins
/// a line of its own. Only queued (a step of a reload, its vCPUs stopped: no other producer).
pub fn end_vm_line(vm: usize) {
    if let Some(queue) = OUTPUT.get(vm) {
        queue.end_line();
    }
}

/// Moves at most `budget` bytes of the VMs' output queues into the multiplexer, round robin
/// from [`PULL_NEXT`], and no further than a hold of Keel's lines ([`queue_line`]), which ends
/// once every VM's output is in; returns how many.
fn pull(console: &mut Console, budget: usize) -> usize {
    let count = console.mux.vm_count().min(MAX_VMS);
    let first = PULL_NEXT.load(Ordering::Relaxed);
    let mut left = budget;
    for step in 0..count {
        let vm = (first + step) % count;
        let queue = &OUTPUT[vm];
        // Looked at whether or not bytes wait, and not a reason to come back sooner: a count
        // waiting out its second is taken by the first look after it.
        if queue.refused() > 0 {
            refused_output(&mut console.mux, vm, queue);
        }
        if !queue.has_work() {
            continue;
        }
        let limit = console
            .hold
            .map_or(usize::MAX, |at| at[vm].wrapping_sub(queue.taken()));
        left -= console.mux.pull(vm, queue, left.min(limit));
        if left == 0 {
            PULL_NEXT.store((vm + 1) % count, Ordering::Relaxed);
            break;
        }
    }
    if let Some(at) = console.hold {
        if OUTPUT[..count]
            .iter()
            .zip(at)
            .all(|(queue, at)| queue.taken() == at)
        {
            console.hold = None;
            console.mux.release_keel();
        }
    }
    budget - left
}

/// How long a VM's count of refused output bytes is gathered before it is said again: one
/// line a second at most per VM (a guest that writes without looking at TXFF would have one
/// every pull).
const REFUSED_REPORT_US: u64 = 1_000_000;

/// When each VM's refused output was last said (counter value; 0: never).
static REFUSED_SAID: [AtomicU64; MAX_VMS] = [const { AtomicU64::new(0) }; MAX_VMS];

/// Hands VM `vm`'s count of refused output bytes to the multiplexer, which says it
/// (`console output full: N bytes dropped`), unless it said one less than
/// [`REFUSED_REPORT_US`] ago: the count then grows in the queue until it may.
fn refused_output(mux: &mut ConsoleMux, vm: usize, queue: &OutputQueue) {
    let now = timer::now();
    let said = &REFUSED_SAID[vm];
    let last = said.load(Ordering::Relaxed);
    if last == 0 || now.saturating_sub(last) >= ticks(REFUSED_REPORT_US) {
        said.store(now.max(1), Ordering::Relaxed);
        mux.add_dropped(vm, queue.take_refused());
    }
}

/// Whether a VM's output queue holds anything for the console pCPU.
fn queued_output() -> bool {
    OUTPUT.iter().any(OutputQueue::has_work)
}

/// The EL2 timer's console deadline on this pCPU. A vCPU start's line waiting is made and
/// queued, with `between` called between its making and its queueing (the caller's poll
/// point, see `irq::hyp_timer`): returns whether it was. Otherwise, on the console pCPU: the
/// VMs' queued output is moved into the multiplexer, `between` is called, and what the UART
/// takes is written (waiting partial lines too, once due); the deadline comes back while
/// output waits.
/// Kept out of line: inlined into the interrupt loop, its constants were hoisted into the
/// virtual timer's path (10 instructions more per timer interrupt).
#[inline(never)]
pub fn flush_partial(between: fn()) -> bool {
    let index = cpu::index();
    if queue_pending_start_between(index, between) {
        return true;
    }
    if index != CONSOLE_CPU {
        return false;
    }
    let pulled = pull(&mut CONSOLE.lock_cold(), PULL_PER_STEP);
    if pulled > 0 {
        between();
    }
    let mut console = CONSOLE.lock_cold();
    let Some(uart) = console.uart else {
        return false;
    };
    let mut sink = UartSink::new(uart);
    let now = timer::now();
    let due = PARTIAL_DUE.load(Ordering::Relaxed) <= now;
    let left = if due && console.mux.partial_waiting() {
        PARTIAL_DUE.store(u64::MAX, Ordering::Relaxed);
        console.mux.flush_partial(&mut sink)
    } else {
        if due {
            PARTIAL_DUE.store(u64::MAX, Ordering::Relaxed);
        }
        console.mux.drain(&mut sink)
    };
    let queued = queued_output();
    if !console.mux.partial_waiting() {
        PARTIAL_DUE.store(u64::MAX, Ordering::Relaxed);
    } else if pulled > 0 && !queued {
        // Restarted by each output: a partial line is written once output has paused (not
        // while a pull has only cut a line that is still queued).
        PARTIAL_DUE.store(now + ticks(PARTIAL_LINE_DELAY_US), Ordering::Relaxed);
    }
    drop(console);
    arm_flush_timer(left || queued);
    false
}

/// What the physical receive interrupt produced, for the caller to carry out once the
/// console lock is released.
pub struct Received {
    /// Decisions for each byte read.
    pub inputs: [Input; 32],
    /// How many are valid.
    pub count: usize,
}

/// Drains the physical UART's receive FIFO through the multiplexer.
pub fn receive() -> Received {
    let mut received = Received {
        inputs: [Input::Nothing; 32],
        count: 0,
    };
    let mut console = CONSOLE.lock_cold();
    let Some(uart) = console.uart else {
        return received;
    };
    while received.count < received.inputs.len() {
        let Some(byte) = uart.read() else {
            break;
        };
        received.inputs[received.count] = console.mux.input(byte);
        received.count += 1;
    }
    received
}

/// Name of VM `vm` as the console shows it (read without a lock: set once by [`init`]).
#[inline(never)]
pub fn focus_name(vm: usize) -> &'static str {
    NAMES
        .get()
        .and_then(|names| names.get(vm).copied())
        .unwrap_or("?")
}

/// Prints a diagnostic a guest can trigger at will, rate-limited per kind and VM, made of its
/// parts (each a [`Show`]: a string, an integer, a [`keel_core::text::Hex`], an error), or of a
/// template and its parts as [`keel_println!`]'s:
/// `keel_println_limited!(DiagnosticKind::Smc, vm, "vm '", name, "': ...")`.
#[macro_export]
macro_rules! keel_println_limited {
    ($kind:expr, $vm:expr, $template:literal; $($arg:expr),* $(,)?) => {
        $crate::console::limited_line(
            $kind,
            $vm,
            &[&keel_core::text::Fill($template, &[$(&$arg as &dyn keel_core::text::Show),*])],
        )
    };
    ($kind:expr, $vm:expr, $($part:expr),+ $(,)?) => {
        $crate::console::limited_line(
            $kind,
            $vm,
            &[$(&$part as &dyn keel_core::text::Show),+],
        )
    };
}

/// Prints a line of Keel's own that no guest can cause, never limited: its cause first (a
/// [`Boot`] or an [`Operator`], see [`NotAGuest`]), then its parts (each a [`Show`]: a string, an
/// integer, a [`keel_core::text::Hex`], a [`VmLabel`], an error):
/// `keel_println!(boot, "no VM configured: powering off")`; or a template and the parts its
/// `{}` stand for ([`keel_core::text::Fill`]), smaller for a line with several pieces of text:
/// `keel_println!(boot, "vm '{}': {} MiB"; name, size)`. A line a guest's action can cause is
/// [`keel_println_limited!`]'s. Where each is used, `cargo xtask test` checks
/// (`xtask/src/lines.rs`).
#[macro_export]
macro_rules! keel_println {
    ($cause:expr, $template:literal; $($arg:expr),* $(,)?) => {
        $crate::console::hypervisor_line($cause, &[&keel_core::text::Fill(
            $template,
            &[$(&$arg as &dyn keel_core::text::Show),*],
        )])
    };
    ($cause:expr, $($part:expr),+ $(,)?) => {
        $crate::console::hypervisor_line($cause, &[$(&$part as &dyn keel_core::text::Show),+])
    };
}

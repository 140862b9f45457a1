//! The console multiplexer: VMs' output lines onto one physical UART with a per-VM prefix,
//! and physical input routed to the VM that has the focus.
//!
//! Output: each VM's bytes go into a bounded buffer of its own ([`VM_BUFFER`] bytes); a full
//! buffer refuses bytes of that VM only, counts them, and Keel reports the count. The UART
//! is fed by [`ConsoleMux::drain`], which writes only what the UART takes without waiting
//! (the caller holds its lock for bounded work, never across a wait on the device) and picks
//! whole lines: Keel's own first, then one line per VM in turn, so a VM that prints flat out
//! gets its share and no more. Lines of different VMs never interleave mid-line. A partial
//! line (a shell prompt) is written when the hypervisor calls [`ConsoleMux::flush_partial`]
//! (from a short timer); its continuation is then appended without a new prefix unless
//! something else was written in between.
//!
//! Nothing a VM prints can pass for another's line or Keel's: control characters (CR not
//! followed by LF, ESC, BS, ...) are shown escaped as `\xNN`, so a guest cannot move the
//! cursor back over a prefix or print escape sequences. A raw VM's bytes go through unchanged
//! (for an interactive shell's line editing and colours; other VMs stay escaped), but only
//! while it has the input focus: a VM made raw by its configuration
//! ([`ConsoleMux::make_raw`]) is raw each time it gets the focus, and `Ctrl-A r` turns raw
//! output on or off for the focused VM until the focus leaves it. What a raw VM queued before
//! it stopped being raw is written before anything else (so a Keel line saying that raw output
//! ended comes after all of it), and whatever follows a raw VM's output (a Keel line, another
//! VM's) is preceded by [`TERMINAL_RESET`] and starts on a line of its own.
//!
//! Input: `Ctrl-A` is the escape key. `Ctrl-A 0`..`9` gives the focus to that VM,
//! `Ctrl-A n` to the next VM, `Ctrl-A r` toggles raw output for the focused VM, `Ctrl-A x`
//! powers the machine off, `Ctrl-A ?` prints help, and `Ctrl-A Ctrl-A` sends one `Ctrl-A` to
//! the focused VM.

use crate::console_queue::{OutputQueue, Step};
use crate::table::{at, at_mut, Table};

/// Most VMs the multiplexer serves.
pub const MAX_VMS: usize = 16;
const _: () = assert!(
    MAX_VMS <= u32::BITS as usize,
    "ConsoleMux::raw_tails has a bit per VM"
);
/// Longest line piece: longer lines are written in pieces of this many shown bytes.
pub const LINE_CAPACITY: usize = 256;
/// Bytes of output each VM may have waiting for the UART.
pub const VM_BUFFER: usize = 2048;
/// Bytes of a VM's line composed for the UART at a time: Keel does it with interrupts
/// masked, and a whole 256-byte line in one go was about 3,000 instructions (a trap of
/// Linux's console that ended a long line).
pub const PIECE: usize = 64;
/// Room a VM's buffer keeps for one byte pulled from its queue ([`ConsoleMux::pull`]): a held
/// CR and the byte, both escaped (`\xNN`), and a piece's end.
const ROOM_PER_BYTE: usize = 4 + 4 + 1;
/// Bytes of Keel's own lines that may wait for the UART.
pub const KEEL_BUFFER: usize = 4096;
/// Longest VM name shown in a prefix.
const NAME_MAX: usize = 32;
/// The escape key, Ctrl-A.
pub const ESCAPE: u8 = 0x01;
/// Written after a raw VM's output, before any line of another source (ECMA-48 and the DEC
/// VT parsers): CAN cancels an escape sequence or control string the VM left open, SGR 0
/// (`ESC [ 0 m`) resets the attributes (colours, concealed or reverse text), SI and
/// `ESC ( B` put the ASCII character set back in use. The terminal state it leaves alone
/// (cursor position, scrolling region, palette, alternate screen) is what raw output gives up.
pub const TERMINAL_RESET: &[u8] = b"\x18\x1b[0m\x0f\x1b(B";

/// Where multiplexed output goes (the physical UART).
pub trait Sink {
    /// Writes as many leading bytes of `bytes` as the device takes now, without waiting;
    /// returns how many.
    fn write_some(&mut self, bytes: &[u8]) -> usize;

    /// Whether another line or piece may be composed for it in this drain (a UART written
    /// with interrupts masked bounds the work; the default: no bound).
    fn may_compose(&mut self) -> bool {
        true
    }
}

/// What to do with one byte of physical input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// Hand the byte to this VM's console.
    Deliver {
        /// Index of the VM.
        vm: usize,
        /// The byte.
        byte: u8,
    },
    /// The focus moved to this VM.
    Focus(usize),
    /// Raw output was turned on (true) or off (false) for this VM.
    Raw(usize, bool),
    /// The user asked to power the machine off.
    PowerOff,
    /// The user asked for help.
    Help,
    /// Nothing to do (escape key pressed, or an unknown escape sequence).
    Nothing,
}

/// A bounded byte queue over `bytes`: `Ring<[u8; N]>` holds it, and its methods are those of
/// `Ring<[u8]>` (reached through `Deref`), compiled once for every size of queue.
#[derive(Clone, Copy)]
struct Ring<B: ?Sized> {
    head: usize,
    len: usize,
    bytes: B,
}

impl<const N: usize> Ring<[u8; N]> {
    const EMPTY: Self = Self {
        head: 0,
        len: 0,
        bytes: [0; N],
    };
}

impl<const N: usize> core::ops::Deref for Ring<[u8; N]> {
    type Target = Ring<[u8]>;

    fn deref(&self) -> &Ring<[u8]> {
        self
    }
}

impl<const N: usize> core::ops::DerefMut for Ring<[u8; N]> {
    fn deref_mut(&mut self) -> &mut Ring<[u8]> {
        self
    }
}

impl Ring<[u8]> {
    fn room(&self) -> usize {
        self.bytes.len() - self.len
    }

    /// `head + count` wrapped to the array (both below its length: one subtraction, no
    /// division).
    fn wrap(&self, at: usize) -> usize {
        if at >= self.bytes.len() {
            at - self.bytes.len()
        } else {
            at
        }
    }

    /// Appends one byte, which fits (the caller checked the room).
    fn push_one(&mut self, byte: u8) {
        let tail = self.wrap(self.head + self.len);
        if let Some(slot) = self.bytes.get_mut(tail) {
            *slot = byte;
            self.len += 1;
        }
    }

    /// Appends `bytes` whole, or nothing if they do not fit.
    fn push(&mut self, bytes: &[u8]) -> bool {
        if bytes.len() > self.room() {
            return false;
        }
        let tail = self.wrap(self.head + self.len);
        let to_end = bytes.len().min(self.bytes.len() - tail);
        at_mut(&mut self.bytes, tail..tail + to_end).copy_from_slice(&bytes[..to_end]);
        at_mut(&mut self.bytes, ..bytes.len() - to_end).copy_from_slice(&bytes[to_end..]);
        self.len += bytes.len();
        true
    }

    /// [`next_line`](Self::next_line) for an `out.len()`-byte buffer, moved into `out` (the
    /// tests' view of the two).
    #[cfg(test)]
    fn pop_line(&mut self, out: &mut [u8], partial: bool) -> Option<(usize, bool)> {
        let (count, complete) = self.next_line(out.len(), partial)?;
        self.pop_into(out, count);
        Some((count, complete))
    }

    /// How many of the queued bytes make the next line or piece for a `max`-byte buffer: up to
    /// and including the first `\n` among the first `max`; with none, `max` if that many are
    /// queued (a piece of a longer line), else all of them if `partial`, else nothing. Also
    /// whether they end a line. Nothing is moved: the caller moves them with
    /// [`pop_into`](Self::pop_into) where they are to go, copied once. The work is bounded by
    /// `max`, whatever the line's length.
    fn next_line(&self, max: usize, partial: bool) -> Option<(usize, bool)> {
        // The bytes in order are two runs of the array (from `head`, then from its start):
        // searched run by run, not byte by byte modulo N (Keel does this with interrupts
        // masked).
        let window = self.len.min(max);
        let (first, second) = self.runs();
        let in_first = window.min(first.len());
        let newline = find_newline(&first[..in_first])
            .or_else(|| find_newline(at(second, ..window - in_first)).map(|i| in_first + i));
        match newline {
            Some(i) => Some((i + 1, true)),
            None if window > 0 && window == max => Some((window, false)),
            None if partial && window > 0 => Some((window, false)),
            None => None,
        }
    }

    /// Removes the first `count` queued bytes (at most the queue's length), copying as many
    /// of them as fit into `out`, run by run; returns how many were copied.
    fn pop_into(&mut self, out: &mut [u8], count: usize) -> usize {
        let count = count.min(self.len);
        let copied = count.min(out.len());
        let (first, second) = self.runs();
        let from_first = copied.min(first.len());
        out[..from_first].copy_from_slice(&first[..from_first]);
        at_mut(out, from_first..copied).copy_from_slice(at(second, ..copied - from_first));
        self.head = self.wrap(self.head + count);
        self.len -= count;
        copied
    }

    /// The queued bytes in order, as two runs of the array.
    fn runs(&self) -> (&[u8], &[u8]) {
        let end = self.head + self.len;
        if end <= self.bytes.len() {
            (at(&self.bytes, self.head..end), &[])
        } else {
            (
                at(&self.bytes, self.head..),
                at(&self.bytes, ..end - self.bytes.len()),
            )
        }
    }
}

/// A byte as the console shows it: itself if printable (tab and bytes of UTF-8 sequences
/// included), else `\xNN`.
struct Escaped {
    bytes: [u8; 4],
    len: usize,
}

impl Escaped {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Whether `byte` is shown as itself: printable, a tab, or a byte of a UTF-8 sequence.
fn shown_as_is(byte: u8) -> bool {
    byte == b'\t' || (0x20..0x7f).contains(&byte) || byte >= 0x80
}

/// Whether every byte of `text` is [`shown_as_is`], eight bytes per test where none is
/// below 0x20 or 0x7f (a word with one, a tab maybe, is looked at byte by byte): Keel checks
/// each of its own lines so, with interrupts masked, and a byte at a time it cost a 90-byte
/// line about 650 instructions.
fn all_shown_as_is(text: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let mut chunks = text.chunks_exact(8);
    for chunk in &mut chunks {
        let Ok(bytes) = <[u8; 8]>::try_from(chunk) else {
            return false;
        };
        let word = u64::from_le_bytes(bytes);
        // A byte below 0x20 (bytes from 0x80 up never count), and a byte equal to 0x7f: the
        // borrow of a subtraction only reaches a byte's top bit through such a byte, so the
        // answer (any or none) is exact.
        let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
        let delete = word ^ (ONES * 0x7f);
        let is_delete = delete.wrapping_sub(ONES) & !delete & HIGHS;
        if below_space | is_delete != 0 && !chunk.iter().all(|&byte| shown_as_is(byte)) {
            return false;
        }
    }
    chunks.remainder().iter().all(|&byte| shown_as_is(byte))
}

fn escape(byte: u8) -> Escaped {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if shown_as_is(byte) {
        Escaped {
            bytes: [byte, 0, 0, 0],
            len: 1,
        }
    } else {
        Escaped {
            bytes: [
                b'\\',
                b'x',
                HEX[usize::from(byte >> 4)],
                HEX[usize::from(byte & 0xf)],
            ],
            len: 4,
        }
    }
}

/// One VM's output on its way to the UART.
#[derive(Clone, Copy)]
struct VmOutput {
    /// Shown bytes; `\n` ends a line.
    waiting: Ring<[u8; VM_BUFFER]>,
    /// Lines (`\n`) in `waiting`.
    complete: usize,
    /// Shown bytes of the line being written, since its last piece ended.
    line_len: usize,
    /// A CR was written and is held to see whether LF follows (CR LF is a line end).
    cr_pending: bool,
    /// Its bytes go through unescaped (only ever while it has the focus).
    raw: bool,
    /// It is raw each time it gets the focus (its configuration's `console = { raw = true }`).
    raw_when_focused: bool,
    /// How many of the bytes in `waiting`, from the first, reach up to the last one queued
    /// raw (0: none queued raw is waiting).
    raw_end: usize,
    /// Bytes refused because `waiting` was full, not yet reported.
    dropped: u64,
}

impl VmOutput {
    const EMPTY: Self = Self {
        waiting: Ring::EMPTY,
        complete: 0,
        line_len: 0,
        cr_pending: false,
        raw: false,
        raw_when_focused: false,
        raw_end: 0,
        dropped: 0,
    };

    /// Queues one byte as the console shows it; false if it was refused (buffer full).
    fn push_byte(&mut self, byte: u8) -> bool {
        if self.cr_pending {
            self.cr_pending = false;
            if byte == b'\n' {
                return self.end_line();
            }
            if !self.push_shown(b'\r') {
                return false;
            }
        }
        match byte {
            b'\n' => self.end_line(),
            b'\r' => {
                self.cr_pending = true;
                true
            }
            _ => self.push_shown(byte),
        }
    }

    /// Ends the line being written, if any, for a restart (a held CR is forgotten); false if
    /// the buffer is full (the end is then refused and counted, as a byte would be).
    fn end_line_for_restart(&mut self) -> bool {
        self.cr_pending = false;
        if self.line_len == 0 {
            return true;
        }
        let ended = self.end_line();
        if !ended {
            self.dropped += 1;
        }
        ended
    }

    fn end_line(&mut self) -> bool {
        if self.waiting.push(b"\n") {
            self.complete += 1;
            self.line_len = 0;
            true
        } else {
            false
        }
    }

    /// Queues `byte` shown: itself if printable (or raw), else escaped as `\xNN`; a piece
    /// that reaches [`LINE_CAPACITY`] is ended.
    fn push_shown(&mut self, byte: u8) -> bool {
        // Most bytes go as they are, one byte stored (a pull moves them with interrupts masked;
        // escaped or copied as a slice, a byte cost about 100 instructions).
        let escaped;
        let shown: &[u8] = if self.raw || shown_as_is(byte) {
            core::slice::from_ref(&byte)
        } else {
            escaped = escape(byte);
            escaped.as_slice()
        };
        // Room for the piece's end too, so a split never fails half-way.
        if shown.len() + 1 > self.waiting.room() {
            return false;
        }
        if let [one] = shown {
            self.waiting.push_one(*one);
        } else {
            self.waiting.push(shown);
        }
        if self.raw {
            self.raw_end = self.waiting.len;
        }
        self.line_len += shown.len();
        if self.line_len >= LINE_CAPACITY {
            self.end_line();
        }
        true
    }
}

/// The multiplexer's state.
pub struct ConsoleMux {
    /// `None` beyond `count` (and all `None` in [`ConsoleMux::EMPTY`], which is all zero
    /// bytes, so that a static multiplexer costs no image space).
    names: [Option<&'static str>; MAX_VMS],
    has_console: Table<bool, MAX_VMS>,
    count: usize,
    focus: usize,
    escape_pending: bool,
    vms: Table<VmOutput, MAX_VMS>,
    /// Keel's own lines (each ending in `\n`).
    keel: Ring<[u8; KEEL_BUFFER]>,
    /// Keel's lines refused because `keel` was full.
    keel_dropped: u64,
    /// The VM whose partial line is open on the UART (written without its line end yet): its
    /// next bytes continue that line without a prefix.
    open: Option<usize>,
    /// The VM whose line is being composed a [`PIECE`] at a time: its next piece comes
    /// before anything else, so that nothing comes between the pieces of a line.
    continuing: Option<usize>,
    /// The VM served next, for round-robin fairness.
    next_vm: usize,
    /// Bit `vm` set: VM `vm` is no longer raw but bytes it queued raw still wait; they are
    /// written before anything else.
    raw_tails: u32,
    /// The VM whose raw output was written last with no [`TERMINAL_RESET`] after it yet.
    raw_on_screen: Option<usize>,
    /// Partial lines are to be written out.
    flush_requested: bool,
    /// Keel's lines wait: output the VMs queued before the first of them is not all in the
    /// VMs' buffers yet ([`hold_keel`](Self::hold_keel)).
    keel_held: bool,
    /// Complete lines of each VM that go before Keel's waiting lines
    /// ([`release_keel`](Self::release_keel)).
    before_keel: Table<usize, MAX_VMS>,
    /// The line being written to the UART.
    out: OutLine,
}

/// The bytes of one line on their way to the UART, and how many of them are written.
struct OutLine {
    bytes: Table<u8, { 2 + TERMINAL_RESET.len() + 1 + NAME_MAX + 2 + LINE_CAPACITY + 8 + 2 }>,
    len: usize,
    sent: usize,
}

impl OutLine {
    const EMPTY: Self = Self {
        bytes: Table([0; 2 + TERMINAL_RESET.len() + 1 + NAME_MAX + 2 + LINE_CAPACITY + 8 + 2]),
        len: 0,
        sent: 0,
    };

    /// Appends `bytes` (truncated to what fits).
    fn put(&mut self, bytes: &[u8]) {
        let take = bytes.len().min(self.bytes.len() - self.len);
        self.bytes[self.len..self.len + take].copy_from_slice(&bytes[..take]);
        self.len += take;
    }

    /// Appends the first `count` bytes queued in `ring`, moved straight from it (truncated
    /// to what fits; all `count` leave the ring).
    fn put_from(&mut self, ring: &mut Ring<[u8]>, count: usize) {
        self.len += ring.pop_into(&mut self.bytes[self.len..], count);
    }

    /// Appends a line's last `count` bytes from `ring` (its `\n` last), ended `\r\n`.
    fn put_line_end(&mut self, ring: &mut Ring<[u8]>, count: usize) {
        self.put_from(ring, count - 1);
        ring.pop_into(&mut [], 1);
        self.put(b"\r\n");
    }

    /// Writes what `sink` takes; whether all of the line is written.
    fn write_to(&mut self, sink: &mut impl Sink) -> bool {
        if self.sent < self.len {
            let written = sink.write_some(&self.bytes[self.sent..self.len]);
            self.sent += written.min(self.len - self.sent);
        }
        if self.sent < self.len {
            return false;
        }
        self.len = 0;
        self.sent = 0;
        true
    }
}

/// Where the first `\n` of `bytes` is: eight bytes at a time (a line is searched with
/// interrupts masked at EL2, where a byte at a time cost 6 instructions a byte, 1,100 for a
/// 180-byte line; eight at a time cost under 4 a byte, though Keel's target, without unaligned
/// loads, loads them one by one; one copy for both runs of the ring). A byte of `word ^ pattern` is zero where `word` has a `\n`; `(x - 0x01..)
/// & !x & 0x80..` sets the top bit of each zero byte of `x`, exactly for the lowest one (a
/// borrow only reaches the bytes above it), which is the first in little-endian order.
#[inline(never)]
fn find_newline(bytes: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const TOPS: u64 = 0x8080_8080_8080_8080;
    const PATTERN: u64 = ONES * b'\n' as u64;
    let mut words = bytes.chunks_exact(8);
    let mut base = 0;
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        let x = u64::from_le_bytes(eight) ^ PATTERN;
        let zero = x.wrapping_sub(ONES) & !x & TOPS;
        if zero != 0 {
            return Some(base + (zero.trailing_zeros() / 8) as usize);
        }
        base += 8;
    }
    words
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| base + i)
}

impl ConsoleMux {
    /// A multiplexer for no VM, all zero bytes: for static storage, set up with
    /// [`configure`](Self::configure).
    pub const EMPTY: Self = Self {
        names: [None; MAX_VMS],
        has_console: Table([false; MAX_VMS]),
        count: 0,
        focus: 0,
        escape_pending: false,
        vms: Table([VmOutput::EMPTY; MAX_VMS]),
        keel: Ring::EMPTY,
        keel_dropped: 0,
        open: None,
        continuing: None,
        next_vm: 0,
        raw_tails: 0,
        raw_on_screen: None,
        flush_requested: false,
        keel_held: false,
        before_keel: Table([0; MAX_VMS]),
        out: OutLine::EMPTY,
    };

    /// A multiplexer for VMs named `names` (indexed by VM id); only those with
    /// `has_console[id]` can hold the focus. The focus starts on the first of them.
    pub fn new(names: &[&'static str], has_console: &[bool]) -> Self {
        let mut mux = Self::EMPTY;
        mux.configure(names, has_console);
        mux
    }

    /// Names the VMs of a multiplexer that is still [`EMPTY`](Self::EMPTY), in place (a
    /// multiplexer is too large to build on a small stack), as [`new`](Self::new) does.
    pub fn configure(&mut self, names: &[&'static str], has_console: &[bool]) {
        let count = names.len().min(MAX_VMS);
        self.count = count;
        for (slot, &name) in self.names.iter_mut().zip(&names[..count]) {
            *slot = Some(name);
        }
        for (slot, &console) in self.has_console[..count].iter_mut().zip(has_console) {
            *slot = console;
        }
        self.focus = (0..count).find(|&vm| self.has_console[vm]).unwrap_or(0);
    }

    /// Makes VM `vm`'s output raw whenever it has the input focus (its configuration's
    /// `console = { raw = true }`: the system's interactive VM), and gives it the focus. Nothing
    /// if it has no console.
    pub fn make_raw(&mut self, vm: usize) {
        if vm < self.count && self.has_console[vm] {
            self.vms[vm].raw_when_focused = true;
            self.set_focus(vm);
            self.set_raw(vm, true);
        }
    }

    /// Whether VM `vm`'s output goes through unescaped now.
    pub fn is_raw(&self, vm: usize) -> bool {
        self.vms[..self.count]
            .get(vm)
            .is_some_and(|output| output.raw)
    }

    /// Whether the last output written was a raw VM's, with no [`TERMINAL_RESET`] after it yet
    /// (for a line written past the multiplexer, on the panic path).
    pub fn raw_output_last(&self) -> bool {
        self.raw_on_screen.is_some()
    }

    /// The VM that receives input.
    pub fn focus(&self) -> usize {
        self.focus
    }

    /// Name of a VM.
    pub fn name(&self, vm: usize) -> &'static str {
        self.names.get(vm).copied().flatten().unwrap_or("?")
    }

    /// Bytes of VM `vm` refused so far because its buffer was full and not yet reported.
    pub fn dropped(&self, vm: usize) -> u64 {
        self.vms.get(vm).map_or(0, |output| output.dropped)
    }

    /// One byte of VM output, queued (never waiting for the UART): false if VM `vm`'s buffer
    /// is full and the byte was refused (counted and reported later). Call [`drain`](Self::drain)
    /// after. A partial line waits for [`flush_partial`](Self::flush_partial) (see
    /// [`partial_waiting`](Self::partial_waiting)).
    pub fn output(&mut self, vm: usize, byte: u8) -> bool {
        let Some(output) = self.vms[..self.count].get_mut(vm) else {
            return false;
        };
        let accepted = output.push_byte(byte);
        if !accepted {
            output.dropped += 1;
        }
        accepted
    }

    /// Ends VM `vm`'s line being written, if any (it restarts: its next output begins a line
    /// of its own); false if its buffer is full (the end is then refused and counted, as a
    /// byte would be).
    pub fn end_line(&mut self, vm: usize) -> bool {
        self.vms[..self.count]
            .get_mut(vm)
            .is_some_and(VmOutput::end_line_for_restart)
    }

    /// Moves at most `max` bytes VM `vm` queued ([`OutputQueue`]) into its buffer, as [`output`]
    /// queues them, while they surely fit (the rest waits in the queue: nothing is refused
    /// here), with the line ends its restarts asked for. Returns how many bytes were moved.
    /// (The bytes the queue refused are the caller's to report: [`add_dropped`].)
    ///
    /// [`add_dropped`]: Self::add_dropped
    ///
    /// [`output`]: Self::output
    pub fn pull(&mut self, vm: usize, queue: &OutputQueue, max: usize) -> usize {
        let Some(output) = self.vms[..self.count].get_mut(vm) else {
            return 0;
        };
        queue.take(max, |step| {
            if output.waiting.room() < ROOM_PER_BYTE {
                return false;
            }
            match step {
                Step::Byte(byte) => output.push_byte(byte),
                Step::EndLine => output.end_line_for_restart(),
            };
            true
        })
    }

    /// Adds `count` bytes of VM `vm` refused before the multiplexer (its full output queue) to
    /// the count of its dropped bytes that the next line of Keel's about it reports.
    pub fn add_dropped(&mut self, vm: usize, count: u64) {
        if let Some(output) = self.vms[..self.count].get_mut(vm) {
            output.dropped = output.dropped.saturating_add(count);
        }
    }

    /// Keel's lines wait, from now, until [`release_keel`](Self::release_keel): the caller
    /// (queueing one of Keel's lines) has output of VMs that is older, still in their queues.
    pub fn hold_keel(&mut self) {
        self.keel_held = true;
    }

    /// The VMs' output older than Keel's waiting lines is all in their buffers now: each VM's
    /// complete lines there are written before Keel's next line (a line of Keel's about a VM
    /// comes after what the VM printed before it, not before).
    pub fn release_keel(&mut self) {
        self.keel_held = false;
        for vm in 0..self.count {
            self.before_keel[vm] = self.vms[vm].complete;
        }
    }

    /// How many VMs the multiplexer serves.
    pub fn vm_count(&self) -> usize {
        self.count
    }

    /// Whether some VM has a partial line waiting for [`flush_partial`](Self::flush_partial).
    pub fn partial_waiting(&self) -> bool {
        self.vms[..self.count]
            .iter()
            .any(|output| output.waiting.len > 0 && output.complete == 0)
    }

    /// Asks for every VM's partial line to be written out (called a short while after output
    /// stopped), then drains.
    pub fn flush_partial(&mut self, sink: &mut impl Sink) -> bool {
        self.flush_requested = true;
        self.drain(sink)
    }

    /// Queues one line of Keel's own, shown prefixed `[keel]`; false if Keel's buffer is full
    /// (the line is counted and the count reported once there is room).
    pub fn hypervisor_line(&mut self, text: &[u8]) -> bool {
        // Most lines have nothing to escape and fit: queued as they are (Keel does this with
        // interrupts masked; the byte-by-byte escaping below costs about 1,500 instructions
        // for a 60-byte line).
        if text.len() < LINE_CAPACITY && all_shown_as_is(text) {
            if text.len() + 1 > self.keel.room() {
                self.keel_dropped += 1;
                return false;
            }
            self.keel.push(text);
            self.keel.push(b"\n");
            return true;
        }
        // Shown as VM text is (control characters escaped), so that nothing a message
        // quotes can break its line; cut at the line capacity.
        let mut shown = [0u8; LINE_CAPACITY + 1];
        let mut len = 0;
        for &byte in text {
            let escaped = escape(byte);
            let bytes = escaped.as_slice();
            if len + bytes.len() > LINE_CAPACITY {
                break;
            }
            shown[len..len + bytes.len()].copy_from_slice(bytes);
            len += bytes.len();
        }
        shown[len] = b'\n';
        if !self.keel.push(&shown[..=len]) {
            self.keel_dropped += 1;
            return false;
        }
        true
    }

    /// Writes to `sink` what it takes without waiting, whole lines at a time as far as it
    /// takes them: Keel's lines first, then each VM's in turn. Returns whether output still
    /// waits (the caller drains again later, e.g. from a timer).
    pub fn drain(&mut self, sink: &mut impl Sink) -> bool {
        loop {
            if !self.out.write_to(sink) || !sink.may_compose() {
                return true;
            }
            if !self.compose_next() {
                return false;
            }
        }
    }

    /// Before a line of Keel's (`for_vm` None) or of VM `for_vm`: resets the terminal if another
    /// source's raw output came last (before the line end, so that CAN has ended any sequence
    /// left open first), and closes an open partial line of another VM.
    fn start_fresh_line(&mut self, for_vm: Option<usize>) {
        if self.raw_on_screen.is_some() && self.raw_on_screen != for_vm {
            self.out.put(TERMINAL_RESET);
            self.raw_on_screen = None;
        }
        if let Some(open) = self.open {
            if Some(open) != for_vm {
                self.out.put(b"\r\n");
                self.open = None;
            }
        }
    }

    /// Puts the next line to write, or the next [`PIECE`] of a VM's line, into `out`; false
    /// if nothing waits.
    fn compose_next(&mut self) -> bool {
        // Lines and pieces go from their queue straight into `out` (no buffer in between:
        // Keel composes with interrupts masked).
        if let Some(vm) = self.continuing.take() {
            let partial = self.vms[vm].complete == 0;
            if let Some((len, complete)) = self.vms[vm].waiting.next_line(PIECE, partial) {
                self.put_piece(vm, len, complete);
                return true;
            }
        }
        if self.raw_tails != 0 {
            // What a VM queued raw before it stopped being raw, up to its last raw byte, partial
            // line or not: before Keel's lines (the one saying so among them).
            let vm = self.raw_tails.trailing_zeros() as usize;
            let max = PIECE.min(self.vms[vm].raw_end);
            if let Some((len, complete)) = self.vms[vm].waiting.next_line(max, true) {
                self.start_vm_piece(vm, len, complete);
                return true;
            }
            // Nothing waits from it after all (never so: raw_end counts queued bytes).
            self.raw_tails &= !(1 << vm);
        }
        if self.before_keel.iter().any(|&lines| lines > 0) {
            // VM lines older than Keel's waiting lines go first.
            for step in 0..self.count {
                let vm = (self.next_vm + step) % self.count;
                if self.before_keel[vm] == 0 {
                    continue;
                }
                if let Some((len, complete)) = self.vms[vm].waiting.next_line(PIECE, false) {
                    self.next_vm = (vm + 1) % self.count;
                    self.start_vm_piece(vm, len, complete);
                    return true;
                }
                self.before_keel[vm] = 0;
            }
        }
        let keel_waits = self.keel_held || self.before_keel.iter().any(|&lines| lines > 0);
        if let Some((len, _)) = self
            .keel
            .next_line(LINE_CAPACITY + 8, false)
            .filter(|_| !keel_waits)
        {
            self.start_fresh_line(None);
            self.out.put(b"[keel] ");
            self.out.put_line_end(&mut self.keel, len);
            return true;
        }
        if self.keel_dropped > 0 {
            let mut digits = [0; 20];
            let count =
                crate::text::decimal(core::mem::take(&mut self.keel_dropped), 0, &mut digits);
            self.keel_line(&[count, b" lines of Keel's own dropped (buffer full)"]);
            return true;
        }
        for step in 0..self.count {
            let vm = (self.next_vm + step) % self.count;
            if self.vms[vm].dropped > 0 && self.vms[vm].waiting.room() > 0 {
                let mut digits = [0; 20];
                let count = crate::text::decimal(
                    core::mem::take(&mut self.vms[vm].dropped),
                    0,
                    &mut digits,
                );
                let name = self.name(vm).as_bytes();
                self.keel_line(&[
                    b"vm '",
                    name,
                    b"': console output full: ",
                    count,
                    b" bytes dropped",
                ]);
                return true;
            }
            let partial = self.flush_requested;
            if self.vms[vm].complete == 0 && !partial {
                continue;
            }
            let Some((len, complete)) = self.vms[vm].waiting.next_line(PIECE, partial) else {
                continue;
            };
            self.next_vm = (vm + 1) % self.count;
            self.start_vm_piece(vm, len, complete);
            return true;
        }
        self.flush_requested = false;
        false
    }

    /// Puts the next `len` queued bytes of VM `vm`'s line into `out` after its prefix, or
    /// without one if they continue its line open on the UART.
    fn start_vm_piece(&mut self, vm: usize, len: usize, complete: bool) {
        let continuing = self.open == Some(vm);
        self.start_fresh_line(Some(vm));
        if !continuing {
            let name = self.name(vm).as_bytes();
            self.out.put(b"[");
            self.out.put(&name[..name.len().min(NAME_MAX)]);
            self.out.put(b"] ");
        }
        self.put_piece(vm, len, complete);
    }

    /// Puts the next `len` queued bytes of VM `vm`'s line into `out` as a piece: with its
    /// line end if it is the line's last (`complete`), else open, and continued first by the
    /// next call if more of the line is queued (a complete line longer than a piece, or a
    /// partial one being flushed).
    fn put_piece(&mut self, vm: usize, len: usize, complete: bool) {
        self.open = Some(vm);
        let output = &mut self.vms[vm];
        if output.raw_end > 0 {
            self.raw_on_screen = Some(vm);
            output.raw_end = output.raw_end.saturating_sub(len);
            if output.raw_end == 0 {
                self.raw_tails &= !(1 << vm);
            }
        }
        if complete {
            output.complete -= 1;
            self.before_keel[vm] = self.before_keel[vm].saturating_sub(1);
            self.out.put_line_end(&mut output.waiting, len);
            self.open = None;
        } else {
            self.out.put_from(&mut output.waiting, len);
            if output.complete > 0 || len == PIECE {
                self.continuing = Some(vm);
            } else if output.waiting.len == 0 {
                // A partial line written whole: its continuation may be a whole piece again.
                output.line_len = 0;
            }
        }
    }

    /// Puts one line of Keel's own, made of `parts`, into `out`, on a fresh line.
    fn keel_line(&mut self, parts: &[&[u8]]) {
        self.start_fresh_line(None);
        self.out.put(b"[keel] ");
        for part in parts {
            self.out.put(part);
        }
        self.out.put(b"\r\n");
    }

    /// One byte of physical input.
    pub fn input(&mut self, byte: u8) -> Input {
        if !self.escape_pending {
            if byte == ESCAPE {
                self.escape_pending = true;
                return Input::Nothing;
            }
            return self.deliver(byte);
        }
        self.escape_pending = false;
        match byte {
            ESCAPE => self.deliver(ESCAPE),
            b'0'..=b'9' => {
                let vm = (byte - b'0') as usize;
                if vm < self.count && self.has_console[vm] {
                    self.set_focus(vm);
                    Input::Focus(vm)
                } else {
                    Input::Nothing
                }
            }
            b'n' => {
                let next = (1..=self.count)
                    .map(|step| (self.focus + step) % self.count)
                    .find(|&vm| self.has_console[vm]);
                match next {
                    Some(vm) => {
                        self.set_focus(vm);
                        Input::Focus(vm)
                    }
                    None => Input::Nothing,
                }
            }
            b'r' if self.count > 0 && self.has_console[self.focus] => {
                let raw = !self.vms[self.focus].raw;
                self.set_raw(self.focus, raw);
                Input::Raw(self.focus, raw)
            }
            b'x' => Input::PowerOff,
            b'?' | b'h' => Input::Help,
            _ => Input::Nothing,
        }
    }

    /// Moves the input focus: the VM losing it leaves raw mode, the one getting it is raw if
    /// its configuration says so.
    fn set_focus(&mut self, vm: usize) {
        if vm != self.focus {
            self.set_raw(self.focus, false);
            self.set_raw(vm, self.vms[vm].raw_when_focused);
        }
        self.focus = vm;
    }

    /// Turns VM `vm`'s raw output on or off; off, what it queued raw is written before anything
    /// else.
    fn set_raw(&mut self, vm: usize, raw: bool) {
        let output = &mut self.vms[vm];
        output.raw = raw;
        if !raw && output.raw_end > 0 {
            self.raw_tails |= 1 << vm;
        } else {
            self.raw_tails &= !(1 << vm);
        }
    }

    fn deliver(&self, byte: u8) -> Input {
        if self.count > 0 && self.has_console[self.focus] {
            Input::Deliver {
                vm: self.focus,
                byte,
            }
        } else {
            Input::Nothing
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time search finds what a byte-at-a-time one finds: every length up to
    /// three words, a `\n` (or none) at each place, among bytes next to it in value (0x09,
    /// 0x0b, 0x8a: the ones a borrow or a top bit could mistake), one or two of them.
    #[test]
    fn find_newline_agrees_with_a_byte_search() {
        let mut rng = crate::rng::Rng::new(11);
        let fill = [0x00u8, 0x09, 0x0b, 0x8a, 0xff, b'a', 0x01];
        for len in 0..=24usize {
            for first in 0..=len {
                for _ in 0..8 {
                    let mut bytes: std::vec::Vec<u8> = (0..len)
                        .map(|_| fill[rng.below(fill.len() as u64) as usize])
                        .collect();
                    if first < len {
                        bytes[first] = b'\n';
                        let second = first + rng.below((len - first) as u64) as usize;
                        bytes[second] = b'\n';
                    }
                    let expected = bytes.iter().position(|&b| b == b'\n');
                    assert_eq!(find_newline(&bytes), expected, "{bytes:x?}");
                }
            }
        }
    }

    /// The ring, pushed and popped across its wrap-around, gives back exactly what went in,
    /// line by line (a model check against a plain vector).
    #[test]
    fn ring_lines_survive_wrapping() {
        let mut ring = Ring::<[u8; 16]>::EMPTY;
        let mut model: std::vec::Vec<u8> = std::vec::Vec::new();
        let mut rng = crate::rng::Rng::new(7);
        for _ in 0..2_000 {
            if rng.below(2) == 0 {
                let len = rng.below(6) as usize;
                let chunk: std::vec::Vec<u8> = (0..len)
                    .map(|_| {
                        if rng.below(4) == 0 {
                            b'\n'
                        } else {
                            b'a' + rng.below(26) as u8
                        }
                    })
                    .collect();
                let fits = chunk.len() <= 16 - model.len();
                assert_eq!(ring.push(&chunk), fits);
                if fits {
                    model.extend_from_slice(&chunk);
                }
            } else {
                let partial = rng.below(3) == 0;
                let size = 1 + rng.below(16) as usize;
                let mut out = [0u8; 16];
                let window = model.len().min(size);
                let expected = match model[..window].iter().position(|&b| b == b'\n') {
                    Some(i) => Some((i + 1, true)),
                    None if window > 0 && window == size => Some((size, false)),
                    None if partial && window > 0 => Some((window, false)),
                    None => None,
                };
                assert_eq!(ring.pop_line(&mut out[..size], partial), expected);
                if let Some((count, _)) = expected {
                    assert_eq!(&out[..count], &model[..count]);
                    model.drain(..count);
                }
            }
            assert_eq!(ring.len, model.len());
        }
    }

    /// A UART that takes at most `room` bytes per drain call (`usize::MAX`: all).
    struct Capture {
        bytes: Vec<u8>,
        room: usize,
    }

    impl Sink for Capture {
        fn write_some(&mut self, bytes: &[u8]) -> usize {
            let take = bytes.len().min(self.room);
            self.bytes.extend_from_slice(&bytes[..take]);
            take
        }
    }

    fn uart() -> Capture {
        uart_taking(usize::MAX)
    }

    /// A UART that takes at most `room` bytes per drain call.
    fn uart_taking(room: usize) -> Capture {
        Capture {
            bytes: Vec::new(),
            room,
        }
    }

    fn text(capture: &Capture) -> String {
        String::from_utf8(capture.bytes.clone()).unwrap()
    }

    fn print(mux: &mut ConsoleMux, vm: usize, s: &str, out: &mut Capture) {
        for b in s.bytes() {
            mux.output(vm, b);
        }
        mux.drain(out);
    }

    /// The word-at-a-time test agrees with the byte-by-byte one: every byte value at every
    /// position of lines of every length up to 24, among printable neighbours.
    #[test]
    fn all_shown_as_is_matches_each_byte() {
        for len in 0..24 {
            for at in 0..len {
                for value in 0..=255u8 {
                    let mut text = vec![b'k'; len];
                    text[at] = value;
                    assert_eq!(
                        all_shown_as_is(&text),
                        shown_as_is(value),
                        "byte {value:#04x} at {at} of {len}"
                    );
                }
            }
        }
        assert!(all_shown_as_is(
            b"tab\tand UTF-8 \xc3\xa9 are shown as they are"
        ));
        assert!(!all_shown_as_is(b"a line long enough for words\x7f"));
        assert!(!all_shown_as_is(b"\x1b[2J clears the screen"));
    }

    /// A UART that lets one line or piece be composed per drain call.
    struct OnePerDrain {
        capture: Capture,
        composes: usize,
    }

    impl Sink for OnePerDrain {
        fn write_some(&mut self, bytes: &[u8]) -> usize {
            self.capture.write_some(bytes)
        }

        fn may_compose(&mut self) -> bool {
            self.composes += 1;
            self.composes == 1
        }
    }

    /// A sink that bounds the composing gets the same output over more drains, each of
    /// which composes at most one line or piece and says whether output still waits.
    #[test]
    fn a_restarting_vms_line_is_ended_once() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = uart();
        for b in "t".bytes() {
            mux.output(0, b);
        }
        assert!(mux.end_line(0));
        assert!(mux.end_line(0), "nothing to end: nothing added");
        assert!(mux.end_line(1));
        print(&mut mux, 0, "test-guest\n", &mut out);
        assert_eq!(text(&out), "[a] t\r\n[a] test-guest\r\n");
    }

    #[test]
    fn bounded_composing_drains_in_order() {
        let feed = |mux: &mut ConsoleMux| {
            mux.hypervisor_line(b"keel says hello");
            for (vm, text) in [(0, "short\n"), (1, &"long ".repeat(30)), (0, "\n\n")] {
                for b in text.bytes() {
                    mux.output(vm, b);
                }
            }
            mux.output(1, b'\n');
        };
        let mut whole = ConsoleMux::new(&["a", "b"], &[true, true]);
        feed(&mut whole);
        let mut expected = uart();
        whole.drain(&mut expected);

        let mut bounded = ConsoleMux::new(&["a", "b"], &[true, true]);
        feed(&mut bounded);
        let mut out = OnePerDrain {
            capture: uart(),
            composes: 0,
        };
        let mut drains = 0;
        loop {
            out.composes = 0;
            let waits = bounded.drain(&mut out);
            drains += 1;
            assert!(
                out.composes <= 2,
                "at most one compose and one refusal per drain"
            );
            if !waits {
                break;
            }
            assert!(drains < 100, "draining ends");
        }
        assert_eq!(text(&out.capture), text(&expected));
        // Keel's line, "short", three pieces of the long line, and two empty lines.
        assert!(drains >= 7, "one compose per drain: {drains} drains");
    }

    #[test]
    fn lines_are_prefixed_and_never_interleaved() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = uart();
        print(&mut mux, 0, "hel", &mut out);
        print(&mut mux, 1, "world\n", &mut out);
        print(&mut mux, 0, "lo\r\n", &mut out);
        assert_eq!(text(&out), "[b] world\r\n[a] hello\r\n");
    }

    #[test]
    fn partial_line_flush_and_continuation() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = uart();
        print(&mut mux, 0, "# ", &mut out);
        assert!(mux.partial_waiting());
        mux.flush_partial(&mut out);
        print(&mut mux, 0, "ls\n", &mut out);
        assert_eq!(text(&out), "[a] # ls\r\n");
        print(&mut mux, 0, "# ", &mut out);
        mux.flush_partial(&mut out);
        print(&mut mux, 1, "tick\n", &mut out);
        print(&mut mux, 0, "x\n", &mut out);
        assert_eq!(text(&out), "[a] # ls\r\n[a] # \r\n[b] tick\r\n[a] x\r\n");
    }

    #[test]
    fn long_lines_are_split_not_lost() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut out = uart();
        let long = "x".repeat(LINE_CAPACITY + 10);
        print(&mut mux, 0, &(long.clone() + "\n"), &mut out);
        assert_eq!(
            text(&out),
            format!(
                "[a] {}\r\n[a] {}\r\n",
                &long[..LINE_CAPACITY],
                &long[LINE_CAPACITY..]
            )
        );
    }

    /// A long line is composed a piece at a time (each call's work bounded by PIECE), yet
    /// comes out whole: a Keel line and another VM's line queued meanwhile come after it.
    #[test]
    fn long_lines_are_composed_in_pieces_and_stay_whole() {
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = uart_taking(10);
        let long: String = (0..200).map(|i| (b'a' + (i % 26) as u8) as char).collect();
        print(&mut mux, 0, &(long.clone() + "\n"), &mut out);
        let mut most = mux.out.len;
        mux.hypervisor_line(b"in between");
        print(&mut mux, 1, "other\n", &mut out);
        for _ in 0..100 {
            most = most.max(mux.out.len);
            mux.drain(&mut out);
        }
        assert!(
            most <= "[a] ".len() + PIECE + 2,
            "{most} bytes composed at once"
        );
        assert_eq!(
            text(&out),
            format!("[a] {long}\r\n[keel] in between\r\n[b] other\r\n")
        );
        // A partial line longer than a piece is flushed whole, with one prefix.
        let mut out = uart();
        let partial = "p".repeat(150);
        print(&mut mux, 1, &partial, &mut out);
        mux.flush_partial(&mut out);
        print(&mut mux, 1, "!\n", &mut out);
        assert_eq!(text(&out), format!("[b] {partial}!\r\n"));
    }

    #[test]
    fn hypervisor_lines_close_open_lines_and_come_first() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut out = uart();
        print(&mut mux, 0, "$ ", &mut out);
        mux.flush_partial(&mut out);
        mux.hypervisor_line(b"vm 'a' stopped");
        mux.drain(&mut out);
        print(&mut mux, 0, "z\n", &mut out);
        assert_eq!(text(&out), "[a] $ \r\n[keel] vm 'a' stopped\r\n[a] z\r\n");
    }

    #[test]
    fn control_characters_cannot_forge_a_line() {
        let mut mux = ConsoleMux::new(&["victim", "evil"], &[true, true]);
        let mut out = uart();
        print(
            &mut mux,
            1,
            "x\r[keel] vm 'victim' (id 0) stopped\r\n\x1b[2K\x1b[1G[victim] tick\x08\x7f\n",
            &mut out,
        );
        assert_eq!(
            text(&out),
            "[evil] x\\x0d[keel] vm 'victim' (id 0) stopped\r\n\
             [evil] \\x1b[2K\\x1b[1G[victim] tick\\x08\\x7f\r\n"
        );
        for line in text(&out).split("\r\n").filter(|l| !l.is_empty()) {
            assert!(line.starts_with("[evil] "), "{line:?}");
            assert!(!line.contains('\r') && !line.contains('\x1b'), "{line:?}");
        }
    }

    /// [`TERMINAL_RESET`] as the tests write it.
    const RESET: &str = "\x18\x1b[0m\x0f\x1b(B";

    #[test]
    fn raw_mode_is_for_the_focused_vm_only_and_keel_lines_stay_distinct() {
        assert_eq!(RESET.as_bytes(), TERMINAL_RESET);
        let mut mux = ConsoleMux::new(&["a", "b"], &[true, true]);
        let mut out = uart();
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'r'), Input::Raw(0, true));
        print(&mut mux, 0, "\x1b[1mbold\r\n", &mut out);
        print(&mut mux, 1, "\x1b[1m\n", &mut out);
        mux.hypervisor_line(b"note");
        mux.drain(&mut out);
        assert_eq!(
            text(&out),
            format!("[a] \x1b[1mbold\r\n{RESET}[b] \\x1b[1m\r\n[keel] note\r\n"),
            "the terminal is reset once, after the raw output"
        );
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'1'), Input::Focus(1));
        out.bytes.clear();
        print(&mut mux, 0, "\x1b\n", &mut out);
        assert_eq!(
            text(&out),
            "[a] \\x1b\r\n",
            "the focus left: raw mode ended"
        );
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'0'), Input::Focus(0));
        out.bytes.clear();
        print(&mut mux, 0, "\x1b\n", &mut out);
        assert_eq!(
            text(&out),
            "[a] \\x1b\r\n",
            "raw by Ctrl-A r only: escaped when the focus comes back"
        );
    }

    /// A VM made raw by its configuration has the focus from the start and is raw each time it
    /// has it; the other VM stays escaped throughout, and its line after the raw VM's open
    /// prompt starts on a line of its own after a reset.
    #[test]
    fn a_configured_raw_vm_is_raw_whenever_it_has_the_focus() {
        let mut mux = ConsoleMux::new(&["plain", "shell"], &[true, true]);
        mux.make_raw(1);
        assert_eq!(mux.focus(), 1);
        assert!(mux.is_raw(1) && !mux.is_raw(0));
        let mut out = uart();
        print(&mut mux, 1, "\x1b[6n~ # ", &mut out);
        mux.flush_partial(&mut out);
        print(&mut mux, 0, "\x1b[6n\r[keel] forged\n", &mut out);
        assert_eq!(
            text(&out),
            format!("[shell] \x1b[6n~ # {RESET}\r\n[plain] \\x1b[6n\\x0d[keel] forged\r\n")
        );

        // Away and back: escaped while away, raw again on return.
        let mut out = uart();
        for (key, focus) in [(b'0', 0), (b'1', 1)] {
            assert_eq!(mux.input(ESCAPE), Input::Nothing);
            assert_eq!(mux.input(key), Input::Focus(focus));
            print(&mut mux, 1, "\x1b[1m\n", &mut out);
        }
        assert_eq!(text(&out), "[shell] \\x1b[1m\r\n[shell] \x1b[1m\r\n");

        // Ctrl-A r turns it off until the focus comes back.
        let mut out = uart();
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'r'), Input::Raw(1, false));
        print(&mut mux, 1, "\x1b[0m\n", &mut out);
        for key in [b'n', b'n'] {
            assert_eq!(mux.input(ESCAPE), Input::Nothing);
            mux.input(key);
        }
        assert_eq!(mux.focus(), 1);
        print(&mut mux, 1, "\x1b[0m\n", &mut out);
        assert_eq!(
            text(&out),
            "[shell] \\x1b[0m\r\n[shell] \x1b[0m\r\n",
            "no reset between lines of one VM (Keel's line about Ctrl-A r comes with one)"
        );
    }

    /// What the raw VM queued before the focus left it comes out raw, before Keel's line about
    /// the focus (a [`PIECE`] at a time, with the rest of its line); from Keel's line on, its
    /// output is escaped.
    #[test]
    fn raw_output_queued_before_the_focus_moves_comes_before_keels_line() {
        let mut mux = ConsoleMux::new(&["plain", "shell"], &[true, true]);
        mux.make_raw(1);
        let long_prompt = format!("\x1b[0m{}$ ", "~".repeat(PIECE));
        for b in format!("\x1b[31mred\n{long_prompt}").bytes() {
            mux.output(1, b);
        }
        for b in "tick\n".bytes() {
            mux.output(0, b);
        }
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'0'), Input::Focus(0));
        mux.hypervisor_line(b"input focus: vm 'plain' (id 0)");
        for b in "\x1b[2J\n".bytes() {
            mux.output(1, b);
        }
        let mut out = uart_taking(5);
        let mut drains = 0;
        while mux.drain(&mut out) {
            drains += 1;
            assert!(drains < 1000, "draining ends");
        }
        assert_eq!(
            text(&out),
            format!(
                "[shell] \x1b[31mred\r\n[shell] {long_prompt}\\x1b[2J\r\n{RESET}\
                 [keel] input focus: vm 'plain' (id 0)\r\n[plain] tick\r\n"
            )
        );
        // Nothing raw is left: the next Keel line needs no reset.
        let mut out = uart();
        mux.hypervisor_line(b"later");
        print(&mut mux, 1, "\x1b\n", &mut out);
        assert_eq!(text(&out), "[keel] later\r\n[shell] \\x1b\r\n");
    }

    #[test]
    fn a_flooding_vm_fills_only_its_own_buffer_and_is_told_so() {
        let mut mux = ConsoleMux::new(&["quiet", "flood"], &[true, true]);
        let mut out = uart_taking(0);
        let line = "0123456789abcdef0123456789abcdef\n";
        let mut refused = 0;
        for _ in 0..200 {
            for b in line.bytes() {
                if !mux.output(1, b) {
                    refused += 1;
                }
            }
            assert!(mux.drain(&mut out), "the UART takes nothing: output waits");
        }
        assert!(refused > 0);
        assert_eq!(mux.dropped(1), refused);
        for b in "still here\n".bytes() {
            assert!(mux.output(0, b), "another VM's buffer is its own");
        }
        out.room = 7;
        while mux.drain(&mut out) {}
        let shown = text(&out);
        assert!(shown.contains("[quiet] still here\r\n"));
        assert!(shown.contains(&format!(
            "[keel] vm 'flood': console output full: {refused} bytes dropped\r\n"
        )));
        let quiet_at = shown.find("[quiet]").unwrap();
        assert!(
            quiet_at < shown.len() / 2,
            "the quiet VM waits for one flood line at most, not for the whole flood"
        );
        assert!(shown.split("\r\n").all(|l| l.is_empty()
            || l.starts_with("[quiet] ")
            || l.starts_with("[flood] ")
            || l.starts_with("[keel] ")));
    }

    /// Bytes come from a VM's output queue: a full multiplexer buffer leaves them queued
    /// (nothing refused there), the queue's own refusals are said with their count, and a
    /// restart's line end comes between the two boots' output.
    #[test]
    fn pulled_output_waits_in_its_queue_and_refusals_are_said() {
        let mut mux = ConsoleMux::new(&["quiet", "flood"], &[true, true]);
        let queue = OutputQueue::new();
        let line = b"0123456789abcdef0123456789abcdef\n";
        let mut pushed = 0;
        while !queue.is_full() {
            queue.push(line[pushed % line.len()]);
            pushed += 1;
        }
        queue.push(b'!');
        queue.push(b'!');
        let mut moved = 0;
        loop {
            let step = mux.pull(1, &queue, 32);
            assert!(step <= 32);
            if step == 0 {
                break;
            }
            moved += step;
        }
        assert!(moved < pushed, "the buffer filled before the queue emptied");
        assert_eq!(queue.len(), pushed - moved, "what did not fit stays queued");
        assert_eq!(mux.dropped(1), 0, "nothing refused by the multiplexer");
        mux.add_dropped(1, queue.take_refused());
        assert_eq!(mux.dropped(1), 2, "only the queue's refusals are counted");
        // The UART takes everything: the rest follows, nothing lost.
        let mut out = uart();
        while mux.drain(&mut out) || queue.has_work() {
            mux.pull(1, &queue, 32);
        }
        while mux.drain(&mut out) {}
        let shown = text(&out);
        let whole = shown
            .matches("[flood] 0123456789abcdef0123456789abcdef\r\n")
            .count();
        assert_eq!(whole, pushed / line.len());
        assert!(shown.contains("[keel] vm 'flood': console output full: 2 bytes dropped\r\n"));
        // A restart ends the partial line before the next boot's output.
        for b in b"half" {
            queue.push(*b);
        }
        queue.end_line();
        for b in b"next\n" {
            queue.push(*b);
        }
        mux.pull(1, &queue, 32);
        let mut out = uart();
        while mux.drain(&mut out) {}
        // (After the part of a line that filled the queue.)
        let rest = std::str::from_utf8(&line[..pushed % line.len()]).unwrap();
        assert_eq!(
            text(&out),
            format!("[flood] {rest}half\r\n[flood] next\r\n")
        );
    }

    /// A line of Keel's queued while a VM's older output still waits in its queue comes after
    /// that output, not before; a VM printing flat out delays it by its backlog only.
    #[test]
    fn keels_line_comes_after_the_vm_output_queued_before_it() {
        let mut mux = ConsoleMux::new(&["quiet", "dying"], &[true, true]);
        let queue = OutputQueue::new();
        for b in b"last words\nmore\n" {
            queue.push(*b);
        }
        mux.hold_keel();
        assert!(mux.hypervisor_line(b"vm 'dying' (id 1) stopped: stage-2 fault"));
        let mut out = uart();
        mux.drain(&mut out);
        assert_eq!(
            text(&out),
            "",
            "held: nothing of Keel's yet, nothing pulled"
        );
        mux.pull(1, &queue, usize::MAX);
        mux.release_keel();
        while mux.drain(&mut out) {}
        assert_eq!(
            text(&out),
            "[dying] last words\r\n[dying] more\r\n[keel] vm 'dying' (id 1) stopped: stage-2 fault\r\n"
        );
        // Output queued after the line (the next boot's) comes after it.
        mux.hold_keel();
        mux.hypervisor_line(b"restarts");
        mux.release_keel();
        for b in b"boot\n" {
            mux.output(1, *b);
        }
        let mut out = uart();
        while mux.drain(&mut out) {}
        assert_eq!(text(&out), "[keel] restarts\r\n[dying] boot\r\n");
    }

    /// Found by the `console` fuzz target: Keel's own lines passed control bytes through.
    #[test]
    fn keel_lines_are_escaped_too() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut out = uart();
        mux.hypervisor_line(b"quoted \x00\x1b[2J\r");
        mux.drain(&mut out);
        assert_eq!(text(&out), "[keel] quoted \\x00\\x1b[2J\\x0d\r\n");
    }

    #[test]
    fn keel_lines_beyond_the_buffer_are_counted() {
        let mut mux = ConsoleMux::new(&["a"], &[true]);
        let mut accepted = 0;
        for _ in 0..1000 {
            if mux.hypervisor_line(b"a diagnostic of some length") {
                accepted += 1;
            }
        }
        let mut out = uart();
        mux.drain(&mut out);
        let shown = text(&out);
        assert_eq!(shown.matches("a diagnostic").count(), accepted);
        assert!(shown.ends_with(&format!(
            "[keel] {} lines of Keel's own dropped (buffer full)\r\n",
            1000 - accepted
        )));
    }

    #[test]
    fn input_goes_to_focus_and_escape_switches() {
        let mut mux = ConsoleMux::new(&["a", "b", "c"], &[true, false, true]);
        assert_eq!(mux.input(b'q'), Input::Deliver { vm: 0, byte: b'q' });
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(
            mux.input(b'n'),
            Input::Focus(2),
            "skips the VM without console"
        );
        assert_eq!(mux.input(b'q'), Input::Deliver { vm: 2, byte: b'q' });
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'1'), Input::Nothing, "no console: focus stays");
        assert_eq!(mux.focus(), 2);
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'0'), Input::Focus(0));
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(
            mux.input(ESCAPE),
            Input::Deliver {
                vm: 0,
                byte: ESCAPE
            }
        );
        assert_eq!(mux.input(ESCAPE), Input::Nothing);
        assert_eq!(mux.input(b'x'), Input::PowerOff);
    }
}

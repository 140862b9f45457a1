//! `keel.control` in ticks mode: a first-order plant stepped at every tick, commanded in lines
//! of text over messages from the peer VM (in the demo, Linux's virtio console, /dev/hvc0).
//!
//! The plant is `value += (setpoint - value) / 1000` per tick: a time constant of 1,000 ticks,
//! one second at 1 kHz. Both are integers in nano-units (no floating point: the test guest is
//! built soft-float and never enables FP/SIMD), shown with three decimals. The tick handler
//! steps it ([`step`]); the main loop, woken by each tick, calls [`Control::poll`], which takes
//! what the peer sent without waiting and sends the answers, so nothing here ever blocks a
//! tick.
//!
//! The peer's bytes are a stream (a line may span messages, a message hold several lines);
//! each line, a trailing `\r` and the spaces around it removed, gets exactly one answer line:
//!
//! | line | answer |
//! | --- | --- |
//! | `setpoint <number>` | the setpoint becomes the number (decimal, a fraction and a sign allowed, at most 1,000,000 either way), then the telemetry line |
//! | `setpoint <other>` | `error: bad setpoint '<other>' (expected a decimal number such as 42.5 or -3)`, or `error: setpoint '<other>' out of range (-1000000 to 1000000)` |
//! | `get` | the telemetry line |
//! | longer than 256 bytes | `error: line longer than 256 bytes, discarded` |
//! | anything else | `error: unknown command '<the line, cut to 64 bytes>' (try: setpoint <value> \| get)` |
//!
//! The telemetry line: `telemetry: t_ms=<ms since start> setpoint=<x.xxx> value=<x.xxx>
//! ticks=<ticks taken> late_max_us=<worst tick lateness since start>`. Answers go to vCPU 0 of
//! the peer, as many whole lines per message as `keel.max` bytes hold. A full queue there is
//! retried at the next tick, for at most [`RETRY_TICKS`] ticks; then the answers waiting are
//! dropped, counted and reported on the console (`control: warning: ...`). While the waiting
//! answers fill the outbox (1 KiB), no more lines are read: the peer's own queue fills, and
//! its writer waits. A peer that writes more commands than its queue, driver and terminal hold
//! before it reads an answer therefore loses answers, not commands.
//!

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use keel_guest::cpu::with_irqs_masked;
use keel_guest::message::{self, MessageError, ReceiveError};
use keel_guest::{println, timer};

use crate::ticks;

/// Nano-units per unit of the setpoint and the value.
const NANO: i64 = 1_000_000_000;
/// The plant moves this fraction's inverse of the way to the setpoint each tick (k = 1/1000).
const PLANT_DIVISOR: i64 = 1000;
/// The largest setpoint either way, in units.
const SETPOINT_LIMIT: u64 = 1_000_000;
/// The longest line taken, without its newline (and a trailing `\r`).
const LINE_MAX: usize = 256;
/// How much of a refused line or argument an error line quotes.
const QUOTE_MAX: usize = 64;
/// Keel's largest message (`keel_core::ipc::MAX_MESSAGE`): no message is too large for it.
const INBOX: usize = 4096;
/// Answers waiting to be sent; a line is read only while one more answer fits.
const OUTBOX: usize = 1024;
/// Room kept for one answer (the telemetry line is at most about 160 bytes).
const ANSWER_MAX: usize = 192;
/// Messages taken at most per tick (the work of one poll stays bounded).
const MESSAGES_PER_TICK: usize = 16;
/// Ticks an answer may wait for room in the peer's queue before it is dropped (1 s at 1 kHz).
const RETRY_TICKS: u64 = 1000;

/// Whether the tick handler steps the plant.
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The setpoint, in nano-units; written by the main loop, read by the tick handler.
static SETPOINT: AtomicI64 = AtomicI64::new(0);
/// The plant's output, in nano-units; written by the tick handler only.
static VALUE: AtomicI64 = AtomicI64::new(0);

/// One step of the plant; called by the tick handler at every tick (nothing until
/// [`Control::new`]).
pub fn step() {
    if !ENABLED.load(Ordering::Relaxed) {
        return;
    }
    let value = VALUE.load(Ordering::Relaxed);
    let setpoint = SETPOINT.load(Ordering::Relaxed);
    VALUE.store(
        value + (setpoint - value) / PLANT_DIVISOR,
        Ordering::Relaxed,
    );
}

/// Why a setpoint's argument was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SetpointError {
    /// Not a decimal number.
    Malformed,
    /// Beyond ±[`SETPOINT_LIMIT`].
    OutOfRange,
}

/// Parses `[+-]digits[.digits]` (at least one digit) into nano-units; digits past the ninth
/// decimal are ignored, except that they put exactly ±1,000,000 out of range.
fn parse_setpoint(text: &[u8]) -> Result<i64, SetpointError> {
    let (negative, number) = match text {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, text),
    };
    let (whole, fraction) = match number.iter().position(|&b| b == b'.') {
        Some(dot) => (&number[..dot], &number[dot + 1..]),
        None => (number, &[][..]),
    };
    let digits = |part: &[u8]| part.iter().all(u8::is_ascii_digit);
    if whole.len() + fraction.len() == 0 || !digits(whole) || !digits(fraction) {
        return Err(SetpointError::Malformed);
    }
    let mut units: u64 = 0;
    for &digit in whole {
        units = units * 10 + u64::from(digit - b'0');
        if units > SETPOINT_LIMIT {
            return Err(SetpointError::OutOfRange);
        }
    }
    if units == SETPOINT_LIMIT && fraction.iter().any(|&digit| digit != b'0') {
        return Err(SetpointError::OutOfRange);
    }
    let mut nanos: i64 = 0;
    let mut scale = NANO / 10;
    for &digit in fraction {
        nanos += i64::from(digit - b'0') * scale;
        scale /= 10;
    }
    let magnitude = units as i64 * NANO + nanos;
    Ok(if negative { -magnitude } else { magnitude })
}

/// A nano-unit quantity shown in units with three decimals, rounded half away from zero.
struct Milli(i64);

impl fmt::Display for Milli {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let milli = (self.0.unsigned_abs() + 500_000) / 1_000_000;
        let sign = if self.0 < 0 && milli != 0 { "-" } else { "" };
        write!(f, "{sign}{}.{:03}", milli / 1000, milli % 1000)
    }
}

/// At most [`QUOTE_MAX`] bytes of `bytes`, printable ASCII as is and any other byte as `?`.
struct Quote<'a>(&'a [u8]);

impl fmt::Display for Quote<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &byte in self.0.iter().take(QUOTE_MAX) {
            let shown = if byte.is_ascii_graphic() || byte == b' ' {
                byte
            } else {
                b'?'
            };
            f.write_char(char::from(shown))?;
        }
        Ok(())
    }
}

/// The answers waiting to be sent.
struct Outbox {
    bytes: [u8; OUTBOX],
    len: usize,
}

impl Outbox {
    fn room(&self) -> usize {
        OUTBOX - self.len
    }

    /// Removes the first `count` bytes (sent or dropped).
    fn consume(&mut self, count: usize) {
        self.bytes.copy_within(count..self.len, 0);
        self.len -= count;
    }
}

impl Write for Outbox {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let end = self.len + text.len();
        let slot = self.bytes.get_mut(self.len..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(text.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// The counter value at the start of ticks mode, and the counter's frequency.
struct Clock {
    start: u64,
    frequency: u64,
}

/// The message side of the control loop: the peer's lines in, the answers out.
pub struct Control {
    /// The VM whose lines are commands, and that gets the answers (at its vCPU 0).
    peer: u64,
    /// The largest message the peer takes.
    max_message: usize,
    clock: Clock,
    /// The message being read, and how far.
    inbox: [u8; INBOX],
    inbox_len: usize,
    inbox_read: usize,
    /// The line so far (one byte more than [`LINE_MAX`], for a trailing `\r`).
    line: [u8; LINE_MAX + 1],
    line_len: usize,
    /// The line passed [`LINE_MAX`]: discarded up to its newline.
    overlong: bool,
    outbox: Outbox,
    /// The first tick at which the peer's queue refused the waiting answers, until it takes one.
    refused_since: Option<u64>,
    /// Answers dropped since the start.
    dropped: u64,
    /// Messages from VMs other than the peer, ignored.
    foreign: u64,
}

impl Control {
    /// Starts the plant (setpoint and value 0) and takes commands from `peer`, answering in
    /// messages of at most `max_message` bytes; `start` is when ticks mode started.
    pub fn new(peer: u64, max_message: usize, start: u64, frequency: u64) -> Self {
        ENABLED.store(true, Ordering::Relaxed);
        println!(
            "control: plant k=1/{PLANT_DIVISOR} per tick; commands from vm {peer}: setpoint <value> | get"
        );
        Control {
            peer,
            max_message: max_message.max(1),
            clock: Clock { start, frequency },
            inbox: [0; INBOX],
            inbox_len: 0,
            inbox_read: 0,
            line: [0; LINE_MAX + 1],
            line_len: 0,
            overlong: false,
            outbox: Outbox {
                bytes: [0; OUTBOX],
                len: 0,
            },
            refused_since: None,
            dropped: 0,
            foreign: 0,
        }
    }

    /// Once per tick, from the main loop: reads the lines the peer sent (without waiting),
    /// answers them, and sends what waits. `tick` is the number of ticks taken.
    pub fn poll(&mut self, tick: u64) {
        let mut messages = 0;
        while self.outbox.room() >= ANSWER_MAX {
            if self.inbox_read == self.inbox_len {
                if messages == MESSAGES_PER_TICK || !self.take_message() {
                    break;
                }
                messages += 1;
            }
            let byte = self.inbox[self.inbox_read];
            self.inbox_read += 1;
            self.take_byte(byte);
        }
        self.send_waiting(tick);
    }

    /// Takes the next message from the peer into the inbox; false if none is queued.
    fn take_message(&mut self) -> bool {
        loop {
            match message::receive(&mut self.inbox, 0) {
                Ok(message) if message.vm == self.peer => {
                    self.inbox_len = message.len;
                    self.inbox_read = 0;
                    return true;
                }
                Ok(message) => {
                    self.foreign += 1;
                    println!(
                        "control: ignored a message from vm {} (only vm {} commands; {} ignored)",
                        message.vm, self.peer, self.foreign
                    );
                }
                Err(ReceiveError::Refused(MessageError::Empty)) => return false,
                Err(error) => {
                    println!("control: receive refused: {error:?}");
                    return false;
                }
            }
        }
    }

    /// One byte of the peer's stream: a newline ends the line and answers it.
    fn take_byte(&mut self, byte: u8) {
        if byte != b'\n' {
            if self.line_len < self.line.len() {
                self.line[self.line_len] = byte;
                self.line_len += 1;
            } else {
                self.overlong = true;
            }
            return;
        }
        let mut len = self.line_len;
        if len > 0 && self.line[len - 1] == b'\r' {
            len -= 1;
        }
        if self.overlong || len > LINE_MAX {
            let _ = writeln!(
                self.outbox,
                "error: line longer than {LINE_MAX} bytes, discarded"
            );
        } else {
            answer(&mut self.outbox, &self.clock, self.line[..len].trim_ascii());
        }
        self.line_len = 0;
        self.overlong = false;
    }

    /// Sends the waiting answers to the peer's vCPU 0, in messages of at most `max_message`
    /// bytes, until its queue is full; drops them after [`RETRY_TICKS`] ticks of refusals,
    /// or at once on any other refusal, counting them and saying so.
    fn send_waiting(&mut self, tick: u64) {
        while self.outbox.len > 0 {
            let waiting = &self.outbox.bytes[..self.outbox.len];
            // Whole lines, as many as fit; a line longer than a message is split.
            let fits = &waiting[..waiting.len().min(self.max_message)];
            let chunk = fits
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(fits.len(), |newline| newline + 1);
            match message::send(self.peer, 0, &waiting[..chunk]) {
                Ok(_) => {
                    self.outbox.consume(chunk);
                    self.refused_since = None;
                }
                Err(MessageError::QueueFull) => {
                    let peer = self.peer;
                    let since = *self.refused_since.get_or_insert(tick);
                    if tick - since >= RETRY_TICKS {
                        self.drop_waiting(format_args!(
                            "vm {peer}'s queue stayed full for {RETRY_TICKS} ticks"
                        ));
                    }
                    return;
                }
                Err(error) => {
                    let peer = self.peer;
                    self.drop_waiting(format_args!("sending to vm {peer} refused: {error:?}"));
                    return;
                }
            }
        }
    }

    /// Drops every waiting answer, with a console line giving `why` and the count.
    fn drop_waiting(&mut self, why: fmt::Arguments<'_>) {
        let waiting = &self.outbox.bytes[..self.outbox.len];
        // A line partly sent counts as dropped too: its end is lost.
        let answers = waiting.iter().filter(|&&b| b == b'\n').count() as u64;
        self.dropped += answers;
        println!(
            "control: warning: {why}: {answers} answers dropped ({} since start)",
            self.dropped
        );
        self.outbox.len = 0;
        self.refused_since = None;
    }
}

/// Appends the answer to one command line.
fn answer(outbox: &mut Outbox, clock: &Clock, line: &[u8]) {
    let argument = line
        .strip_prefix(b"setpoint")
        .filter(|rest| rest.first().is_none_or(u8::is_ascii_whitespace))
        .map(<[u8]>::trim_ascii);
    if let Some(argument) = argument {
        match parse_setpoint(argument) {
            Ok(setpoint) => {
                SETPOINT.store(setpoint, Ordering::Relaxed);
                telemetry(outbox, clock);
            }
            Err(SetpointError::Malformed) => {
                let _ = writeln!(
                    outbox,
                    "error: bad setpoint '{}' (expected a decimal number such as 42.5 or -3)",
                    Quote(argument)
                );
            }
            Err(SetpointError::OutOfRange) => {
                let _ = writeln!(
                    outbox,
                    "error: setpoint '{}' out of range (-{SETPOINT_LIMIT} to {SETPOINT_LIMIT})",
                    Quote(argument)
                );
            }
        }
    } else if line == b"get" {
        telemetry(outbox, clock);
    } else {
        let _ = writeln!(
            outbox,
            "error: unknown command '{}' (try: setpoint <value> | get)",
            Quote(line)
        );
    }
}

/// Appends the telemetry line, its figures sampled together (no tick between them).
fn telemetry(outbox: &mut Outbox, clock: &Clock) {
    let (now, ticks, worst, setpoint, value) = with_irqs_masked(|| {
        (
            timer::counter(),
            ticks::ticks_taken(),
            ticks::worst_lateness(),
            SETPOINT.load(Ordering::Relaxed),
            VALUE.load(Ordering::Relaxed),
        )
    });
    let t_ms = (now - clock.start) * 1000 / clock.frequency;
    let late_max_us = worst * 1_000_000 / clock.frequency;
    let _ = writeln!(
        outbox,
        "telemetry: t_ms={t_ms} setpoint={} value={} ticks={ticks} late_max_us={late_max_us}",
        Milli(setpoint),
        Milli(value)
    );
}

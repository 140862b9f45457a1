//! `keel.mode=messages`: messages between VMs through Keel (KEEL_MSG_SEND, KEEL_MSG_RECV),
//! one role per VM (`keel.msg=`):
//!
//! | role | what it does |
//! | --- | --- |
//! | `ping` | a round trip with `pong` for every size 0..=`keel.max`, content checked both ways; then every refusal, each checked against its code; then `KEEL-END` to `pong` |
//! | `pong` | echoes each message back to its sender, every byte inverted, until `KEEL-END`; counts those not from `keel.peer` |
//! | `outsider` | sends to `keel.peer`, which does not take its messages: each send must be refused |
//! | `bench` | the benchmarks' sender: for each size, `keel.depth` sends timed alone, then round trips timing delivery (send to the receiver's receive returning) |
//! | `bench-receiver` | the benchmarks' receiver, `keel.peer` the sender: times each receive of a queued message, and answers each delivery with when it got it |
//! | `echo-lines` | the far side of a Linux VM's virtio console (`keel.peer`): takes its output as a byte stream, checks each `line N <pattern>` line and answers every line in capitals (messages of at most `keel.max` bytes) |
//! | `stopped` | powers off at once (its senders must get "destination stopped") |
//! | `flood` | from `keel.start` (counter ms) on, sends to `keel.peer` (which never receives) for `keel.seconds`: exactly its queue's depth is accepted, the rest refused as full |
//!
//! Numbers come from the boot arguments: `keel.peer` (a VM id), `keel.max` (the peer's largest
//! message), `keel.depth` (the depth of this VM's own queue), `keel.stopped` (a VM id that
//! powers off) and `keel.outsider` (a VM id that takes no messages from this one).

use keel_guest::bootargs::BootArgs;
use keel_guest::message::{self, Message, MessageError, ReceiveError};
use keel_guest::{println, system_off, timer, vm_id};

/// Largest message the test exchanges (the configurations' `size` is at most this).
const BUFFER: usize = 4096;
/// What ends `pong`.
const END: &[u8] = b"KEEL-END";
/// Far outside every test configuration's memory.
const OUTSIDE: u64 = 0x1000_0000;

/// Runs the role `keel.msg` names.
pub fn run(args: BootArgs<'_>) -> ! {
    let number = |key: &str| args.value(key).and_then(|value| value.parse::<u64>().ok());
    let peer = number("keel.peer").unwrap_or(0);
    match args.value("keel.msg") {
        Some("ping") => ping(&Ping {
            peer,
            max: number("keel.max").unwrap_or(256) as usize,
            depth: number("keel.depth").unwrap_or(4),
            stopped: number("keel.stopped").unwrap_or(u64::MAX),
            outsider: number("keel.outsider").unwrap_or(u64::MAX),
        }),
        Some("pong") => pong(peer),
        Some("outsider") => outsider(peer),
        Some("flood") => flood(
            peer,
            number("keel.start").unwrap_or(0),
            number("keel.seconds").unwrap_or(2),
        ),
        Some("bench") => bench_sender(peer, number("keel.depth").unwrap_or(4)),
        Some("bench-receiver") => bench_receiver(peer, number("keel.depth").unwrap_or(4)),
        Some("echo-lines") => echo_lines(peer, number("keel.max").unwrap_or(256) as usize),
        Some("stopped") => {
            println!("msg: stopped: powering off");
            system_off()
        }
        other => {
            println!("msg: unknown role {other:?}");
            system_off()
        }
    }
}

/// The counter value `ms` milliseconds from now.
fn after_ms(ms: u64) -> u64 {
    timer::counter() + ms * timer::frequency() / 1000
}

/// Byte `i` of the test message of `len` bytes.
fn pattern(len: usize, i: usize) -> u8 {
    (len * 7 + i * 13 + 1) as u8
}

/// The x0 value of a refusal, as the hypercall returned it.
fn code(error: MessageError) -> i64 {
    error.code()
}

struct Ping {
    peer: u64,
    max: usize,
    depth: u64,
    stopped: u64,
    outsider: u64,
}

/// Prints one refusal case's outcome; counts a failure.
fn case(name: &str, got: Result<u64, MessageError>, expected: MessageError, failures: &mut u32) {
    let ok = got == Err(expected);
    if !ok {
        *failures += 1;
    }
    let got = match got {
        Ok(value) => value as i64,
        Err(error) => code(error),
    };
    println!(
        "msg: case {name}: got {got} expected {} {}",
        code(expected),
        if ok { "ok" } else { "FAIL" }
    );
}

fn received(result: Result<Message, ReceiveError>) -> Result<u64, MessageError> {
    match result {
        Ok(message) => Ok(message.len as u64),
        Err(ReceiveError::BufferTooSmall { .. }) => Err(MessageError::BufferTooSmall),
        Err(ReceiveError::Refused(error)) => Err(error),
    }
}

fn ping(config: &Ping) -> ! {
    let (me, _) = vm_id();
    let mut failures = 0u32;
    let mut out = [0u8; BUFFER];
    let mut back = [0u8; BUFFER];
    let max = config.max.min(BUFFER - 1);

    // Round trips, every size.
    for len in 0..=max {
        for (i, byte) in out[..len].iter_mut().enumerate() {
            *byte = pattern(len, i);
        }
        if let Err(error) = message::send(config.peer, 0, &out[..len]) {
            println!("msg: FAIL size {len}: send refused: {error:?}");
            failures += 1;
            continue;
        }
        match message::receive(&mut back, after_ms(1000)) {
            Ok(reply) => {
                let whole = reply.len == len && (reply.vm, reply.vcpu) == (config.peer, 0);
                let same = (0..len).all(|i| back[i] == !pattern(len, i));
                if !whole || !same {
                    println!(
                        "msg: FAIL size {len}: reply of {} bytes from vm {} vcpu {}, content {}",
                        reply.len,
                        reply.vm,
                        reply.vcpu,
                        if same { "right" } else { "wrong" }
                    );
                    failures += 1;
                }
            }
            Err(error) => {
                println!("msg: FAIL size {len}: no reply: {error:?}");
                failures += 1;
            }
        }
    }
    println!(
        "msg: round trips: {} sizes 0..={max}, content checked both ways, failures {failures}",
        max + 1
    );

    // Refusals.
    let mut refusals = 0u32;
    let f = &mut refusals;
    case(
        "too-large",
        message::send(config.peer, 0, &out[..max + 1]),
        MessageError::TooLarge,
        f,
    );
    case(
        "unknown-vm",
        message::send(99, 0, b"x"),
        MessageError::UnknownDestination,
        f,
    );
    case(
        "unknown-vcpu",
        message::send(config.peer, 8, b"x"),
        MessageError::UnknownDestination,
        f,
    );
    case(
        "not-allowed",
        message::send(config.outsider, 0, b"x"),
        MessageError::NotAllowed,
        f,
    );
    case(
        "bad-buffer-send",
        message::send_raw(config.peer, 0, OUTSIDE, 16),
        MessageError::BadBuffer,
        f,
    );
    // SAFETY: the address is outside this VM's memory: Keel must refuse before writing.
    let bad_receive = unsafe { message::receive_raw(OUTSIDE, 16, 0) };
    case(
        "bad-buffer-receive",
        received(bad_receive),
        MessageError::BadBuffer,
        f,
    );
    case(
        "empty",
        received(message::receive(&mut back, 0)),
        MessageError::Empty,
        f,
    );
    let start = timer::counter();
    let timed_out = received(message::receive(&mut back, after_ms(2)));
    let waited_us = (timer::counter() - start) * 1_000_000 / timer::frequency();
    case("timeout", timed_out, MessageError::Empty, f);
    println!("msg: timeout waited {waited_us} us (asked 2000)");
    if waited_us < 2000 {
        *f += 1;
    }

    // A full queue: this VM's own, filled by itself (nothing else sends to it now).
    let mut accepted = 0;
    let mut full = Ok(0);
    for i in 0..config.depth + 1 {
        match message::send(me, 0, &out[..(i as usize % (max + 1))]) {
            Ok(_) => accepted += 1,
            Err(error) => {
                full = Err(error);
                break;
            }
        }
    }
    case("queue-full", full, MessageError::QueueFull, f);
    let mut drained = 0;
    while let Ok(message) = message::receive(&mut back, 0) {
        let len = message.len;
        if back[..len] == out[..len] && message.vm == me {
            drained += 1;
        }
    }
    println!(
        "msg: own queue took {accepted} (depth {}), gave back {drained} intact",
        config.depth
    );
    if accepted != config.depth || drained != accepted {
        *f += 1;
    }

    // A buffer too small: the message stays queued.
    let len = 100.min(max);
    for (i, byte) in out[..len].iter_mut().enumerate() {
        *byte = pattern(len, i);
    }
    let _ = message::send(config.peer, 0, &out[..len]);
    let small = message::receive(&mut back[..len / 10], after_ms(1000));
    let stayed = matches!(small, Err(ReceiveError::BufferTooSmall { len: l }) if l == len);
    case(
        "buffer-too-small",
        received(small),
        MessageError::BufferTooSmall,
        f,
    );
    let whole = message::receive(&mut back, 0);
    let intact = whole.is_ok_and(|m| m.len == len && (0..len).all(|i| back[i] == !pattern(len, i)));
    println!("msg: the message stayed queued: {stayed}, then came whole: {intact}");
    if !stayed || !intact {
        *f += 1;
    }

    // A destination that powers off: refused as stopped, never a hang.
    let deadline = after_ms(2000);
    let mut last = Ok(0);
    while timer::counter() < deadline {
        last = message::send(config.stopped, 0, b"are you there");
        if last == Err(MessageError::DestinationStopped) {
            break;
        }
        let _ = message::receive(&mut back, after_ms(1));
    }
    case("stopped", last, MessageError::DestinationStopped, f);

    let _ = message::send(config.peer, 0, END);
    println!("msg: ping done: {failures} round-trip failures, {refusals} refusal failures");
    system_off()
}

fn pong(peer: u64) -> ! {
    let (me, _) = vm_id();
    let mut buffer = [0u8; BUFFER];
    let mut echoed = 0u64;
    let mut foreign = 0u64;
    loop {
        let message = match message::receive(&mut buffer, u64::MAX) {
            Ok(message) => message,
            Err(error) => {
                println!("msg: pong: receive refused: {error:?}");
                system_off()
            }
        };
        let len = message.len;
        if &buffer[..len] == END {
            println!("msg: pong (vm {me}) echoed {echoed} messages, {foreign} from VMs that may not send");
            system_off()
        }
        if message.vm != peer {
            foreign += 1;
        }
        for byte in &mut buffer[..len] {
            *byte = !*byte;
        }
        loop {
            match message::send(message.vm, message.vcpu, &buffer[..len]) {
                Ok(_) => break,
                Err(MessageError::QueueFull) => keel_guest::yield_now(),
                Err(error) => {
                    println!("msg: pong: reply refused: {error:?}");
                    break;
                }
            }
        }
        echoed += 1;
    }
}

fn outsider(peer: u64) -> ! {
    let mut refused = 0;
    for _ in 0..16 {
        if message::send(peer, 0, b"let me in") == Err(MessageError::NotAllowed) {
            refused += 1;
        }
    }
    println!(
        "msg: outsider: {refused} of 16 sends to vm {peer} refused with {}",
        code(MessageError::NotAllowed)
    );
    system_off()
}

fn flood(peer: u64, start_ms: u64, seconds: u64) -> ! {
    let start = start_ms * timer::frequency() / 1000;
    while timer::counter() < start {
        keel_guest::yield_now();
    }
    println!("msg: flood: begins");
    let deadline = after_ms(seconds * 1000);
    let (mut accepted, mut full, mut other) = (0u64, 0u64, 0u64);
    let message = [0x5au8; 64];
    while timer::counter() < deadline {
        match message::send(peer, 0, &message) {
            Ok(_) => accepted += 1,
            Err(MessageError::QueueFull) => full += 1,
            Err(_) => other += 1,
        }
    }
    println!("msg: flood: {accepted} accepted, {full} refused as full, {other} other refusals");
    system_off()
}

/// The benchmarks' message sizes (the M5150 paper's table II).
const BENCH_SIZES: [usize; 5] = [20, 40, 60, 80, 100];
/// Delivery round trips per size.
const BENCH_ROUNDS: usize = 64;
/// Batches of `depth` timed sends (and receives) per size.
const BENCH_BATCHES: usize = 16;

/// Counter ticks as nanoseconds: instructions under `-icount shift=0`.
fn ticks_ns(ticks: u64) -> u64 {
    ticks * 1_000_000_000 / timer::frequency()
}

/// Minimum, sum and count of samples, printed as a `bench:` figure (also the channels'
/// doorbell round trip, [`crate::channels`]).
pub(crate) struct Figure {
    min: u64,
    max: u64,
    total: u64,
    count: u64,
}

impl Figure {
    pub(crate) fn new() -> Self {
        Figure {
            min: u64::MAX,
            max: 0,
            total: 0,
            count: 0,
        }
    }

    pub(crate) fn add(&mut self, ticks: u64) {
        let ns = ticks_ns(ticks);
        self.min = self.min.min(ns);
        self.max = self.max.max(ns);
        self.total += ns;
        self.count += 1;
    }

    fn print(&self, name: &str, size: usize) {
        self.print_as(format_args!("{name}-{size}"));
    }

    /// Prints `bench: <name> min=.. avg=.. max=..` (ns).
    pub(crate) fn print_as(&self, name: core::fmt::Arguments<'_>) {
        println!(
            "bench: {name} min={} avg={} max={}",
            self.min,
            self.total / self.count.max(1),
            self.max
        );
    }
}

/// Sends until accepted (the receiver drains its queue meanwhile).
fn send_until_taken(peer: u64, message: &[u8]) {
    while message::send(peer, 0, message) == Err(MessageError::QueueFull) {
        keel_guest::yield_now();
    }
}

fn bench_sender(peer: u64, depth: u64) -> ! {
    let mut out = [0u8; 128];
    let mut back = [0u8; 128];
    // Let the receiver boot and wait.
    let _ = message::receive(&mut back, after_ms(5));
    for size in BENCH_SIZES {
        crate::bench::let_console_settle();
        for (i, byte) in out[..size].iter_mut().enumerate() {
            *byte = pattern(size, i);
        }
        let mut send = Figure::new();
        for _ in 0..BENCH_BATCHES {
            for _ in 0..depth {
                let start = timer::counter();
                let sent = message::send(peer, 0, &out[..size]);
                let end = timer::counter();
                match sent {
                    Ok(_) => send.add(end - start),
                    Err(_) => send_until_taken(peer, &out[..size]),
                }
            }
            // The receiver says when it has taken the batch.
            let _ = message::receive(&mut back, u64::MAX);
        }
        send.print("msg-send", size);
        crate::bench::let_console_settle();
        let mut delivery = Figure::new();
        for _ in 0..BENCH_ROUNDS {
            let start = timer::counter();
            send_until_taken(peer, &out[..size]);
            if let Ok(reply) = message::receive(&mut back, u64::MAX) {
                if reply.len == 8 {
                    let mut at = [0u8; 8];
                    at.copy_from_slice(&back[..8]);
                    delivery.add(u64::from_le_bytes(at).saturating_sub(start));
                }
            }
        }
        delivery.print("msg-delivery", size);
    }
    println!("bench: done");
    system_off()
}

fn bench_receiver(peer: u64, depth: u64) -> ! {
    let mut buffer = [0u8; 128];
    for size in BENCH_SIZES {
        let mut receive = Figure::new();
        for _ in 0..BENCH_BATCHES {
            let mut taken = 0;
            while taken < depth {
                // Wait for a message without taking it (an empty buffer is too small for
                // any of these), then time the receive of a queued message alone.
                // SAFETY: Keel writes nothing into an empty buffer.
                let _ = unsafe { message::receive_raw(buffer.as_mut_ptr() as u64, 0, u64::MAX) };
                let start = timer::counter();
                let got = message::receive(&mut buffer, 0);
                let end = timer::counter();
                if got.is_ok() {
                    receive.add(end - start);
                    taken += 1;
                }
            }
            send_until_taken(peer, b"batch");
        }
        receive.print("msg-receive", size);
        for _ in 0..BENCH_ROUNDS {
            let got = message::receive(&mut buffer, u64::MAX);
            let at = timer::counter();
            if got.is_ok() {
                send_until_taken(peer, &at.to_le_bytes());
            }
        }
    }
    system_off()
}

/// Sends `bytes` to vCPU 0 of `peer` in messages of at most `max` bytes, each retried until
/// the queue takes it.
fn send_stream(peer: u64, bytes: &[u8], max: usize) {
    for chunk in bytes.chunks(max.max(1)) {
        send_until_taken(peer, chunk);
    }
}

/// Whether `line` is `line N <N pattern bytes>` with the pattern of the Linux test
/// (`xtask/src/debian/scripts.rs`, VIRTIO_TEST): byte i is 'a' + (7i + N) mod 26.
fn pattern_line(line: &[u8]) -> Option<(usize, bool)> {
    let rest = line.strip_prefix(b"line ")?;
    let space = rest.iter().position(|&b| b == b' ')?;
    let n: usize = core::str::from_utf8(&rest[..space]).ok()?.parse().ok()?;
    let body = &rest[space + 1..];
    let ok = body.len() == n
        && body
            .iter()
            .enumerate()
            .all(|(i, &b)| b == b'a' + ((i * 7 + n) % 26) as u8);
    Some((n, ok))
}

fn echo_lines(peer: u64, max: usize) -> ! {
    let mut buffer = [0u8; BUFFER];
    let mut line = [0u8; BUFFER];
    let mut len = 0;
    let (mut lines, mut checked, mut failed) = (0u64, 0u64, 0u64);
    loop {
        let Ok(message) = message::receive(&mut buffer, u64::MAX) else {
            continue;
        };
        for &byte in &buffer[..message.len] {
            if byte != b'\n' {
                if len < line.len() - 1 {
                    line[len] = byte;
                    len += 1;
                }
                continue;
            }
            lines += 1;
            // A terminal's output processing may end lines with CR LF.
            if len > 0 && line[len - 1] == b'\r' {
                len -= 1;
            }
            if let Some((n, ok)) = pattern_line(&line[..len]) {
                checked += 1;
                if !ok {
                    failed += 1;
                }
                println!(
                    "virtio: line {n} from vm {}: {} (lines {lines}, checked {checked}, failed {failed})",
                    message.vm,
                    if ok { "ok" } else { "FAIL" }
                );
            }
            line[..len].make_ascii_uppercase();
            line[len] = b'\n';
            send_stream(peer, &line[..=len], max);
            len = 0;
        }
    }
}

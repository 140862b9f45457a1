//! `keel.mode=channel`: shared-memory channels between VMs and their doorbells
//! (KEEL_CHANNEL_NOTIFY), one role per VM (`keel.chan=`):
//!
//! | role | what it does |
//! | --- | --- |
//! | `writer` | for every size 1..=`keel.max`: writes a pattern into its read-write window `keel.out`, rings member `keel.to` of channel `keel.tx` (the reader), waits with WFI for the reader's doorbell (`keel.irq`) and checks the answer in its read-only window `keel.in` (every byte inverted); then times `keel.rounds` empty round trips; then ends the reader and checks every refusal's code |
//! | `reader` | enables `keel.irq` and waits with WFI; after each doorbell checks the content of its read-only window `keel.in`, writes the answer into its read-write window `keel.out` and rings member `keel.to` of channel `keel.tx` (the writer) |
//! | `ro-writer` | reads its read-only window `keel.in`, then writes it: Keel must stop the VM |
//! | `outsider` | rings channel `keel.tx`, of which it is no member: each doorbell must be refused |
//!
//! Both directions use the same layout in the window their sender writes: the round's
//! sequence number at [`SEQUENCE`] (written last, after a barrier), its length at [`LENGTH`]
//! ([`PING`]: an empty round trip, [`END`]: the last), the bytes from [`DATA`]. The writer
//! also takes `keel.stopped` (a member of `keel.tx` that Keel stops) for the "peer stopped"
//! case. Windows are `keel.size` bytes (default 64 KiB); addresses are hexadecimal.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use keel_guest::abi::layout;
use keel_guest::bootargs::BootArgs;
use keel_guest::channel::{self, ChannelError, Window, EVERY_OTHER_MEMBER};
use keel_guest::cpu::{disable_irqs, enable_irqs, wait_for_interrupt};
use keel_guest::exceptions::set_irq_handler;
use keel_guest::gic::{IntId, PrivateInterrupts, Trigger, DISTRIBUTOR, FIRST_SPI};
use keel_guest::{println, system_off, timer};

use crate::interrupts::PRIORITY;
use crate::messages::Figure;

/// Offset of a round's sequence number: it publishes the round.
const SEQUENCE: usize = 0x00;
/// Offset of its length.
const LENGTH: usize = 0x04;
/// Offset of its bytes.
const DATA: usize = 0x40;
/// The length of an empty round trip (the doorbell alone).
const PING: u32 = 0;
/// The length that ends the reader.
const END: u32 = u32::MAX;
/// How long a round may take before it counts as lost, in ms.
const ROUND_TIMEOUT_MS: u64 = 1000;

/// The doorbell INTID this VM takes.
static DOORBELL: AtomicU32 = AtomicU32::new(u32::MAX);
/// Doorbells taken; written by the IRQ handler only.
static DOORBELLS: AtomicU64 = AtomicU64::new(0);

fn handle_irq(intid: IntId) {
    if intid == DOORBELL.load(Ordering::Relaxed) {
        DOORBELLS.store(DOORBELLS.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    } else if intid == layout::VTIMER_INTID {
        // A wait's timeout: it stops asserting; the waiter sees the counter past it.
        timer::mask();
    }
}

/// What a role is told.
struct Setup {
    /// Its read-only window (the other side writes it).
    incoming: Option<Window>,
    /// Its read-write window.
    outgoing: Option<Window>,
    /// The channel it rings and the member there.
    tx: u64,
    to: u64,
}

/// Runs the role `keel.chan` names.
pub fn run(args: BootArgs<'_>, interrupts: &PrivateInterrupts) -> ! {
    let number = |key: &str| args.value(key).and_then(|value| value.parse::<u64>().ok());
    let size = number("keel.size").unwrap_or(64 << 10) as usize;
    let window = |key: &str| {
        let value = args.value(key)?;
        let digits = value.strip_prefix("0x").unwrap_or(value);
        let base = usize::from_str_radix(digits, 16).ok()?;
        // SAFETY: the configuration maps this VM's window on a channel there (the scenario's
        // boot arguments repeat its `ipa`); no Rust object lives in it.
        Some(unsafe { Window::new(base, size) })
    };
    let setup = Setup {
        incoming: window("keel.in"),
        outgoing: window("keel.out"),
        tx: number("keel.tx").unwrap_or(0),
        to: number("keel.to").unwrap_or(0),
    };
    if let Some(intid) = number("keel.irq") {
        enable_doorbell(intid as IntId, interrupts);
    }
    match (args.value("keel.chan"), setup.incoming, setup.outgoing) {
        (Some("writer"), Some(incoming), Some(outgoing)) => writer(
            &setup,
            incoming,
            outgoing,
            &Writer {
                max: number("keel.max").unwrap_or(256) as usize,
                rounds: number("keel.rounds").unwrap_or(64),
                stopped: number("keel.stopped"),
            },
        ),
        (Some("reader"), Some(incoming), Some(outgoing)) => reader(&setup, incoming, outgoing),
        (Some("ro-writer"), Some(incoming), _) => ro_writer(incoming),
        (Some("outsider"), _, _) => outsider(setup.tx),
        (role, _, _) => {
            println!("chan: role {role:?} lacks its windows (keel.in, keel.out) or is unknown");
            system_off()
        }
    }
}

/// Takes doorbell `intid` (an SGI, or an SPI routed here, edge-triggered) and the virtual
/// timer's interrupt (a wait's timeout), and unmasks IRQs.
fn enable_doorbell(intid: IntId, interrupts: &PrivateInterrupts) {
    DOORBELL.store(intid, Ordering::Relaxed);
    set_irq_handler(handle_irq);
    if intid < FIRST_SPI {
        interrupts.enable(intid, PRIORITY);
    } else {
        DISTRIBUTOR.enable_spi(intid, PRIORITY, Trigger::Edge);
    }
    interrupts.enable(layout::VTIMER_INTID, PRIORITY);
    enable_irqs();
}

/// Waits with WFI until a doorbell after the `seen`-th, or until `ms` milliseconds passed.
/// Returns the doorbells taken so far, or `None` at the timeout.
fn wait_for_doorbell(seen: u64, ms: u64) -> Option<u64> {
    let deadline = timer::counter() + ms * timer::frequency() / 1000;
    timer::set_deadline(deadline);
    timer::enable();
    let outcome = loop {
        // Masked between the check and WFI, so that a doorbell in between still wakes it.
        disable_irqs();
        let taken = DOORBELLS.load(Ordering::Relaxed);
        if taken != seen {
            break Some(taken);
        }
        if timer::counter() >= deadline {
            break None;
        }
        wait_for_interrupt();
        enable_irqs();
    };
    enable_irqs();
    timer::disable();
    // What the doorbell announces was written before it was rung.
    channel::barrier();
    outcome
}

/// Byte `i` of the round of `len` bytes.
fn pattern(len: usize, i: usize) -> u8 {
    (len * 7 + i * 13 + 1) as u8
}

/// Publishes round `sequence` of `len` (its bytes already written) in `window`.
fn publish(window: &Window, sequence: u32, len: u32) {
    window.write_u32(LENGTH, len);
    channel::barrier();
    window.write_u32(SEQUENCE, sequence);
    channel::barrier();
}

struct Writer {
    max: usize,
    rounds: u64,
    stopped: Option<u64>,
}

/// One round: publishes `len` (its bytes written), rings, waits for the answer of the same
/// sequence. Returns the counter ticks from the ring to the answer, or what went wrong.
fn round(
    setup: &Setup,
    incoming: &Window,
    outgoing: &Window,
    sequence: u32,
    len: u32,
) -> Result<u64, &'static str> {
    publish(outgoing, sequence, len);
    let mut seen = DOORBELLS.load(Ordering::Relaxed);
    let start = timer::counter();
    if channel::notify(setup.tx, setup.to).is_err() {
        return Err("the doorbell was refused");
    }
    loop {
        seen = wait_for_doorbell(seen, ROUND_TIMEOUT_MS).ok_or("no doorbell back")?;
        let end = timer::counter();
        if incoming.read_u32(SEQUENCE) == sequence {
            return if incoming.read_u32(LENGTH) == len {
                Ok(end - start)
            } else {
                Err("the answer has another length")
            };
        }
    }
}

fn writer(setup: &Setup, incoming: Window, outgoing: Window, config: &Writer) -> ! {
    let max = config
        .max
        .min(outgoing.size() - DATA)
        .min(incoming.size() - DATA);
    let mut sequence = 0u32;
    let mut failures = 0u32;
    let mut content = Figure::new();
    for len in 1..=max {
        for i in 0..len {
            outgoing.write_u8(DATA + i, pattern(len, i));
        }
        sequence += 1;
        match round(setup, &incoming, &outgoing, sequence, len as u32) {
            Ok(ticks) => {
                content.add(ticks);
                if let Some(i) = (0..len).find(|&i| incoming.read_u8(DATA + i) != !pattern(len, i))
                {
                    println!("chan: FAIL size {len}: byte {i} of the answer is wrong");
                    failures += 1;
                }
            }
            Err(why) => {
                println!("chan: FAIL size {len}: {why}");
                failures += 1;
            }
        }
    }
    println!(
        "chan: round trips: {max} sizes 1..={max}, content checked both ways, failures {failures}"
    );
    content.print_as(format_args!("doorbell-round-trip-with-content"));

    let mut doorbell = Figure::new();
    for _ in 0..config.rounds {
        sequence += 1;
        match round(setup, &incoming, &outgoing, sequence, PING) {
            Ok(ticks) => doorbell.add(ticks),
            Err(why) => {
                println!("chan: FAIL ping: {why}");
                failures += 1;
            }
        }
    }
    doorbell.print_as(format_args!("doorbell-round-trip"));

    // The end: the reader powers off after it has seen it.
    sequence += 1;
    publish(&outgoing, sequence, END);
    let _ = channel::notify(setup.tx, setup.to);

    let mut refusals = 0u32;
    let f = &mut refusals;
    case(
        "no-such-channel",
        channel::notify(99, 0),
        ChannelError::NoSuchChannel,
        f,
    );
    case(
        "no-such-member",
        channel::notify(setup.tx, 9),
        ChannelError::NoSuchChannel,
        f,
    );
    case(
        "reader-stopped",
        ring_until_stopped(setup.tx, setup.to),
        ChannelError::PeerStopped,
        f,
    );
    if let Some(stopped) = config.stopped {
        case(
            "member-stopped",
            ring_until_stopped(setup.tx, stopped),
            ChannelError::PeerStopped,
            f,
        );
        case(
            "every-other-stopped",
            channel::notify(setup.tx, EVERY_OTHER_MEMBER),
            ChannelError::PeerStopped,
            f,
        );
    }
    println!("chan: writer done: {failures} round-trip failures, {refusals} refusal failures");
    system_off()
}

/// Rings member `member` of channel `tx` once a millisecond until it is refused as stopped (at
/// most 2 s). It waits with WFI in between: a busy wait would keep QEMU's round robin of vCPUs
/// (one host thread under `-icount`) on this vCPU for its whole slice, and the member would
/// take seconds of virtual time to stop.
fn ring_until_stopped(tx: u64, member: u64) -> Result<u64, ChannelError> {
    let deadline = timer::counter() + 2 * timer::frequency();
    loop {
        let rung = channel::notify(tx, member);
        if rung.is_err() || timer::counter() >= deadline {
            return rung;
        }
        let _ = wait_for_doorbell(DOORBELLS.load(Ordering::Relaxed), 1);
    }
}

/// Prints one refusal case's outcome; counts a failure.
fn case(name: &str, got: Result<u64, ChannelError>, expected: ChannelError, failures: &mut u32) {
    let ok = got == Err(expected);
    if !ok {
        *failures += 1;
    }
    let got = match got {
        Ok(rung) => rung as i64,
        Err(error) => error.code(),
    };
    println!(
        "chan: case {name}: got {got} expected {} {}",
        expected.code(),
        if ok { "ok" } else { "FAIL" }
    );
}

fn reader(setup: &Setup, incoming: Window, outgoing: Window) -> ! {
    let mut seen = 0;
    let mut last = 0u32;
    let (mut checked, mut pings, mut wrong) = (0u64, 0u64, 0u64);
    loop {
        // The writer paces the rounds; a doorbell may take longer than one round's timeout
        // (it boots after this VM), so a timeout here just waits again.
        let Some(taken) = wait_for_doorbell(seen, ROUND_TIMEOUT_MS) else {
            continue;
        };
        seen = taken;
        let sequence = incoming.read_u32(SEQUENCE);
        if sequence == last {
            // A doorbell with nothing new (rung to every member, or a second ring).
            continue;
        }
        last = sequence;
        let len = incoming.read_u32(LENGTH);
        match len {
            END => {
                println!(
                    "chan: reader: {checked} rounds checked ({wrong} wrong), {pings} pings \
                     answered"
                );
                system_off()
            }
            PING => pings += 1,
            len => {
                let len = (len as usize).min(incoming.size() - DATA);
                let mut right = true;
                for i in 0..len {
                    let byte = incoming.read_u8(DATA + i);
                    right &= byte == pattern(len, i);
                    outgoing.write_u8(DATA + i, !byte);
                }
                if !right {
                    wrong += 1;
                    println!("chan: FAIL reader: round {sequence} of {len} bytes is wrong");
                }
                checked += 1;
            }
        }
        publish(&outgoing, sequence, len);
        if let Err(error) = channel::notify(setup.tx, setup.to) {
            println!("chan: FAIL reader: doorbell refused: {error:?}");
        }
    }
}

fn ro_writer(window: Window) -> ! {
    println!(
        "chan: ro-writer: reads {:#x} at {:#x}, then writes it",
        window.read_u32(SEQUENCE),
        window.base()
    );
    window.write_u32(SEQUENCE, 0xdead);
    println!("chan: FAIL ro-writer: the write to a read-only window went through");
    system_off()
}

fn outsider(tx: u64) -> ! {
    let refused = [0, EVERY_OTHER_MEMBER]
        .into_iter()
        .filter(|&member| channel::notify(tx, member) == Err(ChannelError::NotMember))
        .count();
    println!(
        "chan: outsider: {refused} of 2 doorbells on channel {tx} refused with {}",
        ChannelError::NotMember.code()
    );
    system_off()
}

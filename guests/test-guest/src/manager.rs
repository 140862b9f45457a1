//! Manager mode (`keel.mode=manager keel.managed=<vm id>`): Keel's health services on another
//! VM, each step printed as one line a scenario checks, and the health notices Keel sends as
//! they arrive. A VM the configuration does not make the other's manager runs the same steps
//! and is refused each (`denied`). Steps, about a second apart:
//!
//! 1. `manager: status vm=<id> <state> restarts=<n> last=<event> -> <action>`
//! 2. `manager: restart vm=<id>: ok`, its notice, then its status (running, 1 restart)
//! 3. `manager: stats vm=<id> vcpu=0 jobs=<n> misses=<n> overruns=<n>` (a shared pCPU's)
//! 4. `manager: stop vm=<id>: ok`, its notice, its status (stopped)
//! 5. `manager: start vm=<id>: ok`, its notice, its status (running, 2 restarts)
//!
//! then the notices that arrive within `keel.seconds` (default 10) of boot, and SYSTEM_OFF.
//! A notice: `manager: notice vm=<id> event=<event> action=<action> restarts=<n>`.
//!
//! With `keel.restarts=<n>` it runs the restart loop instead ([`restart_loop`]: the leak
//! check of the test command, and `cargo xtask soak`): n restarts, each timed, Keel's
//! resource counters of the managed VM compared with those at its boot after each;
//! `keel.running=<ms>` or `keel.restart-on-key` say how long the VM runs between two.
//!
//! With `keel.storm=<ms>` it restarts, stops and starts the VM as fast as it can instead
//! ([`crate::storm`]).

use keel_guest::abi::CallError;
use keel_guest::bootargs::BootArgs;
use keel_guest::health::{self, Notice, Resources, Status, KEEL_SENDER};
use keel_guest::message::{receive, ReceiveError};
use keel_guest::{println, system_off, timer};

fn result(step: &str, vm: u64, outcome: Result<(), CallError>) {
    match outcome {
        Ok(()) => println!("manager: {step} vm={vm}: ok"),
        Err(error) => println!("manager: {step} vm={vm}: {}", name(error)),
    }
}

fn name(error: CallError) -> &'static str {
    match error {
        CallError::Denied => "denied",
        CallError::NotSupported => "not supported",
        CallError::InvalidParameters => "invalid parameters",
        CallError::AlreadyOn => "already running",
        CallError::OnPending => "restart under way",
        CallError::InvalidAddress => "invalid address",
    }
}

fn status(vm: u64) {
    match health::status(vm) {
        Ok(Status {
            state,
            restarts,
            last,
        }) => match last {
            Some((event, action, _)) => println!(
                "manager: status vm={vm} {} restarts={restarts} last={} -> {}",
                state.name(),
                event.name(),
                action.name()
            ),
            None => println!(
                "manager: status vm={vm} {} restarts={restarts} last=none",
                state.name()
            ),
        },
        Err(error) => println!("manager: status vm={vm}: {}", name(error)),
    }
}

/// Prints the notices that arrive until the counter reaches `until`.
fn notices(until: u64) {
    let mut buffer = [0u8; 64];
    loop {
        match receive(&mut buffer, until) {
            Ok(message) if message.vm == u64::from(KEEL_SENDER) => {
                match Notice::from_bytes(buffer.get(..message.len).unwrap_or_default()) {
                    Some(notice) => println!(
                        "manager: notice vm={} event={} action={} restarts={}",
                        notice.vm,
                        notice.event.name(),
                        notice.action.name(),
                        notice.restarts
                    ),
                    None => println!("manager: malformed notice of {} bytes", message.len),
                }
            }
            Ok(message) => println!("manager: message from vm {}", message.vm),
            Err(ReceiveError::Refused(_)) => {
                if timer::counter() >= until {
                    return;
                }
            }
            Err(ReceiveError::BufferTooSmall { len }) => {
                println!("manager: a message of {len} bytes is too long");
                return;
            }
        }
    }
}

fn show(resources: &Resources) -> impl core::fmt::Display + '_ {
    struct Shown<'a>(&'a Resources);
    impl core::fmt::Display for Shown<'_> {
        fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            let r = self.0;
            write!(
                f,
                "messages={} tasks={} slots={} raised={} dma={} watchdog={}",
                r.messages, r.tasks, r.slots, r.raised, r.dma, r.watchdog
            )
        }
    }
    Shown(resources)
}

/// Sleeps until the counter reaches `until`.
fn sleep_until(until: u64) {
    while timer::counter() < until {
        timer::sleep_until(until);
    }
}

/// How long the managed VM runs before each reading of its counters and each restart:
/// `keel.running=<ms>` of it (default 1000), or, with `keel.restart-on-key`, until a byte is
/// typed on this VM's console (the host types one once the managed VM is where it should be,
/// Linux at its shell).
#[derive(Clone, Copy)]
enum Settle {
    Running { ticks: u64 },
    Key,
}

impl Settle {
    fn from_args(args: &BootArgs<'_>) -> Self {
        if args.has_flag("keel.restart-on-key") {
            // Polled (the manager takes no interrupts): the receiver on, its interrupt not.
            keel_guest::console::CONSOLE.enable();
            Settle::Key
        } else {
            let ms = args
                .value("keel.running")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1000);
            Settle::Running {
                ticks: ms * timer::frequency() / 1000,
            }
        }
    }

    fn wait(self) {
        match self {
            Settle::Running { ticks } => sleep_until(timer::counter() + ticks),
            Settle::Key => {
                let poll = timer::frequency() / 1000;
                while keel_guest::console::CONSOLE.try_getc().is_none() {
                    sleep_until(timer::counter() + poll);
                }
            }
        }
    }
}

/// How often the time until a restarted VM runs again is polled: every 50 us (a finer poll
/// would take virtual time from the restart itself under QEMU's icount, whose clock all CPUs
/// share).
const RUNNING_POLL_PER_SECOND: u64 = 20_000;

/// Takes every notice queued for this manager; how many of them say that VM `vm` was
/// restarted at a manager's request (others are printed).
fn take_restart_notices(vm: u64) -> u64 {
    let mut buffer = [0u8; 64];
    let mut restarts = 0;
    while let Ok(message) = receive(&mut buffer, 0) {
        let notice = (message.vm == u64::from(KEEL_SENDER))
            .then(|| Notice::from_bytes(buffer.get(..message.len).unwrap_or_default()))
            .flatten();
        match notice {
            Some(notice)
                if u64::from(notice.vm) == vm
                    && notice.event == keel_guest::health::Event::ManagerRestart =>
            {
                restarts += 1;
            }
            Some(notice) => println!(
                "manager: notice vm={} event={} action={} restarts={}",
                notice.vm,
                notice.event.name(),
                notice.action.name(),
                notice.restarts
            ),
            None => println!("manager: message from vm {}", message.vm),
        }
    }
    restarts
}

/// How many times [`settled_resources`] reads the counters, 1 ms apart.
const RESOURCE_READINGS: u32 = 8;

/// Keel's resource counters of VM `vm`, with its queued messages and raised interrupts the
/// least of [`RESOURCE_READINGS`] readings 1 ms apart: a running Linux has interrupts and
/// messages in flight at any one instant (its console's, its timer's), a leaked one stays in
/// every reading. The others are the last reading's.
fn settled_resources(vm: u64) -> Result<Resources, CallError> {
    let mut least = health::resources(vm)?;
    for _ in 1..RESOURCE_READINGS {
        sleep_until(timer::counter() + timer::frequency() / 1000);
        let now = health::resources(vm)?;
        least = Resources {
            messages: least.messages.min(now.messages),
            raised: least.raised.min(now.raised),
            ..now
        };
    }
    Ok(least)
}

/// `keel.restarts=<n>`: Keel's resource counters of the managed VM read once it has settled
/// (see [`Settle`] and [`settled_resources`]), then after each of `n` restarts (each waited for until KEEL_VM_STATUS
/// says it runs, then settled again), each compared with the first. Lines:
/// `manager: resources vm=<id> at boot: <counters>`, for each restart `manager: restart
/// vm=<id> <i>: running after <us> us` (from the KEEL_VM_RESTART call, polled every 50 us)
/// and `manager: resources vm=<id> restart <i>: <counters>`, and at the end `manager:
/// resources unchanged after <n> restarts` or `manager: resources changed`, then `manager:
/// notices vm=<id>: <k> restarts` (the restart notices Keel sent); then the managed VM is
/// stopped and this one powers off.
fn restart_loop(vm: u64, restarts: u64, settle: Settle) -> ! {
    let frequency = timer::frequency();
    settle.wait();
    let first = match settled_resources(vm) {
        Ok(resources) => resources,
        Err(error) => {
            println!("manager: resources vm={vm}: {}", name(error));
            system_off();
        }
    };
    println!("manager: resources vm={vm} at boot: {}", show(&first));
    let mut changed = false;
    let mut noticed = 0;
    for restart in 1..=restarts {
        let asked = timer::counter();
        if let Err(error) = health::restart(vm) {
            println!("manager: restart vm={vm}: {}", name(error));
            system_off();
        }
        let poll = frequency / RUNNING_POLL_PER_SECOND;
        let running = loop {
            let now = timer::counter();
            if health::status(vm).is_ok_and(|s| s.state == keel_guest::health::VmStatus::Running) {
                break now;
            }
            sleep_until(now + poll);
        };
        println!(
            "manager: restart vm={vm} {restart}: running after {} us",
            (running - asked) * 1_000_000 / frequency
        );
        noticed += take_restart_notices(vm);
        settle.wait();
        match settled_resources(vm) {
            Ok(now) => {
                println!(
                    "manager: resources vm={vm} restart {restart}: {}",
                    show(&now)
                );
                changed |= now != first;
            }
            Err(error) => {
                println!("manager: resources vm={vm}: {}", name(error));
                system_off();
            }
        }
    }
    if changed {
        println!("manager: resources changed");
    } else {
        println!("manager: resources unchanged after {restarts} restarts");
    }
    noticed += take_restart_notices(vm);
    println!("manager: notices vm={vm}: {noticed} restarts");
    result("stop", vm, health::stop(vm));
    system_off()
}

/// Runs the steps on `keel.managed` (or the restart loop, with `keel.restarts`), then
/// SYSTEM_OFF.
pub fn run(args: BootArgs<'_>) -> ! {
    let frequency = timer::frequency();
    let start = timer::counter();
    let at = |ms: u64| start + ms * frequency / 1000;
    let Some(vm) = args
        .value("keel.managed")
        .and_then(|v| v.parse::<u64>().ok())
    else {
        println!("manager: keel.managed=<vm id> is missing");
        system_off();
    };
    if let Some(restarts) = args
        .value("keel.restarts")
        .and_then(|v| v.parse::<u64>().ok())
    {
        restart_loop(vm, restarts, Settle::from_args(&args));
    }
    if let Some(millis) = args.value("keel.storm").and_then(|v| v.parse::<u64>().ok()) {
        crate::storm::run(vm, millis, &args);
    }
    let seconds = args
        .value("keel.seconds")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(10);

    notices(at(1000));
    status(vm);
    result("restart", vm, health::restart(vm));
    notices(at(2500));
    status(vm);
    match health::sched_stats(vm, 0) {
        Ok(stats) => println!(
            "manager: stats vm={vm} vcpu=0 jobs={} misses={} overruns={}",
            stats.jobs, stats.deadline_misses, stats.overruns
        ),
        Err(error) => println!("manager: stats vm={vm} vcpu=0: {}", name(error)),
    }
    result("stop", vm, health::stop(vm));
    notices(at(3500));
    status(vm);
    result("start", vm, health::start(vm));
    notices(at(5000));
    status(vm);
    notices(at(seconds * 1000));
    println!("manager: done");
    system_off()
}

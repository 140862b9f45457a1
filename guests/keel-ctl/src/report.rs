//! The lines `keel` prints, one per answer, in a fixed shape a script can parse:
//!
//! ```text
//! vm 1 (rt): running, 2 restarts, last: watchdog expired -> restarting at 1.234 s
//! vm 1 (rt): restarting
//! vm 1 (rt) vcpu 0: 5000 jobs, 0 deadline misses, 0 budget overruns, worst response 12.345 us
//! event: vm 1 (rt): fault -> stopped at 3.000 s, 2 restarts since boot
//! message: from vm 2 vcpu 0, 5 bytes: 68656c6c6f
//! ```
//!
//! A VM is `vm ID`, followed by its name in parentheses when this VM's device tree names it.

use keel_core::health::{Action, Event, Notice};

use crate::services::{LastEvent, Resources, SchedStats, Status};

/// `vm 1` or `vm 1 (rt)`.
fn vm_label(id: u16, name: Option<&str>) -> String {
    match name {
        Some(name) => format!("vm {id} ({name})"),
        None => format!("vm {id}"),
    }
}

/// `count` and `noun`, plural unless one (`1 restart`, `0 restarts`).
fn counted(count: u64, noun: &str) -> String {
    if count == 1 {
        format!("1 {noun}")
    } else if noun.ends_with('s') {
        format!("{count} {noun}es")
    } else {
        format!("{count} {noun}s")
    }
}

/// Nanoseconds as seconds with three decimals: `1.234 s`.
pub fn seconds(ns: u64) -> String {
    format!(
        "{}.{:03} s",
        ns / 1_000_000_000,
        ns % 1_000_000_000 / 1_000_000
    )
}

/// Nanoseconds as microseconds with three decimals: `12.345 us`.
pub fn micros(ns: u64) -> String {
    format!("{}.{:03} us", ns / 1_000, ns % 1_000)
}

fn event_name(event: Result<Event, u8>) -> String {
    match event {
        Ok(event) => event.name().to_string(),
        Err(code) => format!("event {code}"),
    }
}

fn action_name(action: Result<Action, u8>) -> String {
    match action {
        Ok(action) => action.name().to_string(),
        Err(code) => format!("action {code}"),
    }
}

/// `watchdog expired -> restarting at 1.234 s`.
fn last_event(last: &LastEvent) -> String {
    format!(
        "{} -> {} at {}",
        event_name(last.event),
        action_name(last.action),
        seconds(last.time_ns)
    )
}

/// `keel status`'s line.
pub fn status_line(id: u16, name: Option<&str>, status: &Status) -> String {
    let state = match status.state {
        Ok(state) => state.name().to_string(),
        Err(code) => format!("state {code}"),
    };
    let last = status
        .last
        .as_ref()
        .map_or_else(|| "none".to_string(), last_event);
    format!(
        "{}: {state}, {}, last: {last}",
        vm_label(id, name),
        counted(status.restarts, "restart")
    )
}

/// The line of a `start`, `stop` or `restart` Keel accepted.
pub fn done_line(verb: &str, id: u16, name: Option<&str>) -> String {
    let done = match verb {
        "start" => "starting",
        "stop" => "stopped",
        _ => "restarting",
    };
    format!("{}: {done}", vm_label(id, name))
}

/// `keel stats`'s line.
pub fn stats_line(id: u16, name: Option<&str>, vcpu: u16, stats: &SchedStats) -> String {
    format!(
        "{} vcpu {vcpu}: {}, {}, {}, worst response {}",
        vm_label(id, name),
        counted(stats.jobs, "job"),
        counted(stats.misses, "deadline miss"),
        counted(stats.overruns, "budget overrun"),
        micros(stats.worst_ns)
    )
}

/// `keel resources`'s line.
pub fn resources_line(id: u16, name: Option<&str>, resources: &Resources) -> String {
    let on_off = |on: bool| if on { "on" } else { "off" };
    format!(
        "{}: {} queued, {}, {}, {} raised, DMA {}, watchdog {}",
        vm_label(id, name),
        counted(resources.messages, "message"),
        counted(resources.tasks, "task"),
        counted(resources.slots, "scheduler slot"),
        counted(u64::from(resources.raised), "interrupt"),
        on_off(resources.dma),
        on_off(resources.watchdog)
    )
}

/// A health notice's line (`name`: the VM's, if known).
pub fn notice_line(notice: &Notice, name: Option<&str>) -> String {
    format!(
        "event: {}: {} -> {} at {}, {} since boot",
        vm_label(notice.vm, name),
        notice.event.name(),
        notice.action.name(),
        seconds(notice.time_ns),
        counted(u64::from(notice.restarts), "restart")
    )
}

/// Another message's line: its sender and its bytes in hexadecimal.
pub fn message_line(vm: u16, vcpu: u16, bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    let sender = if vm == keel_core::health::KEEL_SENDER {
        "keel".to_string()
    } else {
        format!("vm {vm} vcpu {vcpu}")
    };
    format!(
        "message: from {sender}, {}: {hex}",
        counted(bytes.len() as u64, "byte")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::health::VmStatus;

    #[test]
    fn times_keep_three_decimals() {
        assert_eq!(seconds(0), "0.000 s");
        assert_eq!(seconds(1_234_567_890), "1.234 s");
        assert_eq!(seconds(60_000_000_000), "60.000 s");
        assert_eq!(micros(999), "0.999 us");
        assert_eq!(micros(123_456), "123.456 us");
    }

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(counted(0, "restart"), "0 restarts");
        assert_eq!(counted(1, "restart"), "1 restart");
        assert_eq!(counted(2, "deadline miss"), "2 deadline misses");
        assert_eq!(counted(1, "deadline miss"), "1 deadline miss");
        assert_eq!(counted(3, "budget overrun"), "3 budget overruns");
    }

    #[test]
    fn a_status_without_an_event_and_with_unknown_codes() {
        let fresh = Status {
            state: Ok(VmStatus::Running),
            restarts: 0,
            last: None,
        };
        assert_eq!(
            status_line(2, None, &fresh),
            "vm 2: running, 0 restarts, last: none"
        );
        let newer = Status {
            state: Err(7),
            restarts: 1,
            last: Some(LastEvent {
                event: Err(9),
                action: Ok(Action::Stop),
                time_ns: 2_500_000_000,
            }),
        };
        assert_eq!(
            status_line(2, Some("bare"), &newer),
            "vm 2 (bare): state 7, 1 restart, last: event 9 -> stopped at 2.500 s"
        );
    }

    #[test]
    fn resources_name_each_counter() {
        let resources = Resources {
            messages: 0,
            tasks: 3,
            slots: 1,
            raised: 2,
            dma: false,
            watchdog: true,
        };
        assert_eq!(
            resources_line(1, Some("rt"), &resources),
            "vm 1 (rt): 0 messages queued, 3 tasks, 1 scheduler slot, 2 interrupts raised, \
             DMA off, watchdog on"
        );
    }

    #[test]
    fn messages_show_their_sender_and_bytes() {
        assert_eq!(
            message_line(3, 1, &[0, 0xff, 0x10]),
            "message: from vm 3 vcpu 1, 3 bytes: 00ff10"
        );
        assert_eq!(
            message_line(keel_core::health::KEEL_SENDER, 0, &[1]),
            "message: from keel, 1 byte: 01"
        );
    }
}

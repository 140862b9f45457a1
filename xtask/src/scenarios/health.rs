//! Health monitoring of bare-metal VMs: restarts by policy up to a limit within a window, a
//! watchdog that a hung VM stops keeping, memory pristine after each restart, a manager's
//! services (and a VM without the grant refused each), the real-time partition beside them
//! keeping every tick.

use regex::Regex;

use super::{
    boot_to_end, check_ticks, expect_clean_exit, expect_line, lines_of, with_console_tail, Scenario,
};
use crate::qemu::Ended;
use crate::Result;

pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "health: a VM that faults is restarted by policy and comes back, pristine, 3 times, then stopped at its limit; a hung VM's watchdog restarts it, then stops it; one that overruns its budget is stopped at its miss threshold; the real-time VM on the same pCPU keeps every tick".into(),
            run: Box::new(restart_by_policy),
        },
        Scenario {
            name: "health: a manager restarts, stops, starts and reads a VM, gets every notice; a VM without the grant is refused each service".into(),
            run: Box::new(manager),
        },
        Scenario {
            name: "health: nothing leaks: Keel's resource counters of the sample partition (messages, tasks, scheduler slots, raised interrupts, DMA, watchdog) are as at boot after 5 restarts; its neighbour keeps every tick".into(),
            run: Box::new(leaks),
        },
    ]
}

fn leaks() -> Result<()> {
    let ended = boot_to_end("health-leaks")?;
    let check = || -> Result<()> {
        // Its three tasks at boot: the counters are read with the partition running.
        expect_line(
            &ended,
            r"^\[mgr\] manager: resources vm=0 at boot: messages=0 tasks=3 slots=[1-9]\d* raised=\d+ dma=false watchdog=false$",
        )?;
        let after = count(&ended, r"^\[mgr\] manager: resources vm=0 restart \d: ");
        if after != 5 {
            return Err(format!("{after} readings after a restart, expected 5"));
        }
        expect_line(
            &ended,
            r"^\[mgr\] manager: resources unchanged after 5 restarts$",
        )?;
        let restarts = count(
            &ended,
            r"^\[keel\] vm 'control' \(id 0\) restarts: asked by 'mgr'$",
        );
        if restarts != 5 {
            return Err(format!("Keel said {restarts} restarts, expected 5"));
        }
        check_ticks(&ended, "steady", 13)?;
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

/// How many times VM `vm` booted (its test guest's first line).
fn boots(ended: &Ended, vm: &str) -> usize {
    lines_of(ended, vm)
        .iter()
        .filter(|l| l.starts_with("test-guest: vm ") && l.contains(" mode "))
        .count()
}

fn count(ended: &Ended, pattern: &str) -> usize {
    let regex = Regex::new(pattern).unwrap();
    ended.lines.iter().filter(|l| regex.is_match(l)).count()
}

fn restart_by_policy() -> Result<()> {
    let ended = boot_to_end("health-restart")?;
    let check = || -> Result<()> {
        // "flaky": three restarts by policy, each said with its place in the window, then a
        // stop at the limit; four boots, each after the first finding its memory pristine.
        for n in 1..=3 {
            expect_line(
                &ended,
                &format!(
                    r"^\[keel\] vm 'flaky' \(id 0\) restarts: .*outside.* \(restart {n} of at most 3 within 60000 ms\)$"
                ),
            )?;
        }
        expect_line(
            &ended,
            r"^\[keel\] vm 'flaky' \(id 0\) stopped: .* \(3 restarts within 60000 ms: its limit\)$",
        )?;
        let flaky_boots = boots(&ended, "flaky");
        if flaky_boots != 4 {
            return Err(format!("vm 'flaky' booted {flaky_boots} times, expected 4"));
        }
        let clean = count(&ended, r"^\[flaky\] pristine: clean$");
        if clean != 4 {
            return Err(format!(
                "vm 'flaky' found its memory clean at {clean} of its 4 boots"
            ));
        }
        // Each incarnation ran: a first second of ticks after each boot.
        let firsts = count(&ended, r"^\[flaky\] tick: s=1 ");
        if firsts != 4 {
            return Err(format!(
                "vm 'flaky' ticked its first second {firsts} times, expected 4"
            ));
        }
        // "hung": its watchdog expires once it hangs; restarted once, then stopped.
        expect_line(
            &ended,
            r"^\[hung\] watchdog: kept every 100 ms, period 300 ms$",
        )?;
        expect_line(
            &ended,
            r"^\[keel\] vm 'hung' \(id 2\) restarts: watchdog expired \(restart 1 of at most 1 within 60000 ms\)$",
        )?;
        expect_line(
            &ended,
            r"^\[keel\] vm 'hung' \(id 2\) stopped: watchdog expired \(1 restarts within 60000 ms: its limit\)$",
        )?;
        let hung_boots = boots(&ended, "hung");
        let hangs = count(&ended, r"^\[hung\] hang: interrupts masked, spinning$");
        if hung_boots != 2 || hangs != 2 {
            return Err(format!(
                "vm 'hung' booted {hung_boots} times and hung {hangs} times, expected 2 and 2"
            ));
        }
        // "greedy" overruns its budget every period: stopped at its threshold.
        expect_line(
            &ended,
            r"^\[keel\] vm 'greedy' \(id 3\) stopped: 3 deadline misses or overruns within 1000 ms$",
        )?;
        // "steady" shares pCPU 1 with "flaky": every second's ticks, no gap, none late.
        check_ticks(&ended, "steady", 13)?;
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

fn manager() -> Result<()> {
    let ended = boot_to_end("health-manager")?;
    let check = || -> Result<()> {
        let m = |line: &str| format!(r"^\[mgr\] manager: {line}$");
        for line in [
            "status vm=0 running restarts=0 last=none",
            "restart vm=0: ok",
            "notice vm=0 event=restart asked by a manager action=restarting restarts=1",
            "status vm=0 running restarts=1 last=restart asked by a manager -> restarting",
            r"stats vm=0 vcpu=0 jobs=\d+ misses=0 overruns=0",
            "stop vm=0: ok",
            "notice vm=0 event=stop asked by a manager action=stopped restarts=1",
            "status vm=0 stopped restarts=1 last=stop asked by a manager -> stopped",
            "start vm=0: ok",
            "notice vm=0 event=restart asked by a manager action=restarting restarts=2",
            "status vm=0 running restarts=2 last=restart asked by a manager -> restarting",
            "done",
        ] {
            expect_line(&ended, &m(line))?;
        }
        expect_line(
            &ended,
            r"^\[keel\] vm 'rt' \(id 0\) stopped: asked by 'mgr'$",
        )?;
        expect_line(
            &ended,
            r"^\[keel\] vm 'rt' \(id 0\) restarts: asked by 'mgr'$",
        )?;
        // The VM without the grant: refused each service, sent no notice.
        for step in ["status", "restart", "stop", "start"] {
            expect_line(&ended, &format!(r"^\[nosy\] manager: {step} vm=0: denied$"))?;
        }
        expect_line(&ended, r"^\[nosy\] manager: stats vm=0 vcpu=0: denied$")?;
        if lines_of(&ended, "nosy")
            .iter()
            .any(|l| l.contains("notice"))
        {
            return Err("vm 'nosy' received a health notice".into());
        }
        // The managed partition: three boots (at start, restart, start), each ticking.
        let rt_boots = boots(&ended, "rt");
        if rt_boots != 3 {
            return Err(format!("vm 'rt' booted {rt_boots} times, expected 3"));
        }
        Ok(())
    };
    check().map_err(|m| with_console_tail(m, &ended))?;
    expect_clean_exit(&ended)
}

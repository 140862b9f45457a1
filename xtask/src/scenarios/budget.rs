//! Scenarios of budgets across restarts (issue 19, item 1): the hostile guest's budget attacks
//! (`guests/hostile/src/budget.rs`), a vCPU with a reservation that spins 50 µs of its own time
//! and restarts (SYSTEM_RESET of its VM, or CPU_OFF and a CPU_ON from its sibling on another
//! pCPU), over and over for 2 s of virtual time, on one shared pCPU with the 1 kHz test
//! partition (`configs/tests/budget-*.toml`). Judged by the attacker's own measure of the time
//! it ran (a lower bound, see the guest) against its reservation, and by the partition's worst
//! tick lateness.

use regex::Regex;

use super::sched::GANDALF_LATENESS_BOUND_US;
use super::{boot_to_end, config, expect_clean_exit, lines_of, tick_reports, with_console_tail};
use super::{expect_line, Scenario};
use crate::qemu::Ended;
use crate::Result;

/// Where the attacker ranks against the partition on their pCPU, which sets the bound on the
/// partition's tick lateness.
#[derive(Clone, Copy)]
enum Rank {
    /// Fixed priority, the attacker above: a tick waits at most one budget of the attacker,
    /// which spends its budget as soon as it has it, plus Keel's own
    /// [`GANDALF_LATENESS_BOUND_US`]. (Keel's fixed-priority budget is replenished at each
    /// period like a deferrable server: an attacker that held its budget back to the end of a
    /// period and ran on into the next could make a tick wait two budgets.)
    Above,
    /// Fixed priority, the attacker below: nothing outranks the partition, so a tick waits at
    /// most Keel's own [`GANDALF_LATENESS_BOUND_US`].
    Below,
    /// EDF, two reservations. A tick wakes the partition, whose deadline may be up to its
    /// period away; until it runs, only the attacker, with an earlier deadline, runs. Its
    /// budget, clipped at every start and wake to its bandwidth until its deadline (the CBS
    /// rule), runs out before its next release unless the tick came right at that release:
    /// either way the tick waits at most one budget of the attacker. The partition's own
    /// budget, clipped the same way, is too small for a tick only within
    /// [`TICK_HANDLING_US`] × its period / its budget of its deadline; it then waits for its
    /// next release there, and one budget of the attacker after it. Plus Keel's own
    /// [`GANDALF_LATENESS_BOUND_US`].
    Edf,
}

/// What the partition's budget must hold for one tick to be taken: Keel's wake-up and switch
/// to it and its handler up to the counter read (about 1,500 instructions, 1.5 µs), twice over.
const TICK_HANDLING_US: u64 = 4;

/// One attack in one arrangement.
struct Arrangement {
    /// `configs/tests/<config>.toml`: VM `rt` is the partition, VM `attacker` the hostile
    /// guest (its vCPU 0 on the partition's pCPU).
    config: &'static str,
    /// How the scenario's name describes it.
    what: &'static str,
    rank: Rank,
}

const ARRANGEMENTS: &[Arrangement] = &[
    Arrangement {
        config: "budget-reset-fp",
        what: "fixed priority, attacker above the partition",
        rank: Rank::Above,
    },
    Arrangement {
        config: "budget-reset-edf",
        what: "EDF, attacker beside the partition",
        rank: Rank::Edf,
    },
    Arrangement {
        config: "budget-reset-fp-below",
        what: "fixed priority, attacker below the partition",
        rank: Rank::Below,
    },
    Arrangement {
        config: "budget-cpu-off-fp",
        what: "fixed priority, attacker above the partition",
        rank: Rank::Above,
    },
    Arrangement {
        config: "budget-cpu-off-edf",
        what: "EDF, attacker beside the partition",
        rank: Rank::Edf,
    },
];

/// The attacker's summary line (see the guest).
struct Summary {
    starts: u64,
    clean: u64,
    ran_us: u64,
    elapsed_us: u64,
    restart_us: u64,
    jobs: u64,
    overruns: u64,
}

fn summary(ended: &Ended) -> Result<Summary> {
    let pattern = Regex::new(
        r"^budget: starts=(\d+) clean=(\d+) ran_us=(\d+) elapsed_us=(\d+) restart_us=(\d+) jobs=(\d+) overruns=(\d+)$",
    )
    .unwrap();
    let lines = lines_of(ended, "attacker");
    let c = lines
        .iter()
        .find_map(|line| pattern.captures(line))
        .ok_or("the attacker printed no summary line")?;
    let n = |i: usize| c[i].parse::<u64>().unwrap();
    Ok(Summary {
        starts: n(1),
        clean: n(2),
        ran_us: n(3),
        elapsed_us: n(4),
        restart_us: n(5),
        jobs: n(6),
        overruns: n(7),
    })
}

/// `(budget, period)` of vCPU 0 of VM `vm` and Keel's switch cost, in µs, from the
/// configuration as the compiler reads it.
fn reservation(name: &str, vm: &str) -> Result<(u64, u64, u64)> {
    let system = keel_core::config::load(&config(name), &crate::image::guest_image)
        .map_err(|e| e.to_string())?;
    let reservation = system
        .vms
        .iter()
        .find(|v| v.name == vm)
        .and_then(|v| v.sched.first()?.reservation)
        .ok_or(format!(
            "{name}: vm '{vm}' has no reservation on its vCPU 0"
        ))?;
    Ok((
        reservation.budget / 1000,
        reservation.period / 1000,
        system.switch_cost_ns.div_ceil(1000),
    ))
}

/// Runs one arrangement: the attacker ran at most its budget share, the partition's worst
/// tick lateness is within its rank's bound and every tick was taken, the attack really ran
/// (a start per two periods at least, each entered in the documented state, its ledger kept
/// across them), and the machine powered off by itself.
fn run(arrangement: &Arrangement) -> Result<()> {
    let name = arrangement.config;
    let ended = boot_to_end(name)?;
    let fail = |message: String| with_console_tail(message, &ended);
    let (budget, period, switch) = reservation(name, "attacker")?;
    let attacker = summary(&ended).map_err(fail)?;
    let mut problems = Vec::new();

    // Its windows over the run, at most elapsed / period + 2 (a partial one at each end), each
    // its budget and one switch.
    let windows = attacker.elapsed_us / period + 2;
    let allowed = windows * (budget + switch);
    let share = attacker.elapsed_us * budget / period;
    if attacker.ran_us > allowed {
        problems.push(format!(
            "the attacker ran {} us in {} us (its share {share} us; allowed with a switch per period and the partial periods {allowed} us)",
            attacker.ran_us, attacker.elapsed_us
        ));
    }

    let late = tick_reports(&ended, "rt").iter().map(|r| r.late_us).max();
    let bound = match arrangement.rank {
        Rank::Above => budget + GANDALF_LATENESS_BOUND_US,
        Rank::Below => GANDALF_LATENESS_BOUND_US,
        Rank::Edf => {
            let (rt_budget, rt_period, _) = reservation(name, "rt")?;
            budget + GANDALF_LATENESS_BOUND_US + TICK_HANDLING_US * rt_period / rt_budget
        }
    };
    match late {
        Some(late) if late > bound => problems.push(format!(
            "the partition's worst tick lateness was {late} us, above the {bound} us bound"
        )),
        None => problems.push("the partition reported no ticks".into()),
        Some(_) => {}
    }
    let reports = tick_reports(&ended, "rt");
    let seconds: Vec<u64> = reports.iter().map(|r| r.second).collect();
    if seconds != [1, 2, 3] || reports.iter().any(|r| r.ticks.abs_diff(r.expected) > 1) {
        problems.push(format!(
            "the partition's tick reports (second, ticks, expected): {:?}, expected seconds 1 to 3 each within one tick",
            reports
                .iter()
                .map(|r| (r.second, r.ticks, r.expected))
                .collect::<Vec<_>>()
        ));
    }

    let periods = attacker.elapsed_us / period;
    if attacker.starts * 2 < periods || attacker.clean != attacker.starts {
        problems.push(format!(
            "the attacker started {} times ({} entered clean) in {periods} periods: it did not run its attack",
            attacker.starts, attacker.clean
        ));
    }
    let first_starts = lines_of(&ended, "attacker")
        .iter()
        .filter(|l| l.starts_with("budget: first start"))
        .count();
    if first_starts != 1 {
        problems.push(format!(
            "{first_starts} first starts: the attacker's ledger did not survive its restarts"
        ));
    }
    if !problems.is_empty() {
        let a = &attacker;
        return Err(fail(format!(
            "{}; the attacker: starts={} ran_us={} elapsed_us={} restart_us={}, Keel counted jobs={} overruns={}",
            problems.join("; "),
            a.starts,
            a.ran_us,
            a.elapsed_us,
            a.restart_us,
            a.jobs,
            a.overruns
        )));
    }
    let attack = if name.starts_with("budget-reset") {
        "budget-reset"
    } else {
        "budget-cpu-off"
    };
    expect_line(&ended, &format!(r"^\[attacker\] attack {attack}: done$")).map_err(fail)?;
    expect_clean_exit(&ended)
}

/// The budget scenarios.
pub fn all() -> Vec<Scenario> {
    ARRANGEMENTS
        .iter()
        .map(|arrangement| {
            let attack = if arrangement.config.starts_with("budget-reset") {
                "budget-reset: a vCPU that spins 50 us then resets its VM"
            } else {
                "budget-cpu-off: a vCPU that spins 50 us then is turned off and on"
            };
            Scenario {
                name: format!(
                    "{}: {attack} ({}): it runs at most its budget share, the 1 kHz partition's ticks stay in bound",
                    arrangement.config, arrangement.what
                ),
                run: Box::new(move || run(arrangement)),
            }
        })
        .collect()
}

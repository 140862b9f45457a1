//! `foreign-records` (issue 19, item 4): the VM asks Keel about what is not its own. Keel's
//! record of a pCPU's longest interrupts-masked stretch (KEEL_MASKED_STRETCH) holds the
//! ESR_EL2 and ELR_EL2 of a trap there: on the victim's pCPU, the victim's own trap and program
//! counter. Each probe aims at it and at every other pCPU not the attacker's alone, reading
//! and resetting, then at the victim's real-time task statistics (KEEL_TASK_STATS): each call
//! must be refused with nothing written back (x1..x3, or x1..x5, as the guest passed them),
//! while the call on a pCPU of its own still answers.
//!
//! The placement comes from the command line, as the scenario wrote the configuration:
//! `keel.victim-pcpus=1` and `keel.own-pcpus=2,3` (`none` when the attacker shares the
//! victim's pCPU and has none of its own).

use keel_core::tasks::TaskError;
use keel_guest::abi::{self, CallError};
use keel_guest::bootargs::BootArgs;
use keel_guest::smccc::hvc_call7;
use keel_guest::vm_id;

use crate::probe;

/// pCPUs asked about: every one Keel can have (8), and one beyond.
const PCPUS: u64 = 9;
/// VMs asked about (Keel's most, 16).
const VMS: u64 = 16;
/// Task indexes asked about per VM (a partition's most, 6, and one beyond).
const TASK_INDEXES: u64 = 7;

const DENIED: i64 = CallError::Denied as i64;
const NOT_SUPPORTED: i64 = CallError::NotSupported as i64;

/// The pCPUs listed in `value` (`2,3`; `none` or absent: none), as a bit set.
fn pcpu_set(value: Option<&str>) -> u64 {
    value
        .unwrap_or("none")
        .split(',')
        .filter_map(|pcpu| pcpu.parse::<u32>().ok())
        .filter(|&pcpu| u64::from(pcpu) < PCPUS)
        .fold(0, |set, pcpu| set | 1 << pcpu)
}

/// KEEL_MASKED_STRETCH of `pcpu` (`reset`: the record starts again), with x3 = 0: x0..x3.
fn masked_stretch(pcpu: u64, reset: bool) -> [u64; 4] {
    // SAFETY: reading and resetting a record of Keel's changes nothing of this guest's.
    let x = unsafe {
        hvc_call7(
            abi::KEEL_MASKED_STRETCH,
            [pcpu, u64::from(reset), 0, 0, 0, 0, 0],
        )
    };
    [x[0], x[1], x[2], x[3]]
}

/// Runs every probe of `foreign-records`.
pub fn foreign_records(args: &BootArgs<'_>) {
    let own = pcpu_set(args.value("keel.own-pcpus"));
    let victim = pcpu_set(args.value("keel.victim-pcpus"));
    if victim == 0 || victim & own != 0 {
        probe!(
            "masked-stretch-foreign",
            false,
            "keel.victim-pcpus and keel.own-pcpus must name the victim's pCPU and the attacker's apart"
        );
        return;
    }
    masked_stretch_foreign(own, victim);
    masked_stretch_own(own);
    task_stats_foreign();
}

/// Every pCPU not its own, the victim's first: a read, a reset, and a read again must each be
/// refused (DENIED where the pCPU exists, NOT_SUPPORTED beyond), with x1..x3 untouched.
fn masked_stretch_foreign(own: u64, victim: u64) {
    let (mut asked, mut answered, mut victim_denied) = (0, 0, 0);
    for pcpu in (0..PCPUS).filter(|pcpu| own & 1 << pcpu == 0) {
        let is_victims = victim & 1 << pcpu != 0;
        for reset in [false, true, false] {
            asked += 1;
            let x = masked_stretch(pcpu, reset);
            let code = x[0] as i64;
            let untouched = x[1] == pcpu && x[2] == u64::from(reset) && x[3] == 0;
            if (code == DENIED || code == NOT_SUPPORTED) && untouched {
                if is_victims && code == DENIED {
                    victim_denied += 1;
                }
                continue;
            }
            answered += 1;
            keel_guest::println!(
                "hostile: masked-stretch of pCPU {pcpu}{}{}: x0={} x1={:#x} x2={:#x} x3={:#x}",
                if is_victims { " (the victim's)" } else { "" },
                if reset { " with reset" } else { "" },
                code,
                x[1],
                x[2],
                x[3]
            );
        }
    }
    let victim_calls = 3 * victim.count_ones();
    probe!(
        "masked-stretch-foreign",
        answered == 0 && victim_denied == victim_calls,
        "{asked} reads and resets of the pCPUs not its own: {answered} answered; the victim's pCPU: {victim_denied} of {victim_calls} denied"
    );
}

/// Every pCPU of its own alone: a read and a reset answer (a length, x0 >= 0). With no pCPU
/// of its own (the shared variant, where it shares the victim's) it has nothing it may read:
/// the probe is not run and prints nothing, and the scenario does not ask for it there.
fn masked_stretch_own(own: u64) {
    if own == 0 {
        return;
    }
    let (mut asked, mut refused) = (0, 0);
    for pcpu in (0..PCPUS).filter(|pcpu| own & 1 << pcpu != 0) {
        for reset in [false, true] {
            asked += 1;
            let x = masked_stretch(pcpu, reset);
            if (x[0] as i64) < 0 {
                refused += 1;
                keel_guest::println!(
                    "hostile: masked-stretch of its own pCPU {pcpu}: {}",
                    x[0] as i64
                );
            }
        }
    }
    probe!(
        "masked-stretch-own",
        asked > 0 && refused == 0,
        "{asked} reads and resets of its own pCPUs: {refused} refused"
    );
}

/// Every task handle of every other VM, the victim's among them: KEEL_TASK_STATS refused as
/// not allowed (or no such task), x1..x5 untouched.
fn task_stats_foreign() {
    let (this_vm, _) = vm_id();
    let refusals = [TaskError::NotAllowed, TaskError::NoSuchTask].map(|e| e.code());
    let (mut asked, mut answered) = (0, 0);
    for vm in (0..VMS).filter(|&vm| vm != this_vm) {
        for index in 0..TASK_INDEXES {
            asked += 1;
            let handle = vm << 8 | index;
            let passed = [handle, 11, 22, 33, 44, 55, 0];
            // SAFETY: statistics are read only; a refused call changes nothing.
            let x = unsafe { hvc_call7(abi::KEEL_TASK_STATS, passed) };
            // x1..x5 come back as passed (the handle, then x2..x5).
            if refusals.contains(&(x[0] as i64)) && x[1..6] == passed[..5] {
                continue;
            }
            answered += 1;
            keel_guest::println!(
                "hostile: task stats of handle {handle:#x}: x0={} x1..x5={:?}",
                x[0] as i64,
                &x[1..6]
            );
        }
    }
    probe!(
        "task-stats-foreign",
        answered == 0,
        "{asked} task handles of the other VMs: {answered} answered"
    );
}

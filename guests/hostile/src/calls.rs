//! Calls a guest may make with any values: unknown and malformed hypercalls and SMCs, PSCI on
//! foreign and invalid CPUs and entry points, CPU_ON/CPU_OFF cycles and races. Each is
//! answered with the error code the specification gives, and nothing else changes.

use keel_core::ipc::MessageError;
use keel_core::tasks::TaskError;
use keel_guest::abi::{self, psci, CallError};
use keel_guest::psci::{affinity_info, cpu_on_raw};
use keel_guest::smccc::hvc_call;

use crate::lifecycle::{start_secondary, stop_secondary, SecondaryTask, TASK};
use crate::probe;
use crate::shared::{secondary_stack_top, Rng};

/// Function ids with an effect on the caller (off, reset, crash, suspend, CPU_ON): left to
/// the probes that mean to make them.
fn has_effect(function: u32) -> bool {
    [
        psci::CPU_OFF,
        psci::CPU_ON_32,
        psci::CPU_ON_64,
        psci::SYSTEM_OFF,
        psci::SYSTEM_RESET,
        psci::CPU_SUSPEND_32,
        psci::CPU_SUSPEND_64,
        abi::KEEL_CRASH,
        abi::KEEL_YIELD,
        // Probed on their own below (with all seven arguments).
        abi::KEEL_TASK_CREATE,
        abi::KEEL_TASK_LAUNCH,
        abi::KEEL_TASK_DELETE,
        abi::KEEL_TASK_WAIT,
        abi::KEEL_TASK_STATS,
        abi::KEEL_MSG_SEND,
        abi::KEEL_MSG_RECV,
        abi::KEEL_CHANNEL_NOTIFY,
    ]
    .contains(&function)
}

/// Whether Keel implements `function` (its answer is then a value, not NOT_SUPPORTED).
fn known(function: u32) -> bool {
    [
        abi::KEEL_VERSION,
        abi::KEEL_VM_ID,
        abi::KEEL_MASKED_STRETCH,
        abi::SMCCC_VERSION,
        abi::SMCCC_ARCH_FEATURES,
        psci::VERSION,
        psci::AFFINITY_INFO_32,
        psci::AFFINITY_INFO_64,
        psci::MIGRATE_INFO_TYPE,
        psci::FEATURES,
    ]
    .contains(&function)
}

const NOT_SUPPORTED: i64 = CallError::NotSupported as i64;
const INVALID_PARAMETERS: i64 = CallError::InvalidParameters as i64;
const INVALID_ADDRESS: i64 = CallError::InvalidAddress as i64;
const ALREADY_ON: i64 = CallError::AlreadyOn as i64;
/// PSCI ON_PENDING.
const ON_PENDING: i64 = -5;

fn hvc(function: u32, args: [u64; 3]) -> i64 {
    // SAFETY: `has_effect` keeps calls with an effect on this guest out of the random ones;
    // the others only answer.
    unsafe { hvc_call(function, args).x0 as i64 }
}

/// Runs every probe of the attack `calls`.
pub fn calls() {
    let mut rng = Rng::new(0x6b65_656c);
    // 1. Random function ids, concentrated on the ranges Keel decodes, with random arguments.
    let (mut tried, mut wrong) = (0, 0);
    for _ in 0..3000 {
        let function = match rng.below(4) {
            0 => 0xC600_0000 | (rng.next_u64() as u32 & 0xffff),
            1 => 0x8400_0000 | (rng.next_u64() as u32 & 0x40ff_ffff),
            2 => 0x8000_0000 | (rng.next_u64() as u32 & 0x40ff_ffff),
            _ => rng.next_u64() as u32,
        };
        if has_effect(function) || known(function) {
            continue;
        }
        tried += 1;
        let args = [rng.next_u64(), rng.next_u64(), rng.next_u64()];
        if hvc(function, args) != NOT_SUPPORTED {
            wrong += 1;
        }
    }
    probe!(
        "hvc-unknown-ids",
        wrong == 0 && tried > 1000,
        "{tried} unknown function ids: {wrong} answered other than NOT_SUPPORTED"
    );
    // 2. The task services with random arguments, from a VM without a task grant: every
    //    call is refused with one of their codes (never a task created, launched, deleted).
    let refusals = [
        TaskError::NotAllowed,
        TaskError::NoSuchTask,
        TaskError::InvalidParameters,
    ]
    .map(|e| e.code());
    let mut answers_wrong = 0;
    for round in 0..1000 {
        let function = [
            abi::KEEL_TASK_CREATE,
            abi::KEEL_TASK_LAUNCH,
            abi::KEEL_TASK_DELETE,
            abi::KEEL_TASK_WAIT,
            abi::KEEL_TASK_STATS,
        ][round % 5];
        // Handles: random, or those of VM 0 (the victim) and this VM.
        let handle = match rng.below(3) {
            0 => rng.below(0x200),
            _ => rng.next_u64(),
        };
        let args: [u64; 7] = core::array::from_fn(|i| if i == 0 { handle } else { rng.next_u64() });
        // SAFETY: without a grant every task service is refused and changes nothing.
        let x0 = unsafe { keel_guest::smccc::hvc_call7(function, args) }[0] as i64;
        if !refusals.contains(&x0) {
            answers_wrong += 1;
        }
    }
    probe!(
        "task-calls-refused",
        answers_wrong == 0,
        "1000 task service calls with random arguments from a VM without a grant: {answers_wrong} not refused"
    );
    // 2b. The message and channel services with random arguments, from a VM that takes no
    //     messages, sends to none and is in no channel: every call is refused with one of
    //     their codes (nothing queued, read, written or rung).
    let refusals = [
        MessageError::NotAllowed,
        MessageError::UnknownDestination,
        MessageError::TooLarge,
    ]
    .map(|e| e.code());
    let channel_refusals = [CallError::Denied as i64, -38];
    let mut answers_wrong = 0;
    for round in 0..1500 {
        let function = [
            abi::KEEL_MSG_SEND,
            abi::KEEL_MSG_RECV,
            abi::KEEL_CHANNEL_NOTIFY,
        ][round % 3];
        // Destinations and channels: small (existing) or random; buffers random.
        let small = |rng: &mut Rng| match rng.below(2) {
            0 => rng.below(20),
            _ => rng.next_u64(),
        };
        let args: [u64; 7] = [
            small(&mut rng),
            small(&mut rng),
            rng.next_u64(),
            small(&mut rng),
            rng.next_u64(),
            rng.next_u64(),
            rng.next_u64(),
        ];
        // SAFETY: a VM without queues or channels is refused before Keel reads or writes
        // anything of its memory (and a refused receive does not wait).
        let x0 = unsafe { keel_guest::smccc::hvc_call7(function, args) }[0] as i64;
        let expected: &[i64] = if function == abi::KEEL_CHANNEL_NOTIFY {
            &channel_refusals
        } else {
            &refusals
        };
        if !expected.contains(&x0) {
            answers_wrong += 1;
        }
    }
    probe!(
        "message-calls-refused",
        answers_wrong == 0,
        "1500 message and channel calls with random arguments from a VM without queues or channels: {answers_wrong} not refused"
    );
    // 3. The known ones with malformed arguments.
    let cases: [(&str, u32, [u64; 3], &[i64]); 9] = [
        (
            "psci-features-unknown",
            psci::FEATURES,
            [0x8400_00ff, 0, 0],
            &[NOT_SUPPORTED],
        ),
        (
            "arch-features-unknown",
            abi::SMCCC_ARCH_FEATURES,
            [0x8000_7fff, 0, 0],
            &[NOT_SUPPORTED],
        ),
        (
            "affinity-info-level-1",
            psci::AFFINITY_INFO_64,
            [0, 1, 0],
            &[INVALID_PARAMETERS],
        ),
        (
            "affinity-info-no-such-vcpu",
            psci::AFFINITY_INFO_64,
            [7, 0, 0],
            &[INVALID_PARAMETERS],
        ),
        (
            "affinity-info-aff1-set",
            psci::AFFINITY_INFO_64,
            [0x100, 0, 0],
            &[INVALID_PARAMETERS],
        ),
        (
            "affinity-info-aff3-set",
            psci::AFFINITY_INFO_64,
            [1 << 32, 0, 0],
            &[INVALID_PARAMETERS],
        ),
        (
            "cpu-on-no-such-vcpu",
            psci::CPU_ON_64,
            [5, 0x4020_0000, 0],
            &[INVALID_PARAMETERS],
        ),
        (
            "cpu-on-self",
            psci::CPU_ON_64,
            [0, 0x4020_0000, 0],
            &[ALREADY_ON],
        ),
        (
            "cpu-on-foreign-aff1",
            psci::CPU_ON_64,
            [0x101, 0x4020_0000, 0],
            &[INVALID_PARAMETERS],
        ),
    ];
    for (name, function, args, expected) in cases {
        let answer = hvc(function, args);
        probe!(
            name,
            expected.contains(&answer),
            "answered {answer}, expected {expected:?}"
        );
    }
    // 3. CPU_ON at entry points outside the VM's memory: refused, the vCPU stays off.
    for (name, entry) in [
        ("cpu-on-entry-zero", 0u64),
        ("cpu-on-entry-gic", 0x0800_0000),
        ("cpu-on-entry-other-vm", 0x5000_0000),
        ("cpu-on-entry-past-ram", 0x4100_0000),
        ("cpu-on-entry-top", !3),
    ] {
        // SAFETY: the entry is outside this VM; Keel must refuse, so nothing runs there.
        let answer = unsafe { cpu_on_raw(1, entry, 0) };
        let still_off = affinity_info(1) == 1;
        probe!(
            name,
            answer == INVALID_ADDRESS && still_off,
            "answered {answer} (expected {INVALID_ADDRESS}), vCPU 1 {}",
            if still_off { "still off" } else { "started" }
        );
    }
    // 4. SMCs of every kind: answered NOT_SUPPORTED, never forwarded.
    let mut wrong = 0;
    for i in 0..200u64 {
        let function = if i % 2 == 0 {
            0x8400_0000 + (i as u32 % 16)
        } else {
            rng.next_u64() as u32
        };
        if smc(function) != NOT_SUPPORTED {
            wrong += 1;
        }
    }
    probe!(
        "smc-any",
        wrong == 0,
        "200 SMCs: {wrong} answered other than NOT_SUPPORTED"
    );
    // 5. CPU_ON / CPU_OFF cycles, and CPU_ON racing a pending one.
    let mut cycles = 0;
    for _ in 0..20 {
        if !start_secondary(SecondaryTask::Idle) {
            break;
        }
        // SAFETY: a second CPU_ON of the same vCPU: Keel must refuse it.
        let again = unsafe { cpu_on_raw(1, 0x4020_0000, secondary_stack_top() as u64) };
        if again != ALREADY_ON && again != ON_PENDING {
            probe!("cpu-on-race", false, "a second CPU_ON answered {again}");
            break;
        }
        stop_secondary();
        if affinity_info(1) != 1 {
            break;
        }
        cycles += 1;
    }
    TASK.set(SecondaryTask::Idle as u64);
    probe!(
        "cpu-on-off-cycles",
        cycles == 20,
        "{cycles} of 20 CPU_ON/CPU_OFF cycles, each second CPU_ON refused"
    );
}

fn smc(function: u32) -> i64 {
    let x0: u64;
    // SAFETY: Keel answers the SMC (SMCCC changes only x0-x3). No memory is touched.
    unsafe {
        core::arch::asm!(
            "smc #0",
            inout("x0") u64::from(function) => x0,
            out("x1") _, out("x2") _, out("x3") _,
            options(nostack, nomem),
        )
    };
    x0 as i64
}

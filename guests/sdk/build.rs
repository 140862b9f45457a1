//! Publishes the SDK's linker script to guests' build scripts, and checks that the C header
//! `include/keel.h` carries exactly the numbers of `keel_core::abi` (and the refusal codes of
//! `keel_core::tasks`, `keel_core::ipc` and `keel_core::channel`).
//!
//! A guest crate's `build.rs` reads `DEP_KEEL_GUEST_LINKER_SCRIPT` and passes it on with
//! `cargo:rustc-link-arg-bins=-T<path>` (link arguments of a library do not reach the binary).

use std::path::{Path, PathBuf};

use keel_core::abi::{self, layout, psci, CallError};
use keel_core::channel::ChannelError;
use keel_core::ipc::MessageError;
use keel_core::tasks::TaskError;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let script = manifest_dir.join("link.ld");
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:linker_script={}", script.display());

    let header = manifest_dir.join("include").join("keel.h");
    println!("cargo:rerun-if-changed={}", header.display());
    if let Err(problems) = check_header(&header) {
        panic!(
            "{} disagrees with keel_core::abi:\n{}",
            header.display(),
            problems.join("\n")
        );
    }
}

/// Every `#define` of the header with the value it must have.
fn expected_defines() -> Vec<(&'static str, i128)> {
    let error = |e: CallError| i128::from(e.to_x0() as i64);
    vec![
        ("KEEL_SMCCC_FAST_CALL", abi::SMCCC_FAST_CALL.into()),
        ("KEEL_SMCCC_64BIT", abi::SMCCC_64BIT.into()),
        ("KEEL_OWNER_VENDOR_HYP", abi::OWNER_VENDOR_HYP.into()),
        ("KEEL_FN_VERSION", abi::KEEL_VERSION.into()),
        ("KEEL_FN_VM_ID", abi::KEEL_VM_ID.into()),
        ("KEEL_FN_YIELD", abi::KEEL_YIELD.into()),
        ("KEEL_FN_CRASH", abi::KEEL_CRASH.into()),
        ("KEEL_FN_SCHED_STATS", abi::KEEL_SCHED_STATS.into()),
        ("KEEL_FN_TASK_CREATE", abi::KEEL_TASK_CREATE.into()),
        ("KEEL_FN_TASK_LAUNCH", abi::KEEL_TASK_LAUNCH.into()),
        ("KEEL_FN_TASK_DELETE", abi::KEEL_TASK_DELETE.into()),
        ("KEEL_FN_TASK_WAIT", abi::KEEL_TASK_WAIT.into()),
        ("KEEL_FN_TASK_STATS", abi::KEEL_TASK_STATS.into()),
        ("KEEL_FN_MASKED_STRETCH", abi::KEEL_MASKED_STRETCH.into()),
        ("KEEL_FN_MSG_SEND", abi::KEEL_MSG_SEND.into()),
        ("KEEL_FN_MSG_RECV", abi::KEEL_MSG_RECV.into()),
        ("KEEL_FN_CHANNEL_NOTIFY", abi::KEEL_CHANNEL_NOTIFY.into()),
        (
            "KEEL_EVERY_OTHER_MEMBER",
            keel_core::channel::EVERY_OTHER_MEMBER.into(),
        ),
        ("KEEL_VERSION_VALUE", abi::KEEL_VERSION_VALUE.into()),
        ("KEEL_SMCCC_VERSION", abi::SMCCC_VERSION.into()),
        ("KEEL_SMCCC_ARCH_FEATURES", abi::SMCCC_ARCH_FEATURES.into()),
        ("KEEL_SMCCC_VERSION_1_1", abi::SMCCC_VERSION_1_1.into()),
        ("KEEL_PSCI_VERSION", psci::VERSION.into()),
        ("KEEL_PSCI_CPU_SUSPEND_32", psci::CPU_SUSPEND_32.into()),
        ("KEEL_PSCI_CPU_SUSPEND_64", psci::CPU_SUSPEND_64.into()),
        ("KEEL_PSCI_CPU_OFF", psci::CPU_OFF.into()),
        ("KEEL_PSCI_CPU_ON_32", psci::CPU_ON_32.into()),
        ("KEEL_PSCI_CPU_ON_64", psci::CPU_ON_64.into()),
        ("KEEL_PSCI_AFFINITY_INFO_32", psci::AFFINITY_INFO_32.into()),
        ("KEEL_PSCI_AFFINITY_INFO_64", psci::AFFINITY_INFO_64.into()),
        (
            "KEEL_PSCI_MIGRATE_INFO_TYPE",
            psci::MIGRATE_INFO_TYPE.into(),
        ),
        ("KEEL_PSCI_SYSTEM_OFF", psci::SYSTEM_OFF.into()),
        ("KEEL_PSCI_SYSTEM_RESET", psci::SYSTEM_RESET.into()),
        ("KEEL_PSCI_FEATURES", psci::FEATURES.into()),
        ("KEEL_PSCI_VERSION_1_1", psci::VERSION_1_1.into()),
        (
            "KEEL_PSCI_TOS_NOT_PRESENT_MP",
            psci::TOS_NOT_PRESENT_MP.into(),
        ),
        ("KEEL_NOT_SUPPORTED", error(CallError::NotSupported)),
        (
            "KEEL_INVALID_PARAMETERS",
            error(CallError::InvalidParameters),
        ),
        ("KEEL_DENIED", error(CallError::Denied)),
        ("KEEL_ALREADY_ON", error(CallError::AlreadyOn)),
        ("KEEL_INVALID_ADDRESS", error(CallError::InvalidAddress)),
        ("KEEL_NO_SUCH_TASK", TaskError::NoSuchTask.code().into()),
        ("KEEL_LIMIT_REACHED", TaskError::LimitReached.code().into()),
        (
            "KEEL_NOT_SCHEDULABLE",
            TaskError::NotSchedulable.code().into(),
        ),
        ("KEEL_QUEUE_FULL", MessageError::QueueFull.code().into()),
        ("KEEL_TOO_LARGE", MessageError::TooLarge.code().into()),
        (
            "KEEL_BUFFER_TOO_SMALL",
            MessageError::BufferTooSmall.code().into(),
        ),
        (
            "KEEL_UNKNOWN_DESTINATION",
            MessageError::UnknownDestination.code().into(),
        ),
        (
            "KEEL_DESTINATION_STOPPED",
            MessageError::DestinationStopped.code().into(),
        ),
        ("KEEL_NO_MESSAGE", MessageError::Empty.code().into()),
        (
            "KEEL_NO_SUCH_CHANNEL",
            ChannelError::NoSuchChannel.code().into(),
        ),
        ("KEEL_GICD_BASE", layout::GICD_BASE.into()),
        ("KEEL_GICD_SIZE", layout::GICD_SIZE.into()),
        ("KEEL_GICR_BASE", layout::GICR_BASE.into()),
        ("KEEL_GICR_STRIDE", layout::GICR_STRIDE.into()),
        ("KEEL_UART_BASE", layout::UART_BASE.into()),
        ("KEEL_UART_SIZE", layout::UART_SIZE.into()),
        ("KEEL_UART_INTID", layout::UART_INTID.into()),
        ("KEEL_VTIMER_INTID", layout::VTIMER_INTID.into()),
        ("KEEL_PTIMER_INTID", layout::PTIMER_INTID.into()),
        ("KEEL_MAINTENANCE_INTID", layout::MAINTENANCE_INTID.into()),
        ("KEEL_HYP_TIMER_INTID", layout::HYP_TIMER_INTID.into()),
    ]
}

/// Compares the header's numeric `#define KEEL_*` lines with [`expected_defines`], both ways.
fn check_header(path: &Path) -> Result<(), Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| vec![format!("cannot read it: {e}")])?;
    let expected = expected_defines();
    let mut problems = Vec::new();
    let mut seen = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some("#define"), Some(name), Some(value)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if !name.starts_with("KEEL_") || name == "KEEL_H" {
            continue;
        }
        seen.push(name);
        match (
            expected.iter().find(|(known, _)| *known == name),
            parse_c_integer(value),
        ) {
            (None, _) => problems.push(format!("{name} is not in keel_core::abi (or this check)")),
            (Some(_), None) => problems.push(format!("{name}: cannot read the value {value}")),
            (Some((_, want)), Some(have)) if *want != have => {
                let want = if *want < 0 {
                    format!("({want})")
                } else {
                    format!("{want:#x}")
                };
                problems.push(format!("{name} is {value}, keel_core says {want}"))
            }
            _ => {}
        }
    }
    for (name, _) in &expected {
        if !seen.contains(name) {
            problems.push(format!("{name} is missing"));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Reads a C integer constant such as `0xC6000000u`, `6u` or `(-1)`.
fn parse_c_integer(text: &str) -> Option<i128> {
    let text = text.trim_start_matches('(').trim_end_matches(')');
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let text = text.trim_end_matches(['u', 'U', 'l', 'L']);
    let magnitude = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => i128::from_str_radix(hex, 16).ok()?,
        None => text.parse().ok()?,
    };
    Some(if negative { -magnitude } else { magnitude })
}

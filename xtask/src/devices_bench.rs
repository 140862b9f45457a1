//! `cargo xtask bench devices`: what Keel adds to a passthrough interrupt (Interruptible
//! Gandalf's measure, seed 004): QEMU's edu device raising its interrupt on a register write,
//! timed by the test guest's edu mode from the write to its IRQ vector and back to the
//! interrupted loop (PMCCNTR_EL0 under `-icount shift=0,sleep=off`, instructions), natively
//! at EL1, in a VM given the PCI host bridge behind the SMMU on a pinned pCPU, and on a
//! shared one.

use std::time::Duration;

use crate::bench::{parse, Figures};
use crate::image::{build_guests, build_system, guest_image, output_dir};
use crate::qemu::Machine;
use crate::{workspace, Result};

/// How long one run may take (real time).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// The edu figures of the test guest natively (no hypervisor, QEMU's own device tree).
fn native() -> Result<Figures> {
    let machine = Machine {
        virtualization: false,
        icount: true,
        icount_sleep: false,
        icount_shift: 0,
        append: Some("keel.native keel.mode=edu keel.edu=bench keel.flood=0".into()),
        edu: true,
        ..Machine::keel(&guest_image("test-guest").ok_or("no test-guest image")?, 1)
    };
    let ended = machine
        .spawn(&output_dir().join("logs/bench-edu-native.log"))?
        .finish(RUN_LIMIT);
    parse(&ended.lines, "")
}

/// The edu figures under Keel with configuration `name` (`configs/bench/<name>.toml`).
fn under_keel(name: &str) -> Result<Figures> {
    let image = build_system(&workspace().join(format!("configs/bench/{name}.toml")))?;
    let machine = Machine {
        edu: true,
        ..Machine::keel_icount(&image)
    };
    let ended = machine
        .spawn(&output_dir().join(format!("logs/bench-{name}.log")))?
        .finish(RUN_LIMIT);
    parse(&ended.lines, "[edu] ")
}

/// Runs the three and prints the table.
pub fn run() -> Result<()> {
    build_guests()?;
    let native = native()?;
    let pinned = under_keel("edu-pinned")?;
    let shared = under_keel("edu-shared")?;
    println!();
    println!("A passthrough interrupt: QEMU's edu device behind the SMMU, raised by a register write (instructions, min / avg / max of 200):");
    println!(
        "{:<20} {:>22} {:>22} {:>22}",
        "figure", "native EL1", "Keel, pinned pCPU", "Keel, shared pCPU"
    );
    let text = |figures: &Figures, name: &str| {
        figures
            .get(name)
            .map_or("n/a".to_string(), |(min, avg, max)| {
                format!("{min} / {avg} / {max}")
            })
    };
    for name in ["edu-irq-entry", "edu-irq-roundtrip"] {
        println!(
            "{:<20} {:>22} {:>22} {:>22}",
            name,
            text(&native, name),
            text(&pinned, name),
            text(&shared, name)
        );
    }
    Ok(())
}

//! The figures CI holds. Under `-icount shift=0,sleep=off` the benchmarks repeat exactly, so
//! the test command measures the fast paths again (the micro-benchmarks, the image, two vCPU
//! switches, a 100-byte message delivery on one and on two pCPUs) and compares them with the
//! committed `xtask/baseline.toml` exactly: a figure that moved either way fails the run,
//! naming it, until the baseline is updated in the same commit
//! (`cargo xtask bench baseline --update`) and the README's and the book's figures are taken
//! again from the same runs. A band would let a figure drift unnoticed, a little at a time.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::{bench, ipc_bench, sched_bench, workspace, Result};

/// Figures by name, in instructions (bytes for the image).
pub type Figures = BTreeMap<String, u64>;

/// The micro-benchmark figures held (their average over the run).
const MICRO: [&str; 6] = [
    "hvc-null",
    "mmio-gicd-typer",
    "psci-version",
    "sysreg-trap",
    "timer-irq-entry",
    "timer-irq-roundtrip",
];

/// The boards whose micro-benchmarks (each one their guest prints) and image are held besides
/// the reference board's, each with the bench system moved there
/// ([`crate::image::with_board`]); their figures are named `<board>.<figure>`.
pub const OTHER_BOARDS: [&str; 2] = ["qemu-virt-gicv2", "zcu102"];

fn path() -> PathBuf {
    workspace().join("xtask/baseline.toml")
}

/// Measures every held figure (the guests must be built).
pub fn measure() -> Result<Figures> {
    let mut figures = Figures::new();
    let (micro, image) = bench::under_keel()?;
    for name in MICRO {
        let (_, avg, _) = micro
            .get(name)
            .ok_or(format!("the micro-benchmarks printed no '{name}' figure"))?;
        figures.insert(name.into(), *avg);
    }
    // Keel's own image: the bench system's, without its guest (as `bench micro` shows it).
    let guest = crate::image::guest_image("test-guest").ok_or("no test-guest image")?;
    let guest = std::fs::metadata(&guest)
        .map_err(|e| format!("{}: {e}", guest.display()))?
        .len();
    figures.insert("image-bytes".into(), image - guest);
    for name in OTHER_BOARDS {
        let board = keel_core::board::board(name).ok_or("an unknown board")?;
        let (micro, image) = crate::image::with_board(board, bench::under_keel)?;
        if micro.is_empty() {
            return Err(format!("the micro-benchmarks on {name} printed no figure"));
        }
        // Every figure its guest prints: a GICv2 guest has no system-register GIC to trap.
        for (figure, (_, avg, _)) in micro {
            figures.insert(format!("{name}.{figure}"), avg);
        }
        figures.insert(format!("{name}.image-bytes"), image - guest);
    }
    // A board QEMU cannot boot: its image is built only.
    let rpi4b = crate::image::build_system(&workspace().join("configs/boards/rpi4b.toml"))?;
    let image = std::fs::metadata(&rpi4b.path)
        .map_err(|e| format!("{}: {e}", rpi4b.path.display()))?
        .len();
    figures.insert("rpi4b.image-bytes".into(), image - guest);
    figures.insert("switch-pair".into(), sched_bench::switch_pair(false)?.1);
    for (config, name) in [
        ("messages-one-pcpu", "msg-delivery-100-one-pcpu"),
        ("messages-two-pcpus", "msg-delivery-100-two-pcpus"),
    ] {
        let ended = ipc_bench::run(config)?;
        figures.insert(
            name.into(),
            sched_bench::figure(&ended, "msg-delivery-100")?.1,
        );
    }
    Ok(figures)
}

/// Reads a baseline file's text: `name = value` lines; `#` starts a comment.
pub fn parse(text: &str) -> Result<Figures> {
    let mut figures = Figures::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (name, value) = line.split_once('=').ok_or(format!(
            "line {}: expected `name = value`, found '{line}'",
            n + 1
        ))?;
        let (name, value) = (name.trim(), value.trim().replace('_', ""));
        let value = value
            .parse::<u64>()
            .map_err(|_| format!("line {}: '{value}' is not a whole number", n + 1))?;
        if figures.insert(name.to_string(), value).is_some() {
            return Err(format!("line {}: '{name}' given twice", n + 1));
        }
    }
    Ok(figures)
}

/// Compares `measured` with `baseline`: one message per figure that differs from its
/// baseline, is missing from either, or is new.
pub fn compare(baseline: &Figures, measured: &Figures) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, &held) in baseline {
        let Some(&now) = measured.get(name) else {
            problems.push(format!("{name}: in the baseline ({held}) but not measured"));
            continue;
        };
        if now != held {
            let moved = if now > held { "above" } else { "below" };
            problems.push(format!(
                "{name}: {now}, {} {moved} its baseline {held} (held exactly; if the change is \
                 meant, record it with `cargo xtask bench baseline --update` in the same commit \
                 and take the README's and the book's figures again)",
                now.abs_diff(held)
            ));
        }
    }
    for (name, now) in measured {
        if !baseline.contains_key(name) {
            problems.push(format!("{name}: measured ({now}) but not in the baseline"));
        }
    }
    problems
}

fn render(figures: &Figures) -> String {
    let mut text = String::from(
        "# The figures the test command holds (xtask/src/baseline.rs): instructions under\n\
         # -icount (bytes for the image). Made by `cargo xtask bench baseline --update`.\n",
    );
    for (name, value) in figures {
        let _ = writeln!(text, "{name} = {value}");
    }
    text
}

/// The test command's check: measures and compares; the error names each figure out of line.
pub fn check() -> Result<()> {
    let file = path();
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let baseline = parse(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let measured = measure()?;
    let problems = compare(&baseline, &measured);
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}: {}", file.display(), problems.join("; ")))
    }
}

/// `cargo xtask bench baseline [--update]`: prints the figures beside their baseline, and
/// writes them as the new baseline if asked.
pub fn run(update: bool) -> Result<()> {
    crate::image::build_guests()?;
    let measured = measure()?;
    let baseline = std::fs::read_to_string(path())
        .ok()
        .map(|text| parse(&text))
        .transpose()?
        .unwrap_or_default();
    println!("{:<28} {:>10} {:>10}", "figure", "baseline", "now");
    for (name, now) in &measured {
        let held = baseline.get(name).map_or("-".into(), u64::to_string);
        println!("{name:<28} {held:>10} {now:>10}");
    }
    if update {
        std::fs::write(path(), render(&measured)).map_err(|e| e.to_string())?;
        println!("wrote {}", path().display());
    } else {
        for problem in compare(&baseline, &measured) {
            println!("{problem}");
        }
    }
    Ok(())
}

/// `cargo xtask bench trace`: the held figures with Keel's trace off (as the configurations
/// are written) and on (256 KiB rings on every pCPU), side by side: what tracing costs the
/// fast paths. A figure with the trace off is the one the baseline holds.
pub fn trace_cost() -> Result<()> {
    let off = measure()?;
    crate::image::trace_every_build(256 << 10);
    let on = measure();
    crate::image::trace_every_build(0);
    let on = on?;
    println!();
    println!(
        "Keel's trace off and on (256 KiB rings per pCPU), instructions (bytes for the image)"
    );
    println!(
        "{:<28} {:>10} {:>10} {:>9}",
        "figure", "off", "on", "on/off"
    );
    for (name, value) in &off {
        let traced = on.get(name).copied().unwrap_or(0);
        println!(
            "{name:<28} {value:>10} {traced:>10} {:>9.3}",
            traced as f64 / (*value).max(1) as f64
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(pairs: &[(&str, u64)]) -> Figures {
        pairs.iter().map(|&(n, v)| (n.to_string(), v)).collect()
    }

    #[test]
    fn parses_what_it_renders() {
        let held = figures(&[("hvc-null", 120), ("image-bytes", 327_648)]);
        assert_eq!(parse(&render(&held)).unwrap(), held);
        assert_eq!(
            parse("a = 1_000 # note\n\n# only a comment\n").unwrap(),
            figures(&[("a", 1000)])
        );
    }

    #[test]
    fn refuses_bad_lines_naming_them() {
        assert!(parse("a = 1\nb 2\n").unwrap_err().starts_with("line 2:"));
        assert!(parse("a = x\n")
            .unwrap_err()
            .contains("'x' is not a whole number"));
        assert!(parse("a = 1\na = 2\n")
            .unwrap_err()
            .contains("'a' given twice"));
    }

    #[test]
    fn holds_every_figure_exactly() {
        let held = figures(&[("hvc-null", 100), ("image-bytes", 94_364)]);
        assert!(compare(&held, &held).is_empty());
        let grew = compare(
            &held,
            &figures(&[("hvc-null", 101), ("image-bytes", 94_364)]),
        );
        assert_eq!(grew.len(), 1);
        assert!(grew[0].starts_with("hvc-null: 101, 1 above its baseline 100 (held exactly"));
        let shrank = compare(
            &held,
            &figures(&[("hvc-null", 100), ("image-bytes", 94_360)]),
        );
        assert_eq!(shrank.len(), 1);
        assert!(shrank[0].starts_with("image-bytes: 94360, 4 below its baseline 94364"));
        assert!(shrank[0].contains("cargo xtask bench baseline --update"));
    }

    #[test]
    fn names_missing_and_new_figures() {
        let problems = compare(&figures(&[("a", 1)]), &figures(&[("b", 1)]));
        assert_eq!(
            problems,
            [
                "a: in the baseline (1) but not measured",
                "b: measured (1) but not in the baseline"
            ]
        );
    }
}

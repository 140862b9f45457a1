//! Scenarios of cache colouring (`colours` in a VM's table): coloured VMs boot, run, reset and
//! DMA, and, run under the project's model of the shared last-level cache (the QEMU plugin of
//! `tools/llc-model`), each pCPU's accesses outside Keel's own region touch only the colours of
//! the VM that runs there: checked from outside the guests.

use std::collections::BTreeMap;

use regex::Regex;

use super::{
    check_linux_beside_rt, check_one_vm_reset, config, devices, expect_clean_exit, log_path,
    with_console_tail, Scenario, DEADLINE,
};
use crate::image::{build_system, SystemImage};
use crate::llc::{plugin, LlcModel};
use crate::qemu::{Ended, Machine};
use crate::Result;
use keel_core::colour::Colours;

/// The machine of `image` under icount, with the LLC model of its configuration's cache
/// counting every pCPU's accesses, Keel's own region apart; but a coloured Keel's accesses
/// are counted, all but those to the guests' images and to what precedes its image.
/// Its report is the file returned.
pub(crate) fn under_llc_model(
    image: &SystemImage,
    name: &str,
) -> Result<(Machine, std::path::PathBuf)> {
    let system = &image.system;
    let geometry = system
        .llc
        .ok_or_else(|| format!("configuration '{name}' gives no last-level cache"))?;
    let out = log_path(&format!("{name}.llc"));
    let _ = std::fs::remove_file(&out);
    let mut model = LlcModel::new(&plugin()?, geometry, &out);
    if system.hypervisor_colours.is_coloured() {
        // Keel's coloured range and the frames it is copied to are counted; what lies before
        // it (the device tree QEMU puts below Keel) and the guests' images in it, which a VM's
        // load and reload read where Keel was loaded, are not.
        let keel = crate::image::keel_image(&image.elf)?;
        let (images, images_end) = keel.guest_images;
        model.excluded.push(system.hypervisor_base..keel.start);
        model.excluded.push(images..images_end);
    } else {
        model
            .excluded
            .push(system.hypervisor_base..system.hypervisor_base + system.hypervisor_size);
    }
    let machine = Machine {
        llc: Some(model),
        ..crate::image::machine(image, true)?
    };
    Ok((machine, out))
}

/// The colours each pCPU's accesses touched (outside the excluded ranges), from the model's
/// report at `path`: its `llc vcpu=N ... colours=LIST ...` lines.
pub(crate) fn colours_touched(path: &std::path::Path) -> Result<BTreeMap<u32, String>> {
    let report = std::fs::read_to_string(path)
        .map_err(|e| format!("the LLC model's report: {}: {e}", path.display()))?;
    let line = Regex::new(r"^llc vcpu=(\d+) .* colours=(\S+)").unwrap();
    let touched: BTreeMap<u32, String> = report
        .lines()
        .filter_map(|l| line.captures(l))
        .map(|c| (c[1].parse().unwrap_or(u32::MAX), c[2].to_string()))
        .collect();
    if touched.is_empty() {
        return Err(format!(
            "{}: no vCPU line in the LLC model's report",
            path.display()
        ));
    }
    Ok(touched)
}

/// Each coloured VM's pCPUs touched only its colours (none of another's), and Keel's if Keel
/// is coloured (its accesses are then counted too, and some of its colours must show), by the
/// model's report at `report`.
fn expect_own_colours(image: &SystemImage, report: &std::path::Path) -> Result<()> {
    let touched = colours_touched(report)?;
    let keel = image.system.hypervisor_colours;
    for vm in image
        .system
        .vms
        .iter()
        .filter(|vm| vm.colours.is_coloured())
    {
        for &pcpu in &vm.pcpus {
            let seen = touched.get(&pcpu).ok_or_else(|| {
                format!(
                    "the LLC model saw no access of pCPU {pcpu} (vm '{}')",
                    vm.name
                )
            })?;
            let parsed = keel_core::colour::Colours::parse(seen, vm.colours.count)
                .map_err(|e| format!("pCPU {pcpu}'s colours '{seen}': {e}"))?;
            if parsed.mask & !(vm.colours.mask | keel.mask) != 0 {
                return Err(format!(
                    "pCPU {pcpu} of vm '{}' (colours {}, Keel's {}) touched colours {seen}",
                    vm.name, vm.colours, keel
                ));
            }
            if keel.is_coloured() && parsed.mask & keel.mask == 0 {
                return Err(format!(
                    "pCPU {pcpu} of vm '{}' touched colours {seen}, none of Keel's {keel}: \
                     Keel's own accesses are not counted",
                    vm.name
                ));
            }
        }
    }
    Ok(())
}

/// Keel said at boot that it runs in the frames of `colours` (its boot line: the set's mask).
fn expect_keel_coloured(ended: &Ended, colours: Colours) -> Result<()> {
    let line = format!(
        "Keel coloured: colour mask {:#x} of {}",
        colours.mask, colours.count
    );
    if ended.lines.iter().any(|l| l.contains(&line)) {
        Ok(())
    } else {
        Err(format!("no '{line}' line at boot (colours {colours})"))
    }
}

/// Two coloured VMs interleaved in one physical range beside a coloured Keel (`colour-two`):
/// Keel copies itself to its colours' frames at boot; both VMs tick; rt-a resets (Keel zeroes
/// and reloads it through its frames) and ticks again; each pCPU touched only its VM's colours
/// and Keel's, before and after the reset, Keel's own accesses counted.
fn two_coloured_vms() -> Result<()> {
    let image = build_system(&config("colour-two"))?;
    let (machine, report) = under_llc_model(&image, "colour-two")?;
    let ended = machine.spawn(&log_path("colour-two"))?.finish(DEADLINE);
    let check = || -> Result<()> {
        check_one_vm_reset(&ended)?;
        expect_keel_coloured(&ended, image.system.hypervisor_colours)?;
        expect_own_colours(&image, &report)
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

/// Debian Linux coloured beside the coloured partition and a coloured Keel (`colour-linux`),
/// under the LLC model: Linux runs stress-ng and cyclictest, the partition keeps its ticks, and
/// every pCPU touched only its VM's colours and Keel's.
fn coloured_linux() -> Result<()> {
    let image = build_system(&config("colour-linux"))?;
    let (machine, report) = under_llc_model(&image, "colour-linux")?;
    let ended = machine
        .spawn(&log_path("colour-linux"))?
        .finish(LINUX_DEADLINE);
    let check = || -> Result<()> {
        check_linux_beside_rt(&ended)?;
        expect_clean_exit(&ended)?;
        expect_keel_coloured(&ended, image.system.hypervisor_colours)?;
        expect_own_colours(&image, &report)
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

/// How long the coloured Linux run may take in real time (the LLC model slows QEMU about
/// 2.5 times).
const LINUX_DEADLINE: std::time::Duration = std::time::Duration::from_secs(900);

/// The edu VM coloured beside a coloured Keel (`colour-edu`): its DMA round trip goes through
/// the SMMU's page-by-page map of its colours' frames, whose tables lie in Keel's; its write to
/// a frame of the victim's colours inside its own physical range is refused.
fn coloured_edu() -> Result<()> {
    let ended = devices::boot_edu("colour-edu", "write")?;
    let check = || -> Result<()> {
        devices::check_edu(&ended, "write", "write")?;
        let keel = Colours::parse("14-15", 16).map_err(|e| e.to_string())?;
        expect_keel_coloured(&ended, keel)?;
        expect_clean_exit(&ended)
    };
    check().map_err(|m| with_console_tail(m, &ended))
}

/// How far above the partition's miss rate alone its coloured run's may be, beside VMs that
/// thrash the rest of the cache: 10 % and 0.1 per 1,000 accesses.
const COLOURED_MARGIN: (f64, f64) = (1.10, 0.1);

/// The shared-cache experiment's bare-metal runs (`cargo xtask bench llc --no-linux`), held:
/// beside two VMs walking 1 MiB each, the partition's LLC misses per 1,000 accesses are well
/// above its rate alone without colours (at least 5 times: the model sees the interference),
/// and within [`COLOURED_MARGIN`] of it with disjoint colours.
fn coloured_miss_rate_held() -> Result<()> {
    let alone = crate::llc_bench::measure("llc-alone")?;
    let shared = crate::llc_bench::measure("llc-shared")?;
    let coloured = crate::llc_bench::measure("llc-coloured")?;
    let (factor, slack) = COLOURED_MARGIN;
    let limit = alone.misses_per_1000 * factor + slack;
    crate::step(&format!(
        "llc: misses per 1,000 accesses: alone {:.3}, beside the walkers {:.3}, coloured {:.3} (at most {limit:.3})",
        alone.misses_per_1000, shared.misses_per_1000, coloured.misses_per_1000
    ));
    if shared.misses_per_1000 < 5.0 * alone.misses_per_1000 {
        return Err(format!(
            "beside the walkers without colours the partition misses {:.3} per 1,000 accesses, alone {:.3}: the model shows no interference",
            shared.misses_per_1000, alone.misses_per_1000
        ));
    }
    if coloured.misses_per_1000 > limit {
        return Err(format!(
            "coloured, the partition misses {:.3} per 1,000 accesses, more than {limit:.3} (alone {:.3} times {factor} plus {slack})",
            coloured.misses_per_1000, alone.misses_per_1000
        ));
    }
    Ok(())
}

/// The scenarios of cache colouring.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "colouring: Keel coloured 14-15 beside two coloured VMs interleaved in one physical range that tick, one resets; under the LLC model each pCPU, Keel's accesses included, touches only its VM's colours and Keel's".into(),
            run: Box::new(two_coloured_vms),
        },
        Scenario {
            name: "colouring: Debian Linux coloured 8-15 runs stress-ng beside the partition coloured 0-7, which keeps every tick, and Keel coloured 14-15; under the LLC model each pCPU touches only its VM's colours and Keel's".into(),
            run: Box::new(coloured_linux),
        },
        Scenario {
            name: "colouring: a coloured VM's edu DMA works through the SMMU's map of its colours, beside Keel coloured 14-15; its DMA to a frame of another VM's colours is refused".into(),
            run: Box::new(coloured_edu),
        },
        Scenario {
            name: "colouring: the LLC model's figure held: a partition's misses beside two VMs thrashing the cache are at least 5 times its rate alone, and with disjoint colours within 10 % (+0.1 per 1,000) of it".into(),
            run: Box::new(coloured_miss_rate_held),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_vcpu_lines_give_each_pcpus_colours() {
        let path = std::env::temp_dir().join(format!("keel-llc-{}.txt", std::process::id()));
        std::fs::write(
            &path,
            "llc size=1048576 ways=16 line=64 sets=1024 colours=16\n\
             llc vcpu=0 accesses=10 hits=5 misses=5 misses_per_1000=500.000 colours=none excluded=9 excluded_misses=1\n\
             llc vcpu=1 accesses=10 hits=5 misses=5 misses_per_1000=500.000 colours=0-7 excluded=0 excluded_misses=0\n\
             llc range=rt accesses=1 hits=1 misses=0 misses_per_1000=0.000\n",
        )
        .unwrap();
        let touched = colours_touched(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(touched.get(&0).map(String::as_str), Some("none"));
        assert_eq!(touched.get(&1).map(String::as_str), Some("0-7"));
        assert_eq!(touched.len(), 2);
    }
}

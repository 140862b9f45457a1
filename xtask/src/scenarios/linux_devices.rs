//! Scenarios of Debian's kernel in a Keel VM given real devices (`configs/tests/linux-devices.toml`):
//! the whole PCI host bridge behind the SMMU, with the root disk (`virtio-blk-pci`, the ext4
//! image `debian::rootfs` builds) and a `virtio-net-pci` card on QEMU's user network plugged
//! into it, and the board's PL031 RTC; the real-time test partition beside it keeps its ticks.
//! The same tests as the native `rootfs:` scenarios, through Keel: a file across the VM's
//! SYSTEM_RESET, DHCP and an HTTP fetch checked by its SHA-256, and `/dev/rtc0` with its alarm.
//! The partition runs on, so a run ends at the Linux test's `KEEL-INIT-END` (QEMU killed).

use std::time::{Duration, Instant};

use regex::Regex;

use super::rootfs::{
    boot_times, captured, expect_fetched, timed_ns, Figures, DD_RUNS, ROOT_DEVICE,
};
use super::{check_tick_counts, config, expect_line, log_path, with_console_tail, Scenario};
use crate::http::FileServer;
use crate::image::{build_system, output_dir};
use crate::qemu::{Ended, Machine};
use crate::Result;

/// Real time a run may take before QEMU is killed.
const DEADLINE: Duration = Duration::from_secs(300);

/// The Keel system of `linux-devices.toml` with the Linux VM running `/tests/<test>.sh` with
/// `extra` on its command line (from its root disk if `root`, else from the initramfs), the
/// root disk (writes kept in QEMU's overlay only) and the network card plugged into the bridge.
fn machine(test: &str, extra: &str, root: bool) -> Result<Machine> {
    let template = config("linux-devices");
    let text =
        std::fs::read_to_string(&template).map_err(|e| format!("{}: {e}", template.display()))?;
    let name = format!("linux-devices-{test}");
    let cmdline = format!(
        "console=ttyAMA0 {}keel.test={test} {extra}",
        if root {
            format!("keel.root={ROOT_DEVICE} ")
        } else {
            String::new()
        }
    );
    let template_cmdline =
        format!("cmdline = \"console=ttyAMA0 keel.root={ROOT_DEVICE} keel.test=disk\"");
    if !text.contains(&template_cmdline) {
        return Err(format!(
            "{}: no {template_cmdline} to replace",
            template.display()
        ));
    }
    let text = text
        .replace(
            &template_cmdline,
            &format!("cmdline = \"{}\"", cmdline.trim_end()),
        )
        .replace("name = \"linux-devices\"", &format!("name = \"{name}\""));
    let path = output_dir().join(format!("{name}.toml"));
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    crate::image::machine(&build_system(&path)?, true)
}

/// Runs `machine` until the Linux test's `KEEL-INIT-END` (then QEMU is killed: the partition
/// would tick on), its console logged as `log`.
fn run_to_end(machine: &Machine, log: &str) -> Result<(Ended, Duration)> {
    let start = Instant::now();
    let mut session = machine.spawn(&log_path(log))?;
    let end = session.wait_for(r"^\[linux\] KEEL-INIT-END ", DEADLINE);
    let ended = session.kill();
    end.map_err(|message| with_console_tail(message, &ended))?;
    Ok((ended, start.elapsed()))
}

/// Linux's console lines (the multiplexer's `[linux] ` prefix removed), as an [`Ended`] of
/// their own, so that the native scenarios' helpers read them.
fn linux_lines(ended: &Ended) -> Ended {
    Ended {
        lines: ended
            .lines
            .iter()
            .filter_map(|line| line.strip_prefix("[linux] ").map(str::to_string))
            .collect(),
        exit_code: ended.exit_code,
        stderr: ended.stderr.clone(),
    }
}

/// Linux ran from its disk, its test ended with status 0, and the partition's ticks were
/// whole throughout (each report within one tick of the virtual counter).
fn expect_success(ended: &Ended) -> Result<()> {
    let linux = linux_lines(ended);
    expect_line(&linux, "^KEEL-INIT-END status=0$")?;
    check_tick_counts(ended, "rt", 1)
}

/// The VM writes a line to its root disk and resets itself (PSCI SYSTEM_RESET: Keel reloads
/// it, the disk keeps its contents), then reads the line back on its next boot.
fn disk_survives_reset() -> Result<()> {
    let (ended, _) = run_to_end(&machine("disk", "", true)?, "linux-devices-disk")?;
    let check = || -> Result<()> {
        expect_success(&ended)?;
        let linux = linux_lines(&ended);
        expect_line(&linux, &format!("^KEEL-ROOT {ROOT_DEVICE} / ext4 rw[, ]"))?;
        let wrote = captured(&linux, "^KEEL-DISK wrote: (.*)$")?;
        let read = captured(&linux, "^KEEL-DISK read: (.*)$")?;
        if wrote != read {
            return Err(format!("wrote '{wrote}' but read '{read}'"));
        }
        expect_line(&ended, r"^\[keel\] vm 'linux' \(id 0\) resets$")?;
        let boots = linux
            .lines
            .iter()
            .filter(|l| l.starts_with("KEEL-ROOT "))
            .count();
        if boots != 2 {
            return Err(format!("{boots} boots from the disk, expected 2"));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// DHCP on the card and a file of `bytes` bytes fetched from the host, checked by its size
/// and SHA-256, timed by the guest.
pub(crate) fn fetch(bytes: usize, real_time: bool) -> Result<Figures> {
    let server = FileServer::start(bytes)?;
    let url = format!("keel.url={}", server.guest_url());
    let machine = Machine {
        icount_sleep: real_time,
        icount_shift: 0,
        ..machine("net", &url, true)?
    };
    let (ended, wall) = run_to_end(&machine, "linux-devices-net")?;
    let check = || -> Result<Figures> {
        expect_success(&ended)?;
        let linux = linux_lines(&ended);
        expect_fetched(&linux, &server)?;
        Ok(Figures {
            bytes: bytes as u64,
            ns: timed_ns(&linux, "fetch")?,
            virtual_s: boot_times(&linux).iter().sum(),
            wall,
        })
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// The disk's first `mib` MiB read with dd, [`DD_RUNS`] times after dropping the page cache,
/// timed by the guest: the fastest read.
pub(crate) fn disk_read(mib: u64) -> Result<Figures> {
    let extra = format!("keel.dd-mib={mib} keel.dd-runs={DD_RUNS}");
    let (ended, wall) = run_to_end(
        &machine("disk-read", &extra, true)?,
        "linux-devices-disk-read",
    )?;
    let check = || -> Result<Figures> {
        expect_success(&ended)?;
        let linux = linux_lines(&ended);
        let mut times = Vec::new();
        for run in 1..=DD_RUNS {
            times.push(timed_ns(&linux, &format!("disk-read-{run}"))?);
        }
        Ok(Figures {
            bytes: mib << 20,
            ns: times.into_iter().min().unwrap_or(0),
            virtual_s: boot_times(&linux).iter().sum(),
            wall,
        })
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// The "image saving" benchmark in the VM (see [`super::rootfs::image_saving`]).
pub(crate) fn image_saving(real_time: bool) -> Result<Figures> {
    use super::rootfs::{image_sizes, saved_images, IMAGES};
    let server = FileServer::start_set(&image_sizes())?;
    let extra = format!("keel.url={} keel.count={IMAGES}", server.guest_url());
    let machine = Machine {
        icount_sleep: real_time,
        icount_shift: 0,
        ..machine("imagesave", &extra, true)?
    };
    let (ended, wall) = run_to_end(&machine, "linux-devices-imagesave")?;
    expect_success(&ended)
        .and_then(|()| saved_images(&linux_lines(&ended), &server, wall))
        .map_err(|message| with_console_tail(message, &ended))
}

/// The PL031 as Linux's `/dev/rtc0`: its name and time, and an alarm two seconds ahead that
/// fires (the driver's interrupt count grows, `wakealarm` is cleared).
fn rtc() -> Result<()> {
    let (ended, _) = run_to_end(&machine("rtc", "", false)?, "linux-devices-rtc")?;
    let check = || -> Result<()> {
        expect_success(&ended)?;
        let linux = linux_lines(&ended);
        expect_line(&linux, r"^KEEL-RTC name rtc-pl031")?;
        let since: u64 = captured(&linux, r"^KEEL-RTC since_epoch (\d+)$")?
            .parse()
            .map_err(|e| format!("since_epoch: {e}"))?;
        // QEMU's RTC starts at the scenarios' fixed date, 2024-01-01 (icount runs).
        if !(1_704_067_200..1_704_067_200 + 600).contains(&since) {
            return Err(format!("/dev/rtc0 reads {since} s since the epoch"));
        }
        let alarm =
            Regex::new(r"^KEEL-RTC alarm interrupts (\d+) -> (\d+); wakealarm ''$").unwrap();
        let (before, after) = linux
            .lines
            .iter()
            .find_map(|line| {
                let c = alarm.captures(line)?;
                Some((c[1].parse::<u64>().ok()?, c[2].parse::<u64>().ok()?))
            })
            .ok_or("no KEEL-RTC alarm line with the alarm cleared")?;
        if after <= before {
            return Err(format!(
                "the RTC's interrupt count went {before} -> {after}"
            ));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// Bytes of the file Linux fetches through the ZCU102's GEM.
const GEM_FETCH_BYTES: usize = 1 << 20;

/// The ZCU102 (`configs/tests/zcu102-devices.toml`): Linux reads the ZynqMP RTC given to it
/// (its time QEMU's, from the scenarios' fixed date, and moving), gets an address by DHCP
/// through GEM3 and fetches a file from the host, checked by its size and SHA-256, with the
/// GEM's interrupts forwarded to it; the partition's ticks stay whole.
fn zynqmp_devices() -> Result<()> {
    let server = FileServer::start(GEM_FETCH_BYTES)?;
    let template = config("zcu102-devices");
    let text =
        std::fs::read_to_string(&template).map_err(|e| format!("{}: {e}", template.display()))?;
    let test = "keel.test=zynqmp\"";
    if !text.contains(test) {
        return Err(format!("{}: no {test} to extend", template.display()));
    }
    let text = text.replace(
        test,
        &format!("keel.test=zynqmp keel.url={}\"", server.guest_url()),
    );
    let path = output_dir().join("zcu102-devices.toml");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    let machine = crate::image::machine(&build_system(&path)?, true)?;
    let (ended, _) = run_to_end(&machine, "zcu102-devices")?;
    let check = || -> Result<()> {
        expect_success(&ended)?;
        expect_line(
            &ended,
            r"^\[keel\] Keel .* \(board zcu102: GICv2 at 0xf9010000, Cadence UART at 0xff000000\)",
        )?;
        let linux = linux_lines(&ended);
        expect_line(&linux, "^KEEL-ZYNQMP-RTC compatible xlnx,zynqmp-rtc $")?;
        let times = captured(&linux, r"^KEEL-ZYNQMP-RTC current_time (\d+ then \d+)$")?;
        let (first, second) = times
            .split_once(" then ")
            .and_then(|(a, b)| Some((a.parse::<u64>().ok()?, b.parse::<u64>().ok()?)))
            .ok_or_else(|| format!("RTC times '{times}'"))?;
        // QEMU's RTC starts at the scenarios' fixed date, 2024-01-01 (icount runs).
        if !(1_704_067_200..1_704_067_200 + 600).contains(&first)
            || !(2..=3).contains(&(second - first.min(second)))
        {
            return Err(format!(
                "the RTC read {first}, then {second} two seconds later"
            ));
        }
        expect_fetched(&linux, &server)?;
        let interrupts: u64 = captured(&linux, r"^KEEL-GEM interrupts (\d+)$")?
            .parse()
            .map_err(|e| format!("GEM interrupts: {e}"))?;
        if interrupts == 0 {
            return Err("the GEM's driver took no interrupt".into());
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// The scenarios of Linux with real devices under Keel.
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "Linux devices: a Keel VM given the PCI bridge (behind the SMMU) boots from its virtio-blk root disk, writes a file, resets, reads it back; the RT partition ticks on".into(),
            run: Box::new(disk_survives_reset),
        },
        Scenario {
            name: "Linux devices: the same VM's virtio-net card gets an address by DHCP and fetches 50 MB over HTTP, checked by SHA-256".into(),
            run: Box::new(|| fetch(super::rootfs::FETCH_BYTES, false).map(|_| ())),
        },
        Scenario {
            name: "Linux devices: the board's PL031 given to the VM is /dev/rtc0, its alarm interrupt fires".into(),
            run: Box::new(rtc),
        },
        Scenario {
            name: "Linux devices [ZCU102]: the ZynqMP's RTC and GEM3 given to Linux by their DT paths: it reads the RTC's time, gets an address by DHCP through the GEM and fetches 1 MiB, checked by SHA-256; the RT partition ticks on".into(),
            run: Box::new(zynqmp_devices),
        },
    ]
}

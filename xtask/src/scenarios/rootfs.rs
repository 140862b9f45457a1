//! Scenarios of Debian's own kernel with real storage and network (issue 21), natively: QEMU
//! `virt` without Keel (the kernel at EL1), under icount like the others. The root file system
//! is the ext4 disk `debian::rootfs` builds, on a `virtio-blk-pci` function (`snapshot=on`: the
//! cached image is never written), reached through the initramfs's `keel.root=/dev/vda`
//! (`debian/scripts.rs`); the network is a `virtio-net-pci` card on QEMU's user-mode network,
//! whose guest reaches [`FileServer`] on the host's loopback at 10.0.2.2. The same runs inside
//! a Keel VM given the PCIe host bridge come later; [`measure`] is what a benchmark comparing
//! the two will call.

use std::time::{Duration, Instant};

use regex::Regex;

use super::{expect_line, log_path, with_console_tail, Scenario};
use crate::http::FileServer;
use crate::image::output_dir;
use crate::qemu::{Disk, Ended, Machine};
use crate::{step, Result};

/// The kernel flavour these runs use (the demo's and the benchmarks').
pub(super) const FLAVOUR: &str = "cloud-arm64";

/// The root disk as the guest's kernel names it (the one virtio-blk function).
pub(super) const ROOT_DEVICE: &str = "/dev/vda";

/// The file the network scenarios fetch, the benchmark's size: natively under icount it takes
/// about 0.22 s of guest time and the whole run about 10 s of real time.
pub(super) const FETCH_BYTES: usize = 50_000_000;

/// What the disk-read scenario reads with dd, in MiB.
const SCENARIO_DD_MIB: u64 = 32;

/// What the benchmark reads with dd, in MiB: no more than the free room of the root file
/// system (its image is its contents and 64 MiB).
pub(super) const BENCH_DD_MIB: u64 = 64;

/// Real time a run may take before QEMU is killed.
const DEADLINE: Duration = Duration::from_secs(300);

/// The guest kernel's timestamp at the start of a console line (`[   12.345678] ...`): its
/// uptime in virtual time.
fn kernel_time(line: &str) -> Option<f64> {
    let rest = line.strip_prefix('[')?;
    rest[..rest.find(']')?].trim().parse().ok()
}

/// The virtual time each boot of a run took: the last kernel timestamp before each reset, and
/// the last one of all (the kernel's uptime starts over at each boot).
pub(super) fn boot_times(ended: &Ended) -> Vec<f64> {
    let mut boots = Vec::new();
    let mut last = 0.0;
    for line in &ended.lines {
        if let Some(time) = kernel_time(line) {
            if time < last {
                boots.push(last);
            }
            last = time;
        }
    }
    boots.push(last);
    boots
}

/// A native machine on one CPU booting Debian's kernel with its root on the disk (writes kept
/// in QEMU's overlay only) and running `/tests/<test>.sh`, with `extra` on its command line
/// and a user-mode network card if `network`.
fn machine(test: &str, extra: &str, network: bool) -> Result<Machine> {
    machine_with_iommu(test, extra, network, false)
}

/// As [`machine`], with QEMU's SMMUv3 in front of the PCIe host bridge if `iommu`.
fn machine_with_iommu(test: &str, extra: &str, network: bool, iommu: bool) -> Result<Machine> {
    let cache = output_dir().join("debian");
    let kernel = crate::debian::kernel(&cache, FLAVOUR)?;
    let initramfs = crate::debian::initramfs(&cache, FLAVOUR)?;
    let disk = crate::debian::rootfs(&cache, FLAVOUR)?;
    let append = format!("console=ttyAMA0 keel.root={ROOT_DEVICE} keel.test={test} {extra}");
    Ok(Machine {
        disk: Some(Disk {
            path: disk,
            snapshot: true,
        }),
        user_network: network,
        iommu,
        ..Machine::native_linux(&kernel, 1, append.trim_end(), &initramfs)
    })
}

/// Where the benchmark's Linux runs: on QEMU's CPU itself, or as dom0 of Debian's Xen 4.17
/// (the peer: the same kernel, initramfs, disk and network on the same QEMU).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Host {
    Native,
    XenDom0,
}

impl Host {
    /// `native` (a [`machine`]) as this host runs it: unchanged, or its kernel, command line
    /// and initramfs loaded as Xen's dom0 (one CPU, `dom0_mem` the Keel VM's 512 MiB, console
    /// on Xen's `hvc0`) with the same disk, network and clock.
    fn machine(self, native: Machine) -> Result<Machine> {
        if self == Host::Native {
            return Ok(native);
        }
        let xen = crate::debian::xen(&output_dir().join("debian"))
            .map_err(|e| format!("fetching Xen: {e}"))?;
        let bootargs = crate::debian::dom0_bootargs(native.append.as_deref().unwrap_or_default());
        let initrd = native
            .initrd
            .as_deref()
            .ok_or("no initramfs to give dom0")?;
        let dom0 = Machine::xen(
            &xen,
            "dom0_mem=512M console=dtuart",
            &native.kernel,
            &bootargs,
            initrd,
        )?;
        Ok(Machine {
            icount: native.icount,
            icount_sleep: native.icount_sleep,
            icount_shift: native.icount_shift,
            disk: native.disk,
            user_network: native.user_network,
            ..dom0
        })
    }

    /// The suffix of a run's log name.
    fn log_suffix(self) -> &'static str {
        match self {
            Host::Native => "",
            Host::XenDom0 => "-xen",
        }
    }
}

/// Runs `machine` until QEMU exits (or [`DEADLINE`]), its console logged as `log`; returns the
/// console and the real time it took.
fn run(machine: &Machine, log: &str) -> Result<(Ended, Duration)> {
    let start = Instant::now();
    let ended = machine.spawn(&log_path(log))?.finish(DEADLINE);
    Ok((ended, start.elapsed()))
}

/// The guest ran from the disk and its test ended with status 0, and QEMU exited 0.
fn expect_success(ended: &Ended) -> Result<()> {
    expect_line(ended, &format!("^KEEL-ROOT {ROOT_DEVICE} / ext4 rw[, ]"))?;
    expect_line(ended, "^KEEL-INIT-END status=0$")?;
    match ended.exit_code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("QEMU exited with status {code}")),
        None => Err("QEMU did not exit by itself (killed at the deadline)".into()),
    }
}

/// The guest's network came up with QEMU's DHCP address, and the file it fetched
/// (`KEEL-FETCH`) is the one `server` served, by size and SHA-256.
pub(super) fn expect_fetched(guest: &Ended, server: &FileServer) -> Result<()> {
    expect_line(guest, r"^KEEL-NET address 10\.0\.2\.15/24$")?;
    let fetched = captured(guest, r"^KEEL-FETCH (bytes=\d+ sha256=[0-9a-f]{64})$")?;
    let served = format!("bytes={} sha256={}", server.size, server.sha256);
    if fetched != served {
        return Err(format!(
            "the guest fetched {fetched}, the host served {served}"
        ));
    }
    Ok(())
}
/// The value of the first console line matching `pattern`'s first group.
pub(super) fn captured(ended: &Ended, pattern: &str) -> Result<String> {
    let regex = Regex::new(pattern).map_err(|e| e.to_string())?;
    ended
        .lines
        .iter()
        .find_map(|line| Some(regex.captures(line)?[1].to_string()))
        .ok_or_else(|| format!("no console line matched /{pattern}/"))
}

/// The nanoseconds of the guest's `KEEL-TIME <name> ns=N status=0` line.
pub(super) fn timed_ns(ended: &Ended, name: &str) -> Result<u64> {
    captured(ended, &format!("^KEEL-TIME {name} ns=(\\d+) status=0$"))?
        .parse()
        .map_err(|e| format!("KEEL-TIME {name}: {e}"))
}

/// Bytes per nanosecond is GB/s; this gives MB/s.
pub(super) fn megabytes_per_second(bytes: u64, ns: u64) -> f64 {
    bytes as f64 * 1000.0 / ns.max(1) as f64
}

/// One run's figures: what it measured and what it cost.
pub(crate) struct Figures {
    /// Bytes read or fetched, and the guest's nanoseconds for them.
    pub bytes: u64,
    pub ns: u64,
    /// Virtual seconds of the run (all boots), and the real time it took.
    pub virtual_s: f64,
    pub wall: Duration,
}

impl Figures {
    fn summary(&self, what: &str) -> String {
        format!(
            "{what}: {} bytes in {:.3} ms of guest time ({:.1} MB/s); the run took {:.2} s virtual, {:.1} s real",
            self.bytes,
            self.ns as f64 / 1e6,
            megabytes_per_second(self.bytes, self.ns),
            self.virtual_s,
            self.wall.as_secs_f64()
        )
    }
}

/// Boots from the disk twice: the first boot writes a line naming itself to the disk and
/// resets the machine (PSCI SYSTEM_RESET; QEMU restarts it), the second reads the line back,
/// checks it and powers off. A second boot that finds no file would write and reset again:
/// the run is stopped then, rather than left to loop.
fn disk_survives_reset() -> Result<()> {
    let start = Instant::now();
    let mut session = machine("disk", "", false)?.spawn(&log_path("rootfs-disk"))?;
    let marker = r"^KEEL-DISK (wrote|read): ";
    let second = session.wait_for_count(marker, 2, DEADLINE);
    let ended = match second {
        Ok(line) if line.starts_with("KEEL-DISK read: ") => session.finish(DEADLINE),
        Ok(line) => {
            let ended = session.kill();
            return Err(with_console_tail(
                format!("the second boot did not find the first one's file: '{line}'"),
                &ended,
            ));
        }
        Err(message) => {
            let ended = session.kill();
            return Err(with_console_tail(message, &ended));
        }
    };
    let wall = start.elapsed();
    let check = || -> Result<()> {
        expect_success(&ended)?;
        let wrote = captured(&ended, "^KEEL-DISK wrote: (.*)$")?;
        let read = captured(&ended, "^KEEL-DISK read: (.*)$")?;
        if wrote != read {
            return Err(format!("wrote '{wrote}' but read '{read}'"));
        }
        let first_boot = wrote
            .strip_prefix("keel disk test: written by boot ")
            .ok_or_else(|| format!("unexpected line written: '{wrote}'"))?;
        let second_boot = captured(&ended, "^KEEL-DISK boot (.*)$")?;
        if first_boot == second_boot {
            return Err(format!("both boots have the boot id {first_boot}"));
        }
        let boots = ended
            .lines
            .iter()
            .filter(|l| l.contains("KEEL-ROOT "))
            .count();
        if boots != 2 {
            return Err(format!("{boots} boots from the disk, expected 2"));
        }
        Ok(())
    };
    check().map_err(|message| with_console_tail(message, &ended))?;
    let times = boot_times(&ended);
    step(&format!(
        "rootfs disk: boots of {} s virtual time; the run took {:.1} s real",
        times
            .iter()
            .map(|t| format!("{t:.2}"))
            .collect::<Vec<_>>()
            .join(" and "),
        wall.as_secs_f64()
    ));
    Ok(())
}

/// Reads of the disk the disk-read test makes in one boot: the figure is the fastest.
pub(super) const DD_RUNS: usize = 3;

/// The disk's first `mib` MiB read with dd after dropping the page cache, [`DD_RUNS`] times,
/// timed by the guest; the fastest read is the figure (under icount, a wait for the disk lasts
/// until the guest's next timer event, so the reads vary).
pub(crate) fn disk_read(mib: u64, host: Host) -> Result<Figures> {
    let machine = host.machine(machine(
        "disk-read",
        &format!("keel.dd-mib={mib} keel.dd-runs={DD_RUNS}"),
        false,
    )?)?;
    let log = format!("rootfs-disk-read{}", host.log_suffix());
    let (ended, wall) = run(&machine, &log)?;
    let check = || -> Result<Figures> {
        expect_success(&ended)?;
        let bytes: u64 = captured(&ended, r"^KEEL-DD bytes=(\d+)$")?
            .parse()
            .map_err(|e| format!("KEEL-DD: {e}"))?;
        let records = Regex::new(&format!(r"^{mib}\+0 records in$")).unwrap();
        let complete = ended.lines.iter().filter(|l| records.is_match(l)).count();
        if complete != DD_RUNS {
            return Err(format!(
                "{complete} of {DD_RUNS} reads of {mib} MiB complete"
            ));
        }
        let mut times = Vec::new();
        for run in 1..=DD_RUNS {
            times.push(timed_ns(&ended, &format!("disk-read-{run}"))?);
        }
        step(&format!(
            "rootfs disk-read: {mib} MiB read in {} ms of guest time",
            times
                .iter()
                .map(|ns| format!("{:.1}", *ns as f64 / 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        Ok(Figures {
            bytes,
            ns: times.into_iter().min().unwrap_or(0),
            virtual_s: boot_times(&ended).iter().sum(),
            wall,
        })
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// The network up with DHCP, and a file of `bytes` bytes fetched from the host over HTTP,
/// timed by the guest and checked by its size and SHA-256 against what the server sent. With
/// `iommu`, QEMU's SMMUv3 is in front of the PCIe bus and Linux's DMA goes through it.
pub(crate) fn fetch(bytes: usize, iommu: bool, real_time: bool, host: Host) -> Result<Figures> {
    let server = FileServer::start(bytes)?;
    let url = format!("keel.url={}", server.guest_url());
    let machine = host.machine(Machine {
        icount_sleep: real_time,
        icount_shift: 0,
        ..machine_with_iommu("net", &url, true, iommu)?
    })?;
    let log = format!(
        "rootfs-net{}{}",
        if iommu { "-smmu" } else { "" },
        host.log_suffix()
    );
    let (ended, wall) = run(&machine, &log)?;
    let check = || -> Result<Figures> {
        expect_success(&ended)?;
        if iommu {
            expect_line(&ended, r"arm-smmu-v3 9050000\.smmuv3: ias ")?;
            expect_line(&ended, r"virtio-pci 0000:00:02\.0: Adding to iommu group")?;
        }
        expect_fetched(&ended, &server)?;
        if server.served() != 1 {
            return Err(format!(
                "the server sent the file {} times, expected once",
                server.served()
            ));
        }
        Ok(Figures {
            bytes: bytes as u64,
            ns: timed_ns(&ended, "fetch")?,
            virtual_s: boot_times(&ended).iter().sum(),
            wall,
        })
    };
    check().map_err(|message| with_console_tail(message, &ended))
}

/// Images the "image saving" benchmark fetches and writes, as in the Xen on ARM paper's table
/// III (200 images of 20 to 90 KB).
pub(super) const IMAGES: usize = 200;

/// The images' sizes: 20,000 to 90,000 bytes, spread over the range.
pub(super) fn image_sizes() -> Vec<usize> {
    (0..IMAGES).map(|i| 20_000 + i * 7_919 % 70_001).collect()
}

/// The image-saving run's figures from `ended` (Linux's own lines), checked against what
/// `server` served: every image written whole and in order (total size and SHA-256 of all).
pub(super) fn saved_images(ended: &Ended, server: &FileServer, wall: Duration) -> Result<Figures> {
    let saved = captured(ended, r"^KEEL-IMAGES (bytes=\d+ sha256=[0-9a-f]{64})$")?;
    let served = format!("bytes={} sha256={}", server.size, server.sha256);
    if saved != served {
        return Err(format!("the guest saved {saved}, the host served {served}"));
    }
    if server.served() != IMAGES {
        return Err(format!(
            "the server sent {} images, expected {IMAGES}",
            server.served()
        ));
    }
    Ok(Figures {
        bytes: server.size as u64,
        ns: timed_ns(ended, "imagesave")?,
        virtual_s: boot_times(ended).iter().sum(),
        wall,
    })
}

/// The "image saving" benchmark natively: [`IMAGES`] images fetched over HTTP and written to
/// the root disk, timed by the guest.
pub(crate) fn image_saving(real_time: bool, host: Host) -> Result<Figures> {
    let server = FileServer::start_set(&image_sizes())?;
    let url = format!("keel.url={} keel.count={IMAGES}", server.guest_url());
    let machine = host.machine(Machine {
        icount_sleep: real_time,
        icount_shift: 0,
        ..machine("imagesave", &url, true)?
    })?;
    let log = format!("rootfs-imagesave{}", host.log_suffix());
    let (ended, wall) = run(&machine, &log)?;
    expect_success(&ended)
        .and_then(|()| saved_images(&ended, &server, wall))
        .map_err(|message| with_console_tail(message, &ended))
}

/// `cargo xtask bench rootfs`: a 64 MiB read of the root disk, a 50 MB fetch and the image
/// saving benchmark (the network runs with `icount_sleep`: the host's network runs in real
/// time, and a guest's clock must not jump while it waits for it), natively, in a Keel VM given
/// the PCI bridge behind the SMMU (`linux-devices.toml`, the real-time partition beside it) and
/// as dom0 of Debian's Xen 4.17, each with its time over native's. A failed Xen run is reported
/// under the table, which keeps its other columns.
pub fn bench() -> Result<()> {
    let native = [
        disk_read(BENCH_DD_MIB, Host::Native)?,
        fetch(FETCH_BYTES, false, true, Host::Native)?,
        image_saving(true, Host::Native)?,
    ];
    let keel = [
        super::linux_devices::disk_read(BENCH_DD_MIB)?,
        super::linux_devices::fetch(FETCH_BYTES, true)?,
        super::linux_devices::image_saving(true)?,
    ];
    let xen = (|| -> Result<[Figures; 3]> {
        Ok([
            disk_read(BENCH_DD_MIB, Host::XenDom0)?,
            fetch(FETCH_BYTES, false, true, Host::XenDom0)?,
            image_saving(true, Host::XenDom0)?,
        ])
    })();
    let names = [
        "dd of /dev/vda",
        "HTTP fetch from the host",
        "image saving (200 images of 20-90 KB fetched and written)",
    ];
    println!();
    println!("Debian cloud kernel, root on virtio-blk-pci, virtio-net-pci on QEMU user networking, guest clock; -icount shift=0, sleep=off for the dd, sleep=on for the network runs (an idle guest waits for the host's network in real time)");
    let columns: [(&str, Option<&[Figures; 3]>); 3] = [
        ("natively (1 CPU):", Some(&native)),
        ("in a Keel VM given the PCI bridge behind the SMMU (2 vCPUs, the RT partition beside it):", Some(&keel)),
        ("as dom0 of Debian's Xen 4.17 (default settings, 1 CPU, dom0_mem=512M, no SMMU):", xen.as_ref().ok()),
    ];
    for (title, figures) in columns {
        let Some(figures) = figures else { continue };
        println!("{title}");
        for (name, figure) in names.iter().zip(figures) {
            println!("  {}", figure.summary(name));
        }
    }
    println!();
    println!(
        "{:<14} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "guest time ms", "native", "Keel", "Xen", "Keel/native", "Xen/native", "paper Xen"
    );
    let ms = |figure: &Figures| format!("{:.1}", figure.ns as f64 / 1e6);
    let ratio =
        |of: &Figures, native: &Figures| format!("{:.3}", of.ns as f64 / native.ns.max(1) as f64);
    let rows = ["dd", "fetch", "image saving"];
    for (row, name) in rows.iter().enumerate() {
        let xen = xen.as_ref().ok().map(|xen| &xen[row]);
        println!(
            "{:<14} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            name,
            ms(&native[row]),
            ms(&keel[row]),
            xen.map_or("-".into(), ms),
            ratio(&keel[row], &native[row]),
            xen.map_or("-".into(), |xen| ratio(xen, &native[row])),
            // The Xen on ARM paper's table III (seed 002): image saving, Xen / native.
            if *name == "image saving" {
                "1.020"
            } else {
                "-"
            }
        );
    }
    if let Err(error) = xen {
        println!("Xen run FAILED, so its column is empty: {error}");
    }
    Ok(())
}

/// The root file system and network scenarios (`cargo xtask test rootfs`).
pub fn all() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "rootfs: Debian's kernel natively, root on ext4 on virtio-blk-pci: a file written, a reset, read back on the next boot".into(),
            run: Box::new(disk_survives_reset),
        },
        Scenario {
            name: format!("rootfs: Debian's kernel natively, root on virtio-blk-pci: {SCENARIO_DD_MIB} MiB read with dd, timed"),
            run: Box::new(|| {
                disk_read(SCENARIO_DD_MIB, Host::Native)
                    .map(|figures| step(&figures.summary("rootfs disk-read")))
            }),
        },
        Scenario {
            name: "rootfs: Debian's kernel natively, virtio-net-pci on QEMU user networking: DHCP gives 10.0.2.15, 50 MB fetched over HTTP from the host with its SHA-256, timed".into(),
            run: Box::new(|| {
                fetch(FETCH_BYTES, false, false, Host::Native)
                    .map(|figures| step(&figures.summary("rootfs net")))
            }),
        },
        Scenario {
            name: "rootfs: the same fetch behind QEMU's SMMUv3 (iommu=smmuv3): Linux's DMA through it".into(),
            run: Box::new(|| {
                fetch(FETCH_BYTES, true, false, Host::Native)
                    .map(|figures| step(&figures.summary("rootfs net behind the SMMUv3")))
            }),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_timestamps_and_boot_times() {
        assert_eq!(
            kernel_time("[    1.250000] reboot: Restarting system"),
            Some(1.25)
        );
        assert_eq!(kernel_time("KEEL-INIT-START"), None);
        let ended = Ended {
            lines: [
                "[    0.000000] Booting Linux",
                "[    4.500000] reboot: Restarting system",
                "[    0.000000] Booting Linux",
                "KEEL-INIT-END status=0",
                "[    3.250000] reboot: Power down",
            ]
            .map(String::from)
            .to_vec(),
            exit_code: Some(0),
            stderr: String::new(),
        };
        assert_eq!(boot_times(&ended), [4.5, 3.25]);
        assert_eq!(megabytes_per_second(1_000_000, 1_000_000_000), 1.0);
    }
}

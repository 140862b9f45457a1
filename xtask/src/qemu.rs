//! Running QEMU's `virt` machine: interactively for the demo, or as a scripted session
//! whose console output tests and benchmarks read.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use keel_core::board::{BoardDesc, GicVersion};
use keel_core::console::TERMINAL_RESET;
use regex::Regex;

use crate::llc::LlcModel;
use crate::Result;

/// How long the console's reader may take, once QEMU has ended, to hand over the lines left
/// in the pipe (it ends at the pipe's end, at once on an idle host).
const DRAIN: Duration = Duration::from_secs(30);

/// Where the `virt` machine's RAM begins, and how much every machine here has (`-m`).
pub const RAM_BASE: u64 = 0x4000_0000;
pub const RAM_SIZE: u64 = 1 << 30;

const MIB: u64 = 1 << 20;

/// The CPU every machine here has unless it asks for another (`-cpu`): the reference platform's.
pub const REFERENCE_CPU: &str = "cortex-a72";

/// A file that QEMU's `guest-loader` device puts in memory for a hypervisor given with
/// `-kernel` to find (QEMU lists it under `/chosen` of the device tree, as a multiboot module).
#[derive(Clone, Debug)]
pub struct Module {
    /// Where it is loaded.
    pub address: u64,
    pub file: PathBuf,
    /// What it is: a kernel with its command line, or the initrd of that kernel.
    pub kind: ModuleKind,
}

#[derive(Clone, Debug)]
pub enum ModuleKind {
    Kernel { bootargs: String },
    Initrd,
}

/// The RAM QEMU gives `board` (base, size): `virt`'s [`RAM_SIZE`] at [`RAM_BASE`], the ZCU102's
/// 2 GiB at 0 (with more, QEMU 7.2 writes a wrong memory node into its device tree).
pub fn ram_of(board: &BoardDesc) -> (u64, u64) {
    match board.name {
        "zcu102" => (0, ZCU102_RAM),
        _ => (RAM_BASE, RAM_SIZE),
    }
}

/// The ZCU102's RAM under QEMU.
const ZCU102_RAM: u64 = 2 << 30;

/// How to start QEMU.
#[derive(Clone, Debug)]
pub struct Machine {
    /// The board QEMU models (`-M`): `virt` with a GICv3 or a GICv2, or the ZCU102.
    pub board: &'static BoardDesc,
    /// Image given to `-kernel`.
    pub kernel: PathBuf,
    /// Number of CPUs.
    pub cpus: u32,
    /// QEMU's CPU model (`-cpu`), [`REFERENCE_CPU`] but where a scenario needs a feature that
    /// one lacks.
    pub cpu: &'static str,
    /// EL2 present (Keel) or not (a guest running natively at EL1).
    pub virtualization: bool,
    /// Deterministic virtual time: one instruction per nanosecond (`-icount shift=0,sleep=off`),
    /// with QEMU's random seeds and the RTC's start fixed too (without a fixed RTC base, the
    /// host's date reaches the guest and Linux runs differ from one another).
    pub icount: bool,
    /// With `icount`, an idle guest waits in real time (`sleep=on`) instead of its clock
    /// jumping to its next timer (`sleep=off`): for waits on something that runs in the host's
    /// real time (QEMU's user network), at the cost of runs that no longer repeat exactly.
    pub icount_sleep: bool,
    /// With `icount`, each instruction takes 2^`icount_shift` ns (0: a 1 GHz core; 2: 250 MHz,
    /// a quarter of the host's work per virtual second, for the soak's long runs).
    pub icount_shift: u8,
    /// Kernel command line (`-append`), for native guests.
    pub append: Option<String>,
    /// A device tree to use instead of QEMU's own (`-dtb`).
    pub dtb: Option<PathBuf>,
    /// An initial RAM disk (`-initrd`), for native Linux.
    pub initrd: Option<PathBuf>,
    /// Files for a hypervisor other than Keel to boot (`-device guest-loader`).
    pub modules: Vec<Module>,
    /// A log of the translation blocks executed in an address range (see [`ExecLog`]).
    pub exec_log: Option<ExecLog>,
    /// QEMU's SMMUv3 in front of the PCIe host bridge (`iommu=smmuv3` on `-M`).
    pub iommu: bool,
    /// A raw disk image on the PCIe bus as a `virtio-blk-pci` function.
    pub disk: Option<Disk>,
    /// A `virtio-net-pci` function on QEMU's user-mode network (see [`Machine::arguments`]).
    pub user_network: bool,
    /// QEMU's `edu` PCI test device (a DMA engine and an interrupt raised by a register
    /// write), first on the bus (00:01.0, SMMU stream 8), DMA addresses not clipped to its
    /// default 28 bits.
    pub edu: bool,
    /// The edu (with `edu`) behind a PCIe root port at 00:03.0 instead (`-device
    /// pcie-root-port,id=rp0,...` and `-device edu,bus=rp0,addr=0x0`): on the bus the guest
    /// numbers behind it, bus 1 as Linux numbers it (01:00.0, SMMU stream 256).
    pub edu_behind_root_port: bool,
    /// A QMP socket at this path (`-qmp unix:...,server=on,wait=off`), for a tool to stop the
    /// machine and read its memory (`cargo xtask trace`).
    pub qmp: Option<PathBuf>,
    /// When the guest powers off, QEMU stops the machine and stays (`-no-shutdown`), so that a
    /// tool can still read its memory through `qmp`; the session then ends when it is killed.
    pub no_shutdown: bool,
    /// A shared last-level cache modelled by a TCG plugin (`-plugin`), whose report says what
    /// each pCPU's loads and stores found in it ([`crate::llc`]).
    pub llc: Option<LlcModel>,
}

/// A raw disk image given to the machine as a `virtio-blk-pci` function.
#[derive(Clone, Debug)]
pub struct Disk {
    pub path: PathBuf,
    /// The guest's writes go to a temporary overlay that QEMU drops when it exits
    /// (`snapshot=on`): they last across the guest's resets, and the image stays as it was.
    pub snapshot: bool,
}

/// QEMU's log of every translation block it executes whose address is in `start..end`, with
/// the instructions of each block as it is translated (`-d exec,nochain,in_asm -dfilter`):
/// what [`crate::exec_trace`] reads. Chaining is off so that each execution is logged, which
/// slows the machine but leaves its virtual time (icount) unchanged.
#[derive(Clone, Debug)]
pub struct ExecLog {
    pub path: PathBuf,
    pub start: u64,
    pub end: u64,
}

impl Machine {
    /// A Keel image on `cpus` pCPUs.
    pub fn keel(kernel: &Path, cpus: u32) -> Self {
        Self {
            // The board this thread's configurations are moved to, if any (a scenario run again
            // on another board: `crate::image::with_board`).
            board: crate::image::board_override().unwrap_or(&keel_core::board::QEMU_VIRT),
            kernel: kernel.into(),
            cpus,
            cpu: REFERENCE_CPU,
            virtualization: true,
            icount: false,
            icount_sleep: false,
            icount_shift: 0,
            append: None,
            // A board whose device tree QEMU does not make gets its own (`-dtb`).
            dtb: crate::image::board_override()
                .and_then(|board| crate::image::board_dtb_file(board).ok()),
            initrd: None,
            modules: Vec::new(),
            exec_log: None,
            iommu: false,
            disk: None,
            user_network: false,
            edu: false,
            edu_behind_root_port: false,
            qmp: None,
            no_shutdown: false,
            llc: None,
        }
    }

    /// Linux running natively (EL1, no hypervisor) on `cpus` CPUs under icount: `kernel` with
    /// its command line `append` and `initrd`, no disk, no network.
    pub fn native_linux(kernel: &Path, cpus: u32, append: &str, initrd: &Path) -> Self {
        Self {
            virtualization: false,
            icount: true,
            icount_sleep: false,
            icount_shift: 0,
            append: Some(append.into()),
            initrd: Some(initrd.into()),
            ..Self::keel(kernel, cpus)
        }
    }

    /// A built Keel system on the pCPUs its configuration uses, under icount: how the
    /// scenarios and benchmarks run one.
    pub fn keel_icount(image: &crate::image::SystemImage) -> Self {
        Self {
            icount: true,
            icount_sleep: false,
            icount_shift: 0,
            iommu: image.system.iommu.is_some(),
            board: image.system.board,
            dtb: crate::image::board_dtb_file(image.system.board).ok(),
            ..Self::keel(&image.path, image.system.pcpus)
        }
    }

    /// The Xen image `xen` (an arm64 Image) on one CPU, with its command line `xen_cmdline`,
    /// booting `kernel` with `bootargs` and `initrd` as dom0. The two are loaded from 16 MiB into
    /// RAM on, each at a 2 MiB boundary, and must end below where QEMU puts its device tree
    /// (`RAM_BASE + min(RAM_SIZE / 2, 128 MiB)` when there is no `-initrd`).
    pub fn xen(
        xen: &Path,
        xen_cmdline: &str,
        kernel: &Path,
        bootargs: &str,
        initrd: &Path,
    ) -> Result<Self> {
        let size = |path: &Path| {
            std::fs::metadata(path)
                .map(|m| m.len())
                .map_err(|e| format!("{}: {e}", path.display()))
        };
        // Xen's own extent, from its Image header: text_offset at 8, image_size at 16.
        let header = std::fs::read(xen).map_err(|e| format!("{}: {e}", xen.display()))?;
        let field = |at: usize| {
            header
                .get(at..at + 8)
                .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        };
        let (Some(text_offset), Some(image_size)) = (field(8), field(16)) else {
            return Err(format!("{}: no arm64 Image header", xen.display()));
        };
        let first = RAM_BASE + 16 * MIB;
        if RAM_BASE + 2 * MIB + text_offset + image_size > first {
            return Err(format!(
                "{}: the image ({image_size:#x} bytes at offset {text_offset:#x}) overlaps its modules at {first:#x}",
                xen.display()
            ));
        }
        let kernel_end = first + size(kernel)?;
        let initrd_address = kernel_end.next_multiple_of(2 * MIB);
        let end = initrd_address + size(initrd)?;
        let dtb = RAM_BASE + (RAM_SIZE / 2).min(128 * MIB);
        if end > dtb {
            return Err(format!(
                "the dom0 kernel and initrd end at {end:#x}, beyond QEMU's device tree at {dtb:#x}"
            ));
        }
        Ok(Self {
            board: &keel_core::board::QEMU_VIRT,
            kernel: xen.into(),
            cpus: 1,
            cpu: REFERENCE_CPU,
            virtualization: true,
            icount: false,
            icount_sleep: false,
            icount_shift: 0,
            append: Some(xen_cmdline.into()),
            dtb: None,
            initrd: None,
            modules: vec![
                Module {
                    address: first,
                    file: kernel.into(),
                    kind: ModuleKind::Kernel {
                        bootargs: bootargs.into(),
                    },
                },
                Module {
                    address: initrd_address,
                    file: initrd.into(),
                    kind: ModuleKind::Initrd,
                },
            ],
            exec_log: None,
            iommu: false,
            disk: None,
            user_network: false,
            edu: false,
            edu_behind_root_port: false,
            qmp: None,
            no_shutdown: false,
            llc: None,
        })
    }

    /// QEMU's arguments (without the console wiring). Only the devices the machine uses are
    /// asked for: `-nic none` drops `virt`'s default network card, whose option ROM
    /// (`efi-virtio.rom`) comes from a package QEMU only recommends (`ipxe-qemu`); the user-mode
    /// network's card is asked for with `romfile=` (none) for the same reason. Its guest is
    /// 10.0.2.15, given by QEMU's DHCP server, and its connections to 10.0.2.2 reach the host's
    /// loopback interface.
    pub fn arguments(&self) -> Vec<String> {
        self.arguments_for(None)
    }

    fn arguments_for(&self, dump_device_tree: Option<&Path>) -> Vec<String> {
        let mut machine = match (self.board.name, self.virtualization) {
            ("zcu102", _) => "xlnx-zcu102,virtualization=on".to_string(),
            (_, virtualization) => format!(
                "virt,{}gic-version={}",
                if virtualization {
                    "virtualization=on,"
                } else {
                    ""
                },
                match self.board.gic {
                    GicVersion::V2 => 2,
                    GicVersion::V3 => 3,
                }
            ),
        };
        if self.iommu {
            machine.push_str(",iommu=smmuv3");
        }
        if let Some(path) = dump_device_tree {
            machine.push_str(&format!(
                ",dumpdtb={}",
                path.display().to_string().replace(',', ",,")
            ));
        }
        // The ZCU102's CPUs are its own (Cortex-A53); with more than 2 GiB QEMU 7.2 writes a
        // wrong memory node into its device tree.
        let zcu102 = self.board.name == "zcu102";
        let cpu = (!zcu102).then_some(self.cpu);
        let ram = ram_of(self.board).1 / MIB;
        let mut args: Vec<String> = ["-M", &machine]
            .into_iter()
            .chain(cpu.map(|cpu| ["-cpu", cpu]).into_iter().flatten())
            .chain([
                "-m",
                &format!("{ram}M"),
                "-smp",
                &self.cpus.to_string(),
                "-display",
                "none",
                "-monitor",
                "none",
                "-nic",
                "none",
            ])
            .map(|s| s.to_string())
            .collect();
        if zcu102 {
            // The ZCU102's DisplayPort has audio, which QEMU would give the host's sound
            // system (ALSA's complaints on a machine without one): it goes nowhere.
            args.extend(["-audiodev", "none,id=none"].map(String::from));
        }
        if self.icount {
            args.extend(
                [
                    "-icount",
                    format!(
                        "shift={},sleep={}",
                        self.icount_shift,
                        if self.icount_sleep { "on" } else { "off" }
                    )
                    .as_str(),
                    "-seed",
                    "1",
                    "-rtc",
                    "base=2024-01-01T00:00:00,clock=vm",
                ]
                .map(String::from),
            );
        }
        if let Some(llc) = &self.llc {
            args.extend(["-plugin".to_string(), llc.plugin_option()]);
        }
        if let Some(log) = &self.exec_log {
            args.extend([
                "-d".to_string(),
                "exec,nochain,in_asm".to_string(),
                "-dfilter".to_string(),
                format!("{:#x}+{:#x}", log.start, log.end - log.start),
                "-D".to_string(),
                log.path.display().to_string(),
            ]);
        }
        if let Some(qmp) = &self.qmp {
            args.extend([
                "-qmp".to_string(),
                format!(
                    "unix:{},server=on,wait=off",
                    qmp.display().to_string().replace(',', ",,")
                ),
            ]);
        }
        if self.no_shutdown {
            args.push("-no-shutdown".to_string());
        }
        args.extend(["-kernel".to_string(), self.kernel.display().to_string()]);
        if let Some(append) = &self.append {
            args.extend(["-append".to_string(), append.clone()]);
        }
        if let Some(initrd) = &self.initrd {
            args.extend(["-initrd".to_string(), initrd.display().to_string()]);
        }
        if let Some(dtb) = &self.dtb {
            args.extend(["-dtb".to_string(), dtb.display().to_string()]);
        }
        if self.edu && self.edu_behind_root_port {
            args.extend(
                [
                    "-device",
                    "pcie-root-port,id=rp0,bus=pcie.0,addr=0x3,chassis=1,slot=1",
                    "-device",
                    "edu,bus=rp0,addr=0x0,dma_mask=0xffffffffffffffff",
                ]
                .map(String::from),
            );
        } else if self.edu {
            args.extend(["-device", "edu,dma_mask=0xffffffffffffffff"].map(String::from));
        }
        // QEMU's virtio devices do their DMA through the IOMMU only when they offer
        // VIRTIO_F_ACCESS_PLATFORM (`iommu_platform=on`, a modern device): otherwise they read
        // and write physical memory at the addresses the guest gives them, past the SMMU. Under
        // Keel those are the VM's guest-physical addresses, not physical ones.
        let virtio_options = if self.iommu {
            ",iommu_platform=on,disable-legacy=on"
        } else {
            ""
        };
        if let Some(disk) = &self.disk {
            args.extend([
                "-drive".to_string(),
                format!(
                    "file={},format=raw,if=none,id=disk0{}",
                    disk.path.display().to_string().replace(',', ",,"),
                    if disk.snapshot { ",snapshot=on" } else { "" }
                ),
                "-device".to_string(),
                format!("virtio-blk-pci,drive=disk0{virtio_options}"),
            ]);
        }
        if self.user_network && zcu102 {
            // The ZynqMP's four GEMs take QEMU's NICs in order, and the ZCU102 wires GEM3
            // (0xff0e0000) to its Ethernet jack: the first three get user networks that reach
            // nothing (`restrict=on`), GEM3 the user network.
            for _ in 0..3 {
                args.extend(["-nic", "user,model=cadence_gem,restrict=on"].map(String::from));
            }
            args.extend(["-nic", "user,model=cadence_gem"].map(String::from));
        } else if self.user_network {
            args.extend([
                "-netdev".to_string(),
                "user,id=net0".to_string(),
                "-device".to_string(),
                format!("virtio-net-pci,netdev=net0,romfile={virtio_options}"),
            ]);
        }
        for module in &self.modules {
            // QEMU's option syntax: a comma inside a value is written twice.
            let file = module.file.display().to_string().replace(',', ",,");
            let what = match &module.kind {
                ModuleKind::Kernel { bootargs } => {
                    format!("kernel={file},bootargs={}", bootargs.replace(',', ",,"))
                }
                ModuleKind::Initrd => format!("initrd={file}"),
            };
            args.extend([
                "-device".to_string(),
                format!("guest-loader,addr={:#x},{what}", module.address),
            ]);
        }
        args
    }

    /// Writes the device tree QEMU would give this machine to `path` (QEMU exits at once).
    pub fn dump_device_tree(&self, path: &Path) -> Result<()> {
        crate::process::output(
            Command::new("qemu-system-aarch64")
                .args(self.arguments_for(Some(path)))
                .stdin(Stdio::null()),
        )
        .map(|_| ())
        .map_err(|e| format!("QEMU could not dump its device tree: {e}"))
    }

    /// Runs QEMU on this terminal: console on stdin/stdout, Ctrl-C goes to the guest.
    pub fn run_interactive(&self) -> Result<()> {
        let status = Command::new("qemu-system-aarch64")
            .args(self.arguments())
            .args([
                "-chardev",
                "stdio,id=console,signal=off",
                "-serial",
                "chardev:console",
            ])
            .status()
            .map_err(|e| format!("qemu-system-aarch64: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("QEMU exited with {status}"))
        }
    }

    /// Starts QEMU with its console on pipes, to be logged to `log` when it ends: a log that
    /// another running session of this process writes is refused (scenarios run at once).
    pub fn spawn(&self, log: &Path) -> Result<Session> {
        let log_claim = LogClaim::new(log)?;
        let mut child = Command::new("qemu-system-aarch64")
            .args(self.arguments())
            .args(["-serial", "stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("qemu-system-aarch64: {e}"))?;
        let (sender, lines) = channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = Vec::new();
            while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
                let text = visible_line(&line);
                if sender
                    .send(text.trim_end_matches('\n').to_string())
                    .is_err()
                {
                    break;
                }
                line.clear();
            }
        });
        let mut stderr = child.stderr.take().unwrap();
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        Ok(Session {
            child,
            lines,
            output: Vec::new(),
            log: log_claim,
            stderr: Some(stderr),
        })
    }
}

/// The lines still to come from a console's reader once QEMU has ended: its pipe ends once
/// read, and the reader with it, so every line QEMU wrote is taken, however far a busy host
/// left the reader behind (a wait of half a second for the next line once cost a scenario its
/// last lines), within `bound`.
fn drain(lines: &Receiver<String>, bound: Duration) -> Vec<String> {
    let end = Instant::now() + bound;
    let mut taken = Vec::new();
    while let Ok(line) = lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
        taken.push(line);
    }
    taken
}

/// A console line as the scenarios judge it: without its CRs, and without the terminal resets
/// Keel writes after a raw VM's output (invisible on a terminal; where they go is tested in
/// `keel_core::console`), so that the line after one still starts with its prefix.
fn visible_line(line: &[u8]) -> String {
    let reset = String::from_utf8_lossy(TERMINAL_RESET);
    String::from_utf8_lossy(line)
        .replace(reset.as_ref(), "")
        .replace('\r', "")
}

/// The console logs of the sessions running now in this process.
static LOGS_IN_USE: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// A session's claim on its log file, given back when the session ends.
struct LogClaim(PathBuf);

impl LogClaim {
    fn new(log: &Path) -> Result<Self> {
        if LOGS_IN_USE.lock().unwrap().insert(log.to_path_buf()) {
            Ok(LogClaim(log.to_path_buf()))
        } else {
            Err(format!(
                "{}: another QEMU of this run logs there now (two scenarios running at once use one log name)",
                log.display()
            ))
        }
    }
}

impl Drop for LogClaim {
    fn drop(&mut self) {
        LOGS_IN_USE.lock().unwrap().remove(&self.0);
    }
}

/// A running QEMU whose console is read line by line.
pub struct Session {
    child: Child,
    lines: Receiver<String>,
    output: Vec<String>,
    log: LogClaim,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// How a session ended.
pub struct Ended {
    /// Every console line.
    pub lines: Vec<String>,
    /// QEMU's exit code, or None if it was killed at the deadline.
    pub exit_code: Option<i32>,
    /// What QEMU itself wrote on stderr (its own errors and warnings).
    pub stderr: String,
}

impl Ended {
    /// QEMU's last stderr lines, as a suffix for an error message (empty if it wrote none).
    pub fn stderr_note(&self) -> String {
        let tail =
            crate::process::stderr_tail(self.stderr.as_bytes(), crate::process::STDERR_LINES);
        if tail.is_empty() {
            tail
        } else {
            format!("; QEMU said:{tail}")
        }
    }
}

impl Session {
    /// Waits until a console line (seen before or now) matches `pattern`; returns that line.
    pub fn wait_for(&mut self, pattern: &str, timeout: Duration) -> Result<String> {
        self.wait_for_count(pattern, 1, timeout)
    }

    /// How many console lines were read so far: a mark for
    /// [`wait_for_after`](Self::wait_for_after).
    pub fn lines_read(&self) -> usize {
        self.output.len()
    }

    /// Waits until a console line after the first `mark` read matches `pattern`; returns it.
    pub fn wait_for_after(
        &mut self,
        mark: usize,
        pattern: &str,
        timeout: Duration,
    ) -> Result<String> {
        let regex = Regex::new(pattern).map_err(|e| e.to_string())?;
        let before = self.output[..mark.min(self.output.len())]
            .iter()
            .filter(|l| regex.is_match(l))
            .count();
        self.wait_for_count(pattern, before + 1, timeout)
    }

    /// Waits until `count` console lines in all have matched `pattern`; returns the last one.
    pub fn wait_for_count(
        &mut self,
        pattern: &str,
        count: usize,
        timeout: Duration,
    ) -> Result<String> {
        let regex = Regex::new(pattern).map_err(|e| e.to_string())?;
        let mut matched: Vec<String> = self
            .output
            .iter()
            .filter(|l| regex.is_match(l))
            .cloned()
            .collect();
        let deadline = Instant::now() + timeout;
        while matched.len() < count {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if regex.is_match(&line) {
                        matched.push(line.clone());
                    }
                    self.output.push(line);
                }
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "{} of {count} console lines matched /{pattern}/ within {timeout:?}",
                        matched.len()
                    ))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(format!(
                        "QEMU ended after {} of {count} console lines matched /{pattern}/",
                        matched.len()
                    ))
                }
            }
        }
        Ok(matched.swap_remove(count - 1))
    }

    /// Types `bytes` on the console.
    pub fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let stdin = self.child.stdin.as_mut().ok_or("QEMU stdin closed")?;
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("writing to QEMU: {e}"))
    }

    /// Waits for QEMU to exit by itself (killing it at the deadline) and collects all output:
    /// every console line it wrote (the reader is waited for until the pipe ends, at most
    /// [`DRAIN`] after QEMU did).
    pub fn finish(mut self, timeout: Duration) -> Ended {
        let deadline = Instant::now() + timeout;
        let mut exit_code = None;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                exit_code = status.code();
                break;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.output.extend(drain(&self.lines, DRAIN));
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        let mut log = self.output.join("\n");
        if !stderr.is_empty() {
            log.push_str("\n--- QEMU stderr ---\n");
            log.push_str(&stderr);
        }
        let _ = std::fs::create_dir_all(self.log.0.parent().unwrap());
        let _ = std::fs::write(&self.log.0, log);
        Ended {
            lines: std::mem::take(&mut self.output),
            exit_code,
            stderr,
        }
    }

    /// Asks QEMU to quit (SIGTERM: it exits as from its monitor's `quit`, running its plugins'
    /// exit callbacks, which SIGKILL would not) and collects all output.
    pub fn terminate(self) -> Ended {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish(Duration::from_secs(30))
    }

    /// Stops QEMU now and collects all output.
    pub fn kill(mut self) -> Ended {
        let _ = self.child.kill();
        self.finish(Duration::from_secs(5))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that falls a second behind (a busy host) still hands over every line; the
    /// drain ends as the reader does, not at its bound.
    #[test]
    fn a_late_readers_last_lines_are_taken() {
        let (sender, lines) = channel();
        let reader = std::thread::spawn(move || {
            sender.send("first".to_string()).unwrap();
            std::thread::sleep(Duration::from_secs(1));
            sender.send("last".to_string()).unwrap();
        });
        let started = Instant::now();
        assert_eq!(drain(&lines, Duration::from_secs(30)), ["first", "last"]);
        assert!(started.elapsed() < Duration::from_secs(20));
        reader.join().unwrap();
        // A reader that never ends is left at the bound.
        let (_sender, lines) = channel::<String>();
        assert!(drain(&lines, Duration::from_millis(50)).is_empty());
    }

    /// Keel's terminal resets and the CRs leave the line; a VM's own escape sequences stay.
    #[test]
    fn visible_lines_drop_keels_terminal_resets_only() {
        let reset = std::str::from_utf8(TERMINAL_RESET).unwrap();
        let line = format!("{reset}[keel] input focus\r\n");
        assert_eq!(visible_line(line.as_bytes()), "[keel] input focus\n");
        let raw = format!("[shell] \x1b[1mbold\x1b[0m ~ # {reset}\r\n");
        assert_eq!(
            visible_line(raw.as_bytes()),
            "[shell] \x1b[1mbold\x1b[0m ~ # \n"
        );
    }

    #[test]
    fn the_zcu102s_network_is_on_gem3() {
        let machine = Machine {
            board: keel_core::board::board("zcu102").unwrap(),
            user_network: true,
            ..Machine::native_linux(Path::new("Image"), 1, "quiet", Path::new("initrd"))
        };
        let args = machine.arguments();
        let nics: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "-nic")
            .map(|w| w[1].as_str())
            .collect();
        let unused = "user,model=cadence_gem,restrict=on";
        assert_eq!(
            nics,
            ["none", unused, unused, unused, "user,model=cadence_gem"]
        );
        assert!(!args.iter().any(|a| a.contains("virtio-net")));
    }

    #[test]
    fn disk_network_and_iommu_only_when_asked_for() {
        let plain = Machine::native_linux(Path::new("Image"), 1, "quiet", Path::new("initrd"));
        let args = plain.arguments();
        assert!(args.windows(2).any(|w| w == ["-M", "virt,gic-version=3"]));
        assert!(args.windows(2).any(|w| w == ["-nic", "none"]));
        assert!(!args
            .iter()
            .any(|a| a == "-drive" || a == "-netdev" || a.contains("iommu")));
        let machine = Machine {
            iommu: true,
            disk: Some(Disk {
                path: "root,fs.ext4".into(),
                snapshot: true,
            }),
            user_network: true,
            ..plain
        };
        let args = machine.arguments();
        assert!(args
            .windows(2)
            .any(|w| w == ["-M", "virt,gic-version=3,iommu=smmuv3"]));
        let text = args.join(" ");
        assert!(text.contains(
            "-drive file=root,,fs.ext4,format=raw,if=none,id=disk0,snapshot=on \
             -device virtio-blk-pci,drive=disk0"
        ));
        assert!(text.contains("-netdev user,id=net0 -device virtio-net-pci,netdev=net0,romfile="));
    }

    #[test]
    fn the_cache_model_plugin_only_when_asked_for() {
        let plain = Machine::keel(Path::new("keel.bin"), 4);
        assert!(!plain.arguments().iter().any(|a| a == "-plugin"));
        let geometry = keel_core::colour::CacheGeometry {
            size: 1 << 20,
            ways: 16,
            line: 64,
        };
        let mut llc = LlcModel::new(
            Path::new("/t/libkeel_llc_model.so"),
            geometry,
            Path::new("/t/llc,1.txt"),
        );
        llc.ranges = vec![("vm0".into(), 0x4800_0000..0x5000_0000)];
        llc.excluded = vec![0x4000_0000..0x4020_0000, 0x7000_0000..0x7000_1000];
        llc.interval = Some(100_000);
        let machine = Machine {
            llc: Some(llc),
            ..plain
        };
        let args = machine.arguments();
        assert!(args.windows(2).any(|w| w
            == [
                "-plugin",
                "file=/t/libkeel_llc_model.so,size=1048576,ways=16,line=64,out=/t/llc,,1.txt,\
                 range=vm0:0x48000000-0x50000000,exclude=0x40000000-0x40200000,\
                 exclude=0x70000000-0x70001000,interval=100000"
            ]));
    }

    #[test]
    fn xen_modules_are_placed_from_file_sizes_below_the_device_tree() {
        let directory = std::env::temp_dir().join(format!("keel-qemu-test-{}", std::process::id()));
        std::fs::create_dir_all(&directory).unwrap();
        let (xen, kernel, initrd) = (
            directory.join("xen"),
            directory.join("Image,1"),
            directory.join("initrd"),
        );
        let mut header = vec![0; 0x40];
        header[16..24].copy_from_slice(&0x13_60c8u64.to_le_bytes());
        std::fs::write(&xen, &header).unwrap();
        std::fs::write(&kernel, vec![0; 3 << 20]).unwrap();
        std::fs::write(&initrd, vec![0; 1 << 20]).unwrap();
        let machine = Machine::xen(&xen, "dom0_mem=512M", &kernel, "a=b,c", &initrd).unwrap();
        let args = machine.arguments();
        let loaders: Vec<&String> = args
            .iter()
            .filter(|a| a.starts_with("guest-loader"))
            .collect();
        assert_eq!(
            loaders,
            [
                &format!(
                    "guest-loader,addr=0x41000000,kernel={},,1,bootargs=a=b,,c",
                    directory.join("Image").display()
                ),
                &format!("guest-loader,addr=0x41400000,initrd={}", initrd.display()),
            ]
        );
        assert!(args.windows(2).any(|w| w == ["-smp", "1"]));
        // A kernel that would reach QEMU's device tree at 0x4800_0000 is refused.
        std::fs::write(&kernel, vec![0; 111 << 20]).unwrap();
        assert!(Machine::xen(&xen, "", &kernel, "", &initrd)
            .unwrap_err()
            .contains("beyond QEMU's device tree"));
        std::fs::remove_dir_all(&directory).unwrap();
    }
}

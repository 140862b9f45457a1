//! Building bootable images: the guests of this workspace, then one Keel image per configuration.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use keel_core::board::BoardDesc;
use keel_core::config;

use crate::build_lock::exclusive;
use crate::setup::{objcopy, C_COMPILER, LINUX_TARGET, TARGET};
use crate::{step, workspace, Result};

/// Guests of this workspace that configurations may name with `image = { guest = "..." }`.
pub const GUESTS: &[&str] = &["test-guest", "hostile", "rt-control"];

/// The C guests (no libc, on `guests/sdk/include/keel.h`), named as the Rust ones: each is
/// `guests/<name>/` with a `link.ld` and its `.S` and `.c` sources, built by [`build_c_guest`].
pub const C_GUESTS: &[&str] = &["c-control"];

/// How the C guests are compiled: freestanding, no FP/SIMD (as Keel's Rust target), no
/// unaligned access (they run with the MMU off, where all memory is Device memory).
const C_FLAGS: &[&str] = &[
    "-ffreestanding",
    "-nostdlib",
    "-mgeneral-regs-only",
    "-mstrict-align",
    "-O2",
    "-fno-pic",
    "-no-pie",
    "-static",
    "-fno-stack-protector",
    "-fno-asynchronous-unwind-tables",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wl,--build-id=none",
    "-Wl,--no-warn-rwx-segments",
];

/// Where build products go (under `target/`, ignored by git).
pub fn output_dir() -> PathBuf {
    workspace().join("target/keel")
}

/// The image a configuration names: a workspace guest (`test-guest`, built by
/// [`build_guests`]), or a Debian kernel or firmware, or initramfs (`debian-kernel/<flavour>`,
/// `debian-kernel/u-boot-qemu`, `debian-initramfs/<flavour>`), fetched and built here on first use. None if there is no such
/// artefact or it could not be built (the reason is printed).
pub fn guest_image(name: &str) -> Option<PathBuf> {
    let cache = output_dir().join("debian");
    let built = match name.split_once('/') {
        Some(("debian-kernel", name)) => crate::debian::firmware(&cache, name)
            .unwrap_or_else(|| crate::debian::kernel(&cache, name)),
        Some(("debian-initramfs", flavour)) => crate::debian::initramfs(&cache, flavour),
        _ => {
            return (GUESTS.contains(&name) || C_GUESTS.contains(&name))
                .then(|| output_dir().join("guests").join(format!("{name}.bin")))
        }
    };
    built
        .map_err(|error| crate::progress::err(&format!("error: {name}: {error}")))
        .ok()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` if set, else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    // Cargo runs in the workspace, so a relative directory is relative to it.
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace().join("target"), |dir| workspace().join(dir))
}

/// Cargo (the one running xtask), in the workspace.
pub fn cargo() -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(workspace());
    command
}

/// Makes the raw image `binary` of `elf`, through a file beside it renamed once complete: a
/// QEMU starting from the previous image reads it whole.
fn to_binary(elf: &Path, binary: &Path) -> Result<()> {
    std::fs::create_dir_all(binary.parent().unwrap()).map_err(|e| e.to_string())?;
    let partial = partial_path(binary);
    crate::process::output(
        Command::new(objcopy()?)
            .args(["-O", "binary"])
            .arg(elf)
            .arg(&partial),
    )?;
    std::fs::rename(&partial, binary).map_err(|e| format!("{}: {e}", binary.display()))
}

/// `path` with `.<process id>.partial` added: where a file is written before it is renamed.
fn partial_path(path: &Path) -> PathBuf {
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".{}.partial", std::process::id()));
    PathBuf::from(partial)
}

fn cargo_build(package: &str, env: &[(&str, &Path)]) -> Result<PathBuf> {
    let mut command = cargo();
    command.args([
        "build",
        "--quiet",
        "--release",
        "--target",
        TARGET,
        "-p",
        package,
    ]);
    for (key, value) in env {
        command.env(key, value);
    }
    crate::process::output_quoting(&mut command, 60)
        .map_err(|e| format!("building {package}: {e}"))?;
    Ok(target_dir().join(TARGET).join("release").join(package))
}

/// Builds `keel`, the manager VM's Linux command (`guests/keel-ctl`), for [`LINUX_TARGET`]: a
/// static program, linked by Debian's cross compiler (its musl and C runtime objects are the
/// target's own), its symbols stripped (the release profile keeps debug information for Keel's
/// images). Returns the program's path.
pub fn build_linux_command() -> Result<PathBuf> {
    let linker_variable = format!(
        "CARGO_TARGET_{}_LINKER",
        LINUX_TARGET.to_uppercase().replace('-', "_")
    );
    let mut command = cargo();
    command
        .args([
            "build",
            "--quiet",
            "--release",
            "--target",
            LINUX_TARGET,
            "-p",
            "keel-ctl",
        ])
        .env(linker_variable, C_COMPILER)
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols");
    crate::process::output_quoting(&mut command, 60)
        .map_err(|e| format!("building keel-ctl: {e}"))?;
    Ok(target_dir().join(LINUX_TARGET).join("release").join("keel"))
}

/// Builds every workspace guest to a raw image.
pub fn build_guests() -> Result<()> {
    exclusive(|| {
        for guest in GUESTS {
            let elf = cargo_build(guest, &[])?;
            to_binary(&elf, &guest_image(guest).unwrap())?;
        }
        for guest in C_GUESTS {
            build_c_guest(guest)?;
        }
        Ok(())
    })
}

/// Compiles and links the C guest `guests/<name>/` with Debian's cross compiler, then makes
/// its raw image; skipped when the image is newer than every file of the guest's directory
/// and keel.h, and was built by the same command line.
fn build_c_guest(name: &str) -> Result<()> {
    let source_dir = workspace().join("guests").join(name);
    let header_dir = workspace().join("guests/sdk/include");
    // Every file of the directory (sources, headers, link.ld) counts for the rebuild; in a
    // fixed order, so that the command line (the stamp below) does not change by itself
    // (link.ld puts the image header first whatever the order).
    let mut files: Vec<PathBuf> = std::fs::read_dir(&source_dir)
        .map_err(|e| format!("{}: {e}", source_dir.display()))?
        .flatten()
        .map(|entry| entry.path())
        .collect();
    files.sort();
    let sources = files
        .iter()
        .filter(|path| path.extension().is_some_and(|e| e == "S" || e == "c"));
    let script = source_dir.join("link.ld");
    let binary = guest_image(name).unwrap();
    let elf = binary.with_extension("elf");
    let mut command = Command::new(C_COMPILER);
    command
        .args(C_FLAGS)
        .arg("-I")
        .arg(&header_dir)
        .arg("-T")
        .arg(&script)
        .arg("-o")
        .arg(&elf)
        .args(sources);
    let line = crate::process::command_line(&command);
    let stamp = binary.with_extension("cmd");
    files.push(header_dir.join("keel.h"));
    if is_newer_than(&binary, &files) && std::fs::read_to_string(&stamp).is_ok_and(|s| s == line) {
        return Ok(());
    }
    std::fs::create_dir_all(binary.parent().unwrap()).map_err(|e| e.to_string())?;
    crate::process::output_quoting(&mut command, 60)
        .map_err(|e| format!("building the C guest {name}: {e}"))?;
    to_binary(&elf, &binary)?;
    std::fs::write(&stamp, line).map_err(|e| format!("{}: {e}", stamp.display()))
}

/// Whether `output` exists and was modified after every one of `inputs`.
fn is_newer_than(output: &Path, inputs: &[PathBuf]) -> bool {
    let modified = |path: &Path| std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let Some(built) = modified(output) else {
        return false;
    };
    inputs
        .iter()
        .all(|input| modified(input).is_some_and(|time| time < built))
}

/// A Keel image built for one configuration.
pub struct SystemImage {
    /// The validated configuration.
    pub system: config::System,
    /// The bootable image (arm64 Image format).
    pub path: PathBuf,
    /// The hypervisor's ELF file, for its symbols (a copy of cargo's output beside the image:
    /// the next build of the hypervisor replaces cargo's).
    pub elf: PathBuf,
}

/// The CPUs of a board QEMU makes, in the device tree the compiler reads: the most Keel's
/// image starts (`MAX_CPUS` in the hypervisor's boot code).
const QEMU_CPUS: u32 = 8;

/// The board's device tree that `[[vm.passthrough]]` paths and `[system] iommu` name: QEMU
/// `virt`'s as Keel runs it ([`Machine::keel`](crate::qemu::Machine::keel), with the SMMUv3 in
/// front of its PCI host bridge if `smmu`; its device nodes do not depend on the pCPU count),
/// dumped once into the output directory.
pub fn board_tree(board: &'static BoardDesc, smmu: bool) -> std::result::Result<Vec<u8>, String> {
    if let Ok(path) = board_dtb_file(board) {
        return std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()));
    }
    let name = format!(
        "board-{}{}.dtb",
        board.name,
        if smmu { "-smmuv3" } else { "" }
    );
    let path = output_dir().join(name);
    exclusive(|| {
        if !path.exists() {
            std::fs::create_dir_all(output_dir()).map_err(|e| e.to_string())?;
            let machine = crate::qemu::Machine {
                iommu: smmu,
                board,
                // QEMU's board has the CPUs it is given: as many as Keel's image runs on.
                ..crate::qemu::Machine::keel(&crate::workspace().join("README.md"), QEMU_CPUS)
            };
            let partial = partial_path(&path);
            machine.dump_device_tree(&partial)?;
            std::fs::rename(&partial, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))
    })
}

/// The device tree a board without a QEMU-made one is given (`-dtb`), and the configuration
/// compiler reads: the one Debian's arm64 kernel package ships for it, with QEMU's model of
/// the board where it differs from the board ([`ZCU102_QEMU_PHY`]). `Err` for a board whose
/// device tree QEMU makes (`virt`), or if the package cannot be fetched.
pub fn board_dtb_file(board: &BoardDesc) -> std::result::Result<PathBuf, String> {
    let relative = match board.name {
        "zcu102" => "xilinx/zynqmp-zcu102-rev1.0.dtb",
        "rpi4b" => "broadcom/bcm2711-rpi-4-b.dtb",
        _ => return Err(format!("QEMU makes board {}'s device tree", board.name)),
    };
    let debian = crate::debian::board_dtb(&output_dir().join("debian"), relative)?;
    if board.name != "zcu102" {
        return Ok(debian);
    }
    let blob = std::fs::read(&debian).map_err(|e| format!("{}: {e}", debian.display()))?;
    let (node, address) = ZCU102_QEMU_PHY;
    let patched =
        with_reg(&blob, node, address).map_err(|e| format!("{}: {node}: {e}", debian.display()))?;
    let path = output_dir().join("board-zcu102-qemu.dtb");
    if std::fs::read(&path).ok().as_deref() != Some(patched.as_slice()) {
        let partial = partial_path(&path);
        std::fs::write(&partial, &patched).map_err(|e| format!("{}: {e}", partial.display()))?;
        std::fs::rename(&partial, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(path)
}

/// Where QEMU 7.2's ZCU102 differs from the board its device tree describes: the machine
/// sets each GEM's `phy-addr` to 23, so its PHY answers MDIO at address 23, where the board
/// has GEM3's TI DP83867 at 12 (the node below). The tree QEMU runs (and the compiler reads)
/// says 23, so that Linux's macb finds the PHY QEMU models; on the board, Debian's tree is
/// right as it is. (The node keeps its name, `@c`: only `reg` is read.)
const ZCU102_QEMU_PHY: (&str, u32) = ("/axi/ethernet@ff0e0000/ethernet-phy@c", 23);

/// `blob` with the one-cell `reg` of the node at `path` set to `value`, in place.
fn with_reg(blob: &[u8], path: &str, value: u32) -> std::result::Result<Vec<u8>, String> {
    let fdt = keel_core::fdt::Fdt::new(blob).map_err(|e| format!("{e:?}"))?;
    let node = fdt
        .find_node(path)
        .map_err(|e| format!("{e:?}"))?
        .ok_or("no such node")?;
    let reg = node
        .property("reg")
        .map_err(|e| format!("{e:?}"))?
        .ok_or("no reg")?;
    if reg.len() != 4 {
        return Err(format!("reg is {} bytes, not one cell", reg.len()));
    }
    let offset = reg.as_ptr() as usize - blob.as_ptr() as usize;
    let mut patched = blob.to_vec();
    patched[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
    Ok(patched)
}

/// The tables of each system this process built, by name, once [`one_image_per_name`] is called.
static TABLES_BY_NAME: Mutex<Option<BTreeMap<String, String>>> = Mutex::new(None);

/// From now on, building a system whose name an earlier build of this process gave other tables
/// is an error naming it: scenarios that run at once share `target/keel/<name>/keel.bin`, so
/// one of them could boot the image the other built after it.
pub fn one_image_per_name() {
    *TABLES_BY_NAME.lock().unwrap() = Some(BTreeMap::new());
}

/// Compiles the configuration at `config_path` and builds Keel's image for it, under
/// `target/keel/<name>/`. Guests must be built first ([`build_guests`]).
pub fn build_system(config_path: &Path) -> Result<SystemImage> {
    exclusive(|| build_system_now(config_path))
}

/// [`build_system`], its caller holding the build lock.
fn build_system_now(config_path: &Path) -> Result<SystemImage> {
    let ring_bytes = TRACE_EVERY_BUILD.load(std::sync::atomic::Ordering::Relaxed);
    if ring_bytes != 0 {
        return build_traced_now(config_path, ring_bytes);
    }
    let system = match board_override() {
        None => config::load_with_board(config_path, &guest_image, &board_tree),
        Some(board) => {
            let text = std::fs::read_to_string(config_path)
                .map_err(|e| format!("{}: {e}", config_path.display()))?;
            let text = on_board(&text, board).map_err(|e| {
                format!(
                    "{}: moved to board {}: {e}",
                    config_path.display(),
                    board.name
                )
            })?;
            config::parse_str_with_board(&text, config_path, &guest_image, &board_tree).map(
                |mut system| {
                    system.name = format!("{}-{}", system.name, board.name);
                    system
                },
            )
        }
    }
    .map_err(|e| e.to_string())?;
    build_compiled(system, config_path)
}

thread_local! {
    /// The board every configuration this thread builds is moved to ([`with_board`]).
    static BOARD_OVERRIDE: std::cell::Cell<Option<&'static BoardDesc>> =
        const { std::cell::Cell::new(None) };
}

/// Runs `run` with every configuration this thread builds moved to `board` (its `[system]
/// board` set, its name suffixed with the board's, so that its image and logs are its own):
/// how the scenarios run again on a GICv2.
pub fn with_board<T>(board: &'static BoardDesc, run: impl FnOnce() -> T) -> T {
    let before = BOARD_OVERRIDE.with(|cell| cell.replace(Some(board)));
    let result = run();
    BOARD_OVERRIDE.with(|cell| cell.set(before));
    result
}

/// The board [`with_board`] moved this thread's configurations to, if any.
pub fn board_override() -> Option<&'static BoardDesc> {
    BOARD_OVERRIDE.with(std::cell::Cell::get)
}

/// Configuration `text` moved to `board`: `[system] board` set to it and, when the board's
/// RAM starts elsewhere than the configuration's (`[system] ram`), the RAM the board has under
/// QEMU ([`crate::qemu::ram_of`]) and every physical region (Keel's, the VMs' memory and flash,
/// the channels') moved by the same distance. Where the VMs see them does not change.
fn on_board(text: &str, board: &BoardDesc) -> std::result::Result<String, String> {
    let mut file: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    let system = file
        .get_mut("system")
        .and_then(toml::Value::as_table_mut)
        .ok_or("no [system] table")?;
    system.insert("board".into(), toml::Value::String(board.name.into()));
    let (ram_base, ram_size) = crate::qemu::ram_of(board);
    let old_base = system
        .get("ram")
        .and_then(|ram| ram.get("base"))
        .and_then(toml::Value::as_integer)
        .ok_or("no [system] ram base")?;
    let distance = ram_base as i64 - old_base;
    if distance == 0 {
        return toml::to_string(&file).map_err(|e| e.to_string());
    }
    let mut ram = toml::Table::new();
    ram.insert("base".into(), toml::Value::Integer(ram_base as i64));
    ram.insert("size".into(), toml::Value::Integer(ram_size as i64));
    system.insert("ram".into(), toml::Value::Table(ram));
    let shift = |region: Option<&mut toml::Value>| {
        if let Some(base) = region.and_then(|region| region.get_mut("base")) {
            if let Some(value) = base.as_integer() {
                *base = toml::Value::Integer(value + distance);
            }
        }
    };
    shift(system.get_mut("hypervisor"));
    for (array, key) in [("vm", "memory"), ("vm", "flash"), ("channel", "memory")] {
        if let Some(tables) = file.get_mut(array).and_then(toml::Value::as_array_mut) {
            for table in tables {
                shift(table.get_mut(key));
            }
        }
    }
    toml::to_string(&file).map_err(|e| e.to_string())
}

/// Rings of this many bytes per pCPU in every system [`build_system`] builds from now on
/// (0: each configuration as written): `cargo xtask bench trace` measures the held figures
/// with Keel's trace on.
static TRACE_EVERY_BUILD: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Makes every later [`build_system`] trace, with rings of `ring_bytes` per pCPU unless the
/// configuration has its own (0: as written).
pub fn trace_every_build(ring_bytes: u64) {
    TRACE_EVERY_BUILD.store(ring_bytes, std::sync::atomic::Ordering::Relaxed);
}

/// As [`build_system`], with Keel's trace on: the configuration's own `[system] trace`, or
/// rings of `default_bytes` per pCPU if it has none (then the system is named `<name>-trace`,
/// so that its image does not replace the untraced one).
pub fn build_system_traced(config_path: &Path, default_bytes: u64) -> Result<SystemImage> {
    crate::build_lock::exclusive(|| build_traced_now(config_path, default_bytes))
}

/// [`build_system_traced`], its caller holding the build lock.
fn build_traced_now(config_path: &Path, default_bytes: u64) -> Result<SystemImage> {
    let mut system = config::load_with_board(config_path, &guest_image, &board_tree)
        .map_err(|e| e.to_string())?;
    if system.trace_bytes == 0 {
        system.trace_bytes = default_bytes;
        system.name = format!("{}-trace", system.name);
    }
    build_compiled(system, config_path)
}

/// Builds Keel's image for `system`, compiled from `config_path`.
fn build_compiled(system: config::System, config_path: &Path) -> Result<SystemImage> {
    let dir = output_dir().join(&system.name);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut dtbs = Vec::new();
    for vm in &system.vms {
        let blob = crate::dtb::guest_dtb(vm, &system.vms, &system.channels, system.board.gic)?;
        let path = dir.join(format!("{}.dtb", vm.name));
        std::fs::write(&path, blob).map_err(|e| e.to_string())?;
        dtbs.push(path);
    }
    let text = config::emit_rust(&system, &dtbs);
    if let Some(built) = TABLES_BY_NAME.lock().unwrap().as_mut() {
        match built.get(&system.name) {
            Some(earlier) if *earlier != text => {
                return Err(format!(
                    "{}: configuration '{}' was built earlier in this run with other contents: \
                     scenarios running at once would boot each other's target/keel/{}/keel.bin \
                     (give each configuration a name of its own)",
                    config_path.display(),
                    system.name,
                    system.name
                ))
            }
            _ => built.insert(system.name.clone(), text.clone()),
        };
    }
    let tables = dir.join("system.rs");
    std::fs::write(&tables, text).map_err(|e| e.to_string())?;
    let gic = match system.board.gic {
        keel_core::board::GicVersion::V2 => "2",
        keel_core::board::GicVersion::V3 => "3",
    };
    let link_address = format!(
        "{:#x}",
        system.hypervisor_base + config::HYPERVISOR_IMAGE_OFFSET
    );
    let cargo_elf = cargo_build(
        "keel",
        &[
            ("KEEL_CONFIG_RS", &tables),
            ("KEEL_GIC", Path::new(gic)),
            (
                "KEEL_UART",
                Path::new(match system.board.uart {
                    keel_core::board::UartKind::Pl011 => "pl011",
                    keel_core::board::UartKind::Cadence => "cadence",
                }),
            ),
            ("KEEL_LINK_ADDRESS", Path::new(&link_address)),
        ],
    )?;
    let elf = dir.join("keel.elf");
    let partial = partial_path(&elf);
    std::fs::copy(&cargo_elf, &partial)
        .and_then(|_| std::fs::rename(&partial, &elf))
        .map_err(|e| format!("{} -> {}: {e}", cargo_elf.display(), elf.display()))?;
    let path = dir.join("keel.bin");
    to_binary(&elf, &path)?;
    let size = std::fs::metadata(&path).map_err(|e| e.to_string())?.len();
    if size > system.hypervisor_size - config::HYPERVISOR_IMAGE_OFFSET {
        return Err(format!(
            "{}: system.hypervisor: Keel's image ({size} bytes with its guests) does not fit the {:#x}-byte region above base + 2 MiB",
            config_path.display(),
            system.hypervisor_size - config::HYPERVISOR_IMAGE_OFFSET
        ));
    }
    check_keel_frames(&system, &elf).map_err(|e| format!("{}: {e}", config_path.display()))?;
    step(&format!(
        "built {} ({size} bytes) for configuration '{}'",
        path.display(),
        system.name
    ));
    // Each VM's share of the last-level cache: no line unless some VM is coloured.
    for line in config::colour_report(&system) {
        step(&line);
    }
    Ok(SystemImage { system, path, elf })
}

/// A coloured Keel's image (its ELF at `elf`) fits its region as Keel will check at boot
/// (`KeelMap::coloured`): a build should not make an image that cannot boot.
fn check_keel_frames(system: &config::System, elf: &Path) -> Result<()> {
    use keel_core::placement::{KeelFitError, KeelMap};
    let colours = system.hypervisor_colours;
    if !colours.is_coloured() {
        return Ok(());
    }
    let image = keel_image(elf)?;
    let region = (system.hypervisor_base, system.hypervisor_size);
    match KeelMap::coloured(&image, region, colours) {
        Ok(_) => Ok(()),
        Err(KeelFitError::Overlaps { end, frames }) => Err(format!(
            "system.hypervisor: Keel's image with its guests ends at {end:#x}, past the middle \
             of its region, where the frames of its colours {colours} start ({frames:#x}): give \
             a larger region"
        )),
        Err(KeelFitError::TooSmall {
            size,
            needs,
            region_end,
        }) => Err(format!(
            "system.hypervisor_colours: Keel's code, data and stacks ({size} bytes) in frames of \
             its colours {colours} reach {needs:#x}, past its region's end at {region_end:#x}: \
             give a larger region or more colours"
        )),
    }
}

/// Keel's image as its ELF at `elf` is linked (its linker's symbols), as Keel reads it at boot
/// (`arch::boot::keel_image`).
pub(crate) fn keel_image(elf: &Path) -> Result<keel_core::placement::KeelImage> {
    let [start, coloured_end, images, images_end, end] = symbols(
        elf,
        [
            "__image_start",
            "__coloured_end",
            "__guest_images_start",
            "__guest_images_end",
            "__image_end",
        ],
    )?;
    Ok(keel_core::placement::KeelImage {
        start,
        coloured_end,
        guest_images: (images, images_end),
        end,
    })
}

/// The addresses of the symbols `names` in the ELF file at `elf` (Keel's linker symbols).
pub(crate) fn symbols<const N: usize>(elf: &Path, names: [&str; N]) -> Result<[u64; N]> {
    use object::{Object, ObjectSymbol};
    let data = std::fs::read(elf).map_err(|e| format!("{}: {e}", elf.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", elf.display()))?;
    let mut addresses = [0; N];
    for (address, name) in addresses.iter_mut().zip(names) {
        *address = file
            .symbol_by_name(name)
            .map(|s| s.address())
            .ok_or_else(|| format!("{}: no symbol {name}", elf.display()))?;
    }
    Ok(addresses)
}

/// Whether VM `vm` is given a PCI host bridge (a node of `device_type = "pci"`).
fn has_pci_bridge(vm: &config::Vm) -> bool {
    vm.passthrough.iter().any(|device| {
        device
            .node
            .properties
            .iter()
            .any(|(name, value)| name == "device_type" && value.as_slice() == b"pci\0")
    })
}

/// The machine a built system runs on, under icount if `icount` (the scenarios and
/// benchmarks) or not (the interactive demo): with the SMMUv3 if the configuration names it,
/// and, when a VM running a Debian kernel is given the PCI host bridge, the devices its Linux
/// finds there: the ext4 root file system of its flavour on `virtio-blk-pci` (QEMU keeps the
/// writes in an overlay it drops at exit: they survive the VM's resets, the cached image
/// stays as built) and a `virtio-net-pci` card on QEMU's user network; a VM given a Cadence
/// GEM (the ZCU102's Ethernet) has QEMU's user network on it.
pub fn machine(image: &SystemImage, icount: bool) -> Result<crate::qemu::Machine> {
    let mut machine = crate::qemu::Machine {
        icount,
        ..crate::qemu::Machine::keel_icount(image)
    };
    let linux = image.system.vms.iter().find_map(|vm| match &vm.image {
        config::ImageSource::Debian(flavour) if has_pci_bridge(vm) => Some(flavour),
        _ => None,
    });
    if let Some(flavour) = linux {
        let disk = crate::debian::rootfs(&output_dir().join("debian"), flavour)?;
        machine.disk = Some(crate::qemu::Disk {
            path: disk,
            snapshot: true,
        });
        machine.user_network = true;
    }
    if image.system.vms.iter().any(has_cadence_gem) {
        machine.user_network = true;
    }
    Ok(machine)
}

/// Whether `vm` is given a Cadence GEM Ethernet MAC (the ZynqMP's): QEMU's user network is
/// plugged into it.
fn has_cadence_gem(vm: &config::Vm) -> bool {
    vm.passthrough.iter().any(|device| {
        device.node.properties.iter().any(|(name, value)| {
            name == "compatible" && value.split(|&b| b == 0).any(|c| c == b"cdns,gem")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::with_reg;

    fn tree(reg: &[u32]) -> Vec<u8> {
        let mut fdt = vm_fdt::FdtWriter::new().unwrap();
        let root = fdt.begin_node("").unwrap();
        let mac = fdt.begin_node("ethernet@ff0e0000").unwrap();
        let phy = fdt.begin_node("ethernet-phy@c").unwrap();
        fdt.property_array_u32("reg", reg).unwrap();
        fdt.property_u32("ti,fifo-depth", 1).unwrap();
        fdt.end_node(phy).unwrap();
        fdt.end_node(mac).unwrap();
        fdt.end_node(root).unwrap();
        fdt.finish().unwrap()
    }

    #[test]
    fn the_phys_reg_is_rewritten_and_nothing_else() {
        let blob = tree(&[0xc]);
        let patched = with_reg(&blob, "/ethernet@ff0e0000/ethernet-phy@c", 23).unwrap();
        let fdt = keel_core::fdt::Fdt::new(&patched).unwrap();
        let phy = fdt
            .find_node("/ethernet@ff0e0000/ethernet-phy@c")
            .unwrap()
            .unwrap();
        assert_eq!(phy.property_u32("reg").unwrap(), Some(23));
        assert_eq!(phy.property_u32("ti,fifo-depth").unwrap(), Some(1));
        let changed = blob.iter().zip(&patched).filter(|(a, b)| a != b).count();
        assert_eq!((patched.len(), changed), (blob.len(), 1));
    }

    #[test]
    fn a_missing_node_or_a_wider_reg_is_an_error() {
        let blob = tree(&[0xc]);
        assert_eq!(
            with_reg(&blob, "/ethernet@0/phy@c", 23),
            Err("no such node".into())
        );
        let wide = tree(&[0, 0xc]);
        assert_eq!(
            with_reg(&wide, "/ethernet@ff0e0000/ethernet-phy@c", 23),
            Err("reg is 8 bytes, not one cell".into())
        );
    }
}

//! Installs what building and running Keel needs on a Debian machine, saying what it does.

use std::path::PathBuf;
use std::process::Command;

use crate::{step, Result};

/// The target Keel and its guests are built for (no FP/SIMD instructions in the hypervisor).
pub const TARGET: &str = "aarch64-unknown-none-softfloat";

/// The target of `keel`, the manager VM's Linux command (`guests/keel-ctl`): a static aarch64
/// Linux program, musl and Rust's standard library from the target's own self-contained parts.
pub const LINUX_TARGET: &str = "aarch64-unknown-linux-musl";

/// Debian's cross compiler for the C guests (package `gcc-aarch64-linux-gnu`, which brings
/// the cross binutils: `aarch64-linux-gnu-objcopy` and the rest).
pub const C_COMPILER: &str = "aarch64-linux-gnu-gcc";

fn command_exists(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// Where Debian's e2fsprogs puts `mke2fs`: a user's PATH may lack the sbin directories.
const MKE2FS_PLACES: &[&str] = &["/usr/sbin/mke2fs", "/sbin/mke2fs"];

/// `mke2fs` (package `e2fsprogs`), from PATH or Debian's sbin directories.
pub fn mke2fs() -> Result<PathBuf> {
    if command_exists("mke2fs") {
        return Ok(PathBuf::from("mke2fs"));
    }
    MKE2FS_PLACES
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
        .ok_or_else(|| {
            "mke2fs not found (Debian package e2fsprogs: `cargo xtask test` installs it as root)"
                .to_string()
        })
}

fn run(command: &mut Command) -> Result<()> {
    crate::process::output(command).map(|_| ())
}

/// The sysroot's `llvm-objcopy` (rustup component `llvm-tools`).
pub fn objcopy() -> Result<PathBuf> {
    llvm_tool("llvm-objcopy")
}

/// The sysroot's LLVM tool `name` (`llvm-objcopy`, `llvm-nm`: rustup component `llvm-tools`).
pub fn llvm_tool(name: &str) -> Result<PathBuf> {
    let output = crate::process::output(Command::new("rustc").args(["--print", "sysroot"]))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&output.stdout).trim());
    let rustlib = sysroot.join("lib/rustlib");
    let entries = std::fs::read_dir(&rustlib).map_err(|e| format!("{}: {e}", rustlib.display()))?;
    for entry in entries.flatten() {
        let candidate = entry.path().join("bin").join(name);
        if candidate.exists() {
            return Ok(candidate);
        }
    }
    Err(format!(
        "{name} not found in the Rust sysroot (rustup component add llvm-tools)"
    ))
}

/// Makes sure the Rust targets (Keel's, and the Linux command's), llvm-tools, QEMU, dtc, the C
/// cross compiler, mke2fs (for the Linux guests' root file system) and the benchmark plots'
/// font are present, installing what is missing.
pub fn ensure_tools() -> Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    for target in [TARGET, LINUX_TARGET] {
        let has_target = installed.as_ref().is_ok_and(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == target)
        });
        if !has_target {
            step(&format!(
                "installing the Rust target {target} (rustup target add)"
            ));
            run(Command::new("rustup").args(["target", "add", target]))?;
        }
    }
    if objcopy().is_err() {
        step("installing llvm-tools (rustup component add llvm-tools)");
        run(Command::new("rustup").args(["component", "add", "llvm-tools"]))?;
        objcopy()?;
    }
    let mut packages = Vec::new();
    if !command_exists("qemu-system-aarch64") {
        packages.push("qemu-system-arm");
    }
    if !command_exists("dtc") {
        packages.push("device-tree-compiler");
    }
    if !command_exists(C_COMPILER) {
        packages.push("gcc-aarch64-linux-gnu");
    }
    if mke2fs().is_err() {
        packages.push("e2fsprogs");
    }
    if !std::path::Path::new(crate::plots::FONT_FILE).exists() {
        packages.push("fonts-dejavu-core");
    }
    if !packages.is_empty() {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        if !root {
            return Err(format!(
                "missing Debian packages {}: run `sudo apt-get install {}` (or run this command as root)",
                packages.join(", "),
                packages.join(" ")
            ));
        }
        step(&format!(
            "installing Debian packages {} (apt-get)",
            packages.join(", ")
        ));
        run(Command::new("apt-get").args(["update", "-q"]))?;
        run(Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive"))?;
    }
    Ok(())
}

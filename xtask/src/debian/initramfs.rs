//! Assembling a flavour's initramfs: busybox and its applet links, rt-tests and stress-ng with
//! their shared libraries, the virtio kernel modules, device nodes, /etc, /init and /tests,
//! and Keel's own programs (`keel-lat`, and `keel`, a manager VM's command).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::apt::{no_package, Apt, KernelPackage, Unpacked};
use super::cpio::{Node, Tree};
use super::elf::{is_elf, Elf};
use super::scripts::{
    modules_test, BANDWIDTH_TEST, BENCH_TEST, CACHE_TEST, CRASH_TEST, DISK_READ_TEST, DISK_TEST,
    IMAGESAVE_TEST, INIT, LOAD_TEST, MATRIXPROD_TEST, NET_TEST, RTC_TEST, STRESS_TEST,
    TEST_LIBRARY, UDHCPC_SCRIPT, VIRTIO_TEST, ZYNQMP_TEST,
};
use crate::step;

/// The packages whose programs go into the initramfs (libc6 for the dynamic loader).
const USER_PACKAGES: &[&str] = &["busybox-static", "rt-tests", "stress-ng", "libc6"];

/// The dynamic loader named by every arm64 glibc program (PT_INTERP), and where glibc has it.
const LOADER: &str = "lib/ld-linux-aarch64.so.1";
const LOADER_SONAME: &str = "ld-linux-aarch64.so.1";

/// Where shared libraries are looked for in a package, in order; glibc's loader searches the
/// same directories by default, so no `ld.so.cache` is needed.
const LIBRARY_DIRECTORIES: &[&str] = &[
    "lib/aarch64-linux-gnu",
    "usr/lib/aarch64-linux-gnu",
    "lib",
    "usr/lib",
];

/// The kernel modules carried (with their dependencies) when the kernel has them as modules:
/// the virtio transports (MMIO for Keel's console, PCI for QEMU's disk and network cards), the
/// console, disk and network drivers, and ext4 for a root file system on the disk, with the
/// CRC32C its checksums need (which ext4 asks the crypto API for, not a module dependency:
/// Debian's generic kernel has both as modules, its cloud kernel has them built in), and the
/// SP805 watchdog's driver for Keel's emulated one (with the watchdog core, a module of the
/// cloud kernel), and the ZynqMP's GEM Ethernet driver (macb, with the PHY library: modules
/// of the generic and RT kernels, absent from the cloud kernel).
const MODULES: &[&str] = &[
    "virtio_mmio",
    "virtio_pci",
    "virtio_console",
    "virtio_blk",
    "virtio_net",
    "crc32c_generic",
    "ext4",
    "sp805_wdt",
    "macb",
];

/// The applets of Debian bookworm's busybox-static 1.35 that go in /sbin (the rest go in /bin).
const SBIN_APPLETS: &str = "\
    acpid adjtimex arp blkdiscard blockdev brctl depmod devmem fdisk findfs freeramdisk \
    fsfreeze fstrim getty halt hwclock i2cdetect i2cdump i2cget i2cset i2ctransfer ifconfig \
    ifdown ifup insmod ip ipneigh klogd losetup lsmod mdev mkdosfs mke2fs mkswap modinfo \
    modprobe nameif partprobe pivot_root poweroff reboot rmmod route run-init \
    start-stop-daemon sulogin swapoff swapon switch_root sysctl syslogd tc tunctl udhcpc \
    udhcpd uevent vconfig watchdog";

/// The other applets of Debian bookworm's busybox-static 1.35: all but `busybox`, `init` and
/// `linuxrc` (/init is ours) and the package tools (dpkg, dpkg-deb, rpm, rpm2cpio, mim, nuke).
const BIN_APPLETS: &str = "\
    [ [[ ar arch arping ascii ash awk base64 basename bc bunzip2 bzcat bzip2 cal cat chgrp \
    chmod chown chroot chvt clear cmp cp cpio crc32 crond crontab cttyhack cut date dc dd \
    deallocvt df diff dirname dmesg dnsdomainname dos2unix du dumpkmap dumpleases echo ed \
    egrep env expand expr factor fallocate false fatattr fgrep find fold free ftpget ftpput \
    getopt grep groups gunzip gzip head hexdump hostid hostname httpd id ionice ipcalc kill \
    killall last less link linux32 linux64 ln loadfont loadkmap logger login logname logread \
    ls lsscsi lzcat lzma lzop md5sum microcom mkdir mkfifo mknod mkpasswd mktemp more mount \
    mt mv nc netstat nl nologin nproc nsenter nslookup od openvt passwd paste patch pidof \
    ping ping6 printf ps pwd rdate readlink realpath renice reset resume rev rm rmdir \
    run-parts sed seq setkeycodes setpriv setsid sh sha1sum sha256sum sha3sum sha512sum shred \
    shuf sleep sort ssl_client stat strings stty su svc svok sync tac tail tar taskset tee \
    telnet telnetd test tftp time timeout top touch tr traceroute traceroute6 true truncate \
    ts tty ubirename umount uname uncompress unexpand uniq unix2dos unlink unlzma unshare \
    unxz unzip uptime usleep uudecode uuencode vi w watch wc wget which who whoami xargs xxd \
    xz xzcat yes zcat";

/// Builds (cached: rebuilt only if inputs changed) a gzip-compressed newc cpio initramfs for `flavour`: busybox (from busybox-static), cyclictest and the other rt-tests binaries, stress-ng, their shared libraries (resolved from ELF NEEDED entries, recursively, taken from the arm64 libc6 and other library packages fetched the same way; with the dynamic loader /lib/ld-linux-aarch64.so.1), and the virtio kernel modules of the matching kernel (virtio_mmio, virtio_pci, virtio_console, virtio_blk, virtio_net, ext4 and their dependencies, if they are modules, with a generated modules.dep and modules.alias, for /init's coldplug), plus /init and /tests. Returns the .cpio.gz path.
pub fn initramfs(cache: &Path, flavour: &str) -> Result<PathBuf, String> {
    crate::build_lock::exclusive(|| build_initramfs(cache, flavour))
}

/// [`initramfs`], its caller holding the build lock.
fn build_initramfs(cache: &Path, flavour: &str) -> Result<PathBuf, String> {
    let (image, kernel) = contents(cache, flavour)?;
    let directory = cache.join(flavour);
    let output = directory.join("initramfs.cpio.gz");
    let manifest_path = directory.join("initramfs.manifest");
    let manifest = image.manifest();
    if output.exists() && fs::read_to_string(&manifest_path).ok().as_deref() == Some(&manifest) {
        return Ok(output);
    }
    step(&format!(
        "building {} ({} entries, kernel {})",
        output.display(),
        image.entries.len(),
        kernel.version
    ));
    fs::create_dir_all(&directory).map_err(|e| format!("{}: {e}", directory.display()))?;
    let partial = directory.join(format!("initramfs-{}.partial", std::process::id()));
    image.write_cpio_gzip(&partial, &output)?;
    fs::write(&manifest_path, manifest).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    Ok(output)
}

/// What the initramfs of `flavour` holds (the root file system of `rootfs.rs` too), with the
/// kernel package it was made for.
pub(super) fn contents(cache: &Path, flavour: &str) -> Result<(Tree, KernelPackage), String> {
    let mut apt = Apt::new(cache)?;
    let kernel = apt.kernel_package(flavour)?;
    let mut image = Tree::default();
    base_system(&mut image);
    user_space(&mut apt, &mut image)?;
    kernel_modules(&kernel, &mut image)?;
    latency_program(cache, &mut image)?;
    manager_command(&mut image)?;
    Ok((image, kernel))
}

/// `/bin/keel-lat`, the lmbench-style measurements (`guests/linux-lat/lat.c`), built with
/// Debian's cross compiler as a static program without a C library (the compiler xtask
/// installs comes without the arm64 libc).
fn latency_program(cache: &Path, image: &mut Tree) -> Result<(), String> {
    let source = crate::workspace().join("guests/linux-lat/lat.c");
    // One output per process: two xtask runs may share the cache.
    let output = cache.join(format!("keel-lat-{}", std::process::id()));
    let mut command = std::process::Command::new(crate::setup::C_COMPILER);
    command
        .args([
            "-static",
            "-nostdlib",
            "-ffreestanding",
            "-fno-stack-protector",
        ])
        .args(["-fno-pic", "-no-pie", "-O2", "-s", "-Wall", "-Werror", "-o"])
        .arg(&output)
        .arg(&source);
    crate::process::output_quoting(&mut command, 60)
        .map_err(|e| format!("building {}: {e}", source.display()))?;
    let program = fs::read(&output).map_err(|e| format!("{}: {e}", output.display()))?;
    let _ = fs::remove_file(&output);
    image.insert("bin/keel-lat", 0o100755, Node::Data(program));
    Ok(())
}

/// `/bin/keel`, a manager VM's command for Keel's management window (`guests/keel-ctl`).
fn manager_command(image: &mut Tree) -> Result<(), String> {
    let path = crate::image::build_linux_command()?;
    let program = fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    image.insert("bin/keel", 0o100755, Node::Data(program));
    Ok(())
}

/// The directories, device nodes, /etc files, busybox applet links, /init, /tests and
/// udhcpc's hook.
fn base_system(image: &mut Tree) {
    for directory in [
        "bin", "sbin", "usr/bin", "usr/sbin", "lib", "proc", "sys", "dev", "etc", "tests", "mnt",
    ] {
        image.insert(directory, 0o040755, Node::Directory);
    }
    image.insert("tmp", 0o041777, Node::Directory);
    image.insert("root", 0o040700, Node::Directory);
    // The kernel opens /dev/console for /init before devtmpfs is mounted.
    image.insert(
        "dev/console",
        0o020600,
        Node::CharDevice { major: 5, minor: 1 },
    );
    image.insert(
        "dev/null",
        0o020666,
        Node::CharDevice { major: 1, minor: 3 },
    );
    image.insert(
        "etc/passwd",
        0o100644,
        Node::Data(b"root:x:0:0:root:/root:/bin/sh\n".to_vec()),
    );
    image.insert("etc/group", 0o100644, Node::Data(b"root:x:0:\n".to_vec()));
    for (directory, applets) in [("sbin", SBIN_APPLETS), ("bin", BIN_APPLETS)] {
        for applet in applets.split_whitespace() {
            image.insert(
                &format!("{directory}/{applet}"),
                0o120777,
                Node::Symlink("/bin/busybox".into()),
            );
        }
    }
    image.insert("init", 0o100755, Node::Data(INIT.into()));
    image.insert("tests/lib.sh", 0o100644, Node::Data(TEST_LIBRARY.into()));
    image.insert("tests/stress.sh", 0o100755, Node::Data(STRESS_TEST.into()));
    image.insert("tests/bench.sh", 0o100755, Node::Data(BENCH_TEST.into()));
    image.insert("tests/load.sh", 0o100755, Node::Data(LOAD_TEST.into()));
    image.insert("tests/crash.sh", 0o100755, Node::Data(CRASH_TEST.into()));
    image.insert(
        "tests/bandwidth.sh",
        0o100755,
        Node::Data(BANDWIDTH_TEST.into()),
    );
    image.insert("tests/virtio.sh", 0o100755, Node::Data(VIRTIO_TEST.into()));
    image.insert(
        "tests/matrixprod.sh",
        0o100755,
        Node::Data(MATRIXPROD_TEST.into()),
    );
    image.insert("tests/disk.sh", 0o100755, Node::Data(DISK_TEST.into()));
    image.insert(
        "tests/disk-read.sh",
        0o100755,
        Node::Data(DISK_READ_TEST.into()),
    );
    image.insert("tests/net.sh", 0o100755, Node::Data(NET_TEST.into()));
    image.insert("tests/rtc.sh", 0o100755, Node::Data(RTC_TEST.into()));
    image.insert("tests/zynqmp.sh", 0o100755, Node::Data(ZYNQMP_TEST.into()));
    image.insert("tests/cache.sh", 0o100755, Node::Data(CACHE_TEST.into()));
    image.insert(
        "tests/imagesave.sh",
        0o100755,
        Node::Data(IMAGESAVE_TEST.into()),
    );
    image.insert(
        "etc/udhcpc/default.script",
        0o100755,
        Node::Data(UDHCPC_SCRIPT.into()),
    );
}

/// busybox, the rt-tests programs, stress-ng, the dynamic loader and every library they need.
fn user_space(apt: &mut Apt, image: &mut Tree) -> Result<(), String> {
    let roots: Vec<String> = USER_PACKAGES.iter().map(|name| name.to_string()).collect();
    let mut packages = apt.fetch(&roots)?;
    if let Some(name) = roots.iter().find(|name| !packages.contains_key(*name)) {
        return Err(no_package(name));
    }
    let mut programs = vec![("bin/busybox".to_string(), "busybox-static".to_string())];
    for (package, directories) in [
        ("rt-tests", &["usr/bin", "usr/sbin"][..]),
        ("stress-ng", &["usr/bin"][..]),
    ] {
        for directory in directories {
            let path = packages[package].root.join(directory);
            let entries = fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut names: Vec<String> = entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for name in names {
                // rt-tests also has Python scripts (hwlatdetect...): there is no Python here.
                if is_elf(&path.join(&name)) {
                    programs.push((format!("{directory}/{name}"), package.to_string()));
                }
            }
        }
    }
    let found = loop {
        let libraries = resolve_libraries(&programs, &packages)?;
        if libraries.missing.is_empty() {
            break libraries.found;
        }
        // Look in the dependencies of the packages whose files need what is missing.
        let mut wanted = BTreeSet::new();
        for (_, needed_by) in &libraries.missing {
            for dependency in &packages[needed_by].depends {
                if !packages.contains_key(dependency) {
                    wanted.insert(dependency.clone());
                }
            }
        }
        let fetched = apt.fetch(&wanted.into_iter().collect::<Vec<_>>())?;
        if fetched.is_empty() {
            let list: Vec<String> = libraries
                .missing
                .iter()
                .map(|(soname, package)| format!("{soname} (needed by package {package})"))
                .collect();
            return Err(format!(
                "shared libraries not found in the packages or their dependencies: {}",
                list.join(", ")
            ));
        }
        packages.extend(fetched);
    };
    for (path, package) in &programs {
        let source = packages[package].root.join(path);
        image.insert(path, 0o100755, Node::File(source));
    }
    for library in found.values() {
        image.insert(&library.path, 0o100755, Node::File(library.source.clone()));
    }
    // The loader is run by its PT_INTERP path; glibc's package has it as a link.
    let loader_target = fs::read_link(packages["libc6"].root.join(LOADER))
        .map_err(|e| format!("libc6: {LOADER}: {e}"))?;
    image.insert(
        LOADER,
        0o120777,
        Node::Symlink(loader_target.to_string_lossy().into_owned()),
    );
    Ok(())
}

/// A shared library found in a package: where it goes in the image and the file it comes from.
struct Library {
    path: String,
    source: PathBuf,
}

/// The shared libraries some programs need, by soname.
struct Libraries {
    found: BTreeMap<String, Library>,
    /// Sonames that no fetched package has, each with the package of a file that needs it.
    missing: Vec<(String, String)>,
}

/// The libraries that `programs` (paths in their packages) need, transitively, with the loader.
fn resolve_libraries(
    programs: &[(String, String)],
    packages: &BTreeMap<String, Unpacked>,
) -> Result<Libraries, String> {
    let mut libraries = BTreeMap::new();
    let mut missing = Vec::new();
    let mut queue: Vec<(PathBuf, String)> = programs
        .iter()
        .map(|(path, package)| (packages[package].root.join(path), package.clone()))
        .collect();
    let mut sonames = vec![(LOADER_SONAME.to_string(), "libc6".to_string())];
    loop {
        for (soname, needed_by) in sonames.drain(..) {
            if libraries.contains_key(&soname) || missing.iter().any(|(m, _)| *m == soname) {
                continue;
            }
            match find_library(packages, &soname) {
                Some((package, library)) => {
                    queue.push((library.source.clone(), package));
                    libraries.insert(soname, library);
                }
                None => missing.push((soname, needed_by)),
            }
        }
        let Some((file, package)) = queue.pop() else {
            break;
        };
        let contents = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let elf = Elf::parse(&contents).map_err(|e| format!("{}: {e}", file.display()))?;
        let needed = elf
            .needed()
            .map_err(|e| format!("{}: {e}", file.display()))?;
        sonames.extend(needed.into_iter().map(|soname| (soname, package.clone())));
    }
    Ok(Libraries {
        found: libraries,
        missing,
    })
}

/// The first package (by name) with `soname` in one of the library directories.
fn find_library(packages: &BTreeMap<String, Unpacked>, soname: &str) -> Option<(String, Library)> {
    for (name, package) in packages {
        for directory in LIBRARY_DIRECTORIES {
            let path = format!("{directory}/{soname}");
            if let Some(source) = resolve_in(&package.root, Path::new(&path)) {
                return Some((name.clone(), Library { path, source }));
            }
        }
    }
    None
}

/// Follows symbolic links inside an unpacked package; the regular file at the end, if any.
fn resolve_in(root: &Path, relative: &Path) -> Option<PathBuf> {
    let mut path = root.join(relative);
    for _ in 0..16 {
        let metadata = fs::symlink_metadata(&path).ok()?;
        if !metadata.file_type().is_symlink() {
            return metadata.is_file().then_some(path);
        }
        let target = fs::read_link(&path).ok()?;
        path = match target.strip_prefix("/") {
            Ok(absolute) => root.join(absolute),
            Err(_) => path.parent()?.join(target),
        };
    }
    None
}

/// The kernel's virtio modules and their dependencies, with modules.dep, modules.alias,
/// modules.order and modules.builtin for busybox's modprobe (what Debian's depmod makes from
/// the modules themselves: each `.modinfo` names a module's dependencies and the device and
/// feature aliases it serves, which /init's coldplug loads it by), and /tests/modules.sh that
/// loads them.
fn kernel_modules(kernel: &KernelPackage, image: &mut Tree) -> Result<(), String> {
    let base = format!("lib/modules/{}", kernel.version);
    let directory = kernel.root.join(&base);
    let mut paths = BTreeMap::new();
    index_modules(&directory, Path::new("kernel"), &mut paths)?;
    let builtin_path = directory.join("modules.builtin");
    let builtin_text = fs::read_to_string(&builtin_path)
        .map_err(|e| format!("{}: {e}", builtin_path.display()))?;
    let builtin: BTreeSet<String> = builtin_text.lines().map(module_name).collect();

    let mut dependencies: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut aliases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut loaded = Vec::new();
    let mut queue: Vec<String> = Vec::new();
    for name in MODULES {
        if builtin.contains(*name) {
            continue;
        }
        if paths.contains_key(*name) {
            loaded.push(name.to_string());
            queue.push(name.to_string());
        } else {
            step(&format!(
                "note: kernel {} has no module {name}",
                kernel.version
            ));
        }
    }
    while let Some(name) = queue.pop() {
        if dependencies.contains_key(&name) {
            continue;
        }
        let relative = paths.get(&name).ok_or_else(|| {
            format!(
                "kernel {}: module {name} is needed but absent",
                kernel.version
            )
        })?;
        let file = directory.join(relative);
        let contents = fs::read(&file).map_err(|e| format!("{}: {e}", file.display()))?;
        let elf = Elf::parse(&contents).map_err(|e| format!("{}: {e}", file.display()))?;
        let depends: Vec<String> = elf
            .modinfo("depends")
            .iter()
            .flat_map(|list| list.split(','))
            .filter(|dependency| !dependency.is_empty())
            .map(|dependency| dependency.replace('-', "_"))
            .collect();
        queue.extend(depends.iter().cloned());
        aliases.insert(
            name.clone(),
            elf.modinfo("alias").into_iter().map(String::from).collect(),
        );
        dependencies.insert(name, depends);
    }

    let mut modules_dep = String::new();
    for name in dependencies.keys() {
        let relative = paths[name].to_string_lossy();
        image.insert(
            &format!("{base}/{relative}"),
            0o100644,
            Node::File(directory.join(&*relative)),
        );
        modules_dep.push_str(&format!("{relative}:"));
        for dependency in dependency_line(name, &dependencies) {
            modules_dep.push_str(&format!(" {}", paths[&dependency].to_string_lossy()));
        }
        modules_dep.push('\n');
    }
    let order_path = directory.join("modules.order");
    let modules_order: String = fs::read_to_string(&order_path)
        .map_err(|e| format!("{}: {e}", order_path.display()))?
        .lines()
        .filter(|line| dependencies.contains_key(&module_name(line)))
        .map(|line| format!("{line}\n"))
        .collect();
    image.insert(
        &format!("{base}/modules.dep"),
        0o100644,
        Node::Data(modules_dep.into()),
    );
    image.insert(
        &format!("{base}/modules.alias"),
        0o100644,
        Node::Data(modules_alias(&aliases).into()),
    );
    image.insert(
        &format!("{base}/modules.order"),
        0o100644,
        Node::Data(modules_order.into()),
    );
    image.insert(
        &format!("{base}/modules.builtin"),
        0o100644,
        Node::File(builtin_path),
    );
    image.insert(
        "tests/modules.sh",
        0o100755,
        Node::Data(modules_test(&loaded).into()),
    );
    Ok(())
}

/// Every `*.ko` under `directory/relative`, by module name, as paths relative to `directory`.
fn index_modules(
    directory: &Path,
    relative: &Path,
    paths: &mut BTreeMap<String, PathBuf>,
) -> Result<(), String> {
    let path = directory.join(relative);
    let entries = fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    for entry in entries.flatten() {
        let child = relative.join(entry.file_name());
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
            index_modules(directory, &child, paths)?;
        } else if name.ends_with(".ko") {
            paths.insert(module_name(&name), child);
        } else if name.contains(".ko.") {
            return Err(format!(
                "{}: compressed kernel modules are not supported",
                directory.join(child).display()
            ));
        }
    }
    Ok(())
}

/// modules.alias as depmod writes it: `alias <pattern> <module>`, one line per alias of each
/// module (a device's modalias, `pci:v00001AF4d00001041...`, matches a pattern as a shell
/// glob), modules in name order.
fn modules_alias(aliases: &BTreeMap<String, Vec<String>>) -> String {
    aliases
        .iter()
        .flat_map(|(name, patterns)| {
            patterns
                .iter()
                .map(move |pattern| format!("alias {pattern} {name}\n"))
        })
        .collect()
}

/// `kernel/drivers/net/virtio_net.ko` -> `virtio_net` (the kernel treats `-` and `_` alike).
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.strip_suffix(".ko").unwrap_or(file).replace('-', "_")
}

/// The dependencies of `name` for its modules.dep line: all of them, transitively, each before
/// its own dependencies (modprobe loads the list from its end).
fn dependency_line(name: &str, dependencies: &BTreeMap<String, Vec<String>>) -> Vec<String> {
    fn visit(
        name: &str,
        dependencies: &BTreeMap<String, Vec<String>>,
        seen: &mut BTreeSet<String>,
        load_order: &mut Vec<String>,
    ) {
        if !seen.insert(name.to_string()) {
            return;
        }
        for dependency in dependencies.get(name).into_iter().flatten() {
            visit(dependency, dependencies, seen, load_order);
        }
        load_order.push(name.to_string());
    }
    let mut seen = BTreeSet::new();
    let mut load_order = Vec::new();
    visit(name, dependencies, &mut seen, &mut load_order);
    load_order.pop();
    load_order.reverse();
    load_order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_system_has_init_tests_and_applets() {
        let mut tree = Tree::default();
        base_system(&mut tree);
        for path in [
            "init",
            "tests/stress.sh",
            "tests/bench.sh",
            "dev/null",
            "sbin/poweroff",
            "bin/sh",
        ] {
            assert!(tree.entries.contains_key(path), "{path}");
        }
        assert!(INIT.contains("\necho KEEL-INIT-START\n"));
        // The 269 names in busybox-static's applet table but 9 (see BIN_APPLETS), each once.
        let mut applets: Vec<&str> = SBIN_APPLETS.split_whitespace().collect();
        applets.extend(BIN_APPLETS.split_whitespace());
        let unique: BTreeSet<&str> = applets.iter().copied().collect();
        assert_eq!((applets.len(), unique.len()), (260, 260));
    }

    #[test]
    fn modules_alias_has_a_line_per_alias_of_each_module() {
        let aliases: BTreeMap<String, Vec<String>> = [
            ("virtio_net", vec!["virtio:d00000001v*"]),
            ("virtio_ring", vec![]),
            ("ext4", vec!["fs-ext4", "fs-ext3"]),
        ]
        .into_iter()
        .map(|(name, patterns)| {
            (
                name.to_string(),
                patterns.into_iter().map(String::from).collect(),
            )
        })
        .collect();
        assert_eq!(
            modules_alias(&aliases),
            "alias fs-ext4 ext4\nalias fs-ext3 ext4\nalias virtio:d00000001v* virtio_net\n"
        );
    }

    #[test]
    fn module_names_and_dependency_lines() {
        assert_eq!(
            module_name("kernel/drivers/char/hw_random/virtio-rng.ko"),
            "virtio_rng"
        );
        let dependencies: BTreeMap<String, Vec<String>> = [
            ("virtio_net", vec!["net_failover", "virtio", "virtio_ring"]),
            ("net_failover", vec!["failover"]),
            ("failover", vec![]),
            ("virtio_ring", vec!["virtio"]),
            ("virtio", vec![]),
        ]
        .into_iter()
        .map(|(name, depends)| {
            (
                name.to_string(),
                depends.into_iter().map(String::from).collect(),
            )
        })
        .collect();
        // modprobe loads from the end: every module after the ones that depend on it.
        assert_eq!(
            dependency_line("virtio_net", &dependencies),
            ["virtio_ring", "virtio", "net_failover", "failover"]
        );
        assert_eq!(
            dependency_line("virtio", &dependencies),
            Vec::<String>::new()
        );
    }
}

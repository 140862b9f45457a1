//! Debian packages through apt: their candidate versions (`apt-cache show`, remembered in
//! `packages.index`), downloaded with `apt-get download` and unpacked with `dpkg-deb -x`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::FLAVOURS;
use crate::progress::Progress;
use crate::step;

/// The Debian architecture of the guests.
const ARCH: &str = "arm64";

/// A Debian package as `apt-cache show` describes its candidate version.
#[derive(Clone, Debug, PartialEq)]
struct PackageInfo {
    name: String,
    version: String,
    architecture: String,
    depends: Vec<String>,
}

/// A package downloaded and unpacked.
pub(super) struct Unpacked {
    pub(super) root: PathBuf,
    pub(super) depends: Vec<String>,
}

/// A kernel package unpacked, with its release (`uname -r`, the /lib/modules directory).
pub(super) struct KernelPackage {
    pub(super) root: PathBuf,
    pub(super) version: String,
}

/// Debian's package tools, with the cache they download and unpack into, and what
/// `apt-cache show` said (kept in `packages.index` until apt's lists change: each `apt-cache`
/// run takes about a second).
pub(super) struct Apt {
    debs: PathBuf,
    packages: PathBuf,
    index: PathBuf,
    /// When apt's lists last changed: the index is valid for this value only.
    lists_stamp: String,
    known: BTreeMap<String, PackageInfo>,
}

impl Apt {
    /// Creates the cache directories and makes sure apt knows arm64 packages.
    pub(super) fn new(cache: &Path) -> Result<Self, String> {
        let mut apt = Apt {
            debs: cache.join("debs"),
            packages: cache.join("packages"),
            index: cache.join("packages.index"),
            lists_stamp: String::new(),
            known: BTreeMap::new(),
        };
        for directory in [&apt.debs, &apt.packages] {
            fs::create_dir_all(directory).map_err(|e| format!("{}: {e}", directory.display()))?;
        }
        apt.lists_stamp = lists_stamp();
        let index = fs::read_to_string(&apt.index).unwrap_or_default();
        if let Some(entries) = index.strip_prefix(&format!("{}\n", apt.lists_stamp)) {
            apt.known = entries
                .lines()
                .filter_map(PackageInfo::from_index_line)
                .collect();
        }
        if apt.known.is_empty() {
            let native = run(Command::new("dpkg").arg("--print-architecture"))?;
            let foreign = run(Command::new("dpkg").arg("--print-foreign-architectures"))?;
            if native.trim() != ARCH && !foreign.lines().any(|line| line.trim() == ARCH) {
                step(&format!(
                    "adding the Debian architecture {ARCH} (dpkg --add-architecture {ARCH}; apt-get update)"
                ));
                run(Command::new("dpkg").args(["--add-architecture", ARCH]))?;
                run(Command::new("apt-get").args(["update", "-q"]))?;
                apt.lists_stamp = lists_stamp();
            } else if run(Command::new("apt-cache").args(["show", &format!("libc6:{ARCH}")]))
                .is_err()
            {
                step(&format!("apt knows no {ARCH} packages yet: apt-get update"));
                run(Command::new("apt-get").args(["update", "-q"]))?;
                apt.lists_stamp = lists_stamp();
            }
        }
        Ok(apt)
    }

    /// The kernel package of `flavour`: the one its `linux-image-<flavour>` package depends on.
    pub(super) fn kernel_package(&mut self, flavour: &str) -> Result<KernelPackage, String> {
        if !FLAVOURS.contains(&flavour) {
            return Err(format!(
                "unknown Debian kernel flavour {flavour:?} (known: {})",
                FLAVOURS.join(", ")
            ));
        }
        let meta = format!("linux-image-{flavour}");
        let name = self
            .show(std::slice::from_ref(&meta))?
            .remove(&meta)
            .ok_or_else(|| no_package(&meta))?
            .depends
            .into_iter()
            .find(|name| name.starts_with("linux-image-"))
            .ok_or_else(|| format!("package {meta}: depends on no linux-image-* package"))?;
        let root = self
            .fetch(std::slice::from_ref(&name))?
            .remove(&name)
            .ok_or_else(|| no_package(&name))?
            .root;
        let version = name["linux-image-".len()..].to_string();
        if !root.join("lib/modules").join(&version).is_dir() {
            return Err(format!("package {name}: has no /lib/modules/{version}"));
        }
        Ok(KernelPackage { root, version })
    }

    /// What `apt-cache show` says of the candidate versions of `names` for arm64 (or
    /// architecture `all`), for those that have one.
    fn show(&mut self, names: &[String]) -> Result<BTreeMap<String, PackageInfo>, String> {
        let unknown: Vec<&String> = names
            .iter()
            .filter(|name| !self.known.contains_key(*name))
            .collect();
        if !unknown.is_empty() {
            // `name:arm64` finds arm64 packages; a plain `name`, the architecture-independent ones.
            for qualifier in [format!(":{ARCH}"), String::new()] {
                let queries: Vec<String> = unknown
                    .iter()
                    .filter(|name| !self.known.contains_key(**name))
                    .map(|name| format!("{name}{qualifier}"))
                    .collect();
                if queries.is_empty() {
                    break;
                }
                // apt-cache fails only when it finds none of them: that is for the caller to say.
                let output = run(Command::new("apt-cache")
                    .args(["show", "--no-all-versions"])
                    .args(&queries))
                .unwrap_or_default();
                for paragraph in output.split("\n\n") {
                    if let Some(info) = parse_package(paragraph) {
                        if info.architecture == ARCH || info.architecture == "all" {
                            self.known.insert(info.name.clone(), info);
                        }
                    }
                }
            }
            let mut index = format!("{}\n", self.lists_stamp);
            for info in self.known.values() {
                index.push_str(&info.index_line());
            }
            fs::write(&self.index, index).map_err(|e| format!("{}: {e}", self.index.display()))?;
        }
        Ok(names
            .iter()
            .filter_map(|name| Some((name.clone(), self.known.get(name)?.clone())))
            .collect())
    }

    /// Downloads (unless cached) and unpacks (unless done) the candidate versions of `names`,
    /// those that have one for arm64.
    pub(super) fn fetch(&mut self, names: &[String]) -> Result<BTreeMap<String, Unpacked>, String> {
        let infos = self.show(names)?;
        let missing: Vec<&PackageInfo> = infos
            .values()
            .filter(|info| !self.debs.join(info.deb_name()).exists())
            .collect();
        if !missing.is_empty() {
            let list: Vec<String> = missing
                .iter()
                .map(|info| format!("{} {}", info.name, info.version))
                .collect();
            step(&format!(
                "downloading {} (apt-get download, {ARCH})",
                list.join(", ")
            ));
            let download = self
                .debs
                .join(format!("download-{}.partial", std::process::id()));
            let _ = fs::remove_dir_all(&download);
            fs::create_dir_all(&download).map_err(|e| format!("{}: {e}", download.display()))?;
            let queries = missing.iter().map(|info| match info.architecture.as_str() {
                "all" => format!("{}={}", info.name, info.version),
                _ => format!("{}:{ARCH}={}", info.name, info.version),
            });
            // apt-get says `Get:N <source> <package> <arch> <version> [<size>]` as it starts each.
            let progress = Progress::bar(missing.len() as u64, "downloading Debian packages");
            crate::process::output_by_line(
                Command::new("apt-get")
                    .args(["download", "-q"])
                    .args(queries)
                    .current_dir(&download),
                |line| {
                    if let Some(what) = line.strip_prefix("Get:") {
                        progress.inc();
                        progress.set_message(what.split_once(' ').map_or(what, |(_, rest)| rest));
                    }
                },
            )
            .map_err(|e| format!("downloading packages {}: {e}", list.join(", ")))?;
            drop(progress);
            for info in &missing {
                let downloaded = download.join(info.deb_name());
                fs::rename(&downloaded, self.debs.join(info.deb_name())).map_err(|e| {
                    format!(
                        "package {}: apt-get download left no {}: {e}",
                        info.name,
                        downloaded.display()
                    )
                })?;
            }
            let _ = fs::remove_dir_all(&download);
        }
        let mut unpacked = BTreeMap::new();
        let unpacked_root = |info: &PackageInfo| {
            let deb = self.debs.join(info.deb_name());
            self.packages.join(deb.file_stem().unwrap_or_default())
        };
        let extract = infos
            .values()
            .filter(|info| !unpacked_root(info).is_dir())
            .count();
        let progress =
            (extract > 0).then(|| Progress::bar(extract as u64, "extracting Debian packages"));
        for (name, info) in infos {
            let deb = self.debs.join(info.deb_name());
            let stem = deb.file_stem().unwrap_or_default().to_string_lossy();
            let root = self.packages.join(&*stem);
            if !root.is_dir() {
                step(&format!("extracting {}", deb.display()));
                if let Some(progress) = &progress {
                    progress.inc();
                    progress.set_message(name.clone());
                }
                let partial = self
                    .packages
                    .join(format!("{stem}.{}.partial", std::process::id()));
                let _ = fs::remove_dir_all(&partial);
                run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial)).map_err(|e| {
                    let _ = fs::remove_dir_all(&partial);
                    format!("package {name}: {e}")
                })?;
                fs::rename(&partial, &root).map_err(|e| format!("{}: {e}", root.display()))?;
            }
            unpacked.insert(
                name,
                Unpacked {
                    root,
                    depends: info.depends,
                },
            );
        }
        Ok(unpacked)
    }
}

/// Fetches (apt-get download, cached) and extracts `package`; returns the path of `file`
/// (relative to the package's root) in it.
pub(super) fn package_file(cache: &Path, package: &str, file: &str) -> Result<PathBuf, String> {
    let root = crate::build_lock::exclusive(|| {
        Ok(Apt::new(cache)?
            .fetch(&[package.to_string()])?
            .remove(package)
            .ok_or_else(|| no_package(package))?
            .root)
    })?;
    let path = root.join(file);
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("package {package}: has no /{file}"))
    }
}

/// The error for a package apt does not have for arm64.
pub(super) fn no_package(name: &str) -> String {
    format!(
        "package {name}: `apt-cache show {name}:{ARCH}` finds no {ARCH} package \
         (is the architecture added, with `dpkg --add-architecture {ARCH}; apt-get update`?)"
    )
}

/// The modification time of apt's lists directory, which `apt-get update` changes.
fn lists_stamp() -> String {
    let modified = fs::metadata("/var/lib/apt/lists").and_then(|metadata| metadata.modified());
    format!("apt lists {modified:?}")
}

impl PackageInfo {
    /// The file name `apt-get download` gives the package (an epoch's `:` becomes `%3a`).
    fn deb_name(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            self.architecture
        )
    }

    fn index_line(&self) -> String {
        format!(
            "{} {} {} {}\n",
            self.name,
            self.version,
            self.architecture,
            self.depends.join(",")
        )
    }

    fn from_index_line(line: &str) -> Option<(String, PackageInfo)> {
        let mut fields = line.split(' ');
        let name = fields.next()?.to_string();
        let info = PackageInfo {
            name: name.clone(),
            version: fields.next()?.to_string(),
            architecture: fields.next()?.to_string(),
            depends: fields
                .next()?
                .split(',')
                .filter(|name| !name.is_empty())
                .map(String::from)
                .collect(),
        };
        Some((name, info))
    }
}

/// One paragraph of `apt-cache show` output.
fn parse_package(text: &str) -> Option<PackageInfo> {
    let mut fields = BTreeMap::new();
    for line in text.lines() {
        if let Some((key, value)) = line.split_once(": ") {
            if !line.starts_with(' ') {
                fields.insert(key, value.trim());
            }
        }
    }
    let mut depends = Vec::new();
    for key in ["Pre-Depends", "Depends"] {
        depends.extend(
            fields
                .get(key)
                .map(|field| parse_depends(field))
                .unwrap_or_default(),
        );
    }
    Some(PackageInfo {
        name: fields.get("Package")?.to_string(),
        version: fields.get("Version")?.to_string(),
        architecture: fields.get("Architecture")?.to_string(),
        depends,
    })
}

/// `libc6 (>= 2.34), libfoo1 | libbar1, python3:any` -> `libc6 libfoo1 python3`: the first
/// alternative of each, without version or architecture qualifiers.
fn parse_depends(field: &str) -> Vec<String> {
    field
        .split(',')
        .filter_map(|relation| {
            let first = relation.split('|').next()?.trim();
            let name = first.split([' ', '(']).next()?;
            let name = name.split(':').next()?;
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}

/// Runs a command; its standard output, or an error naming the command with its stderr.
fn run(command: &mut Command) -> Result<String, String> {
    crate::process::output(command)
        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depends_take_the_first_alternative_without_qualifiers() {
        assert_eq!(
            parse_depends(
                "libc6 (>= 2.34), libfoo1 | libbar1, python3:any, zlib1g:arm64 (>= 1:1.2)"
            ),
            ["libc6", "libfoo1", "python3", "zlib1g"]
        );
        assert_eq!(parse_depends(""), Vec::<String>::new());
    }

    #[test]
    fn package_paragraph_and_index_line() {
        let text = "Package: zlib1g\nVersion: 1:1.2.13.dfsg-1\nArchitecture: arm64\n\
                    Pre-Depends: libc6 (>= 2.17)\nDepends: libx1\nDescription: compression\n \
                    Depends: not a field\n";
        let info = parse_package(text).unwrap();
        assert_eq!(
            info,
            PackageInfo {
                name: "zlib1g".into(),
                version: "1:1.2.13.dfsg-1".into(),
                architecture: "arm64".into(),
                depends: vec!["libc6".into(), "libx1".into()],
            }
        );
        assert_eq!(info.deb_name(), "zlib1g_1%3a1.2.13.dfsg-1_arm64.deb");
        let line = info.index_line();
        assert_eq!(
            PackageInfo::from_index_line(line.trim_end()),
            Some(("zlib1g".into(), info))
        );
        assert_eq!(parse_package("Package: x\n"), None);
    }
}

//! Firmware images from Debian packages, for VMs that boot from flash.

use std::path::{Path, PathBuf};

use super::apt::{no_package, Apt};

/// The firmware a configuration may name with `image = { debian = "..." }`: name, the package
/// that has it, and the file inside the package.
pub const FIRMWARE: &[(&str, &str, &str)] = &[(
    "u-boot-qemu",
    "u-boot-qemu",
    "usr/lib/u-boot/qemu_arm64/u-boot.bin",
)];

/// Fetches (apt-get download, cached) and extracts the package of firmware `name`; returns the
/// path of its image, or None if `name` is not a known firmware.
pub fn firmware(cache: &Path, name: &str) -> Option<Result<PathBuf, String>> {
    let &(_, package, file) = FIRMWARE.iter().find(|(known, ..)| *known == name)?;
    Some(fetch(cache, package, file))
}

fn fetch(cache: &Path, package: &str, file: &str) -> Result<PathBuf, String> {
    let mut apt = Apt::new(cache)?;
    let root = apt
        .fetch(&[package.to_string()])?
        .remove(package)
        .ok_or_else(|| no_package(package))?
        .root;
    let image = root.join(file);
    if image.is_file() {
        Ok(image)
    } else {
        Err(format!("package {package}: has no /{file}"))
    }
}

//! Firmware images from Debian packages, for VMs that boot from flash.

use std::path::{Path, PathBuf};

use super::apt::package_file;

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
    Some(package_file(cache, package, file))
}

//! Debian's Xen hypervisor for arm64, the peer that `cargo xtask bench` runs Linux under as
//! dom0.

use std::fs;
use std::path::{Path, PathBuf};

use super::apt::package_file;

/// The package, and the file in it that QEMU boots with `-kernel`: `/boot/xen-4.17-arm64` is
/// both an EFI PE and an arm64 Image (Xen's `.efi` beside it is the same file).
const PACKAGE: &str = "xen-hypervisor-4.17-arm64";
const IMAGE: &str = "boot/xen-4.17-arm64";

/// A Linux command line for dom0: its `console=` (the board's UART) becomes Xen's `hvc0`,
/// every other word stays.
pub fn dom0_bootargs(cmdline: &str) -> String {
    cmdline
        .split_whitespace()
        .map(|word| {
            if word.starts_with("console=") {
                "console=hvc0"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Fetches (apt-get download, cached) and extracts Debian's Xen 4.17 for arm64; returns the path
/// of its arm64 Image.
pub fn xen(cache: &Path) -> Result<PathBuf, String> {
    let image = package_file(cache, PACKAGE, IMAGE)?;
    let header = fs::read(&image).map_err(|e| format!("{}: {e}", image.display()))?;
    // The arm64 Image header (Documentation/arch/arm64/booting.rst): magic "ARM\x64" at 0x38.
    if header.get(0x38..0x3c) != Some(b"ARM\x64") {
        return Err(format!(
            "{}: not an arm64 Image (no ARM\\x64 magic at 0x38)",
            image.display()
        ));
    }
    Ok(image)
}

#[cfg(test)]
mod tests {
    #[test]
    fn dom0_takes_xens_console_and_every_other_word() {
        assert_eq!(
            super::dom0_bootargs("console=ttyAMA0  keel.root=/dev/vda keel.test=net"),
            "console=hvc0 keel.root=/dev/vda keel.test=net"
        );
        assert_eq!(super::dom0_bootargs("quiet"), "quiet");
    }
}

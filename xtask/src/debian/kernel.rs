//! The arm64 kernel Image of a Debian kernel package (decompressed if the package has it gzipped).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::apt::Apt;
use crate::step;

/// Debian kernel flavours: "cloud-arm64", "arm64" (generic), "rt-arm64" (PREEMPT_RT).
pub const FLAVOURS: &[&str] = &["cloud-arm64", "arm64", "rt-arm64"];

/// Fetches (apt-get download, cached) and extracts the kernel package of `flavour`; returns the path of its arm64 Image (the package's /boot/vmlinuz-*, which on arm64 is an uncompressed Image; if it is gzip-compressed, decompress it).
pub fn kernel(cache: &Path, flavour: &str) -> Result<PathBuf, String> {
    crate::build_lock::exclusive(|| {
        let mut apt = Apt::new(cache)?;
        let kernel = apt.kernel_package(flavour)?;
        let boot = kernel.root.join("boot");
        arm64_image(
            &boot.join(format!("vmlinuz-{}", kernel.version)),
            &boot.join(format!("Image-{}", kernel.version)),
        )
    })
}

/// The device tree `relative` (e.g. `xilinx/zynqmp-zcu102-rev1.0.dtb`) of a board, as Debian's
/// generic arm64 kernel package ships it under `/usr/lib/linux-image-<version>/`.
pub fn board_dtb(cache: &Path, relative: &str) -> Result<PathBuf, String> {
    crate::build_lock::exclusive(|| {
        let mut apt = Apt::new(cache)?;
        let kernel = apt.kernel_package("arm64")?;
        let path = kernel
            .root
            .join("usr/lib")
            .join(format!("linux-image-{}", kernel.version))
            .join(relative);
        if !path.is_file() {
            return Err(format!(
                "Debian's kernel package {} has no {relative}",
                kernel.version
            ));
        }
        Ok(path)
    })
}

/// `vmlinuz` if it is an arm64 Image, or `decompressed` made from it if it is gzip-compressed.
fn arm64_image(vmlinuz: &Path, decompressed: &Path) -> Result<PathBuf, String> {
    let contents = fs::read(vmlinuz).map_err(|e| format!("{}: {e}", vmlinuz.display()))?;
    let (path, contents) = if contents.starts_with(&[0x1f, 0x8b]) {
        if decompressed.exists() {
            return Ok(decompressed.to_path_buf());
        }
        step(&format!(
            "decompressing {} into {}",
            vmlinuz.display(),
            decompressed.display()
        ));
        let mut image = Vec::new();
        io::copy(&mut flate2::read::GzDecoder::new(&contents[..]), &mut image)
            .map_err(|e| format!("{}: gzip: {e}", vmlinuz.display()))?;
        (decompressed, image)
    } else {
        (vmlinuz, contents)
    };
    // The arm64 Image header (Documentation/arch/arm64/booting.rst): magic "ARM\x64" at 0x38.
    if contents.get(0x38..0x3c) != Some(b"ARM\x64") {
        return Err(format!(
            "{}: not an arm64 Image (no ARM\\x64 magic at 0x38)",
            vmlinuz.display()
        ));
    }
    if path == decompressed {
        write_atomically(decompressed, &contents)?;
    }
    Ok(path.to_path_buf())
}

/// Writes `path` through a temporary file beside it, so that it exists only when complete.
fn write_atomically(path: &Path, contents: &[u8]) -> Result<(), String> {
    let mut partial = path.as_os_str().to_owned();
    partial.push(format!(".{}.partial", std::process::id()));
    let partial = PathBuf::from(partial);
    fs::write(&partial, contents).map_err(|e| format!("{}: {e}", partial.display()))?;
    fs::rename(&partial, path).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::write::GzEncoder;
    use flate2::Compression;

    use super::*;

    #[test]
    fn kernel_images_plain_or_gzip_compressed() {
        let directory =
            std::env::temp_dir().join(format!("keel-debian-test-{}", std::process::id()));
        fs::create_dir_all(&directory).unwrap();
        let mut image = vec![0; 0x40];
        image[0x38..0x3c].copy_from_slice(b"ARM\x64");
        let (plain, compressed, decompressed) = (
            directory.join("plain"),
            directory.join("compressed"),
            directory.join("Image"),
        );
        fs::write(&plain, &image).unwrap();
        assert_eq!(arm64_image(&plain, &decompressed), Ok(plain.clone()));
        let mut gzip = GzEncoder::new(Vec::new(), Compression::fast());
        gzip.write_all(&image).unwrap();
        fs::write(&compressed, gzip.finish().unwrap()).unwrap();
        assert_eq!(
            arm64_image(&compressed, &decompressed),
            Ok(decompressed.clone())
        );
        assert_eq!(fs::read(&decompressed).unwrap(), image);
        fs::write(&plain, b"MZ not an Image").unwrap();
        assert!(arm64_image(&plain, &decompressed)
            .unwrap_err()
            .contains("not an arm64 Image"));
        fs::remove_dir_all(&directory).unwrap();
    }
}

//! Kernel images: finding the file, recognising an arm64 Linux `Image` header, and its footprint.

use std::path::{Path, PathBuf};

use super::error::Problem;
use super::model::ImageSource;
use super::schema::ImageTable;

/// Offset of the `ARM\x64` magic in an arm64 Linux `Image` header
/// (Linux `Documentation/arch/arm64/booting.rst`, "Call the kernel image").
const LINUX_MAGIC_OFFSET: usize = 0x38;
/// The magic itself.
const LINUX_MAGIC: &[u8; 4] = b"ARM\x64";
/// Offset of the little-endian `text_offset` field.
const LINUX_TEXT_OFFSET_OFFSET: usize = 8;
/// Offset of the little-endian `image_size` field.
const LINUX_IMAGE_SIZE_OFFSET: usize = 16;
/// Length of the header.
const LINUX_HEADER_SIZE: usize = 64;

/// How an image lies in guest memory, relative to the VM's ipa.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLayout {
    /// Offset from the VM's ipa to the load address (`text_offset` for Linux, 0 for raw binaries).
    pub load_offset: u64,
    /// Bytes the image occupies once loaded: the file, or Linux's `image_size` (which includes
    /// BSS) if larger.
    pub footprint: u64,
    /// Whether the image carries the arm64 Linux `Image` header.
    pub is_linux: bool,
}

/// Reads the layout of an image from its bytes.
pub fn inspect(bytes: &[u8]) -> ImageLayout {
    let file_length = bytes.len() as u64;
    let is_linux = bytes.len() >= LINUX_HEADER_SIZE
        && &bytes[LINUX_MAGIC_OFFSET..LINUX_MAGIC_OFFSET + 4] == LINUX_MAGIC;
    if !is_linux {
        return ImageLayout {
            load_offset: 0,
            footprint: file_length,
            is_linux: false,
        };
    }
    let read_u64 = |offset: usize| {
        let mut field = [0u8; 8];
        field.copy_from_slice(&bytes[offset..offset + 8]);
        u64::from_le_bytes(field)
    };
    ImageLayout {
        load_offset: read_u64(LINUX_TEXT_OFFSET_OFFSET),
        footprint: file_length.max(read_u64(LINUX_IMAGE_SIZE_OFFSET)),
        is_linux: true,
    }
}

/// Resolves `image`/`initrd = { guest | file | debian }` to its source and the path to read
/// (not yet canonical). `config_dir` is the directory of the configuration file. A Debian
/// flavour is asked of `guest_image` as `<debian_kind>/<flavour>` (`debian-kernel/cloud-arm64`,
/// `debian-initramfs/cloud-arm64`): xtask fetches and builds it.
pub fn resolve(
    table: &ImageTable,
    config_dir: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
    debian_kind: &str,
) -> Result<(ImageSource, PathBuf), Problem> {
    match (&table.guest, &table.file, &table.debian) {
        (None, None, Some(flavour)) => {
            let path = guest_image(&format!("{debian_kind}/{flavour}")).ok_or_else(|| {
                Problem::UnknownDebianFlavour {
                    flavour: flavour.clone(),
                }
            })?;
            Ok((ImageSource::Debian(flavour.clone()), path))
        }
        (None, None, None) => Err(Problem::ImageNoSource),
        (_, _, Some(_)) | (Some(_), Some(_), None) => Err(Problem::ImageBothSources),
        (Some(guest), None, None) => {
            let path = guest_image(guest).ok_or_else(|| Problem::UnknownGuest {
                guest: guest.clone(),
            })?;
            if !path.is_file() {
                return Err(Problem::GuestImageNotBuilt {
                    guest: guest.clone(),
                    path,
                });
            }
            Ok((ImageSource::Guest(guest.clone()), path))
        }
        (None, Some(file), None) => {
            let path = config_dir.join(file);
            if !path.is_file() {
                return Err(Problem::FileNotFound { path });
            }
            Ok((ImageSource::File(PathBuf::from(file)), path))
        }
    }
}

/// Reads an image and returns its layout and its absolute path.
pub fn load(path: &Path) -> Result<(ImageLayout, PathBuf), Problem> {
    let unreadable = |error: std::io::Error| Problem::ImageUnreadable {
        path: path.to_path_buf(),
        error: error.to_string(),
    };
    let bytes = std::fs::read(path).map_err(unreadable)?;
    if bytes.is_empty() {
        return Err(Problem::ImageEmpty {
            path: path.to_path_buf(),
        });
    }
    let absolute = std::fs::canonicalize(path).map_err(unreadable)?;
    Ok((inspect(&bytes), absolute))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn linux_header(text_offset: u64, image_size: u64) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x1000];
        bytes[8..16].copy_from_slice(&text_offset.to_le_bytes());
        bytes[16..24].copy_from_slice(&image_size.to_le_bytes());
        bytes[0x38..0x3c].copy_from_slice(b"ARM\x64");
        bytes
    }

    #[test]
    fn raw_binary_loads_at_ipa() {
        let layout = inspect(&[0u8; 100]);
        assert_eq!(
            layout,
            ImageLayout {
                load_offset: 0,
                footprint: 100,
                is_linux: false
            }
        );
    }

    #[test]
    fn linux_header_gives_offset_and_bss_footprint() {
        let layout = inspect(&linux_header(0x8_0000, 0x20_0000));
        assert_eq!(
            layout,
            ImageLayout {
                load_offset: 0x8_0000,
                footprint: 0x20_0000,
                is_linux: true
            }
        );
        // image_size smaller than the file: the file wins.
        assert_eq!(inspect(&linux_header(0, 0x10)).footprint, 0x1000);
    }

    #[test]
    fn short_file_with_magic_is_raw() {
        let mut bytes = vec![0u8; 0x3c];
        bytes[0x38..0x3c].copy_from_slice(b"ARM\x64");
        assert!(!inspect(&bytes).is_linux);
    }
}

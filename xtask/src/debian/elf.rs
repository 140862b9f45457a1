//! What the initramfs needs from ELF files, read with the `object` crate: the sonames programs
//! and libraries need (`DT_NEEDED`) and the dependencies of kernel modules (`.modinfo`).

use std::fs;
use std::path::Path;

use object::elf::{FileHeader64, DT_NEEDED};
use object::read::elf::{FileHeader, SectionHeader, SectionTable};
use object::{Endianness, FileKind, ReadCache};

/// Whether the file is an ELF file (rt-tests also has Python scripts); only its start is read.
pub(super) fn is_elf(path: &Path) -> bool {
    fs::File::open(path).is_ok_and(|file| {
        matches!(
            FileKind::parse(&ReadCache::new(file)),
            Ok(FileKind::Elf32 | FileKind::Elf64)
        )
    })
}

/// A 64-bit ELF file (every arm64 program, library and kernel module), its sections parsed.
pub(super) struct Elf<'a> {
    data: &'a [u8],
    endian: Endianness,
    sections: SectionTable<'a, FileHeader64<Endianness>>,
}

impl<'a> Elf<'a> {
    /// Parses the file header and the section headers; an error says what is malformed.
    pub(super) fn parse(data: &'a [u8]) -> Result<Self, String> {
        let header = FileHeader64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
        let endian = header.endian().map_err(|e| e.to_string())?;
        let sections = header.sections(endian, data).map_err(|e| e.to_string())?;
        Ok(Elf {
            data,
            endian,
            sections,
        })
    }

    /// The DT_NEEDED entries of the dynamic section, up to its DT_NULL: the sonames this file is
    /// linked against (none for a statically linked file, which has no dynamic section).
    pub(super) fn needed(&self) -> Result<Vec<String>, String> {
        let table = self
            .sections
            .dynamic_table(self.endian, self.data)
            .map_err(|e| format!("dynamic section: {e}"))?;
        let mut needed = Vec::new();
        for entry in &table {
            if entry.tag == DT_NEEDED {
                let name = table
                    .string(entry)
                    .map_err(|e| format!("dynamic section: {e}"))?;
                needed.push(
                    std::str::from_utf8(name)
                        .map_err(|_| {
                            format!("dynamic section: a needed name is not UTF-8: {name:?}")
                        })?
                        .to_string(),
                );
            }
        }
        Ok(needed)
    }

    /// The values of `key=value` strings in a kernel module's `.modinfo` section.
    pub(super) fn modinfo(&self, key: &str) -> Vec<&'a str> {
        let Some(info) = self
            .sections
            .section_by_name(self.endian, b".modinfo")
            .and_then(|(_, section)| section.data(self.endian, self.data).ok())
        else {
            return Vec::new();
        };
        info.split(|&byte| byte == 0)
            .filter_map(|entry| std::str::from_utf8(entry).ok())
            .filter_map(|entry| entry.strip_prefix(key)?.strip_prefix('='))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section type of `.dynamic` (System V gABI, "Sections").
    const SHT_DYNAMIC: u32 = 6;

    /// A little ELF64 file with the given sections (after the null one, before .shstrtab).
    fn elf(sections: &[(&str, u32, &[u8], u32)]) -> Vec<u8> {
        let mut data = vec![0; 64];
        data[..7].copy_from_slice(b"\x7fELF\x02\x01\x01");
        let mut names = vec![0];
        let mut headers = vec![[0u8; 64]];
        let mut all: Vec<(&str, u32, Vec<u8>, u32)> = sections
            .iter()
            .map(|(name, kind, contents, link)| (*name, *kind, contents.to_vec(), *link))
            .collect();
        for name in all.iter().map(|section| section.0).chain([".shstrtab"]) {
            names.extend_from_slice(name.as_bytes());
            names.push(0);
        }
        all.push((".shstrtab", 3, names, 0));
        let mut name_offset = 1;
        for (name, kind, contents, link) in &all {
            let mut header = [0u8; 64];
            header[0..4].copy_from_slice(&(name_offset as u32).to_le_bytes());
            header[4..8].copy_from_slice(&kind.to_le_bytes());
            header[24..32].copy_from_slice(&(data.len() as u64).to_le_bytes());
            header[32..40].copy_from_slice(&(contents.len() as u64).to_le_bytes());
            header[40..44].copy_from_slice(&link.to_le_bytes());
            headers.push(header);
            data.extend_from_slice(contents);
            name_offset += name.len() + 1;
        }
        let section_offset = data.len() as u64;
        for header in &headers {
            data.extend_from_slice(header);
        }
        data[0x28..0x30].copy_from_slice(&section_offset.to_le_bytes());
        data[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        data[0x3c..0x3e].copy_from_slice(&(headers.len() as u16).to_le_bytes());
        data[0x3e..0x40].copy_from_slice(&(headers.len() as u16 - 1).to_le_bytes());
        data
    }

    fn dynamic(entries: &[(u64, u64)]) -> Vec<u8> {
        entries
            .iter()
            .flat_map(|(tag, value)| [tag.to_le_bytes(), value.to_le_bytes()].concat())
            .collect()
    }

    #[test]
    fn elf_needed_entries_until_dt_null() {
        let strings = b"\0libc.so.6\0libm.so.6\0";
        // DT_STRTAB (5) is not NEEDED; nothing after DT_NULL counts.
        let entries = dynamic(&[(1, 1), (5, 0), (1, 11), (0, 0), (1, 1)]);
        let file = elf(&[
            (".dynstr", 3, strings, 0),
            (".dynamic", SHT_DYNAMIC, &entries, 1),
        ]);
        let elf = Elf::parse(&file).unwrap();
        assert_eq!(elf.needed().unwrap(), ["libc.so.6", "libm.so.6"]);
    }

    #[test]
    fn elf_without_dynamic_section_is_static() {
        let file = elf(&[(".text", 1, b"code", 0)]);
        assert_eq!(
            Elf::parse(&file).unwrap().needed().unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn elf_modinfo_values() {
        let info = b"license=GPL\0depends=virtio,virtio_ring\0dependsx=no\0name=virtio_mmio\0";
        let file = elf(&[(".text", 1, b"code", 0), (".modinfo", 1, info, 0)]);
        let elf = Elf::parse(&file).unwrap();
        assert_eq!(elf.modinfo("depends"), ["virtio,virtio_ring"]);
        assert_eq!(elf.modinfo("name"), ["virtio_mmio"]);
        assert_eq!(elf.modinfo("alias"), Vec::<&str>::new());
    }

    #[test]
    fn elf_rejects_other_formats_and_truncation_without_panicking() {
        assert!(Elf::parse(b"#!/usr/bin/python3\n").is_err());
        assert!(Elf::parse(b"\x7fELF\x01\x01\x01").is_err());
        let mut file = elf(&[(".dynstr", 3, b"\0", 0)]);
        assert!(Elf::parse(&file[..0x30]).is_err());
        // The last section header cut short (before its sh_link).
        file.truncate(file.len() - 30);
        assert!(Elf::parse(&file).is_err());
        // A dynamic section linked to a string table that does not exist.
        let entries = dynamic(&[(1, 1)]);
        let file = elf(&[(".dynamic", SHT_DYNAMIC, &entries, 9)]);
        assert!(Elf::parse(&file).unwrap().needed().is_err());
    }
}

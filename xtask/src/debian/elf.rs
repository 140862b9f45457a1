//! A reader of 64-bit little-endian ELF files: the sonames programs and libraries need
//! (`DT_NEEDED`) and the dependencies of kernel modules (`.modinfo`).

use std::fs;
use std::io;
use std::path::Path;

/// Whether the file starts with the ELF magic (rt-tests also has Python scripts).
pub(super) fn is_elf(path: &Path) -> bool {
    let mut magic = [0; 4];
    fs::File::open(path)
        .and_then(|mut file| io::Read::read_exact(&mut file, &mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The parts of a 64-bit little-endian ELF file (System V gABI, "ELF Header" and "Sections")
/// needed here: section headers, `.dynamic` with its string table, `.modinfo`.
pub(super) struct Elf<'a> {
    data: &'a [u8],
    sections: Vec<Section>,
}

/// One section header (`Elf64_Shdr`).
struct Section {
    name: u32,
    kind: u32,
    offset: u64,
    size: u64,
    link: u32,
}

const SHT_DYNAMIC: u32 = 6;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;

impl<'a> Elf<'a> {
    pub(super) fn parse(data: &'a [u8]) -> Result<Self, String> {
        if data.get(0..4) != Some(b"\x7fELF") {
            return Err("not an ELF file".into());
        }
        // EI_CLASS 2 = ELFCLASS64, EI_DATA 1 = ELFDATA2LSB.
        if data.get(4..6) != Some(&[2, 1]) {
            return Err("not a 64-bit little-endian ELF file".into());
        }
        let truncated = || "truncated ELF header".to_string();
        let section_offset = read_u64(data, 0x28).ok_or_else(truncated)?;
        let entry_size = u64::from(read_u16(data, 0x3a).ok_or_else(truncated)?);
        let count = u64::from(read_u16(data, 0x3c).ok_or_else(truncated)?);
        let mut sections = Vec::new();
        for index in 0..count {
            let at = section_offset + index * entry_size;
            let field32 = |offset: u64| read_u32(data, at + offset);
            let field64 = |offset: u64| read_u64(data, at + offset);
            sections.push(Section {
                name: field32(0).ok_or("truncated section header")?,
                kind: field32(4).ok_or("truncated section header")?,
                offset: field64(24).ok_or("truncated section header")?,
                size: field64(32).ok_or("truncated section header")?,
                link: field32(40).ok_or("truncated section header")?,
            });
        }
        Ok(Elf { data, sections })
    }

    fn contents(&self, section: &Section) -> Option<&'a [u8]> {
        let start = usize::try_from(section.offset).ok()?;
        let end = start.checked_add(usize::try_from(section.size).ok()?)?;
        self.data.get(start..end)
    }

    /// The section called `name` (looked up in the section-name string table, e_shstrndx).
    fn section(&self, name: &str) -> Option<&'a [u8]> {
        let names = self.sections.get(usize::from(read_u16(self.data, 0x3e)?))?;
        let names = self.contents(names)?;
        self.sections
            .iter()
            .find(|section| c_string(names, u64::from(section.name)) == Some(name))
            .and_then(|section| self.contents(section))
    }

    /// The DT_NEEDED entries of the dynamic section: the sonames this file is linked against.
    pub(super) fn needed(&self) -> Result<Vec<String>, String> {
        let Some(dynamic) = self
            .sections
            .iter()
            .find(|section| section.kind == SHT_DYNAMIC)
        else {
            return Ok(Vec::new()); // statically linked
        };
        let malformed = || "malformed dynamic section".to_string();
        let entries = self.contents(dynamic).ok_or_else(malformed)?;
        let strings = self
            .sections
            .get(dynamic.link as usize)
            .and_then(|section| self.contents(section))
            .ok_or_else(malformed)?;
        let mut needed = Vec::new();
        for entry in entries.chunks_exact(16) {
            let tag = read_u64(entry, 0).ok_or_else(malformed)?;
            let value = read_u64(entry, 8).ok_or_else(malformed)?;
            match tag {
                DT_NULL => break,
                DT_NEEDED => {
                    needed.push(c_string(strings, value).ok_or_else(malformed)?.to_string())
                }
                _ => {}
            }
        }
        Ok(needed)
    }

    /// The values of `key=value` strings in a kernel module's `.modinfo` section.
    pub(super) fn modinfo(&self, key: &str) -> Vec<&'a str> {
        let Some(info) = self.section(".modinfo") else {
            return Vec::new();
        };
        info.split(|&byte| byte == 0)
            .filter_map(|entry| std::str::from_utf8(entry).ok())
            .filter_map(|entry| entry.strip_prefix(key)?.strip_prefix('='))
            .collect()
    }
}

fn read_u16(data: &[u8], offset: u64) -> Option<u16> {
    let start = usize::try_from(offset).ok()?;
    Some(u16::from_le_bytes(
        data.get(start..start.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn read_u32(data: &[u8], offset: u64) -> Option<u32> {
    let start = usize::try_from(offset).ok()?;
    Some(u32::from_le_bytes(
        data.get(start..start.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn read_u64(data: &[u8], offset: u64) -> Option<u64> {
    let start = usize::try_from(offset).ok()?;
    Some(u64::from_le_bytes(
        data.get(start..start.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The NUL-terminated string at `offset` of a string table.
fn c_string(table: &[u8], offset: u64) -> Option<&str> {
    let rest = table.get(usize::try_from(offset).ok()?..)?;
    let end = rest.iter().position(|&byte| byte == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

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

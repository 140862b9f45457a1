//! The initramfs archive: a tree of entries with its manifest, written as gzip-compressed newc
//! cpio, or into a directory (from which `rootfs.rs` makes a file system).

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::progress::Progress;

/// Bumped when the image layout changes in a way the manifest would not show.
const FORMAT: &str = "keel-debian-initramfs 1";

/// What an entry of the image is.
#[derive(Debug)]
pub(super) enum Node {
    Directory,
    /// A regular file copied from the host.
    File(PathBuf),
    /// A regular file with these contents.
    Data(Vec<u8>),
    Symlink(String),
    CharDevice {
        major: u32,
        minor: u32,
    },
}

/// The initramfs as a tree of paths (relative, without a leading `/`) in sorted order, so that
/// each directory comes before its contents and the archive is reproducible.
#[derive(Default)]
pub(super) struct Tree {
    pub(super) entries: BTreeMap<String, (u32, Node)>,
}

impl Tree {
    /// Adds (or replaces) an entry with its full mode (type and permissions), and its parents.
    pub(super) fn insert(&mut self, path: &str, mode: u32, node: Node) {
        let mut parent = path;
        while let Some((directory, _)) = parent.rsplit_once('/') {
            self.entries
                .entry(directory.to_string())
                .or_insert((0o040755, Node::Directory));
            parent = directory;
        }
        self.entries.insert(path.to_string(), (mode, node));
    }

    /// One line per entry, with where its contents come from: equal manifests, equal images.
    pub(super) fn manifest(&self) -> String {
        let mut manifest = format!("{FORMAT}\n");
        for (path, (mode, node)) in &self.entries {
            let what = match node {
                Node::Directory => String::new(),
                Node::File(source) => source.display().to_string(),
                Node::Data(data) => format!("{:?}", String::from_utf8_lossy(data)),
                Node::Symlink(target) => format!("-> {target}"),
                Node::CharDevice { major, minor } => format!("{major}:{minor}"),
            };
            manifest.push_str(&format!("{path} {mode:o} {what}\n"));
        }
        manifest
    }

    /// Writes the tree's directories, files and symbolic links under `root` (which must not
    /// exist yet), with their permissions. Device nodes are refused: making them takes root;
    /// leave them out (a system that mounts devtmpfs on /dev needs none).
    pub(super) fn write_directory(&self, root: &Path) -> Result<(), String> {
        fs::create_dir(root).map_err(|e| format!("{}: {e}", root.display()))?;
        let progress = Progress::bar(self.entries.len() as u64, "writing the root file system");
        for (path, (mode, node)) in &self.entries {
            progress.inc();
            let target = root.join(path);
            let failed = |e: io::Error| format!("{}: {e}", target.display());
            match node {
                Node::Directory => fs::create_dir(&target).map_err(failed)?,
                Node::File(source) => {
                    fs::copy(source, &target).map_err(|e| {
                        format!("{} -> {}: {e}", source.display(), target.display())
                    })?;
                }
                Node::Data(data) => fs::write(&target, data).map_err(failed)?,
                Node::Symlink(link) => {
                    std::os::unix::fs::symlink(link, &target).map_err(failed)?;
                    continue;
                }
                Node::CharDevice { .. } => {
                    return Err(format!(
                        "{}: device nodes are not written to directories",
                        target.display()
                    ))
                }
            }
            fs::set_permissions(&target, fs::Permissions::from_mode(mode & 0o7777))
                .map_err(failed)?;
        }
        Ok(())
    }

    /// Writes the tree as a newc cpio archive (the kernel's initramfs format,
    /// Documentation/driver-api/early-userspace/buffer-format.rst) with the `cpio` crate: each
    /// entry owned by root with mtime 0 and an inode number of its own, then the trailer;
    /// returns the writer. `written` is called after each entry.
    fn write_cpio<W: Write>(&self, mut out: W, mut written: impl FnMut()) -> io::Result<W> {
        for (inode, (path, (mode, node))) in (1..).zip(&self.entries) {
            let file;
            let (links, device, data): (u32, (u32, u32), &[u8]) = match node {
                Node::Directory => (2, (0, 0), &[]),
                Node::File(source) => {
                    file = fs::read(source).map_err(|e| {
                        io::Error::new(e.kind(), format!("{}: {e}", source.display()))
                    })?;
                    (1, (0, 0), &file)
                }
                Node::Data(data) => (1, (0, 0), data),
                Node::Symlink(target) => (1, (0, 0), target.as_bytes()),
                Node::CharDevice { major, minor } => (1, (*major, *minor), &[]),
            };
            let size = u32::try_from(data.len()).map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("{path}: over 4 GiB"))
            })?;
            let mut entry = cpio::NewcBuilder::new(path)
                .ino(inode)
                .mode(*mode)
                .nlink(links)
                .rdev_major(device.0)
                .rdev_minor(device.1)
                .write(out, size);
            entry.write_all(data)?;
            out = entry.finish()?;
            written();
        }
        cpio::newc::trailer(out)
    }

    /// Writes the tree to `output` as a gzip-compressed newc cpio archive, through `partial`
    /// (renamed to `output` once complete).
    pub(super) fn write_cpio_gzip(&self, partial: &Path, output: &Path) -> Result<(), String> {
        let file = fs::File::create(partial).map_err(|e| format!("{}: {e}", partial.display()))?;
        let gzip = GzEncoder::new(io::BufWriter::new(file), Compression::default());
        let progress = Progress::bar(self.entries.len() as u64, "building the initramfs");
        let gzip = self
            .write_cpio(gzip, || progress.inc())
            .map_err(|e| format!("{}: {e}", partial.display()))?;
        gzip.finish()
            .and_then(|mut buffered| buffered.flush())
            .map_err(|e| format!("{}: {e}", partial.display()))?;
        fs::rename(partial, output).map_err(|e| format!("{}: {e}", output.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a newc archive into (name, mode, rdev major, rdev minor, data), checking the
    /// alignment of every header and data start.
    fn read_cpio(archive: &[u8]) -> Vec<(String, u32, u32, u32, Vec<u8>)> {
        let mut entries = Vec::new();
        let mut at = 0;
        loop {
            assert_eq!(at % 4, 0, "header at {at} is not 4-byte aligned");
            assert_eq!(&archive[at..at + 6], b"070701");
            let field = |index: usize| {
                let start = at + 6 + index * 8;
                u32::from_str_radix(std::str::from_utf8(&archive[start..start + 8]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, major, minor, name_size) =
                (field(1), field(6), field(9), field(10), field(11));
            let name_start = at + 110;
            let name = &archive[name_start..name_start + name_size as usize];
            assert_eq!(name.last(), Some(&0), "names are NUL-terminated");
            let name = String::from_utf8(name[..name.len() - 1].to_vec()).unwrap();
            let data_start = (name_start + name_size as usize).next_multiple_of(4);
            let data = archive[data_start..data_start + size as usize].to_vec();
            at = (data_start + size as usize).next_multiple_of(4);
            if name == "TRAILER!!!" {
                assert_eq!(at, archive.len(), "nothing after the trailer but padding");
                return entries;
            }
            entries.push((name, mode, major, minor, data));
        }
    }

    #[test]
    fn cpio_header_fields_name_and_padding() {
        let mut tree = Tree::default();
        tree.insert("init", 0o100755, Node::Data(b"hello".to_vec()));
        let archive = tree.write_cpio(Vec::new(), || {}).unwrap();
        let header = std::str::from_utf8(&archive[..110]).unwrap();
        assert_eq!(
            header,
            concat!(
                "070701", "00000001", "000081ed", "00000000", "00000000", "00000001", "00000000",
                "00000005", "00000000", "00000000", "00000000", "00000000", "00000005", "00000000"
            )
        );
        // 110 + "init\0" = 115, padded to 116; 5 bytes of data padded to 8.
        assert_eq!(&archive[110..116], b"init\0\0");
        assert_eq!(&archive[116..124], b"hello\0\0\0");
        assert_eq!(&archive[124..130], b"070701");
    }

    #[test]
    fn cpio_ends_with_the_trailer() {
        let archive = Tree::default().write_cpio(Vec::new(), || {}).unwrap();
        // 110 + "TRAILER!!!\0" = 121, padded to 124.
        assert_eq!(archive.len(), 124);
        assert_eq!(&archive[110..124], b"TRAILER!!!\0\0\0\0");
        assert_eq!(read_cpio(&archive), vec![]);
    }

    #[test]
    fn tree_writes_parents_first_with_device_nodes_and_links() {
        let mut tree = Tree::default();
        tree.insert(
            "usr/bin/tool",
            0o100755,
            Node::Data(b"#!/bin/sh\n".to_vec()),
        );
        tree.insert(
            "dev/console",
            0o020600,
            Node::CharDevice { major: 5, minor: 1 },
        );
        tree.insert("bin/sh", 0o120777, Node::Symlink("/bin/busybox".into()));
        let archive = tree.write_cpio(Vec::new(), || {}).unwrap();
        let entries = read_cpio(&archive);
        let names: Vec<&str> = entries.iter().map(|entry| entry.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "bin",
                "bin/sh",
                "dev",
                "dev/console",
                "usr",
                "usr/bin",
                "usr/bin/tool"
            ]
        );
        assert_eq!(entries[0].1, 0o040755);
        assert_eq!(entries[1].4, b"/bin/busybox");
        assert_eq!((entries[3].1, entries[3].2, entries[3].3), (0o020600, 5, 1));
        assert_eq!(entries[6].4, b"#!/bin/sh\n");
        assert!(tree.manifest().contains("dev/console 20600 5:1\n"));
    }

    #[test]
    fn tree_written_to_a_directory_keeps_modes_and_links() {
        let directory = std::env::temp_dir().join(format!("keel-tree-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&directory);
        fs::create_dir_all(&directory).unwrap();
        let source = directory.join("source");
        fs::write(&source, b"copied").unwrap();
        let mut tree = Tree::default();
        tree.insert("tmp", 0o041777, Node::Directory);
        tree.insert(
            "usr/bin/tool",
            0o100755,
            Node::Data(b"#!/bin/sh\n".to_vec()),
        );
        tree.insert("etc/copied", 0o100600, Node::File(source));
        tree.insert("bin/sh", 0o120777, Node::Symlink("/bin/busybox".into()));
        let root = directory.join("root");
        tree.write_directory(&root).unwrap();
        let mode = |path: &str| {
            fs::symlink_metadata(root.join(path))
                .unwrap()
                .permissions()
                .mode()
        };
        assert_eq!(mode("tmp"), 0o041777);
        assert_eq!(mode("usr"), 0o040755);
        assert_eq!(mode("usr/bin/tool"), 0o100755);
        assert_eq!(mode("etc/copied"), 0o100600);
        assert_eq!(fs::read(root.join("etc/copied")).unwrap(), b"copied");
        assert_eq!(
            fs::read_link(root.join("bin/sh")).unwrap(),
            Path::new("/bin/busybox")
        );
        // An existing directory is not written over; device nodes are refused.
        assert!(tree.write_directory(&root).is_err());
        tree.insert(
            "dev/null",
            0o020666,
            Node::CharDevice { major: 1, minor: 3 },
        );
        let error = tree.write_directory(&directory.join("other")).unwrap_err();
        assert!(error.ends_with("dev/null: device nodes are not written to directories"));
        fs::remove_dir_all(&directory).unwrap();
    }
}

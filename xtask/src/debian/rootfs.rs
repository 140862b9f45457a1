//! A flavour's root file system on a disk: the initramfs's contents (`initramfs::contents`)
//! written into a directory and made into an ext4 image with `mke2fs -d` (e2fsprogs).
//!
//! The boot stays two-stage, as with Debian's own initramfs: the kernel starts the initramfs's
//! /init, which with `keel.root=/dev/vda` loads the PCI and disk drivers (modules in Debian's
//! kernels), mounts the disk and `switch_root`s into it; the disk's /init is the same script,
//! which knows where it runs by /etc/keel-rootfs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::cpio::Node;
use super::initramfs::contents;
use crate::step;

/// Bumped when the image is made differently in a way the tree's manifest would not show.
const FORMAT: &str = "keel-debian-rootfs 2";

/// Free room in the file system beyond its contents (for the journal, the tests' files and
/// what a user writes).
const FREE_MIB: u64 = 64;

/// What every entry costs beyond its data, for sizing the image: an inode (256 bytes) and a
/// block partly used.
const ENTRY_OVERHEAD: u64 = 4096 + 256;

/// Marks the disk's tree: its /init switches to no other root.
const MARKER: &str = "etc/keel-rootfs";

/// Builds (cached: rebuilt only when its contents change) the ext4 root file system of
/// `flavour`, `<cache>/<flavour>/rootfs.ext4`, with `rootfs.manifest` beside it saying what it
/// was built from. The image is a raw disk without partitions (the guest's `/dev/vda`), sized
/// to its contents and [`FREE_MIB`] more. Device nodes are left out (/init mounts devtmpfs on
/// /dev). Files belong to the user who builds the image (root when xtask runs as root: mke2fs
/// copies the owners of the directory it is given). Returns the image's path.
pub fn rootfs(cache: &Path, flavour: &str) -> Result<PathBuf, String> {
    crate::build_lock::exclusive(|| build_rootfs(cache, flavour))
}

/// [`rootfs`], its caller holding the build lock.
fn build_rootfs(cache: &Path, flavour: &str) -> Result<PathBuf, String> {
    let (mut tree, kernel) = contents(cache, flavour)?;
    tree.entries
        .retain(|_, (_, node)| !matches!(node, Node::CharDevice { .. }));
    tree.insert(
        MARKER,
        0o100644,
        Node::Data(
            b"Keel's Debian root file system (built by xtask/src/debian/rootfs.rs)\n".into(),
        ),
    );
    tree.insert("sbin/init", 0o120777, Node::Symlink("/init".into()));

    let mut content_bytes = 0;
    for (path, (_, node)) in &tree.entries {
        content_bytes += ENTRY_OVERHEAD
            + match node {
                Node::File(source) => fs::metadata(source)
                    .map_err(|e| format!("{} (for /{path}): {e}", source.display()))?
                    .len(),
                Node::Data(data) => data.len() as u64,
                _ => 0,
            };
    }
    let size_mib = content_bytes.div_ceil(1 << 20) + FREE_MIB;

    let directory = cache.join(flavour);
    let output = directory.join("rootfs.ext4");
    let manifest_path = directory.join("rootfs.manifest");
    let manifest = format!("{FORMAT}\nsize {size_mib} MiB\n{}", tree.manifest());
    if output.exists() && fs::read_to_string(&manifest_path).ok().as_deref() == Some(&manifest) {
        return Ok(output);
    }
    step(&format!(
        "building {} ({} entries, {size_mib} MiB, kernel {})",
        output.display(),
        tree.entries.len(),
        kernel.version
    ));
    fs::create_dir_all(&directory).map_err(|e| format!("{}: {e}", directory.display()))?;
    // One staging directory and image per process: two xtask runs may share the cache.
    let staging = directory.join(format!("rootfs-{}.d", std::process::id()));
    let partial = directory.join(format!("rootfs-{}.partial", std::process::id()));
    let _ = fs::remove_dir_all(&staging);
    let built = tree
        .write_directory(&staging)
        .and_then(|()| make_ext4(&staging, &partial, size_mib));
    let _ = fs::remove_dir_all(&staging);
    if let Err(error) = built {
        let _ = fs::remove_file(&partial);
        return Err(error);
    }
    fs::rename(&partial, &output).map_err(|e| format!("{}: {e}", output.display()))?;
    fs::write(&manifest_path, manifest).map_err(|e| format!("{}: {e}", manifest_path.display()))?;
    Ok(output)
}

/// Makes `image`, a sparse file of `size_mib` MiB, an ext4 file system holding the tree at
/// `root` (4 KiB blocks, as on a disk of usual size; labelled `keel-root`, its root directory
/// owned by root).
fn make_ext4(root: &Path, image: &Path, size_mib: u64) -> Result<(), String> {
    let file = fs::File::create(image).map_err(|e| format!("{}: {e}", image.display()))?;
    file.set_len(size_mib << 20)
        .map_err(|e| format!("{}: {e}", image.display()))?;
    drop(file);
    let _progress = crate::progress::Progress::spinner("making the ext4 root file system (mke2fs)");
    let mut command = Command::new(crate::setup::mke2fs()?);
    command
        .args(["-q", "-F", "-t", "ext4", "-b", "4096", "-L", "keel-root"])
        .args(["-E", "root_owner=0:0", "-d"])
        .arg(root)
        .arg(image);
    crate::process::output(&mut command)
        .map(|_| ())
        .map_err(|e| format!("making the root file system {}: {e}", image.display()))
}

//! Real Linux guests from Debian bookworm arm64 packages: kernels and busybox initramfs images.
//!
//! Everything is fetched with `apt-get download` and unpacked with `dpkg-deb -x` under the
//! cache directory (`target/keel/debian`), never committed:
//!
//! ```text
//! debs/<package>_<version>_<arch>.deb        the downloaded packages
//! packages/<package>_<version>_<arch>/       each one unpacked
//! <flavour>/initramfs.cpio.gz                the image, and initramfs.manifest: what it was built from
//! <flavour>/rootfs.ext4                       the same contents as an ext4 disk, and rootfs.manifest
//! ```
//!
//! Debian's Xen 4.17 (`xen-hypervisor-4.17-arm64`) comes the same way, for the benchmark's peer
//! run (`xen.rs`).
//!
//! The initramfs carries busybox, rt-tests and stress-ng. Shared libraries are found from the
//! ELF `DT_NEEDED` entries of the programs (read by `elf.rs` with the `object` crate, never by
//! running arm64 code), in the packages fetched so far; a library that none of them has is
//! looked for in the dependencies of the package that needs it. Kernel module dependencies come
//! from the modules' `.modinfo` sections: Debian's kernel packages leave `modules.dep` to
//! `depmod` at install time, so `initramfs.rs` writes it for the subset we carry.
//!
//! `kernel.rs` gives the kernel Image, `initramfs.rs` assembles the image from the packages
//! that `apt.rs` fetches (reading their ELF files with `elf.rs`), `scripts.rs` has /init and
//! the tests, and `cpio.rs` writes the archive (with the `cpio` crate) or a directory, which
//! `rootfs.rs` makes an ext4 disk image of, for a root file system on a virtio-blk disk.

mod apt;
mod cpio;
mod elf;
mod firmware;
mod initramfs;
mod kernel;
mod rootfs;
mod scripts;
mod xen;

pub use firmware::firmware;
pub use initramfs::initramfs;
pub use kernel::{board_dtb, kernel, FLAVOURS};
pub use rootfs::rootfs;
pub use xen::{dom0_bootargs, xen};

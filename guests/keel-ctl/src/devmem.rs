//! The management window mapped from `/dev/mem`: Linux maps a physical page that is not RAM
//! as device memory (`O_SYNC` asks for it uncached in any case), so each load and store
//! reaches Keel as one trapped access. Keel serves only 64-bit accesses whose syndrome it can
//! decode: on aarch64 each is one `ldr`/`str` of an X register with a plain base register
//! (a compiler's post-indexed or paired forms would carry no syndrome, and Keel would stop the
//! VM). The window's registers are one set per VM: an exclusive `flock` on `/dev/mem` keeps
//! two `keel` commands of this VM from mixing their calls.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;

use keel_core::abi::manager_window::{ARGS, ARG_COUNT, FUNCTION, RESULTS, RESULT_COUNT};
use keel_ctl::services::Window;

/// The device of physical memory.
const DEV_MEM: &str = "/dev/mem";

/// Why the window cannot be mapped.
#[derive(Debug)]
pub struct MapError {
    what: String,
    error: std::io::Error,
}

impl MapError {
    /// `what` failed with the error the last system call set.
    fn last_os_error(what: String) -> MapError {
        MapError {
            what,
            error: std::io::Error::last_os_error(),
        }
    }
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.error)
    }
}

/// The mapped window (unmapped when dropped; the lock goes with the file).
pub struct DevMem {
    registers: *mut u64,
    size: usize,
    _file: File,
}

impl DevMem {
    /// Opens `/dev/mem`, takes its lock and maps the `size` bytes at physical address `base`.
    pub fn map(base: u64, size: u64) -> Result<DevMem, MapError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_SYNC)
            .open(DEV_MEM)
            .map_err(|error| MapError {
                what: format!("opening {DEV_MEM} (as root?)"),
                error,
            })?;
        let needed = (RESULTS + RESULT_COUNT * 8) as usize;
        let size = usize::try_from(size).unwrap_or(0);
        if size < needed {
            return Err(MapError {
                what: format!("the device tree's window is {size} bytes"),
                error: std::io::Error::other(format!("its registers take {needed}")),
            });
        }
        let offset = libc::off_t::try_from(base).map_err(|_| MapError {
            what: format!("the window's address {base:#x}"),
            error: std::io::Error::other("beyond what mmap takes"),
        })?;
        // SAFETY: flock on an open descriptor changes only the lock.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(MapError::last_os_error(format!("locking {DEV_MEM}")));
        }
        // SAFETY: a new mapping at an address the kernel chooses; nothing else of this process
        // is at it. The descriptor maps the physical page at `base` (the management window).
        let mapped = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(MapError::last_os_error(format!(
                "mapping {DEV_MEM} at {base:#x}"
            )));
        }
        Ok(DevMem {
            registers: mapped.cast(),
            size,
            _file: file,
        })
    }

    /// The register at byte `offset` (a multiple of 8 inside the mapping).
    fn register(&self, offset: u64) -> *mut u64 {
        assert!(offset.is_multiple_of(8) && (offset as usize) < self.size);
        self.registers.wrapping_add(offset as usize / 8)
    }

    fn store(&mut self, offset: u64, value: u64) {
        let register = self.register(offset);
        // SAFETY: `register` is an aligned 64-bit register of the live mapping; the store is
        // Keel's to serve.
        unsafe { store64(register, value) }
    }

    fn load(&mut self, offset: u64) -> u64 {
        let register = self.register(offset);
        // SAFETY: as in `store`.
        unsafe { load64(register) }
    }
}

impl Window for DevMem {
    fn call(&mut self, function: u32, args: &[u64], results: usize) -> [u64; 8] {
        for (index, &arg) in args.iter().take(ARG_COUNT as usize).enumerate() {
            self.store(ARGS + 8 * index as u64, arg);
        }
        self.store(FUNCTION, u64::from(function));
        let mut read = [0; 8];
        for (index, result) in read
            .iter_mut()
            .take(results.min(RESULT_COUNT as usize))
            .enumerate()
        {
            *result = self.load(RESULTS + 8 * index as u64);
        }
        read
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of this size, used no more.
        unsafe { libc::munmap(self.registers.cast(), self.size) };
    }
}

/// One 64-bit store of `value` at `register`: `str x, [x]`.
///
/// # Safety
/// `register` is an aligned, mapped, writable 64-bit location.
#[cfg(target_arch = "aarch64")]
unsafe fn store64(register: *mut u64, value: u64) {
    // SAFETY: the caller's promise; the instruction touches nothing else.
    unsafe {
        core::arch::asm!(
            "str {value}, [{register}]",
            value = in(reg) value,
            register = in(reg) register,
            options(nostack, preserves_flags)
        )
    }
}

/// One 64-bit load from `register`: `ldr x, [x]`.
///
/// # Safety
/// `register` is an aligned, mapped, readable 64-bit location.
#[cfg(target_arch = "aarch64")]
unsafe fn load64(register: *mut u64) -> u64 {
    let value: u64;
    // SAFETY: the caller's promise; the instruction touches nothing else.
    unsafe {
        core::arch::asm!(
            "ldr {value}, [{register}]",
            value = out(reg) value,
            register = in(reg) register,
            options(nostack, preserves_flags, readonly)
        )
    };
    value
}

/// A volatile 64-bit store (another architecture's build, for the host's checks: Keel's window
/// exists only on aarch64, and without its device tree node `keel` maps nothing).
///
/// # Safety
/// As the aarch64 one.
#[cfg(not(target_arch = "aarch64"))]
unsafe fn store64(register: *mut u64, value: u64) {
    // SAFETY: the caller's promise.
    unsafe { register.write_volatile(value) }
}

/// A volatile 64-bit load (see [`store64`]).
///
/// # Safety
/// As the aarch64 one.
#[cfg(not(target_arch = "aarch64"))]
unsafe fn load64(register: *mut u64) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { register.read_volatile() }
}

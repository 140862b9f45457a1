//! CPU-level operations: identity, barriers, waiting, cache maintenance.

use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::mem::MaybeUninit;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU8, Ordering};

use keel_core::ticket::TicketLock;

use super::regs::read_sysreg;

/// This pCPU's MPIDR affinity fields (Aff3..Aff0).
pub fn mpidr() -> u64 {
    read_sysreg!("mpidr_el1") & 0xff_00ff_ffff
}

/// The pCPU index Keel gave this CPU at boot (kept in TPIDR_EL2), below
/// [`MAX_CPUS`](super::boot::MAX_CPUS): the boot code gives no higher one, and the value is
/// taken modulo that power of two, so that every per-pCPU table indexed by it needs no bounds
/// check (one `and` instead of a comparison and a panic branch on every trap path).
#[inline(always)]
pub fn index() -> usize {
    let value: u64;
    // SAFETY: reading TPIDR_EL2 has no side effect. The boot code sets it to the pCPU's index
    // before any Rust code runs (keel_primary_entry, keel_secondary_entry) and nothing
    // changes it after, so the read is `pure`: the compiler may reuse one read for several
    // calls, as it does on the trap paths.
    unsafe {
        core::arch::asm!("mrs {}, tpidr_el2", out(reg) value, options(pure, nomem, nostack, preserves_flags));
    }
    value as usize % super::boot::MAX_CPUS
}

const _: () = assert!(
    super::boot::MAX_CPUS.is_power_of_two(),
    "cpu::index takes TPIDR_EL2 modulo MAX_CPUS with a mask"
);

/// `table[index]` for a per-pCPU, per-VM or per-vCPU table (`vm::entry` is this one): an
/// index out of range (a bug) panics in the one place the core's tables share
/// ([`keel_core::table::at`]), where `table[index]` would give each inlined use its own panic
/// call and location in the image.
#[inline(always)]
pub fn entry<T>(table: &[T], index: usize) -> &T {
    keel_core::table::at(table, index)
}

/// This pCPU's entry of a per-pCPU table (see [`entry`]).
#[inline(always)]
pub fn this<T>(table: &'static [T]) -> &'static T {
    entry(table, index())
}

/// Waits for an interrupt (or any other wake-up event).
pub fn wait_for_interrupt() {
    // SAFETY: WFI only suspends execution until a wake-up event.
    unsafe { core::arch::asm!("wfi", options(nomem, nostack, preserves_flags)) };
}

/// Masks IRQs at EL2.
pub fn disable_irqs() {
    // SAFETY: masking interrupts has no memory effects.
    unsafe { core::arch::asm!("msr daifset, #2", options(nomem, nostack)) };
}

/// Instruction synchronization barrier.
pub fn isb() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("isb", options(nostack, preserves_flags)) };
}

/// Data memory barrier, inner shareable: the memory accesses before it are observed by the
/// other CPUs before those after it.
pub fn dmb_ish() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("dmb ish", options(nostack, preserves_flags)) };
}

/// Data synchronization barrier, full system.
pub fn dsb_sy() {
    // SAFETY: a barrier has no effect but ordering.
    unsafe { core::arch::asm!("dsb sy", options(nostack, preserves_flags)) };
}

/// Copies `source` into `destination` (of the same length) in wide moves whatever either's
/// alignment: at least 16 bytes, the last 16 first, then 16-byte load/store pairs from the
/// start up to them (the last pair overlaps them unless the length is a multiple of 16); 8 to
/// 15 bytes, the first 8 and the last 8; 4 to 7, the first 4 and the last 4; 1 to 3 bytes one
/// at a time (`keel_core::ipc`'s tests check the plan, and the queues with it). Keel allows unaligned accesses to normal memory (SCTLR_EL2.A = 0) but its Rust
/// target assumes strict alignment, so `copy_from_slice` copies a misaligned slice byte by
/// byte (~3 instructions a byte), as it would the guest images, which are embedded at byte
/// alignment, and the 8-byte headers of the message queues. The two slices never overlap
/// (one is borrowed mutably), so a byte moved twice gets the same value.
#[inline]
pub fn copy_bytes(destination: &mut [u8], source: &[u8]) {
    assert!(
        destination.len() == source.len(),
        "copy_bytes: lengths differ"
    );
    let len = source.len();
    let from = source.as_ptr();
    let to = destination.as_mut_ptr();
    if len >= 16 {
        // SAFETY: reads `[from, from + len)` and writes `[to, to + len)`, both inside their
        // slices: the last 16 bytes at `len - 16` (len >= 16), then (len - 1) / 16 blocks of 16
        // from offset 0, which end at or before `len`. Both are normal memory, where unaligned
        // LDP/STP are allowed.
        unsafe {
            core::arch::asm!(
                "add {end_from}, {from}, {len}",
                "add {end_to}, {to}, {len}",
                "ldp {a}, {b}, [{end_from}, #-16]",
                "stp {a}, {b}, [{end_to}, #-16]",
                "sub {len}, {len}, #1",
                "lsr {len}, {len}, #4",
                "cbz {len}, 2f",
                "1: ldp {a}, {b}, [{from}], #16",
                "stp {a}, {b}, [{to}], #16",
                "subs {len}, {len}, #1",
                "b.ne 1b",
                "2:",
                from = inout(reg) from => _,
                to = inout(reg) to => _,
                len = inout(reg) len => _,
                end_from = out(reg) _,
                end_to = out(reg) _,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        };
    } else if len >= 8 {
        // SAFETY: reads 8 bytes at offsets 0 and `len - 8` of `source` and writes them at the
        // same offsets of `destination` (8 <= len < 16: both inside the slices); normal memory,
        // where unaligned LDR/STR are allowed.
        unsafe {
            core::arch::asm!(
                "ldr {a}, [{from}]",
                "ldr {b}, [{from}, {last}]",
                "str {a}, [{to}]",
                "str {b}, [{to}, {last}]",
                from = in(reg) from,
                to = in(reg) to,
                last = in(reg) len - 8,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        };
    } else if len >= 4 {
        // SAFETY: as above, 4 bytes at offsets 0 and `len - 4` (4 <= len < 8).
        unsafe {
            core::arch::asm!(
                "ldr {a:w}, [{from}]",
                "ldr {b:w}, [{from}, {last}]",
                "str {a:w}, [{to}]",
                "str {b:w}, [{to}, {last}]",
                from = in(reg) from,
                to = in(reg) to,
                last = in(reg) len - 4,
                a = out(reg) _,
                b = out(reg) _,
                options(nostack, preserves_flags),
            )
        };
    } else if len > 0 {
        // Bytes 0, len / 2 and len - 1: every byte of 1 to 3, with no loop (which the compiler
        // would make a call to `memcpy`).
        destination[0] = source[0];
        destination[len / 2] = source[len / 2];
        destination[len - 1] = source[len - 1];
    }
}

/// Cleans and invalidates one data cache line by set/way (`DC CISW`; `set_way` as the
/// instruction's operand: level in bits 3:1, set and way above). Keel performs a guest's trapped
/// set/way operations this way: set/way operations act on this pCPU's caches, and a clean
/// before the invalidate never discards data written by anyone else.
pub fn clean_invalidate_set_way(set_way: u64) {
    // SAFETY: cleaning before invalidating writes dirty data back first, so memory contents
    // are unchanged whatever line the operand names.
    unsafe { core::arch::asm!("dc cisw, {}", in(reg) set_way, options(nostack, preserves_flags)) };
}

/// Cleans `[start, start + len)` from the data cache to the point of coherency and
/// invalidates the instruction cache, so a guest starting with its MMU and caches off
/// sees what Keel copied.
pub fn clean_to_poc(start: usize, len: usize) {
    let line = 4usize << ((read_sysreg!("ctr_el0") >> 16) & 0xf);
    let mut address = start & !(line - 1);
    while address < start + len {
        // SAFETY: DC CVAC on an address Keel maps only cleans a cache line; memory is unchanged.
        unsafe {
            core::arch::asm!("dc cvac, {}", in(reg) address, options(nostack, preserves_flags))
        };
        address += line;
    }
    dsb_sy();
    // SAFETY: invalidating the instruction cache has no architectural effect on data.
    unsafe {
        core::arch::asm!(
            "ic iallu",
            "dsb sy",
            "isb",
            options(nostack, preserves_flags)
        )
    };
}

/// Parks this CPU for good.
pub fn halt() -> ! {
    disable_irqs();
    loop {
        wait_for_interrupt();
    }
}

core::arch::global_asm!(
    r#"
// Zeroes V0-V31, FPCR and FPSR. Keel is built soft-float and never uses these registers, so
// the instructions are enabled for this function alone.
    .pushsection .text.keel_zero_fp_simd, "ax"
    .balign 4
    .arch_extension fp
    .arch_extension simd
    .global keel_zero_fp_simd
keel_zero_fp_simd:
    movi    v0.2d, #0
    movi    v1.2d, #0
    movi    v2.2d, #0
    movi    v3.2d, #0
    movi    v4.2d, #0
    movi    v5.2d, #0
    movi    v6.2d, #0
    movi    v7.2d, #0
    movi    v8.2d, #0
    movi    v9.2d, #0
    movi    v10.2d, #0
    movi    v11.2d, #0
    movi    v12.2d, #0
    movi    v13.2d, #0
    movi    v14.2d, #0
    movi    v15.2d, #0
    movi    v16.2d, #0
    movi    v17.2d, #0
    movi    v18.2d, #0
    movi    v19.2d, #0
    movi    v20.2d, #0
    movi    v21.2d, #0
    movi    v22.2d, #0
    movi    v23.2d, #0
    movi    v24.2d, #0
    movi    v25.2d, #0
    movi    v26.2d, #0
    movi    v27.2d, #0
    movi    v28.2d, #0
    movi    v29.2d, #0
    movi    v30.2d, #0
    movi    v31.2d, #0
    msr     fpcr, xzr
    msr     fpsr, xzr
    ret
    .arch_extension nosimd
    .arch_extension nofp
    .popsection
"#
);

unsafe extern "C" {
    fn keel_zero_fp_simd();
}

/// Zeroes the FP/SIMD registers (V0-V31, FPCR, FPSR), part of a vCPU's entry state. Needs
/// FP/SIMD untrapped at EL2 (CPTR_EL2.TFP = 0, as [`super::guest::prepare`] leaves it).
pub fn zero_fp_simd() {
    // SAFETY: the function only writes FP/SIMD registers, which Keel never uses and which
    // belong to the vCPU about to start on this pCPU; it follows the C calling convention.
    unsafe { keel_zero_fp_simd() }
}

/// Zeroes `len` bytes at `to` (`len` a multiple of 8), sixteen bytes per store: a vCPU's
/// start clears its frame and registers this way with interrupts masked (`memset` at
/// opt-level "s" took 117 instructions for a 256-byte frame; this takes 50).
///
/// # Safety
/// `[to, to + len)` must be valid for writes, 8-byte aligned, and all-zero bytes a valid
/// value of whatever lives there.
#[inline(always)]
pub unsafe fn zero_bytes(to: *mut u8, len: usize) {
    debug_assert!(len.is_multiple_of(8) && (to as usize).is_multiple_of(8));
    // SAFETY: the caller's contract; only `[to, to + len)` is written.
    unsafe {
        core::arch::asm!(
            "tbz {n}, #3, 2f",
            "str xzr, [{p}], #8",
            "2:",
            "bics {n}, {n}, #15",
            "b.eq 4f",
            "3:",
            "stp xzr, xzr, [{p}], #16",
            "subs {n}, {n}, #16",
            "b.ne 3b",
            "4:",
            p = inout(reg) to => _,
            n = inout(reg) len => _,
            options(nostack),
        );
    }
}

/// How Keel's spin locks wait: `yield`, the architecture's spin-wait hint (Linux's
/// `cpu_relax()` on arm64). Under QEMU's single-threaded round-robin emulation it also ends the
/// waiting CPU's turn, so the lock holder runs instead of the waiter spinning out a whole time
/// slice (100 ms of virtual time).
pub struct YieldRelax;

impl spin::RelaxStrategy for YieldRelax {
    #[inline(always)]
    fn relax() {
        // SAFETY: `yield` has no architectural effect.
        unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
    }
}

/// One step of a wait loop for another pCPU ([`YieldRelax`]'s `yield`).
pub fn spin_wait() {
    <YieldRelax as spin::RelaxStrategy>::relax();
}

/// Keel's lock: a fair spin lock, a ticket lock ([`TicketLock`]: its counters and their host
/// tests are in the core). A pCPU takes the next ticket and waits with `yield`
/// ([`YieldRelax`]) until it is served; tickets are served in the order they were taken, so a
/// waiter waits for at most one hold of each other pCPU ahead of it, where a test-and-set lock
/// let a pCPU lose every race for as long as the others kept coming back. Its lock is the
/// ticket's add and that loop, a few instructions at each of the dozens of places it is
/// inlined; its unlock a load, an add and a release store. What each lock guards, its longest
/// hold and the order locks are taken in: the crate's [lock order](crate#lock-order).
pub struct Mutex<T: ?Sized> {
    ticket: TicketLock,
    data: UnsafeCell<T>,
}

// SAFETY: the lock lets one holder at a time reach the data, which may move to another pCPU
// with it (as `spin::mutex::SpinMutex`).
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}

impl<T> Mutex<T> {
    /// A free lock holding `data` (its counters all zero bytes).
    pub const fn new(data: T) -> Self {
        Self {
            ticket: TicketLock::new(),
            data: UnsafeCell::new(data),
        }
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Takes the lock, waiting (in ticket order) while others hold it or wait ahead.
    #[inline(always)]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.ticket.lock(spin_wait);
        MutexGuard {
            lock: self,
            _data: PhantomData,
        }
    }

    /// [`lock`](Self::lock) for code off the hot paths (boot, Keel's own lines, console
    /// input, a vCPU's start, a VM's reset): the ticket's add and wait are one copy out of
    /// line for all of them, where `lock` inlines them at each place. The call costs a few
    /// instructions, and the caller's registers.
    #[inline(always)]
    pub fn lock_cold(&self) -> MutexGuard<'_, T> {
        acquire(&self.ticket);
        MutexGuard {
            lock: self,
            _data: PhantomData,
        }
    }

    /// Takes the lock if it is free (no one holds it or waits for it).
    #[inline(always)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        self.ticket.try_lock().then_some(MutexGuard {
            lock: self,
            _data: PhantomData,
        })
    }
}

/// Takes a [`Mutex`]'s ticket and waits with `yield` until it is served
/// ([`Mutex::lock_cold`]).
#[inline(never)]
fn acquire(ticket: &TicketLock) {
    ticket.lock(spin_wait);
}

/// What locking a [`Mutex`] gives: its data, until dropped.
pub struct MutexGuard<'a, T: ?Sized> {
    lock: &'a Mutex<T>,
    /// Sendable and shareable as `&mut T` is.
    _data: PhantomData<&'a mut T>,
}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the guard holds the lock: no one else reaches the data until it is dropped.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`; `&mut self` makes this the only reference through the guard.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        // The guard is the holder: it serves the next ticket, once.
        self.lock.ticket.unlock();
    }
}

/// A value set once, then only read: the board's facts, each pCPU's redistributor. As
/// `spin::Once` (`call_once`, `get`) without poisoning, which a Keel built with `panic =
/// "abort"` never sees: about 400 bytes of the image less for its two uses. All zero bytes
/// until set.
pub struct Once<T> {
    /// [`Once::EMPTY`], [`Once::WRITING`] or [`Once::READY`].
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<T>>,
}

// SAFETY: the value is written once, by the one caller that moved `state` from EMPTY to
// WRITING, and only read (shared) after `state` says READY, with Release/Acquire ordering
// between the two; it may be made on one pCPU and read on another, as with `spin::Once`.
unsafe impl<T: Send + Sync> Sync for Once<T> {}

impl<T> Once<T> {
    const EMPTY: u8 = 0;
    const WRITING: u8 = 1;
    const READY: u8 = 2;

    /// No value yet.
    pub const fn new() -> Self {
        Self {
            state: AtomicU8::new(Self::EMPTY),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The value, made by `make` if there is none yet (another caller making it meanwhile is
    /// waited for, and its value kept).
    pub fn call_once(&self, make: impl FnOnce() -> T) -> &T {
        if self
            .state
            .compare_exchange(
                Self::EMPTY,
                Self::WRITING,
                Ordering::Acquire,
                Ordering::Acquire,
            )
            .is_ok()
        {
            // SAFETY: this caller moved `state` to WRITING: no one else writes the value, and
            // no one reads it before READY.
            unsafe { (*self.value.get()).write(make()) };
            self.state.store(Self::READY, Ordering::Release);
        } else {
            while self.state.load(Ordering::Acquire) != Self::READY {
                spin_wait();
            }
        }
        // SAFETY: `state` is READY (set or seen above): the value is written, and never again.
        unsafe { (*self.value.get()).assume_init_ref() }
    }

    /// The value, if it has been set.
    #[inline(always)]
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == Self::READY {
            // SAFETY: as at the end of `call_once`.
            Some(unsafe { (*self.value.get()).assume_init_ref() })
        } else {
            None
        }
    }
}

//! The EL2 exception vector tables (Arm ARM D1.3.1) and guest entry/exit.
//!
//! A trap from a guest saves x0-x30 in a [`GuestRegs`] frame just below the stack pointer it
//! entered with, calls the Rust handler with it, restores a frame and returns with `eret`.
//! A pinned pCPU ([`install`]) enters its guest with its stack empty, so its one frame is
//! always at the top of its stack, and the handler's return restores that frame. A shared
//! pCPU ([`install_shared`]) enters each vCPU on a stack of the vCPU's own whose top 256
//! bytes are its registers while it is switched out ([`resume_guest`]): the trap saves them
//! in place, and its return restores the frame of the vCPU loaded by then
//! ([`set_return_frame`]), the same one or the one switched in meanwhile, so that a switch
//! moves no general register.

use core::sync::atomic::{AtomicPtr, Ordering};

use super::boot::MAX_CPUS;
use super::regs::{read_sysreg, write_sysreg};

/// A vCPU's general-purpose registers as saved on a trap.
#[repr(C)]
#[derive(Clone, Debug, Default)]
pub struct GuestRegs {
    /// x0 to x30.
    pub x: [u64; 31],
    padding: u64,
}

const _: () = assert!(
    core::mem::size_of::<GuestRegs>() == 256,
    "the asm frame is 256 bytes"
);

impl GuestRegs {
    /// All zero.
    pub const ZERO: Self = Self {
        x: [0; 31],
        padding: 0,
    };

    /// Sets every register to zero (a vCPU's start).
    #[inline(always)]
    pub fn zero(&mut self) {
        // SAFETY: `self` is 256 writable, 8-byte aligned bytes of plain integers.
        unsafe { super::cpu::zero_bytes((self as *mut Self).cast(), core::mem::size_of::<Self>()) }
    }

    /// Reads register `n` as an instruction's Rt/Rn field names it (31 is xzr).
    pub fn get(&self, n: u8) -> u64 {
        self.x.get(n as usize).copied().unwrap_or(0)
    }

    /// Writes register `n` (writes to xzr are discarded).
    pub fn set(&mut self, n: u8, value: u64) {
        if let Some(slot) = self.x.get_mut(n as usize) {
            *slot = value;
        }
    }
}

core::arch::global_asm!(
    r#"
.macro SAVE_GUEST
    sub     sp, sp, #256
    stp     x0, x1, [sp, #16 * 0]
    stp     x2, x3, [sp, #16 * 1]
    stp     x4, x5, [sp, #16 * 2]
    stp     x6, x7, [sp, #16 * 3]
    stp     x8, x9, [sp, #16 * 4]
    stp     x10, x11, [sp, #16 * 5]
    stp     x12, x13, [sp, #16 * 6]
    stp     x14, x15, [sp, #16 * 7]
    stp     x16, x17, [sp, #16 * 8]
    stp     x18, x19, [sp, #16 * 9]
    stp     x20, x21, [sp, #16 * 10]
    stp     x22, x23, [sp, #16 * 11]
    stp     x24, x25, [sp, #16 * 12]
    stp     x26, x27, [sp, #16 * 13]
    stp     x28, x29, [sp, #16 * 14]
    str     x30, [sp, #16 * 15]
.endm

.macro RESTORE_GUEST
    ldp     x0, x1, [sp, #16 * 0]
    ldp     x2, x3, [sp, #16 * 1]
    ldp     x4, x5, [sp, #16 * 2]
    ldp     x6, x7, [sp, #16 * 3]
    ldp     x8, x9, [sp, #16 * 4]
    ldp     x10, x11, [sp, #16 * 5]
    ldp     x12, x13, [sp, #16 * 6]
    ldp     x14, x15, [sp, #16 * 7]
    ldp     x16, x17, [sp, #16 * 8]
    ldp     x18, x19, [sp, #16 * 9]
    ldp     x20, x21, [sp, #16 * 10]
    ldp     x22, x23, [sp, #16 * 11]
    ldp     x24, x25, [sp, #16 * 12]
    ldp     x26, x27, [sp, #16 * 13]
    ldp     x28, x29, [sp, #16 * 14]
    ldr     x30, [sp, #16 * 15]
    add     sp, sp, #256
    eret
.endm

// The 16 entries of a table whose guest entries call `sync`, `irq` and `serror` and return
// through `ret`.
.macro VECTORS sync, irq, serror, ret
    // Current EL with SP_EL0: never used by Keel.
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    // Current EL with SP_ELx: Keel itself.
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_irq_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    // Lower EL, AArch64: the guests.
    .balign 0x80
    SAVE_GUEST
    mov     x0, sp
    bl      \sync
    b       \ret
    .balign 0x80
    SAVE_GUEST
    mov     x0, sp
    bl      \irq
    b       \ret
    .balign 0x80
    SAVE_GUEST
    mov     x0, sp
    bl      \irq
    b       \ret
    .balign 0x80
    SAVE_GUEST
    mov     x0, sp
    bl      \serror
    b       \ret
    // Lower EL, AArch32: Keel runs no AArch32 guest (HCR_EL2.RW = 1).
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
    .balign 0x80
    b       keel_hyp_fault_entry
.endm

// Placed before the tables, in the padding up to their 2 KiB alignment rather than after them.
    .pushsection .text.keel_before_vectors, "ax"
    .balign 4
// A pinned pCPU's return: through the frame at the top of its stack.
    .global keel_return_to_guest
keel_return_to_guest:
    RESTORE_GUEST

// A shared pCPU's return: through the frame KEEL_RETURN_FRAMES names for this pCPU (TPIDR_EL2
// holds its index, below MAX_CPUS).
keel_return_to_frame:
    mrs     x0, tpidr_el2
    adrp    x1, KEEL_RETURN_FRAMES
    add     x1, x1, :lo12:KEEL_RETURN_FRAMES
    ldr     x0, [x1, x0, lsl #3]
    mov     sp, x0
    RESTORE_GUEST

// An interrupt while Keel itself runs (an idle pCPU waiting in WFI).
keel_hyp_irq_entry:
    sub     sp, sp, #192
    stp     x0, x1, [sp, #16 * 0]
    stp     x2, x3, [sp, #16 * 1]
    stp     x4, x5, [sp, #16 * 2]
    stp     x6, x7, [sp, #16 * 3]
    stp     x8, x9, [sp, #16 * 4]
    stp     x10, x11, [sp, #16 * 5]
    stp     x12, x13, [sp, #16 * 6]
    stp     x14, x15, [sp, #16 * 7]
    stp     x16, x17, [sp, #16 * 8]
    stp     x18, x29, [sp, #16 * 9]
    mrs     x0, elr_el2
    mrs     x1, spsr_el2
    stp     x0, x1, [sp, #16 * 10]
    str     x30, [sp, #16 * 11]
    bl      keel_hyp_irq
    ldp     x0, x1, [sp, #16 * 10]
    msr     elr_el2, x0
    msr     spsr_el2, x1
    ldp     x0, x1, [sp, #16 * 0]
    ldp     x2, x3, [sp, #16 * 1]
    ldp     x4, x5, [sp, #16 * 2]
    ldp     x6, x7, [sp, #16 * 3]
    ldp     x8, x9, [sp, #16 * 4]
    ldp     x10, x11, [sp, #16 * 5]
    ldp     x12, x13, [sp, #16 * 6]
    ldp     x14, x15, [sp, #16 * 7]
    ldp     x16, x17, [sp, #16 * 8]
    ldp     x18, x29, [sp, #16 * 9]
    ldr     x30, [sp, #16 * 11]
    add     sp, sp, #192
    eret
    .popsection

    .section .text.vectors, "ax"
    .balign 2048
    .global keel_vectors
keel_vectors:
    VECTORS keel_guest_sync, keel_guest_irq, keel_guest_serror, keel_return_to_guest

// Code in the 124 bytes the table's last entry (AArch32, never taken: a branch to the fault
// report) leaves free, rather than in padding; the `.org` below fails to assemble if it
// outgrows them.
keel_hyp_fault_entry:
    bl      keel_hyp_fault
    b       .

// x0 = registers to load, x1 = top of this pCPU's stack. Does not return. The registers are
// loaded straight from x0's frame: nothing is written to memory on the way, so a frame that
// lies anywhere on the old stack (including below the new top) cannot be overwritten before
// it is read.
    .global keel_enter_guest
keel_enter_guest:
    mov     sp, x1
    ldp     x2, x3, [x0, #16 * 1]
    ldp     x4, x5, [x0, #16 * 2]
    ldp     x6, x7, [x0, #16 * 3]
    ldp     x8, x9, [x0, #16 * 4]
    ldp     x10, x11, [x0, #16 * 5]
    ldp     x12, x13, [x0, #16 * 6]
    ldp     x14, x15, [x0, #16 * 7]
    ldp     x16, x17, [x0, #16 * 8]
    ldp     x18, x19, [x0, #16 * 9]
    ldp     x20, x21, [x0, #16 * 10]
    ldp     x22, x23, [x0, #16 * 11]
    ldp     x24, x25, [x0, #16 * 12]
    ldp     x26, x27, [x0, #16 * 13]
    ldp     x28, x29, [x0, #16 * 14]
    ldr     x30, [x0, #16 * 15]
    ldp     x0, x1, [x0, #16 * 0]
    eret
    .org    keel_vectors + 0x800
    .global keel_shared_vectors
keel_shared_vectors:
    VECTORS keel_guest_sync, keel_guest_irq, keel_guest_serror, keel_return_to_frame

"#
);

unsafe extern "C" {
    static keel_vectors: u8;
    static keel_shared_vectors: u8;
    fn keel_enter_guest(regs: *const GuestRegs, stack_top: u64) -> !;
}

/// Installs Keel's vector table on this pCPU (a pinned one's, until [`install_shared`]).
pub fn install() {
    // SAFETY: `keel_vectors` is the 2 KiB-aligned table above; its handlers are Keel's own.
    unsafe {
        write_sysreg!("vbar_el2", core::ptr::addr_of!(keel_vectors) as u64);
    }
    super::cpu::isb();
}

/// The frame each shared pCPU's traps return through (see the module's description): the
/// loaded vCPU's, set by [`set_return_frame`] as it is loaded. Read by `keel_return_to_frame`.
#[unsafe(no_mangle)]
static KEEL_RETURN_FRAMES: [AtomicPtr<GuestRegs>; MAX_CPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_CPUS];

/// Makes this pCPU's traps return through `frame` (a shared pCPU's: the frame of the vCPU just
/// loaded, at the top of its stack), from the trap being handled on.
#[inline(always)]
pub fn set_return_frame(frame: *mut GuestRegs) {
    KEEL_RETURN_FRAMES[super::cpu::index()].store(frame, Ordering::Relaxed);
}

/// Installs the table of a shared pCPU, whose traps return through the frame of the vCPU
/// loaded by then ([`set_return_frame`]), before any vCPU runs on it.
pub fn install_shared() {
    // SAFETY: `keel_shared_vectors` is the 2 KiB-aligned table above; its handlers are Keel's
    // own, and each returns a frame the scheduler loaded.
    unsafe {
        write_sysreg!("vbar_el2", core::ptr::addr_of!(keel_shared_vectors) as u64);
    }
    super::cpu::isb();
}

/// Enters the guest at `pc` (EL1h, interrupts masked) with the given registers, on a fresh
/// stack. The stage-2 tables, HCR_EL2 and the guest's EL1 state must be set up. `last` runs
/// once the guest's return state is written (ELR_EL2 holds `pc`), the last thing before the
/// registers are loaded: the caller ends its interrupts-masked stretch there. It must leave
/// ELR_EL2 and SPSR_EL2 as they are (and so take no exception: interrupts stay masked).
/// Always inlined, so that `last`, a constant at each call, is a direct call inlined in turn.
#[inline(always)]
pub fn enter_guest(regs: &GuestRegs, pc: u64, stack_top: u64, last: fn()) -> ! {
    // SAFETY: ELR/SPSR describe an EL1h entry into the current VM, whose memory and traps are
    // set up; nothing between here and the eret below writes them (`last` may not).
    unsafe {
        write_sysreg!("elr_el2", pc);
        write_sysreg!("spsr_el2", super::regs::SPSR_EL1H_MASKED);
    }
    last();
    // SAFETY: ELR/SPSR were written above for this entry; keel_enter_guest copies `regs`
    // before discarding this stack.
    unsafe { keel_enter_guest(regs, stack_top) }
}

/// Enters the guest at `pc` with PSTATE `pstate` and the registers in `regs`, with its stack
/// pointer at `stack_top`: a vCPU resuming on a shared pCPU where it was switched out, whose
/// frame is the top 256 bytes of its own stack (`stack_top` is just above them). Its context
/// must be loaded. `last` runs as for [`enter_guest`], with the same duty.
#[inline(always)]
pub fn resume_guest(regs: &GuestRegs, pc: u64, pstate: u64, stack_top: u64, last: fn()) -> ! {
    // SAFETY: ELR/SPSR are the values saved when the vCPU left (or its entry state), at EL1 or
    // EL0 of its own VM, whose stage 2, traps and EL1 state are loaded; nothing between here
    // and the eret below writes them (`last` may not).
    unsafe {
        write_sysreg!("elr_el2", pc);
        write_sysreg!("spsr_el2", pstate);
    }
    last();
    // SAFETY: ELR/SPSR were written above for this resumption; keel_enter_guest loads `regs`
    // before anything is written to the new stack.
    unsafe { keel_enter_guest(regs, stack_top) }
}

/// Makes the trap being handled return to `pc` with PSTATE `pstate` (ELR_EL2, SPSR_EL2): a
/// vCPU switched in on this trap's frame, its context loaded.
#[inline(always)]
pub fn set_return(pc: u64, pstate: u64) {
    // SAFETY: the values saved when the vCPU left (or its entry state), at EL1 or EL0 of its
    // own VM, whose stage 2, traps and EL1 state the caller loaded; the trap's return erets
    // to them.
    unsafe {
        write_sysreg!("elr_el2", pc);
        write_sysreg!("spsr_el2", pstate);
    }
}

/// The guest's return address (ELR_EL2).
pub fn guest_pc() -> u64 {
    read_sysreg!("elr_el2")
}

/// Puts the guest back on the HVC it trapped with (ELR_EL2 is the instruction after it), so
/// that it makes the call again when it resumes.
pub fn repeat_call() {
    // SAFETY: moves the guest's own return address back by the one instruction it executed.
    unsafe { write_sysreg!("elr_el2", guest_pc() - 4) };
}

/// Moves the guest past the trapped instruction (all trapped AArch64 instructions are 4 bytes).
pub fn skip_instruction() {
    // SAFETY: advances the guest's own return address within its address space.
    unsafe { write_sysreg!("elr_el2", guest_pc() + 4) };
}

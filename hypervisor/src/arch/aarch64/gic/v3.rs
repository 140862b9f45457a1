//! The physical GICv3 (IHI 0069H): distributor, this pCPU's redistributor and CPU interface,
//! and the virtual CPU interface control registers (ICH_*, chapter 12.4) used for guests.
//!
//! Keel runs the CPU interface with `ICC_CTLR_EL1.EOImode = 1`: writing EOIR only drops the
//! priority, and the interrupt stays active until deactivated, by Keel (ICC_DIR_EL1) or,
//! for interrupts forwarded with a hardware-linked list register, by the guest's own EOI.

use super::super::mmio::Mmio;
use super::super::regs::{read_sysreg, write_sysreg};
use super::{list_register_is_pending, spi_bit, Regions};

const GICD_CTLR: usize = 0x0000;
const GICD_IGROUPR: usize = 0x0080;
const GICD_ISENABLER: usize = 0x0100;
/// Clear-active registers (GICD_ICACTIVER<n>; GICR_ICACTIVER0 at the same offset of the SGI frame).
const GICD_ICACTIVER: usize = 0x0380;
/// Set-active registers (GICD_ISACTIVER<n>; GICR_ISACTIVER0 in the SGI frame).
const GICD_ISACTIVER: usize = 0x0300;
const GICD_ICENABLER: usize = 0x0180;
const GICD_ICPENDR: usize = 0x0280;
const GICD_IPRIORITYR: usize = 0x0400;
/// Interrupt configuration: two bits per interrupt, the upper one set for edge-triggered.
const GICD_ICFGR: usize = 0x0c00;
const GICD_IROUTER: usize = 0x6000;
const CTLR_ENABLE_GRP1: u32 = 1 << 1;
const CTLR_ARE: u32 = 1 << 4;
const CTLR_RWP: u32 = 1 << 31;

const GICR_TYPER: usize = 0x0008;
const GICR_WAKER: usize = 0x0014;
const GICR_STRIDE: usize = 0x2_0000;
const SGI_FRAME: usize = 0x1_0000;
const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
const TYPER_LAST: u64 = 1 << 4;

/// Priority Keel gives every interrupt it uses.
const PRIORITY: u8 = 0x80;
/// First id that is not a real interrupt (1020-1023 are special).
pub const SPECIAL_INTID: u32 = 1020;

/// The physical distributor.
#[derive(Clone, Copy, Debug)]
pub struct Distributor {
    regs: Mmio,
}

impl Distributor {
    /// The distributor at `base` (from the DTB).
    ///
    /// # Safety
    /// `base` must be the GICv3 distributor, mapped as device memory.
    pub const unsafe fn new(base: u64) -> Self {
        // SAFETY: forwarded from this function's contract.
        let regs = unsafe { Mmio::new(base) };
        Self { regs }
    }

    fn wait_rwp(&self) {
        while self.regs.read32(GICD_CTLR) & CTLR_RWP != 0 {}
    }

    /// Enables affinity routing and group 1.
    pub(super) fn init(&self) {
        self.regs.write32(GICD_CTLR, 0);
        self.wait_rwp();
        self.regs.write32(GICD_CTLR, CTLR_ARE | CTLR_ENABLE_GRP1);
        self.wait_rwp();
    }

    /// Routes SPI `intid` to the pCPU with affinity `mpidr`, group 1, and enables it.
    pub fn enable_spi(&self, intid: u32, mpidr: u64) {
        self.prepare_spi(intid);
        self.route_spi(intid, mpidr);
        self.set_spi_enabled(intid, true);
    }

    /// Puts SPI `intid` in group 1 at Keel's priority.
    fn prepare_spi(&self, intid: u32) {
        let (word, bit) = spi_bit(intid);
        self.regs.write32(
            GICD_IGROUPR + word,
            self.regs.read32(GICD_IGROUPR + word) | bit,
        );
        let priority_word = GICD_IPRIORITYR + (intid as usize & !3);
        let shift = 8 * (intid % 4);
        let priorities = self.regs.read32(priority_word) & !(0xff << shift);
        self.regs
            .write32(priority_word, priorities | (u32::from(PRIORITY) << shift));
    }

    /// Puts SPI `intid`, forwarded to a guest, in its reset state: disabled, neither pending
    /// nor active (a guest stopped or reset with it active would otherwise leave the line
    /// dead), group 1 at Keel's priority, level-sensitive or edge-triggered as its device is
    /// (12.9.9 GICD_ICFGR<n>), routed to `mpidr`.
    pub fn reset_spi(&self, intid: u32, level: bool, mpidr: u64) {
        self.set_spi_enabled(intid, false);
        let (word, bit) = spi_bit(intid);
        self.regs.write32(GICD_ICPENDR + word, bit);
        self.regs.write32(GICD_ICACTIVER + word, bit);
        self.prepare_spi(intid);
        let config_word = GICD_ICFGR + (intid as usize / 16) * 4;
        let edge = 2 << (2 * (intid % 16));
        let config = self.regs.read32(config_word) & !edge;
        self.regs
            .write32(config_word, if level { config } else { config | edge });
        self.route_spi(intid, mpidr);
    }

    /// Routes SPI `intid` to the pCPU with affinity `mpidr` (12.9.22 GICD_IROUTER<n>).
    pub fn route_spi(&self, intid: u32, mpidr: u64) {
        self.regs.write64(GICD_IROUTER + 8 * intid as usize, mpidr);
    }

    /// Enables or disables SPI `intid`; a disable is complete on return (GICD_CTLR.RWP).
    pub fn set_spi_enabled(&self, intid: u32, enabled: bool) {
        let (word, bit) = spi_bit(intid);
        if enabled {
            self.regs.write32(GICD_ISENABLER + word, bit);
        } else {
            self.regs.write32(GICD_ICENABLER + word, bit);
            self.wait_rwp();
        }
    }

    /// Deactivates SPI `intid` (one Keel acknowledged and forwarded, whose guest is gone).
    pub fn deactivate_spi(&self, intid: u32) {
        let (word, bit) = spi_bit(intid);
        self.regs.write32(GICD_ICACTIVER + word, bit);
    }
}

/// This pCPU's redistributor.
#[derive(Clone, Copy, Debug)]
pub struct Redistributor {
    regs: Mmio,
    sgi: Mmio,
}

impl Redistributor {
    /// Finds the redistributor whose GICR_TYPER affinity matches `mpidr`, scanning the
    /// redistributor region of `regions`.
    ///
    /// # Safety
    /// `regions.redistributors` and its size must be the GICv3 redistributor region, mapped
    /// as device memory.
    pub unsafe fn find(regions: &Regions, mpidr: u64) -> Option<Self> {
        let (base, size) = (regions.redistributors, regions.redistributors_size);
        let affinity = ((mpidr >> 8) & 0xff00_0000) | (mpidr & 0x00ff_ffff);
        let mut offset = 0;
        while offset + GICR_STRIDE as u64 <= size {
            // SAFETY: inside the region per this function's contract.
            let regs = unsafe { Mmio::new(base + offset) };
            let typer = regs.read64(GICR_TYPER);
            if typer >> 32 == affinity {
                // SAFETY: the SGI frame follows the RD frame of the same redistributor.
                let sgi = unsafe { Mmio::new(base + offset + SGI_FRAME as u64) };
                return Some(Self { regs, sgi });
            }
            if typer & TYPER_LAST != 0 {
                break;
            }
            offset += GICR_STRIDE as u64;
        }
        None
    }

    /// Wakes the redistributor and puts all SGIs and PPIs in group 1, disabled.
    pub fn init(&self) {
        let waker = self.regs.read32(GICR_WAKER) & !WAKER_PROCESSOR_SLEEP;
        self.regs.write32(GICR_WAKER, waker);
        while self.regs.read32(GICR_WAKER) & WAKER_CHILDREN_ASLEEP != 0 {}
        self.sgi.write32(GICD_IGROUPR, 0xffff_ffff);
        self.sgi.write32(GICD_ISENABLER + 0x80, 0xffff_ffff);
    }

    /// Enables SGI or PPI `intid` on this pCPU.
    pub fn enable_private(&self, intid: u32) {
        let priority_word = GICD_IPRIORITYR + (intid as usize & !3);
        let shift = 8 * (intid % 4);
        let priorities = self.sgi.read32(priority_word) & !(0xff << shift);
        self.sgi
            .write32(priority_word, priorities | (u32::from(PRIORITY) << shift));
        self.sgi.write32(GICD_ISENABLER, 1 << intid);
    }

    /// Disables SGI or PPI `intid` on this pCPU.
    pub fn disable_private(&self, intid: u32) {
        self.sgi.write32(GICD_ISENABLER + 0x80, 1 << intid);
    }

    /// Clears the active state of SGI or PPI `intid` on this pCPU (GICR_ICACTIVER0, 12.11.7):
    /// for a hardware-linked interrupt whose list register was discarded before the guest's
    /// EOI could deactivate it, which would otherwise never be signalled again.
    pub fn clear_active_private(&self, intid: u32) {
        self.sgi.write32(GICD_ICACTIVER, 1 << intid);
    }

    /// Takes SGI or PPI `intid`'s active state off this pCPU: returns whether it was active,
    /// and clears it (GICR_ISACTIVER0/ICACTIVER0). A vCPU leaving a shared pCPU with its
    /// hardware-linked timer interrupt unfinished takes the state with it.
    pub fn take_active_private(&self, intid: u32) -> bool {
        let active = self.sgi.read32(GICD_ISACTIVER) & (1 << intid) != 0;
        if active {
            self.clear_active_private(intid);
        }
        active
    }

    /// Makes SGI or PPI `intid` active on this pCPU (GICR_ISACTIVER0): the state
    /// [`Redistributor::take_active_private`] took, given back when its vCPU returns.
    pub fn set_active_private(&self, intid: u32) {
        self.sgi.write32(GICD_ISACTIVER, 1 << intid);
    }
}

/// Sets up this pCPU's system-register CPU interface and the virtual interface (the GICv3's
/// are system registers: `_regions` has nothing for them).
pub fn init_cpu_interface(_regions: &Regions) {
    // SAFETY: configures this pCPU's own GIC CPU interface; Keel is its only user at EL2.
    unsafe {
        // ICC_SRE_EL2: SRE and Enable (lets EL1 use the system-register interface).
        write_sysreg!("icc_sre_el2", 0b1001u64);
        core::arch::asm!("isb", options(nostack));
        write_sysreg!("icc_pmr_el1", 0xffu64);
        write_sysreg!("icc_bpr1_el1", 0u64);
        write_sysreg!("icc_ctlr_el1", 1u64 << 1);
        write_sysreg!("icc_igrpen1_el1", 1u64);
        write_sysreg!("ich_vmcr_el2", 0u64);
        write_sysreg!("ich_hcr_el2", 1u64);
        core::arch::asm!("isb", options(nostack));
    }
    clear_list_registers();
}

/// Empties every list register: cold (boot, a vCPU's reset), one copy of [`write_lr`]'s
/// computed branch for both callers.
#[inline(never)]
fn clear_list_registers() {
    for lr in 0..list_registers() {
        write_lr(lr, 0);
    }
}

/// Acknowledges the highest-priority pending group-1 interrupt.
pub fn acknowledge() -> u32 {
    let intid: u64;
    // SAFETY: reading ICC_IAR1_EL1 acknowledges an interrupt; Keel handles what it returns.
    unsafe { core::arch::asm!("mrs {}, icc_iar1_el1", out(reg) intid, options(nomem, nostack)) };
    intid as u32
}

/// Drops the running priority of `intid` (EOImode 1: it stays active).
pub fn end_of_interrupt(intid: u32) {
    // SAFETY: `intid` was acknowledged by this pCPU.
    unsafe { write_sysreg!("icc_eoir1_el1", intid) };
}

/// Deactivates `intid`.
pub fn deactivate(intid: u32) {
    // SAFETY: `intid` was acknowledged and priority-dropped by this pCPU.
    unsafe { write_sysreg!("icc_dir_el1", intid) };
}

/// Sends SGI `intid` to the pCPU with affinity `mpidr` (ICC_SGI1R_EL1, 12.2.22).
pub fn send_sgi(intid: u32, mpidr: u64) {
    let aff0 = mpidr & 0xff;
    let value = (1u64 << (aff0 % 16))
        | (((mpidr >> 8) & 0xff) << 16)
        | (u64::from(intid & 0xf) << 24)
        | (((mpidr >> 16) & 0xff) << 32)
        | ((aff0 / 16) << 44)
        | (((mpidr >> 32) & 0xff) << 48);
    // SAFETY: sends a software-generated interrupt; no memory is touched.
    unsafe {
        core::arch::asm!("dsb ishst", options(nostack));
        write_sysreg!("icc_sgi1r_el1", value);
        core::arch::asm!("isb", options(nostack));
    }
}

/// Number of list registers (ICH_VTR_EL2.ListRegs + 1).
pub fn list_registers() -> usize {
    ((read_sysreg!("ich_vtr_el2") & 0x1f) + 1) as usize
}

/// Whether any list register holds a virtual interrupt (ICH_ELRSR_EL2 has a clear bit).
pub fn any_interrupt_listed() -> bool {
    let implemented = (1u64 << list_registers()) - 1;
    read_sysreg!("ich_elrsr_el2") & implemented != implemented
}

/// Whether list register `lr` is empty in ICH_ELRSR_EL2 (12.4.5): state invalid, and either
/// hardware-linked or without an EOI maintenance request. False for a register beyond 15.
#[inline(always)]
pub fn list_register_is_empty(lr: usize) -> bool {
    lr < 16 && read_sysreg!("ich_elrsr_el2") >> lr & 1 != 0
}

/// Whether any list register holds a virtual interrupt in the pending state.
pub fn any_interrupt_pending() -> bool {
    any_list_register_pending(list_registers())
}

/// Sets or clears ICH_HCR_EL2.UIE (maintenance interrupt when at most one list register is in use).
pub fn set_underflow_interrupt(enabled: bool) {
    let hcr = read_sysreg!("ich_hcr_el2");
    let hcr = if enabled { hcr | 0b10 } else { hcr & !0b10 };
    // SAFETY: only the underflow-enable bit of the virtual interface control changes.
    unsafe { write_sysreg!("ich_hcr_el2", hcr) };
}

/// Clears the guest's view of the virtual CPU interface (VM reset).
pub fn reset_virtual_interface() {
    // SAFETY: resets the virtual interface that belongs to this pCPU's only vCPU: enabled,
    // no maintenance interrupt requested, no virtual interrupt listed.
    unsafe {
        write_sysreg!("ich_vmcr_el2", 0u64);
        write_sysreg!("ich_hcr_el2", 1u64);
    }
    clear_list_registers();
    clear_active_priorities();
}

/// Clears the virtual active priority registers (ICH_AP0R<n>_EL2, ICH_AP1R<n>_EL2, 12.4.1-2):
/// an interrupt the guest acknowledged and never ended (it went off, or reset, inside its
/// handler) would otherwise keep its priority running and mask every interrupt of equal or
/// lower priority on the next vCPU start. ICH_VTR_EL2.PRIbits says how many are implemented.
fn clear_active_priorities() {
    let priority_bits = ((read_sysreg!("ich_vtr_el2") >> 29) & 0x7) + 1;
    // SAFETY: the active priorities belong to the vCPU being reset on this pCPU; writing zero
    // says that none of its interrupts is active.
    unsafe {
        write_sysreg!("ich_ap0r0_el2", 0u64);
        write_sysreg!("ich_ap1r0_el2", 0u64);
        if priority_bits >= 6 {
            write_sysreg!("ich_ap0r1_el2", 0u64);
            write_sysreg!("ich_ap1r1_el2", 0u64);
        }
        if priority_bits >= 7 {
            write_sysreg!("ich_ap0r2_el2", 0u64);
            write_sysreg!("ich_ap1r2_el2", 0u64);
            write_sysreg!("ich_ap0r3_el2", 0u64);
            write_sysreg!("ich_ap1r3_el2", 0u64);
        }
        core::arch::asm!("isb", options(nostack));
    }
}

/// Saves the virtual active priority registers (the implemented ones; see
/// [`clear_active_priorities`]).
pub fn save_active_priorities(ap0r: &mut [u64; 4], ap1r: &mut [u64; 4]) {
    let priority_bits = ((read_sysreg!("ich_vtr_el2") >> 29) & 0x7) + 1;
    ap0r[0] = read_sysreg!("ich_ap0r0_el2");
    ap1r[0] = read_sysreg!("ich_ap1r0_el2");
    if priority_bits >= 6 {
        ap0r[1] = read_sysreg!("ich_ap0r1_el2");
        ap1r[1] = read_sysreg!("ich_ap1r1_el2");
    }
    if priority_bits >= 7 {
        ap0r[2] = read_sysreg!("ich_ap0r2_el2");
        ap1r[2] = read_sysreg!("ich_ap1r2_el2");
        ap0r[3] = read_sysreg!("ich_ap0r3_el2");
        ap1r[3] = read_sysreg!("ich_ap1r3_el2");
    }
}

/// Loads the virtual active priority registers saved by [`save_active_priorities`].
pub fn restore_active_priorities(ap0r: &[u64; 4], ap1r: &[u64; 4]) {
    let priority_bits = ((read_sysreg!("ich_vtr_el2") >> 29) & 0x7) + 1;
    // SAFETY: the active priorities of the vCPU about to run on this pCPU, as it left them.
    unsafe {
        write_sysreg!("ich_ap0r0_el2", ap0r[0]);
        write_sysreg!("ich_ap1r0_el2", ap1r[0]);
        if priority_bits >= 6 {
            write_sysreg!("ich_ap0r1_el2", ap0r[1]);
            write_sysreg!("ich_ap1r1_el2", ap1r[1]);
        }
        if priority_bits >= 7 {
            write_sysreg!("ich_ap0r2_el2", ap0r[2]);
            write_sysreg!("ich_ap1r2_el2", ap1r[2]);
            write_sysreg!("ich_ap0r3_el2", ap0r[3]);
            write_sysreg!("ich_ap1r3_el2", ap1r[3]);
        }
    }
}

macro_rules! list_register_at {
    ($($n:literal),*) => {
        /// Reads list register `n` (0 above 15) with a `match` inlined in the caller: for a
        /// constant `n` one `mrs`, for a variable one a jump table of its own, a call fewer
        /// than [`read_lr`] for the hottest paths (a vCPU switch).
        #[inline(always)]
        pub fn read_lr_at(n: usize) -> u64 {
            match n {
                $($n => {
                    let value: u64;
                    // SAFETY: reading a list register has no side effects.
                    unsafe {
                        core::arch::asm!(concat!("mrs {}, ich_lr", $n, "_el2"), out(reg) value, options(nomem, nostack, preserves_flags));
                    }
                    value
                })*
                _ => 0,
            }
        }

        /// Writes list register `n` (nothing above 15) as [`read_lr_at`] reads it: for the
        /// virtual timer's fast path and a vCPU switch (others take [`write_lr`]).
        #[inline(always)]
        pub fn write_lr_at(n: usize, value: u64) {
            match n {
                // SAFETY: list registers only describe virtual interrupts for the running vCPU.
                $($n => unsafe {
                    core::arch::asm!(concat!("msr ich_lr", $n, "_el2, {}"), in(reg) value, options(nostack, preserves_flags));
                },)*
                _ => {}
            }
        }
    };
}

list_register_at!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

core::arch::global_asm!(
    r#"
// keel_read_lr: x0 = ICH_LR<x0>_EL2 (0 for a number above 15). keel_write_lr: ICH_LR<x0>_EL2
// = x1 (nothing for a number above 15). A computed branch into a table of two-instruction
// entries; they use x9 and the flags besides, and no stack.
    .pushsection .text.keel_list_registers, "ax"
    .balign 4
    .global keel_read_lr
keel_read_lr:
    cmp     x0, #15
    b.hi    9f
    adr     x9, 1f
    add     x9, x9, x0, lsl #3
    br      x9
1:
    .irp n, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    mrs     x0, ich_lr\n\()_el2
    ret
    .endr
9:
    mov     x0, #0
    ret

    .global keel_write_lr
keel_write_lr:
    cmp     x0, #15
    b.hi    9f
    adr     x9, 1f
    add     x9, x9, x0, lsl #3
    br      x9
1:
    .irp n, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15
    msr     ich_lr\n\()_el2, x1
    ret
    .endr
9:
    ret
    .popsection
"#
);

/// Reads list register `n` (ICH_LR<n>_EL2); 0 for `n` above 15. One out-of-line table
/// (`keel_read_lr`) for every caller but the hottest ([`read_lr_at`]): a `match` inlined at
/// each took a jump table and 32 instructions there, for about the same number run.
#[inline(always)]
pub fn read_lr(n: usize) -> u64 {
    let value: u64;
    // SAFETY: `keel_read_lr` reads one list register, which has no side effects; it changes
    // x0 (the value), x9, the flags and x30 (the call), and touches no memory.
    unsafe {
        core::arch::asm!(
            "bl keel_read_lr",
            inout("x0") n => value,
            out("x9") _,
            out("x30") _,
            options(nomem, nostack),
        );
    }
    value
}

/// Writes list register `n` (nothing for `n` above 15), through `keel_write_lr` (as
/// [`read_lr`]).
#[inline(always)]
pub fn write_lr(n: usize, value: u64) {
    // SAFETY: list registers only describe virtual interrupts for the running vCPU;
    // `keel_write_lr` changes one of them, x9, the flags and x30 (the call), and no memory.
    unsafe {
        core::arch::asm!(
            "bl keel_write_lr",
            in("x0") n,
            in("x1") value,
            out("x9") _,
            out("x30") _,
            options(nostack),
        );
    }
}

macro_rules! list_registers_at_once {
    ($($n:literal),*) => {
        /// Whether one of the first `count` list registers holds its interrupt pending,
        /// straight-line (a loop over [`read_lr`] costs a call and a computed branch per
        /// register).
        #[inline(always)]
        fn any_list_register_pending(count: usize) -> bool {
            $(
                if $n >= count {
                    return false;
                }
                if list_register_is_pending(read_lr_at($n)) {
                    return true;
                }
            )*
            false
        }

    };
}

list_registers_at_once!(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

/// The virtual machine control register (ICH_VMCR_EL2, 12.4.8): the guest's view of its CPU
/// interface, saved when its vCPU leaves the pCPU.
#[inline(always)]
pub fn read_vmcr() -> u64 {
    read_sysreg!("ich_vmcr_el2")
}

/// The virtual interface control (ICH_HCR_EL2, 12.4.3), saved with [`read_vmcr`].
#[inline(always)]
pub fn read_hcr() -> u64 {
    read_sysreg!("ich_hcr_el2")
}

/// Loads a vCPU's [`read_vmcr`] and [`read_hcr`] as it left them.
#[inline(always)]
pub fn write_vmcr_hcr(vmcr: u64, hcr: u64) {
    // SAFETY: the incoming vCPU's virtual interface control, as it left it.
    unsafe {
        write_sysreg!("ich_vmcr_el2", vmcr);
        write_sysreg!("ich_hcr_el2", hcr);
        core::arch::asm!("isb", options(nostack));
    }
}

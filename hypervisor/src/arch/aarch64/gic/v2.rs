//! The physical GICv2 with the virtualization extensions (Arm IHI 0048B; a GIC-400):
//! distributor, this pCPU's CPU interface (GICC) and virtual interface control (GICH), all
//! memory-mapped. The functions and types are those of the GICv3 driver (see the module
//! above): list registers are given and taken in the ICH_LR<n>_EL2 layout and converted here
//! to and from GICH_LR<n> (5.3.14), and [`Redistributor`] is this pCPU's banked view of the
//! distributor (its SGIs and PPIs).
//!
//! Keel runs the CPU interface with EOImode 1 (GICC_CTLR bit 9, EOImodeNS in the non-secure
//! view): writing GICC_EOIR only drops the priority, and the interrupt stays active until
//! GICC_DIR, or the guest's EOI of a hardware-linked list register, deactivates it. Writes of
//! GICD_CTLR and GICC_CTLR set the bits of both the single-security view (group 0 and 1) and
//! the non-secure view (group 1), so the same code runs on QEMU's `virt` GICv2 (no Security
//! Extensions, interrupts in group 0) and on a GIC-400 entered in non-secure EL2 (group 1).

use core::sync::atomic::{AtomicU64, Ordering};

use super::super::boot::MAX_CPUS;
use super::super::mmio::Mmio;
use super::{list_register_is_pending, spi_bit, Regions};

const GICD_CTLR: usize = 0x000;
const GICD_ISENABLER: usize = 0x100;
const GICD_ICENABLER: usize = 0x180;
const GICD_ICPENDR: usize = 0x280;
const GICD_ISACTIVER: usize = 0x300;
const GICD_ICACTIVER: usize = 0x380;
const GICD_IPRIORITYR: usize = 0x400;
const GICD_ITARGETSR: usize = 0x800;
const GICD_ICFGR: usize = 0xc00;
const GICD_SGIR: usize = 0xf00;

const GICC_CTLR: usize = 0x00;
const GICC_PMR: usize = 0x04;
const GICC_BPR: usize = 0x08;
const GICC_IAR: usize = 0x0c;
const GICC_EOIR: usize = 0x10;
const GICC_DIR: usize = 0x1000;
/// GICC_CTLR: enable group 0 and group 1 (single security), group 1 (non-secure view), and
/// EOImode (bit 9 in both views).
const GICC_CTLR_VALUE: u32 = 0b11 | (1 << 9);

const GICH_HCR: usize = 0x00;
const GICH_VTR: usize = 0x04;
const GICH_VMCR: usize = 0x08;
const GICH_ELRSR0: usize = 0x30;
const GICH_APR: usize = 0xf0;
const GICH_LR: usize = 0x100;
const HCR_EN: u32 = 1 << 0;
const HCR_UIE: u32 = 1 << 1;

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
    /// `base` must be the GICv2 distributor, mapped as device memory.
    pub const unsafe fn new(base: u64) -> Self {
        // SAFETY: forwarded from this function's contract.
        let regs = unsafe { Mmio::new(base) };
        Self { regs }
    }

    /// Enables forwarding (both groups; see the module), and records the boot pCPU's CPU
    /// interface, before the routes to it (its UART's SPI) are written.
    pub(super) fn init(&self) {
        self.regs.write32(GICD_CTLR, 0b11);
        record_interface(&self.regs, super::super::cpu::mpidr());
    }

    /// Routes SPI `intid` to the pCPU with affinity `mpidr`, at Keel's priority, and enables it.
    pub fn enable_spi(&self, intid: u32, mpidr: u64) {
        self.prepare_spi(intid);
        self.route_spi(intid, mpidr);
        self.set_spi_enabled(intid, true);
    }

    /// Puts SPI `intid` at Keel's priority (its group is the one the board reset it in).
    fn prepare_spi(&self, intid: u32) {
        write_byte(&self.regs, GICD_IPRIORITYR, intid, PRIORITY);
    }

    /// Puts SPI `intid`, forwarded to a guest, in its reset state: disabled, neither pending
    /// nor active, at Keel's priority, level-sensitive or edge-triggered as its device is
    /// (4.3.13 GICD_ICFGRn), routed to `mpidr`.
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

    /// Routes SPI `intid` to the pCPU with affinity `mpidr` (4.3.12 GICD_ITARGETSRn: that
    /// pCPU's CPU interface alone).
    pub fn route_spi(&self, intid: u32, mpidr: u64) {
        write_byte(&self.regs, GICD_ITARGETSR, intid, interface_mask(mpidr));
    }

    /// Enables or disables SPI `intid`.
    pub fn set_spi_enabled(&self, intid: u32, enabled: bool) {
        let (word, bit) = spi_bit(intid);
        if enabled {
            self.regs.write32(GICD_ISENABLER + word, bit);
        } else {
            self.regs.write32(GICD_ICENABLER + word, bit);
        }
    }

    /// Deactivates SPI `intid` (one Keel acknowledged and forwarded, whose guest is gone).
    pub fn deactivate_spi(&self, intid: u32) {
        let (word, bit) = spi_bit(intid);
        self.regs.write32(GICD_ICACTIVER + word, bit);
    }
}

/// Writes byte `intid` of a byte-per-interrupt register array (priorities, targets) with a
/// read-modify-write of its word (word accesses work on every GICv2).
fn write_byte(regs: &Mmio, array: usize, intid: u32, value: u8) {
    let word = array + (intid as usize & !3);
    let shift = 8 * (intid % 4);
    let old = regs.read32(word) & !(0xff << shift);
    regs.write32(word, old | (u32::from(value) << shift));
}

/// Each pCPU's MPIDR and the mask of its CPU interface (GICD_ITARGETSR0's first byte, read by
/// that pCPU: 4.3.12), `mpidr << 8 | mask`; 0 until the pCPU has started. SGIs and SPI routes
/// name CPU interfaces, not affinities.
static INTERFACES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Records the CPU interface of the pCPU this runs on, affinity `mpidr`, in its own slot
/// (pCPUs come up at once, and none may take another's): the first byte of its banked
/// GICD_ITARGETSR0 (`regs`: the distributor).
fn record_interface(regs: &Mmio, mpidr: u64) -> Option<()> {
    let mask = regs.read32(GICD_ITARGETSR) as u8;
    let slot = INTERFACES.get(super::super::cpu::index())?;
    slot.store(
        (mpidr & 0xff_00ff_ffff) << 8 | u64::from(mask),
        Ordering::Relaxed,
    );
    Some(())
}

/// The CPU interface mask of the pCPU with affinity `mpidr`: the one it recorded when it came
/// up, or, before that (routes written at boot, before the other pCPUs start), the interface
/// numbered as its core in the first cluster, as a GIC-400 numbers them (0 beyond: no CPU).
fn interface_mask(mpidr: u64) -> u8 {
    let mpidr = mpidr & 0xff_00ff_ffff;
    let recorded = INTERFACES
        .iter()
        .map(|entry| entry.load(Ordering::Relaxed))
        .find(|&entry| entry != 0 && entry >> 8 == mpidr);
    match recorded {
        Some(entry) => entry as u8,
        None if mpidr < 8 => 1 << mpidr,
        None => 0,
    }
}

/// The CPU interface's and the virtual interface control's addresses (the same on every
/// pCPU: each reaches its own there), set by [`init_cpu_interface`] on each pCPU before it
/// takes an interrupt. Plain loads on the interrupt path (a `Once` cost its acquire and a
/// check at each register access).
static GICC_BASE: AtomicU64 = AtomicU64::new(0);
static GICH_BASE: AtomicU64 = AtomicU64::new(0);

/// This pCPU's CPU interface (GICC).
#[inline(always)]
fn gicc() -> Mmio {
    // SAFETY: the GICv2 CPU interface from the device tree, mapped as device memory, stored by
    // `init_cpu_interface` on this pCPU before any of its interrupts is taken; nothing else
    // uses it.
    unsafe { Mmio::new(GICC_BASE.load(Ordering::Relaxed)) }
}

/// This pCPU's virtual interface control (GICH).
#[inline(always)]
fn gich() -> Mmio {
    // SAFETY: as for `gicc`, the virtual interface control region.
    unsafe { Mmio::new(GICH_BASE.load(Ordering::Relaxed)) }
}

/// This pCPU's SGIs and PPIs: the distributor's banked registers (GICv2 has no
/// redistributor; the name is the interface's).
#[derive(Clone, Copy, Debug)]
pub struct Redistributor {
    regs: Mmio,
}

impl Redistributor {
    /// This pCPU's banked distributor, and records its CPU interface for `mpidr`.
    ///
    /// # Safety
    /// `regions.distributor` must be the GICv2 distributor, mapped as device memory, and this
    /// must run on the pCPU with affinity `mpidr`.
    pub unsafe fn find(regions: &Regions, mpidr: u64) -> Option<Self> {
        // SAFETY: per this function's contract.
        let regs = unsafe { Mmio::new(regions.distributor) };
        record_interface(&regs, mpidr)?;
        Some(Self { regs })
    }

    /// Puts all SGIs and PPIs disabled (SGIs stay enabled where the GIC fixes them so).
    pub fn init(&self) {
        self.regs.write32(GICD_ICENABLER, 0xffff_ffff);
    }

    /// Enables SGI or PPI `intid` on this pCPU, at Keel's priority.
    pub fn enable_private(&self, intid: u32) {
        write_byte(&self.regs, GICD_IPRIORITYR, intid, PRIORITY);
        self.regs.write32(GICD_ISENABLER, 1 << intid);
    }

    /// Disables SGI or PPI `intid` on this pCPU.
    pub fn disable_private(&self, intid: u32) {
        self.regs.write32(GICD_ICENABLER, 1 << intid);
    }

    /// Clears the active state of SGI or PPI `intid` on this pCPU (GICD_ICACTIVER0).
    pub fn clear_active_private(&self, intid: u32) {
        self.regs.write32(GICD_ICACTIVER, 1 << intid);
    }

    /// Takes SGI or PPI `intid`'s active state off this pCPU: returns whether it was active,
    /// and clears it.
    pub fn take_active_private(&self, intid: u32) -> bool {
        let active = self.regs.read32(GICD_ISACTIVER) & (1 << intid) != 0;
        if active {
            self.clear_active_private(intid);
        }
        active
    }

    /// Makes SGI or PPI `intid` active on this pCPU (GICD_ISACTIVER0).
    pub fn set_active_private(&self, intid: u32) {
        self.regs.write32(GICD_ISACTIVER, 1 << intid);
    }
}

/// Sets up this pCPU's CPU interface (EOImode 1, all priorities unmasked) and its virtual
/// interface (enabled, every list register empty).
pub fn init_cpu_interface(regions: &Regions) {
    GICC_BASE.store(regions.cpu_interface, Ordering::Relaxed);
    GICH_BASE.store(regions.virtual_control, Ordering::Relaxed);
    let gicc = gicc();
    gicc.write32(GICC_PMR, 0xff);
    gicc.write32(GICC_BPR, 0);
    gicc.write32(GICC_CTLR, GICC_CTLR_VALUE);
    gich().write32(GICH_VMCR, 0);
    gich().write32(GICH_HCR, HCR_EN);
    clear_list_registers();
}

/// Empties every list register.
fn clear_list_registers() {
    for lr in 0..list_registers() {
        write_lr(lr, 0);
    }
}

/// The source CPU bits (GICC_IAR[12:10]) of the SGI of each id this pCPU acknowledged last,
/// per pCPU: its EOI and deactivation must name the same source (4.4.5).
static SGI_SOURCE: [[core::sync::atomic::AtomicU16; 16]; MAX_CPUS] =
    [const { [const { core::sync::atomic::AtomicU16::new(0) }; 16] }; MAX_CPUS];

/// The GICC_EOIR or GICC_DIR value that ends `intid` on this pCPU: with an SGI, the source
/// its acknowledge gave.
fn with_source(intid: u32) -> u32 {
    if intid < 16 {
        let sources = SGI_SOURCE.get(super::super::cpu::index());
        let source = sources.map_or(0, |s| s[intid as usize].load(Ordering::Relaxed));
        intid | u32::from(source)
    } else {
        intid
    }
}

/// Acknowledges the highest-priority pending interrupt (GICC_IAR): its id, an SGI's source
/// kept for its EOI and deactivation.
pub fn acknowledge() -> u32 {
    let iar = gicc().read32(GICC_IAR);
    let intid = iar & 0x3ff;
    if intid < 16 {
        if let Some(sources) = SGI_SOURCE.get(super::super::cpu::index()) {
            sources[intid as usize].store((iar & 0x1c00) as u16, Ordering::Relaxed);
        }
    }
    intid
}

/// Drops the running priority of `intid` (EOImode 1: it stays active).
pub fn end_of_interrupt(intid: u32) {
    gicc().write32(GICC_EOIR, with_source(intid));
}

/// Deactivates `intid`.
pub fn deactivate(intid: u32) {
    gicc().write32(GICC_DIR, with_source(intid));
}

/// Sends SGI `intid` to the pCPU with affinity `mpidr` (GICD_SGIR, 4.3.15: its CPU interface
/// in the target list).
pub fn send_sgi(intid: u32, mpidr: u64) {
    let Some(distributor) = super::distributor() else {
        return;
    };
    let targets = u32::from(interface_mask(mpidr));
    super::super::cpu::dsb_sy();
    distributor
        .regs
        .write32(GICD_SGIR, targets << 16 | (intid & 0xf));
}

/// Number of list registers (GICH_VTR.ListRegs + 1).
pub fn list_registers() -> usize {
    ((gich().read32(GICH_VTR) & 0x3f) + 1) as usize
}

/// The empty list registers (GICH_ELRSR0, one bit each).
#[inline(always)]
fn empty_list_registers() -> u32 {
    gich().read32(GICH_ELRSR0)
}

/// Whether any list register holds a virtual interrupt.
pub fn any_interrupt_listed() -> bool {
    let implemented = (1u64 << list_registers()) - 1;
    u64::from(empty_list_registers()) & implemented != implemented
}

/// Whether list register `lr` is empty in GICH_ELRSR0. False for a register beyond 15.
#[inline(always)]
pub fn list_register_is_empty(lr: usize) -> bool {
    lr < 16 && empty_list_registers() >> lr & 1 != 0
}

/// Whether any list register holds a virtual interrupt in the pending state.
pub fn any_interrupt_pending() -> bool {
    (0..list_registers()).any(|lr| list_register_is_pending(read_lr(lr)))
}

/// Sets or clears GICH_HCR.UIE (maintenance interrupt when at most one list register is in use).
pub fn set_underflow_interrupt(enabled: bool) {
    let hcr = gich().read32(GICH_HCR);
    let hcr = if enabled {
        hcr | HCR_UIE
    } else {
        hcr & !HCR_UIE
    };
    gich().write32(GICH_HCR, hcr);
}

/// Clears the guest's view of the virtual CPU interface (VM reset): enabled, no maintenance
/// interrupt requested, nothing listed, no active priority (GICH_APR).
pub fn reset_virtual_interface() {
    gich().write32(GICH_VMCR, 0);
    gich().write32(GICH_HCR, HCR_EN);
    clear_list_registers();
    gich().write32(GICH_APR, 0);
}

/// Saves the virtual active priorities (GICH_APR, one register: kept in `ap1r[0]`).
pub fn save_active_priorities(_ap0r: &mut [u64; 4], ap1r: &mut [u64; 4]) {
    ap1r[0] = u64::from(gich().read32(GICH_APR));
}

/// Loads the virtual active priorities saved by [`save_active_priorities`].
pub fn restore_active_priorities(_ap0r: &[u64; 4], ap1r: &[u64; 4]) {
    gich().write32(GICH_APR, ap1r[0] as u32);
}

/// The guest's view of its CPU interface (GICH_VMCR, 5.3.4), saved when its vCPU leaves.
#[inline(always)]
pub fn read_vmcr() -> u64 {
    u64::from(gich().read32(GICH_VMCR))
}

/// The virtual interface control (GICH_HCR, 5.3.2), saved with [`read_vmcr`].
#[inline(always)]
pub fn read_hcr() -> u64 {
    u64::from(gich().read32(GICH_HCR))
}

/// Loads a vCPU's [`read_vmcr`] and [`read_hcr`] as it left them.
#[inline(always)]
pub fn write_vmcr_hcr(vmcr: u64, hcr: u64) {
    gich().write32(GICH_VMCR, vmcr as u32);
    gich().write32(GICH_HCR, hcr as u32);
}

/// GICH_LR<n> (5.3.14) from an ICH_LR<n>_EL2 value: virtual id, the priority's upper five
/// bits, state, group, and the physical id of a hardware-linked one or the EOI maintenance
/// request of another.
fn to_gich_lr(value: u64) -> u32 {
    let mut lr = (value & 0x3ff) as u32
        | (((value >> 51) & 0x1f) as u32) << 23
        | (((value >> 62) & 0b11) as u32) << 28
        | (((value >> 60) & 1) as u32) << 30;
    if value & (1 << 61) != 0 {
        lr |= 1 << 31 | (((value >> 32) & 0x3ff) as u32) << 10;
    } else if value & (1 << 41) != 0 {
        lr |= 1 << 19;
    }
    lr
}

/// The ICH_LR<n>_EL2 value of a GICH_LR<n> ([`to_gich_lr`] the other way).
fn from_gich_lr(lr: u32) -> u64 {
    let lr = u64::from(lr);
    let mut value = (lr & 0x3ff)
        | ((lr >> 23) & 0x1f) << 51
        | ((lr >> 28) & 0b11) << 62
        | ((lr >> 30) & 1) << 60;
    if lr & (1 << 31) != 0 {
        value |= 1 << 61 | ((lr >> 10) & 0x3ff) << 32;
    } else if lr & (1 << 19) != 0 {
        value |= 1 << 41;
    }
    value
}

/// Reads list register `n` in the ICH_LR<n>_EL2 layout; 0 for `n` above 15.
#[inline(always)]
pub fn read_lr(n: usize) -> u64 {
    if n >= 16 {
        return 0;
    }
    from_gich_lr(gich().read32(GICH_LR + 4 * n))
}

/// Writes list register `n` from an ICH_LR<n>_EL2 value (nothing for `n` above 15).
#[inline(always)]
pub fn write_lr(n: usize, value: u64) {
    if n < 16 {
        gich().write32(GICH_LR + 4 * n, to_gich_lr(value));
    }
}

/// [`read_lr`] (the GICv3 driver's inlined form for constant `n`).
#[inline(always)]
pub fn read_lr_at(n: usize) -> u64 {
    read_lr(n)
}

/// [`write_lr`] (the GICv3 driver's inlined form for constant `n`).
#[inline(always)]
pub fn write_lr_at(n: usize, value: u64) {
    write_lr(n, value)
}

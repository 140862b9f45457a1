//! Emulated GICv3 distributor and redistributors of one VM (GICv3/v4 architecture
//! specification, IHI 0069H, chapters 12.9 GICD_* and 12.10-12.11 GICR_*).
//!
//! The model presents a single-security-state GIC (`GICD_CTLR.DS = 1`) with affinity
//! routing always on (`ARE = 1`) and no LPIs. It holds the state of every virtual
//! interrupt; the arch layer moves pending ones into list registers
//! ([`Vgic::next_pending`], [`Vgic::mark_listed`]) and reports back what the guest did
//! with them ([`Vgic::unlisted`]).
//!
//! Ownership: SGIs and PPIs belong to each vCPU; an SPI belongs to the VM only if the
//! configuration gave it one (its console's). Set-enable/pending/active writes for an SPI
//! the VM does not own, and any access beyond the implemented lines, are refused with a
//! [`DeviceError`]; other writes to unowned SPIs are ignored and reads return zero, as for
//! unimplemented interrupts on real hardware.
//!
//! A VM whose guest sees a GICv2 has the same state, decoded by the GICv2 distributor view
//! (`vgic/gicv2.rs`: [`Vgic::v2_distributor_read`], [`Vgic::v2_distributor_write`]) instead
//! of this GICv3 decoding.

use super::DeviceError;

mod gicv2;

/// Interrupt ids implemented: SGIs, PPIs and 96 SPIs (`GICD_TYPER.ITLinesNumber = 3`).
pub const NR_IRQS: usize = 128;
/// Most vCPUs (redistributors) per VM.
pub const MAX_VCPUS: usize = crate::system::MAX_VCPUS;

const _: () = assert!(
    MAX_VCPUS.is_power_of_two() && NR_IRQS.is_power_of_two(),
    "Vgic::priority masks its indices"
);
/// Keel's JEP106-style implementer code in GICD_IIDR / GICR_IIDR ("KEL", product 1).
const IIDR: u32 = 0x0100_043b;
/// PIDR2 with ArchRev = 3 (GICv3).
const PIDR2: u32 = 0x3b;

/// GICD_CTLR bits with DS = 1 (12.9.4).
const CTLR_ENABLE_GRP0: u32 = 1 << 0;
const CTLR_ENABLE_GRP1: u32 = 1 << 1;
const CTLR_ARE: u32 = 1 << 4;
const CTLR_DS: u32 = 1 << 6;

/// GICR_WAKER bits (12.11.42).
const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;

/// Offset of the SGI/PPI frame inside a redistributor.
const SGI_FRAME: u64 = 0x1_0000;
/// Size of one redistributor (RD + SGI frames).
pub const REDISTRIBUTOR_SIZE: u64 = 0x2_0000;

/// One bit per interrupt id for each piece of interrupt state. For a vCPU's SGIs and PPIs
/// only bits 0-31 are used; for the VM's SPIs only bits 32 and up.
#[derive(Clone, Copy, Debug, Default)]
struct Bank {
    enabled: u128,
    /// Latched pending state (edge, software, SGI).
    pending: u128,
    /// Line level of level-sensitive device interrupts.
    level: u128,
    active: u128,
    group1: u128,
    edge: u128,
    /// Currently held in a list register.
    listed: u128,
}

impl Bank {
    const ZERO: Self = Self {
        enabled: 0,
        pending: 0,
        level: 0,
        active: 0,
        group1: 0,
        edge: 0,
        listed: 0,
    };

    fn pending(&self) -> u128 {
        self.pending | (self.level & !self.edge)
    }
}

/// Which per-interrupt bit register a 1-bit-per-interrupt access targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BitRegister {
    Group,
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

impl BitRegister {
    /// The register at `offset` in the distributor or SGI frame, and the first interrupt it covers.
    fn decode(offset: u64) -> Option<(Self, u32)> {
        let (register, base) = match offset {
            0x080..=0x0ff => (BitRegister::Group, 0x080),
            0x100..=0x17f => (BitRegister::SetEnable, 0x100),
            0x180..=0x1ff => (BitRegister::ClearEnable, 0x180),
            0x200..=0x27f => (BitRegister::SetPending, 0x200),
            0x280..=0x2ff => (BitRegister::ClearPending, 0x280),
            0x300..=0x37f => (BitRegister::SetActive, 0x300),
            0x380..=0x3ff => (BitRegister::ClearActive, 0x380),
            _ => return None,
        };
        Some((register, ((offset - base) / 4 * 32) as u32))
    }

    fn sets_state(self) -> bool {
        matches!(
            self,
            BitRegister::SetEnable | BitRegister::SetPending | BitRegister::SetActive
        )
    }

    fn get(self, bank: &Bank) -> u128 {
        match self {
            BitRegister::Group => bank.group1,
            BitRegister::SetEnable | BitRegister::ClearEnable => bank.enabled,
            BitRegister::SetPending | BitRegister::ClearPending => bank.pending(),
            BitRegister::SetActive | BitRegister::ClearActive => bank.active,
        }
    }

    /// Applies a write of `bits` (only bits the VM owns).
    fn apply(self, bank: &mut Bank, bits: u128, covered: u128) {
        match self {
            BitRegister::Group => bank.group1 = (bank.group1 & !covered) | bits,
            BitRegister::SetEnable => bank.enabled |= bits,
            BitRegister::ClearEnable => bank.enabled &= !bits,
            BitRegister::SetPending => bank.pending |= bits,
            BitRegister::ClearPending => bank.pending &= !bits,
            BitRegister::SetActive => bank.active |= bits,
            BitRegister::ClearActive => bank.active &= !bits,
        }
    }
}

/// The virtual GIC state of one VM.
#[derive(Clone, Debug)]
pub struct Vgic {
    ctlr: u32,
    vcpus: usize,
    spis: Bank,
    private: [Bank; MAX_VCPUS],
    /// Interrupts the VM owns: all SGIs and PPIs, and its configured SPIs.
    owned: u128,
    spi_priority: [u8; NR_IRQS],
    private_priority: [[u8; 32]; MAX_VCPUS],
    /// GICD_IROUTER of each SPI.
    route: [u64; NR_IRQS],
    asleep: [bool; MAX_VCPUS],
    /// GICv2 view only (`gicv2`): the GICD_ITARGETSR byte of each SPI, its CPU targets as
    /// the guest wrote them (delivery goes to the lowest, written into `route`).
    cpu_targets: [u8; NR_IRQS],
    /// GICv2 view only: the SPIs whose CPU targets are none, which no vCPU is offered.
    untargeted: u128,
    /// GICv2 view only: the SPIs of `untargeted` the guest enabled, held here instead of in
    /// `spis.enabled` so that the delivery functions never offer them.
    enabled_untargeted: u128,
}

const PRIVATE_MASK: u128 = 0xffff_ffff;
/// SGIs are always edge-triggered; PPIs reset as level (GICR_ICFGR0/1).
const SGI_MASK: u128 = 0xffff;

fn bit(intid: u32) -> u128 {
    1u128 << intid
}

impl Vgic {
    /// An all-zero GIC with no vCPU, for static storage before [`Vgic::new`] replaces it.
    pub const EMPTY: Self = Self {
        ctlr: 0,
        vcpus: 0,
        spis: Bank::ZERO,
        private: [Bank::ZERO; MAX_VCPUS],
        owned: 0,
        spi_priority: [0; NR_IRQS],
        private_priority: [[0; 32]; MAX_VCPUS],
        route: [0; NR_IRQS],
        asleep: [false; MAX_VCPUS],
        cpu_targets: [0; NR_IRQS],
        untargeted: 0,
        enabled_untargeted: 0,
    };

    /// A GIC in its reset state for `vcpus` vCPUs, owning the SPIs listed in `owned_spis`.
    pub fn new(vcpus: usize, owned_spis: &[u32]) -> Self {
        let mut gic = Self::EMPTY;
        gic.reset(vcpus, owned_spis);
        gic
    }

    /// Puts this GIC in the state [`Vgic::new`] gives, in place: a VM's reset does it in one
    /// bounded step of its reload with interrupts masked, where building the 2.4 KB state
    /// anew and copying it over (with the virtio console's 4 KiB) made that step about 7,500
    /// instructions; in place, about 1,700.
    pub fn reset(&mut self, vcpus: usize, owned_spis: &[u32]) {
        let mut owned = PRIVATE_MASK;
        for &intid in owned_spis {
            if (32..NR_IRQS as u32).contains(&intid) {
                owned |= bit(intid);
            }
        }
        let private = Bank {
            edge: SGI_MASK,
            ..Bank::ZERO
        };
        self.ctlr = 0;
        self.vcpus = vcpus.clamp(1, MAX_VCPUS);
        self.spis = Bank::ZERO;
        self.private.fill(private);
        self.owned = owned;
        self.spi_priority.fill(0);
        for priorities in &mut self.private_priority {
            priorities.fill(0);
        }
        self.route.fill(0);
        self.asleep.fill(true);
        // Every SPI targets vCPU 0, as `route` says.
        self.cpu_targets.fill(1);
        self.untargeted = 0;
        self.enabled_untargeted = 0;
    }

    /// Number of vCPUs (redistributors).
    pub fn vcpus(&self) -> usize {
        self.vcpus
    }

    /// The bank holding `intid` for `vcpu`, or None beyond the implemented lines.
    fn bank(&self, vcpu: usize, intid: u32) -> Option<&Bank> {
        match intid {
            0..=31 => self.private.get(vcpu),
            _ if (intid as usize) < NR_IRQS => Some(&self.spis),
            _ => None,
        }
    }

    fn bank_mut(&mut self, vcpu: usize, intid: u32) -> Option<&mut Bank> {
        match intid {
            0..=31 => self.private.get_mut(vcpu),
            _ if (intid as usize) < NR_IRQS => Some(&mut self.spis),
            _ => None,
        }
    }

    /// The priority of `intid` for `vcpu`, both in range (callers check them first). The
    /// indices are masked to the tables' power-of-two sizes, which drops the bounds checks.
    fn priority(&self, vcpu: usize, intid: u32) -> u8 {
        let intid = intid as usize;
        if intid < 32 {
            self.private_priority[vcpu % MAX_VCPUS][intid]
        } else {
            self.spi_priority[intid % NR_IRQS]
        }
    }

    fn owns(&self, intid: u32) -> bool {
        (intid as usize) < NR_IRQS && self.owned & bit(intid) != 0
    }

    /// The vCPU an SPI is routed to (`GICD_IROUTER.Aff0`; vCPU `i` has MPIDR Aff0 = `i`).
    pub fn spi_target(&self, intid: u32) -> usize {
        let vcpu = self
            .route
            .get(intid as usize)
            .map_or(0, |route| (route & 0xff) as usize);
        if vcpu < self.vcpus {
            vcpu
        } else {
            0
        }
    }

    /// Sets the line level of a level-sensitive SPI (from a device model).
    pub fn set_level(&mut self, intid: u32, level: bool) {
        if (32..NR_IRQS as u32).contains(&intid) {
            if level {
                self.spis.level |= bit(intid);
            } else {
                self.spis.level &= !bit(intid);
            }
        }
    }

    /// Makes an interrupt pending for `vcpu` (an SGI, a PPI, or an edge on an SPI).
    pub fn raise(&mut self, vcpu: usize, intid: u32) {
        if let Some(bank) = self.bank_mut(vcpu, intid) {
            bank.pending |= bit(intid);
        }
    }

    fn group_enabled_mask(&self, bank: &Bank) -> u128 {
        let mut mask = 0;
        if self.ctlr & CTLR_ENABLE_GRP1 != 0 {
            mask |= bank.group1;
        }
        if self.ctlr & CTLR_ENABLE_GRP0 != 0 {
            mask |= !bank.group1;
        }
        mask
    }

    /// Whether `intid` is enabled for `vcpu` (and the distributor forwards its group).
    pub fn is_enabled(&self, vcpu: usize, intid: u32) -> bool {
        self.bank(vcpu, intid)
            .is_some_and(|bank| bank.enabled & self.group_enabled_mask(bank) & bit(intid) != 0)
    }

    /// The interrupts of `bank` that may be listed: raised, enabled, not listed or active, of
    /// an enabled group.
    #[inline(always)]
    fn deliverable(&self, bank: &Bank) -> u128 {
        // Nothing raised and enabled is the common case (a vCPU about to wait, one woken by a
        // message, one that polls its messages with their interrupt disabled): answered from
        // three of the bank's words, in the caller.
        if (bank.pending | bank.level) & bank.enabled == 0 {
            return 0;
        }
        self.deliverable_raised(bank)
    }

    /// [`Vgic::deliverable`] of a bank with something raised.
    #[inline(never)]
    fn deliverable_raised(&self, bank: &Bank) -> u128 {
        let pending = bank.pending() & bank.enabled & !bank.listed & !bank.active;
        if pending == 0 {
            return 0;
        }
        pending & self.group_enabled_mask(bank)
    }

    /// Interrupts raised and not yet done with: pending (or a level high), active or held in a
    /// list register, over every vCPU's SGIs and PPIs and the SPIs: what a VM restarted from
    /// its pristine image must find at zero.
    pub fn raised_count(&self) -> u32 {
        let count = |bank: &Bank| (bank.pending() | bank.active | bank.listed).count_ones();
        self.private[..self.vcpus.min(MAX_VCPUS)]
            .iter()
            .map(count)
            .sum::<u32>()
            + count(&self.spis)
    }

    /// The highest-priority interrupt that should be put in a list register for `vcpu`:
    /// `(intid, priority, group1)`. Ties go to the lowest interrupt id.
    pub fn next_pending(&self, vcpu: usize) -> Option<(u32, u8, bool)> {
        let private = self.private.get(vcpu)?;
        let candidates = (self.deliverable(private) & PRIVATE_MASK)
            | (self.deliverable(&self.spis) & self.owned & !PRIVATE_MASK);
        // Nothing deliverable is the common answer (a vCPU about to wait): given without the
        // frame of the search below.
        if candidates == 0 {
            return None;
        }
        self.best_candidate(vcpu, candidates)
    }

    /// [`Vgic::next_pending`]'s search among the deliverable interrupts `candidates`.
    #[inline(never)]
    fn best_candidate(&self, vcpu: usize, mut candidates: u128) -> Option<(u32, u8, bool)> {
        let mut best: Option<(u32, u8)> = None;
        while candidates != 0 {
            let intid = candidates.trailing_zeros();
            candidates &= candidates - 1;
            if intid >= 32 && self.spi_target(intid) != vcpu {
                continue;
            }
            let priority = self.priority(vcpu, intid);
            if best.is_none_or(|(_, best_priority)| priority < best_priority) {
                best = Some((intid, priority));
            }
        }
        let (intid, priority) = best?;
        let group1 = self.bank(vcpu, intid)?.group1 & bit(intid) != 0;
        Some((intid, priority, group1))
    }

    /// If `intid` is deliverable to `vcpu` now, marks it listed and returns its
    /// `(priority, group1)`: a shortcut of [`next_pending`](Self::next_pending) +
    /// [`mark_listed`](Self::mark_listed) for one known interrupt (the virtual timer).
    pub fn take_if_deliverable(&mut self, vcpu: usize, intid: u32) -> Option<(u8, bool)> {
        let bank = self.bank(vcpu, intid)?;
        if self.deliverable(bank) & self.owned & bit(intid) == 0
            || (intid >= 32 && self.spi_target(intid) != vcpu)
        {
            return None;
        }
        let group1 = bank.group1 & bit(intid) != 0;
        let priority = self.priority(vcpu, intid);
        self.mark_listed(vcpu, intid);
        Some((priority, group1))
    }

    /// Fills the free list registers of `vcpu` with its highest-priority deliverable interrupts:
    /// `occupied` has a bit per list register in use (of `list_registers`), and `write(lr,
    /// intid, priority, group1)` puts one in register `lr`. Returns the registers now in use
    /// and whether interrupts still wait for a register, in which case the caller asks for
    /// the underflow maintenance interrupt (ICH_HCR_EL2.UIE, GICv3 spec 12.4.3) so that they
    /// are listed once the guest has finished with the others. That answer holds whether the
    /// registers were filled now or were already full.
    pub fn fill_list_registers(
        &mut self,
        vcpu: usize,
        occupied: u64,
        list_registers: usize,
        mut write: impl FnMut(usize, u32, u8, bool),
    ) -> (u64, bool) {
        let mut occupied = occupied;
        for lr in 0..list_registers.min(64) {
            let bit = 1u64 << lr;
            if occupied & bit != 0 {
                continue;
            }
            let Some((intid, priority, group1)) = self.next_pending(vcpu) else {
                return (occupied, false);
            };
            write(lr, intid, priority, group1);
            self.mark_listed(vcpu, intid);
            occupied |= bit;
        }
        (occupied, self.next_pending(vcpu).is_some())
    }

    /// vCPU `vcpu` (re)starts from power-off (PSCI CPU_ON) or stopped: its redistributor
    /// returns to its reset state, with no SGI or PPI pending, active, listed or enabled and
    /// the redistributor asleep until the guest wakes it. The VM's SPIs are left as they are.
    pub fn reset_vcpu(&mut self, vcpu: usize) {
        if vcpu < self.vcpus {
            self.private[vcpu] = Bank {
                edge: SGI_MASK,
                ..Bank::default()
            };
            self.private_priority[vcpu] = [0; 32];
            self.asleep[vcpu] = true;
        }
    }

    /// `intid` was written to a list register as pending: the list register now holds its state.
    pub fn mark_listed(&mut self, vcpu: usize, intid: u32) {
        if let Some(bank) = self.bank_mut(vcpu, intid) {
            bank.listed |= bit(intid);
            bank.pending &= !bit(intid);
        }
    }

    /// A list register gave `intid` back, in the state the guest left it.
    pub fn unlisted(&mut self, vcpu: usize, intid: u32, pending: bool, active: bool) {
        if let Some(bank) = self.bank_mut(vcpu, intid) {
            let mask = bit(intid);
            bank.listed &= !mask;
            if pending && bank.edge & mask != 0 {
                bank.pending |= mask;
            }
            if active {
                bank.active |= mask;
            } else {
                bank.active &= !mask;
            }
        }
    }

    fn check_width(offset: u64, size: u8, allowed: &[u8]) -> Result<(), DeviceError> {
        if allowed.contains(&size) && offset.is_multiple_of(u64::from(size)) {
            Ok(())
        } else {
            Err(DeviceError::BadWidth { offset, size })
        }
    }

    /// The 32 interrupts from `first` as bits 0-31, or an error beyond the implemented lines.
    fn window(first: u32) -> Result<u32, DeviceError> {
        if first as usize >= NR_IRQS {
            Err(DeviceError::InterruptOutOfRange { intid: first })
        } else {
            Ok(first)
        }
    }

    fn bit_read(&self, vcpu: usize, register: BitRegister, first: u32) -> Result<u64, DeviceError> {
        let first = Self::window(first)?;
        let bank = self
            .bank(vcpu, first)
            .ok_or(DeviceError::InterruptOutOfRange { intid: first })?;
        Ok(((register.get(bank) & self.owned) >> first) as u64 & 0xffff_ffff)
    }

    fn bit_write(
        &mut self,
        vcpu: usize,
        register: BitRegister,
        first: u32,
        value: u64,
    ) -> Result<(), DeviceError> {
        let first = Self::window(first)?;
        let written = u128::from(value as u32) << first;
        let unowned = written & !self.owned;
        if unowned != 0 && register.sets_state() {
            return Err(DeviceError::UnownedInterrupt {
                intid: unowned.trailing_zeros(),
            });
        }
        let covered = (0xffff_ffffu128 << first) & self.owned;
        let bits = written & self.owned;
        let bank = self
            .bank_mut(vcpu, first)
            .ok_or(DeviceError::InterruptOutOfRange { intid: first })?;
        register.apply(bank, bits, covered);
        Ok(())
    }

    fn priority_read(&self, vcpu: usize, first: u32, size: u8) -> Result<u64, DeviceError> {
        let mut value = 0;
        for byte in 0..u32::from(size) {
            let intid = first + byte;
            if intid as usize >= NR_IRQS {
                return Err(DeviceError::InterruptOutOfRange { intid });
            }
            if self.owns(intid) {
                value |= u64::from(self.priority(vcpu, intid)) << (8 * byte);
            }
        }
        Ok(value)
    }

    fn priority_write(
        &mut self,
        vcpu: usize,
        first: u32,
        size: u8,
        value: u64,
    ) -> Result<(), DeviceError> {
        for byte in 0..u32::from(size) {
            let intid = first + byte;
            if intid as usize >= NR_IRQS {
                return Err(DeviceError::InterruptOutOfRange { intid });
            }
            if self.owns(intid) {
                let priority = (value >> (8 * byte)) as u8;
                if intid < 32 {
                    self.private_priority[vcpu][intid as usize] = priority;
                } else {
                    self.spi_priority[intid as usize] = priority;
                }
            }
        }
        Ok(())
    }

    fn config_read(&self, vcpu: usize, first: u32) -> Result<u64, DeviceError> {
        let bank = self
            .bank(vcpu, first)
            .ok_or(DeviceError::InterruptOutOfRange { intid: first })?;
        let mut value = 0;
        for i in 0..16 {
            let intid = first + i;
            if self.owns(intid) && bank.edge & bit(intid) != 0 {
                value |= 2 << (2 * i);
            }
        }
        Ok(value)
    }

    fn config_write(&mut self, vcpu: usize, first: u32, value: u64) -> Result<(), DeviceError> {
        let owned = self.owned;
        let bank = self
            .bank_mut(vcpu, first)
            .ok_or(DeviceError::InterruptOutOfRange { intid: first })?;
        for i in 0..16 {
            let intid = first + i;
            // SGIs are fixed edge-triggered (ICFGR0 is read-only).
            if owned & bit(intid) != 0 && intid >= 16 {
                if value & (2 << (2 * i)) != 0 {
                    bank.edge |= bit(intid);
                } else {
                    bank.edge &= !bit(intid);
                }
            }
        }
        Ok(())
    }

    /// A guest read of the distributor frame.
    pub fn distributor_read(&self, offset: u64, size: u8) -> Result<u64, DeviceError> {
        match offset {
            0x6100..=0x7fdf => {
                Self::check_width(offset, size, &[4, 8])?;
                let intid = ((offset & !7) - 0x6000) as u32 / 8;
                if intid as usize >= NR_IRQS {
                    return Err(DeviceError::InterruptOutOfRange { intid });
                }
                let route = if self.owns(intid) {
                    self.route[intid as usize]
                } else {
                    0
                };
                Ok(if offset % 8 == 4 {
                    route >> 32
                } else if size == 4 {
                    route & 0xffff_ffff
                } else {
                    route
                })
            }
            0x400..=0x7ff => {
                Self::check_width(offset, size, &[1, 4])?;
                let first = (offset - 0x400) as u32;
                if first < 32 {
                    return Ok(0);
                }
                self.priority_read(0, first, size)
            }
            _ => {
                Self::check_width(offset, size, &[4])?;
                self.distributor_read32(offset)
            }
        }
    }

    /// The value of a distributor register that no guest write and no state changes, for a
    /// load of `size` bytes at `offset` that [`Vgic::distributor_read`] accepts: GICD_TYPER,
    /// GICD_IIDR, GICD_TYPER2, the reserved word at 0x10 and GICD_PIDR2 (GICv3 12.9). `None`
    /// for every other offset or width. Such a load needs no lock on the model.
    #[inline(always)]
    pub fn distributor_constant(offset: u64, size: u8) -> Option<u64> {
        if size != 4 {
            return None;
        }
        let value = match offset {
            0x0004 => ((NR_IRQS as u32 / 32) - 1) | (9 << 19),
            0x0008 => IIDR,
            0x000c | 0x0010 => 0,
            0xffe8 => PIDR2,
            _ => return None,
        };
        Some(u64::from(value))
    }

    fn distributor_read32(&self, offset: u64) -> Result<u64, DeviceError> {
        if let Some(value) = Self::distributor_constant(offset, 4) {
            return Ok(value);
        }
        Ok(u64::from(match offset {
            0x0000 => self.ctlr | CTLR_ARE | CTLR_DS,
            0x0080..=0x03ff => {
                let (register, first) = BitRegister::decode(offset)
                    .ok_or(DeviceError::InterruptOutOfRange { intid: 0 })?;
                // With affinity routing, the distributor's view of SGIs and PPIs is RAZ/WI.
                return if first < 32 {
                    Ok(0)
                } else {
                    self.bit_read(0, register, first)
                };
            }
            0x0c00..=0x0cff => {
                let first = ((offset - 0xc00) / 4 * 16) as u32;
                return if first < 32 {
                    Ok(0)
                } else {
                    self.config_read(0, first)
                };
            }
            _ => 0,
        }))
    }

    /// A guest write to the distributor frame.
    pub fn distributor_write(
        &mut self,
        offset: u64,
        size: u8,
        value: u64,
    ) -> Result<(), DeviceError> {
        match offset {
            0x6100..=0x7fdf => {
                Self::check_width(offset, size, &[4, 8])?;
                let intid = ((offset & !7) - 0x6000) as u32 / 8;
                if intid as usize >= NR_IRQS {
                    return Err(DeviceError::InterruptOutOfRange { intid });
                }
                if self.owns(intid) {
                    // Aff3 in [39:32], IRM in 31, Aff2..Aff0 in [23:0] (12.9.22).
                    const MASK: u64 = 0xff_80ff_ffff;
                    let route = &mut self.route[intid as usize];
                    *route = match (size, offset % 8) {
                        (8, _) => value & MASK,
                        (_, 0) => (*route & !0xffff_ffff) | (value & 0xffff_ffff & MASK),
                        _ => (*route & 0xffff_ffff) | ((value << 32) & MASK),
                    };
                }
                Ok(())
            }
            0x400..=0x7ff => {
                Self::check_width(offset, size, &[1, 4])?;
                let first = (offset - 0x400) as u32;
                if first < 32 {
                    return Ok(());
                }
                self.priority_write(0, first, size, value)
            }
            _ => {
                Self::check_width(offset, size, &[4])?;
                match offset {
                    0x0000 => self.ctlr = value as u32 & (CTLR_ENABLE_GRP0 | CTLR_ENABLE_GRP1),
                    0x0080..=0x03ff => {
                        if let Some((register, first)) = BitRegister::decode(offset) {
                            if first >= 32 {
                                self.bit_write(0, register, first, value)?;
                            }
                        }
                    }
                    0x0c00..=0x0cff => {
                        let first = ((offset - 0xc00) / 4 * 16) as u32;
                        if first >= 32 {
                            self.config_write(0, first, value)?;
                        }
                    }
                    _ => {}
                }
                Ok(())
            }
        }
    }

    fn redistributor_vcpu(&self, offset: u64) -> Result<(usize, u64), DeviceError> {
        let vcpu = (offset / REDISTRIBUTOR_SIZE) as usize;
        if vcpu >= self.vcpus {
            return Err(DeviceError::NoSuchRedistributor { offset });
        }
        Ok((vcpu, offset % REDISTRIBUTOR_SIZE))
    }

    /// A guest read of the redistributor region (all vCPUs' redistributors, back to back).
    pub fn redistributor_read(&self, offset: u64, size: u8) -> Result<u64, DeviceError> {
        let (vcpu, offset) = self.redistributor_vcpu(offset)?;
        if offset == 0x0008 || offset == 0x000c {
            // GICR_TYPER (12.10.40): affinity in [63:32], Processor_Number in [23:8], Last in bit 4.
            Self::check_width(offset, size, &[4, 8])?;
            let last = if vcpu + 1 == self.vcpus { 1 << 4 } else { 0 };
            let typer = ((vcpu as u64) << 32) | ((vcpu as u64) << 8) | last;
            return Ok(match (size, offset) {
                (8, _) => typer,
                (_, 0x0008) => typer & 0xffff_ffff,
                _ => typer >> 32,
            });
        }
        if (SGI_FRAME + 0x400..SGI_FRAME + 0x420).contains(&offset) {
            Self::check_width(offset, size, &[1, 4])?;
            return self.priority_read(vcpu, (offset - SGI_FRAME - 0x400) as u32, size);
        }
        Self::check_width(offset, size, &[4])?;
        Ok(match offset {
            0x0004 => u64::from(IIDR),
            0x0014 if self.asleep[vcpu] => u64::from(WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP),
            0xffe8 => u64::from(PIDR2),
            o if (SGI_FRAME + 0x80..SGI_FRAME + 0x400).contains(&o) => {
                match BitRegister::decode(o - SGI_FRAME) {
                    Some((register, 0)) => self.bit_read(vcpu, register, 0)?,
                    _ => 0,
                }
            }
            o if o == SGI_FRAME + 0xc00 || o == SGI_FRAME + 0xc04 => {
                self.config_read(vcpu, ((o - SGI_FRAME - 0xc00) * 4) as u32)?
            }
            _ => 0,
        })
    }

    /// A guest write to the redistributor region.
    pub fn redistributor_write(
        &mut self,
        offset: u64,
        size: u8,
        value: u64,
    ) -> Result<(), DeviceError> {
        let (vcpu, offset) = self.redistributor_vcpu(offset)?;
        if (SGI_FRAME + 0x400..SGI_FRAME + 0x420).contains(&offset) {
            Self::check_width(offset, size, &[1, 4])?;
            return self.priority_write(vcpu, (offset - SGI_FRAME - 0x400) as u32, size, value);
        }
        Self::check_width(offset, size, &[4, 8])?;
        match offset {
            0x0014 => self.asleep[vcpu] = value as u32 & WAKER_PROCESSOR_SLEEP != 0,
            o if (SGI_FRAME + 0x80..SGI_FRAME + 0x400).contains(&o) => {
                if let Some((register, 0)) = BitRegister::decode(o - SGI_FRAME) {
                    self.bit_write(vcpu, register, 0, value)?;
                }
            }
            o if o == SGI_FRAME + 0xc04 => self.config_write(vcpu, 16, value)?,
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UART: u32 = 33;

    fn enabled_gic() -> Vgic {
        let mut gic = Vgic::new(2, &[UART]);
        gic.distributor_write(0x0000, 4, u64::from(CTLR_ENABLE_GRP1))
            .unwrap();
        gic
    }

    /// A reset in place leaves exactly what a new GIC has, whatever was done before it.
    #[test]
    fn reset_in_place_is_a_new_gic() {
        let mut gic = enabled_gic();
        let fresh = std::format!("{:?}", Vgic::new(3, &[UART, 40]));
        for offset in (0x100..0x200).step_by(4) {
            let _ = gic.distributor_write(offset, 4, 0xffff_ffff);
        }
        for offset in (0x400..0x480).step_by(4) {
            let _ = gic.distributor_write(offset, 4, 0x8080_8080);
        }
        let _ = gic.distributor_write(0x6100, 8, 0x0000_0001);
        gic.raise(1, 27);
        gic.raise(0, 3);
        let _ = gic.take_if_deliverable(0, 3);
        assert_eq!(
            gic.raised_count(),
            2,
            "one pending, one taken (active or listed)"
        );
        gic.reset(3, &[UART, 40]);
        assert_eq!(std::format!("{gic:?}"), fresh);
        assert_eq!(gic.raised_count(), 0);
    }

    #[test]
    fn distributor_constants_read_as_the_model_does() {
        let mut gic = Vgic::new(2, &[UART]);
        let mut constants = 0;
        for round in 0..2 {
            if round == 1 {
                // Whatever a guest writes, the constant registers do not change.
                for offset in (0..0x1_0000u64).step_by(4) {
                    let _ = gic.distributor_write(offset, 4, u64::MAX);
                }
            }
            for offset in 0..0x1_0000u64 {
                for size in [1, 2, 4, 8] {
                    if let Some(value) = Vgic::distributor_constant(offset, size) {
                        assert_eq!(gic.distributor_read(offset, size), Ok(value), "{offset:#x}");
                        constants += 1;
                    }
                }
            }
        }
        assert_eq!(constants, 2 * 5);
        assert_eq!(Vgic::distributor_constant(0x0004, 4), Some(0x0048_0003));
        assert_eq!(Vgic::distributor_constant(0x0000, 4), None);
        assert_eq!(Vgic::distributor_constant(0x0004, 8), None);
    }

    #[test]
    fn typer_and_ctlr() {
        let gic = enabled_gic();
        let typer = gic.distributor_read(0x0004, 4).unwrap();
        assert_eq!((typer & 0x1f) as usize, NR_IRQS / 32 - 1);
        let ctlr = gic.distributor_read(0x0000, 4).unwrap() as u32;
        assert_eq!(ctlr, CTLR_ENABLE_GRP1 | CTLR_ARE | CTLR_DS);
        assert_eq!(gic.distributor_read(0xffe8, 4), Ok(u64::from(PIDR2)));
    }

    #[test]
    fn ppi_enable_and_delivery_through_sgi_frame() {
        let mut gic = enabled_gic();
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 1 << 27)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, 1 << 27)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x41b, 1, 0x80).unwrap();
        assert!(gic.is_enabled(0, 27));
        assert!(!gic.is_enabled(1, 27), "PPIs are per vCPU");
        assert_eq!(gic.next_pending(0), None);
        gic.raise(0, 27);
        assert_eq!(gic.next_pending(0), Some((27, 0x80, true)));
        gic.mark_listed(0, 27);
        assert_eq!(
            gic.next_pending(0),
            None,
            "listed interrupts are not offered twice"
        );
        gic.unlisted(0, 27, false, false);
        assert_eq!(gic.next_pending(0), None);
    }

    #[test]
    fn level_spi_follows_its_line_and_route() {
        let mut gic = enabled_gic();
        gic.distributor_write(0x0084, 4, 1 << 1).unwrap();
        gic.distributor_write(0x0104, 4, 1 << 1).unwrap();
        gic.distributor_write(0x6000 + 8 * 33, 8, 1).unwrap();
        assert_eq!(gic.spi_target(UART), 1);
        gic.set_level(UART, true);
        assert_eq!(gic.next_pending(0), None);
        assert_eq!(gic.next_pending(1).map(|p| p.0), Some(UART));
        assert_eq!(
            gic.distributor_read(0x0204, 4),
            Ok(1 << 1),
            "ISPENDR shows the level"
        );
        gic.set_level(UART, false);
        assert_eq!(gic.next_pending(1), None);
    }

    #[test]
    fn take_if_deliverable_only_when_enabled_and_not_listed() {
        let mut gic = enabled_gic();
        gic.raise(0, 27);
        assert_eq!(gic.take_if_deliverable(0, 27), None, "disabled");
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 1 << 27)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, 1 << 27)
            .unwrap();
        assert_eq!(gic.take_if_deliverable(0, 27), Some((0, true)));
        gic.raise(0, 27);
        assert_eq!(gic.take_if_deliverable(0, 27), None, "already listed");
        gic.unlisted(0, 27, false, false);
        assert_eq!(gic.take_if_deliverable(0, 27), Some((0, true)));
    }

    #[test]
    fn more_pending_than_list_registers_all_delivered_in_priority_order() {
        let mut gic = enabled_gic();
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 0xffff)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, 0xffff)
            .unwrap();
        for sgi in 0..16u32 {
            gic.redistributor_write(
                SGI_FRAME + 0x400 + u64::from(sgi),
                1,
                u64::from(0xf0 - sgi as u8 * 8),
            )
            .unwrap();
            gic.raise(0, sgi);
        }
        // Four list registers: deliver four, let the guest finish them, repeat.
        let mut delivered = Vec::new();
        while delivered.len() < 16 {
            let mut batch = Vec::new();
            for _ in 0..4 {
                let Some((intid, _, _)) = gic.next_pending(0) else {
                    break;
                };
                gic.mark_listed(0, intid);
                batch.push(intid);
            }
            assert!(!batch.is_empty(), "pending interrupts were lost");
            for &intid in &batch {
                gic.unlisted(0, intid, false, false);
            }
            delivered.extend(batch);
        }
        assert_eq!(
            delivered,
            (0..16).rev().collect::<Vec<u32>>(),
            "highest priority (lowest value) first"
        );
        assert_eq!(gic.next_pending(0), None);
    }

    /// A minimal model of the list registers: the guest finishes what is listed.
    fn fill(gic: &mut Vgic, occupied: u64, listed: &mut Vec<(usize, u32)>) -> (u64, bool) {
        gic.fill_list_registers(0, occupied, 4, |lr, intid, _, _| listed.push((lr, intid)))
    }

    #[test]
    fn full_list_registers_still_ask_for_the_underflow_interrupt() {
        let mut gic = enabled_gic();
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 0xffff_ffff)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, 0xffff)
            .unwrap();
        let mut listed = Vec::new();
        let mut occupied = 0;
        let mut underflow = false;
        // The SGIs come one trap at a time, as a guest raises them with IRQs masked.
        for sgi in 0..16 {
            gic.raise(0, sgi);
            (occupied, underflow) = fill(&mut gic, occupied, &mut listed);
        }
        assert_eq!(occupied, 0b1111);
        assert_eq!(listed.iter().map(|l| l.1).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert!(
            underflow,
            "12 SGIs wait with every list register full: the underflow interrupt must be asked for"
        );
        // The guest takes and finishes all four; the underflow interrupt refills.
        for (_, intid) in listed.drain(..) {
            gic.unlisted(0, intid, false, false);
        }
        let (occupied, underflow) = fill(&mut gic, 0, &mut listed);
        assert_eq!(occupied, 0b1111);
        assert_eq!(listed.iter().map(|l| l.1).collect::<Vec<_>>(), [4, 5, 6, 7]);
        assert!(underflow);
    }

    #[test]
    fn nothing_waiting_asks_for_no_underflow_interrupt() {
        let mut gic = enabled_gic();
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 0xffff_ffff)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, 0xffff)
            .unwrap();
        gic.raise(0, 1);
        gic.raise(0, 1);
        let mut listed = Vec::new();
        assert_eq!(fill(&mut gic, 0b0100, &mut listed), (0b0101, false));
        assert_eq!(
            listed,
            [(0, 1)],
            "an SGI raised twice before it is taken is one"
        );
    }

    #[test]
    fn a_vcpu_restart_leaves_no_private_interrupt_state() {
        let mut gic = enabled_gic();
        let vcpu1 = REDISTRIBUTOR_SIZE + SGI_FRAME;
        let enable_timer = |gic: &mut Vgic| {
            gic.redistributor_write(vcpu1 + 0x080, 4, 0xffff_ffff)
                .unwrap();
            gic.redistributor_write(vcpu1 + 0x100, 4, 1 << 27).unwrap();
        };
        enable_timer(&mut gic);
        gic.raise(1, 27);
        assert_eq!(gic.next_pending(1).map(|p| p.0), Some(27));
        // Listed, taken, and left active when the vCPU went off (CPU_OFF in the handler).
        gic.mark_listed(1, 27);
        gic.unlisted(1, 27, false, true);
        gic.raise(1, 27);
        assert_eq!(gic.next_pending(1), None, "active: not offered again");
        gic.reset_vcpu(1);
        assert!(
            !gic.is_enabled(1, 27),
            "the redistributor is back to its reset state"
        );
        assert_eq!(
            gic.redistributor_read(REDISTRIBUTOR_SIZE + 0x14, 4),
            Ok(u64::from(WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP)),
            "asleep until the guest wakes it"
        );
        enable_timer(&mut gic);
        assert_eq!(
            gic.next_pending(1),
            None,
            "nothing pending or active survives"
        );
        gic.raise(1, 27);
        assert_eq!(
            gic.next_pending(1).map(|p| p.0),
            Some(27),
            "the timer works again"
        );
    }

    #[test]
    fn highest_priority_first() {
        let mut gic = enabled_gic();
        gic.redistributor_write(SGI_FRAME + 0x080, 4, 0xffff_ffff)
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x100, 4, (1 << 27) | (1 << 3))
            .unwrap();
        gic.redistributor_write(SGI_FRAME + 0x41b, 1, 0xa0).unwrap();
        gic.redistributor_write(SGI_FRAME + 0x400, 4, 0x9000_0000)
            .unwrap();
        gic.raise(0, 27);
        gic.raise(0, 3);
        assert_eq!(gic.next_pending(0).map(|p| p.0), Some(3));
    }

    #[test]
    fn unowned_spi_cannot_be_enabled() {
        let mut gic = enabled_gic();
        assert_eq!(
            gic.distributor_write(0x0104, 4, 1 << 2),
            Err(DeviceError::UnownedInterrupt { intid: 34 })
        );
        // Linux-style bulk writes that only disable or configure are harmless.
        gic.distributor_write(0x0184, 4, 0xffff_ffff).unwrap();
        gic.distributor_write(0x0084, 4, 0xffff_ffff).unwrap();
        gic.distributor_write(0x0420, 4, 0xa0a0_a0a0).unwrap();
        assert_eq!(
            gic.distributor_read(0x0420, 4),
            Ok(0xa0a0_a0a0 & 0xff00),
            "only INTID 33 is owned"
        );
        assert_eq!(gic.distributor_read(0x0084, 4), Ok(1 << 1));
    }

    #[test]
    fn beyond_the_lines_is_an_error() {
        let mut gic = enabled_gic();
        assert_eq!(
            gic.distributor_write(0x0110, 4, 1),
            Err(DeviceError::InterruptOutOfRange { intid: 128 })
        );
        assert!(gic.distributor_read(0x6000 + 8 * 200, 8).is_err());
    }

    #[test]
    fn redistributors_typer_last_and_waker() {
        let mut gic = enabled_gic();
        let first = gic.redistributor_read(0x0008, 8).unwrap();
        let second = gic
            .redistributor_read(REDISTRIBUTOR_SIZE + 0x0008, 8)
            .unwrap();
        assert_eq!(first & (1 << 4), 0);
        assert_eq!(second & (1 << 4), 1 << 4);
        assert_eq!(second >> 32, 1);
        assert_eq!(
            gic.redistributor_read(2 * REDISTRIBUTOR_SIZE, 4),
            Err(DeviceError::NoSuchRedistributor {
                offset: 2 * REDISTRIBUTOR_SIZE
            })
        );
        assert_eq!(gic.redistributor_read(0x0014, 4), Ok(6));
        gic.redistributor_write(0x0014, 4, 0).unwrap();
        assert_eq!(gic.redistributor_read(0x0014, 4), Ok(0));
    }

    #[test]
    fn bad_widths_are_refused() {
        let gic = enabled_gic();
        assert!(gic.distributor_read(0x0004, 2).is_err());
        assert!(gic.distributor_read(0x0005, 1).is_err());
    }
}

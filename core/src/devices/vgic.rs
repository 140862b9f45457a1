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

use super::DeviceError;

/// Interrupt ids implemented: SGIs, PPIs and 96 SPIs (`GICD_TYPER.ITLinesNumber = 3`).
pub const NR_IRQS: usize = 128;
/// Most vCPUs (redistributors) per VM.
pub const MAX_VCPUS: usize = 8;
const NR_SPIS: usize = NR_IRQS - 32;
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

#[derive(Clone, Copy, Debug, Default)]
struct Irq {
    enabled: bool,
    /// Latched pending state (edge, software, SGI).
    pending: bool,
    /// Line level of a level-sensitive device interrupt.
    level: bool,
    active: bool,
    group1: bool,
    edge: bool,
    /// Currently held in a list register.
    listed: bool,
    priority: u8,
    /// GICD_IROUTER value (SPIs only).
    route: u64,
}

impl Irq {
    fn is_pending(&self) -> bool {
        self.pending || (self.level && !self.edge)
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

    fn get(self, irq: &Irq) -> bool {
        match self {
            BitRegister::Group => irq.group1,
            BitRegister::SetEnable | BitRegister::ClearEnable => irq.enabled,
            BitRegister::SetPending | BitRegister::ClearPending => irq.is_pending(),
            BitRegister::SetActive | BitRegister::ClearActive => irq.active,
        }
    }

    fn write_one(self, irq: &mut Irq) {
        match self {
            BitRegister::Group => irq.group1 = true,
            BitRegister::SetEnable => irq.enabled = true,
            BitRegister::ClearEnable => irq.enabled = false,
            BitRegister::SetPending => irq.pending = true,
            BitRegister::ClearPending => irq.pending = false,
            BitRegister::SetActive => irq.active = true,
            BitRegister::ClearActive => irq.active = false,
        }
    }
}

/// The virtual GIC state of one VM.
#[derive(Clone, Debug)]
pub struct Vgic {
    ctlr: u32,
    vcpus: usize,
    spis: [Irq; NR_SPIS],
    owned: [bool; NR_SPIS],
    private: [[Irq; 32]; MAX_VCPUS],
    asleep: [bool; MAX_VCPUS],
}

impl Vgic {
    /// A GIC in its reset state for `vcpus` vCPUs, owning the SPIs listed in `owned_spis`.
    pub fn new(vcpus: usize, owned_spis: &[u32]) -> Self {
        let mut vgic = Self {
            ctlr: 0,
            vcpus: vcpus.clamp(1, MAX_VCPUS),
            spis: [Irq::default(); NR_SPIS],
            owned: [false; NR_SPIS],
            private: [[Irq::default(); 32]; MAX_VCPUS],
            asleep: [true; MAX_VCPUS],
        };
        for &intid in owned_spis {
            if let Some(slot) = (intid as usize)
                .checked_sub(32)
                .and_then(|i| vgic.owned.get_mut(i))
            {
                *slot = true;
            }
        }
        for vcpu in vgic.private.iter_mut() {
            for (intid, irq) in vcpu.iter_mut().enumerate() {
                // SGIs are always edge-triggered; PPIs reset as level (GICR_ICFGR1).
                irq.edge = intid < 16;
            }
        }
        vgic
    }

    /// Number of vCPUs (redistributors).
    pub fn vcpus(&self) -> usize {
        self.vcpus
    }

    fn irq(&self, vcpu: usize, intid: u32) -> Option<&Irq> {
        match intid as usize {
            i @ 0..=31 => self.private.get(vcpu).map(|p| &p[i]),
            i if i < NR_IRQS => Some(&self.spis[i - 32]),
            _ => None,
        }
    }

    fn irq_mut(&mut self, vcpu: usize, intid: u32) -> Option<&mut Irq> {
        match intid as usize {
            i @ 0..=31 => self.private.get_mut(vcpu).map(|p| &mut p[i]),
            i if i < NR_IRQS => Some(&mut self.spis[i - 32]),
            _ => None,
        }
    }

    fn owns(&self, intid: u32) -> bool {
        intid < 32
            || self
                .owned
                .get(intid as usize - 32)
                .copied()
                .unwrap_or(false)
    }

    /// The vCPU an SPI is routed to (`GICD_IROUTER.Aff0`; vCPU `i` has MPIDR Aff0 = `i`).
    pub fn spi_target(&self, intid: u32) -> usize {
        self.irq(0, intid)
            .map(|irq| (irq.route & 0xff) as usize)
            .filter(|&vcpu| vcpu < self.vcpus)
            .unwrap_or(0)
    }

    /// Sets the line level of a level-sensitive SPI (from a device model).
    pub fn set_level(&mut self, intid: u32, level: bool) {
        if intid >= 32 {
            if let Some(irq) = self.irq_mut(0, intid) {
                irq.level = level;
            }
        }
    }

    /// Makes an interrupt pending for `vcpu` (an SGI, a PPI, or an edge on an SPI).
    pub fn raise(&mut self, vcpu: usize, intid: u32) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.pending = true;
        }
    }

    /// Whether `intid` is enabled for `vcpu` (and the distributor forwards its group).
    pub fn is_enabled(&self, vcpu: usize, intid: u32) -> bool {
        self.irq(vcpu, intid)
            .is_some_and(|irq| irq.enabled && self.group_enabled(irq))
    }

    fn group_enabled(&self, irq: &Irq) -> bool {
        let bit = if irq.group1 {
            CTLR_ENABLE_GRP1
        } else {
            CTLR_ENABLE_GRP0
        };
        self.ctlr & bit != 0
    }

    /// The highest-priority interrupt that should be put in a list register for `vcpu`:
    /// `(intid, priority, group1)`.
    pub fn next_pending(&self, vcpu: usize) -> Option<(u32, u8, bool)> {
        let private = self
            .private
            .get(vcpu)?
            .iter()
            .enumerate()
            .map(|(i, irq)| (i as u32, irq));
        let spis = self
            .spis
            .iter()
            .enumerate()
            .map(|(i, irq)| (i as u32 + 32, irq))
            .filter(|&(intid, _)| self.owns(intid) && self.spi_target(intid) == vcpu);
        private
            .chain(spis)
            .filter(|(_, irq)| {
                irq.is_pending()
                    && irq.enabled
                    && !irq.listed
                    && !irq.active
                    && self.group_enabled(irq)
            })
            .min_by_key(|(_, irq)| irq.priority)
            .map(|(intid, irq)| (intid, irq.priority, irq.group1))
    }

    /// `intid` was written to a list register as pending: the list register now holds its state.
    pub fn mark_listed(&mut self, vcpu: usize, intid: u32) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.listed = true;
            irq.pending = false;
        }
    }

    /// A list register gave `intid` back, in the state the guest left it.
    pub fn unlisted(&mut self, vcpu: usize, intid: u32, pending: bool, active: bool) {
        if let Some(irq) = self.irq_mut(vcpu, intid) {
            irq.listed = false;
            irq.pending |= pending && irq.edge;
            irq.active = active;
        }
    }

    fn check_width(offset: u64, size: u8, allowed: &[u8]) -> Result<(), DeviceError> {
        if allowed.contains(&size) && offset % u64::from(size) == 0 {
            Ok(())
        } else {
            Err(DeviceError::BadWidth { offset, size })
        }
    }

    fn bit_read(&self, vcpu: usize, register: BitRegister, first: u32) -> Result<u64, DeviceError> {
        let mut value = 0u64;
        for bit in 0..32 {
            let intid = first + bit;
            let irq = self
                .irq(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            if self.owns(intid) && register.get(irq) {
                value |= 1 << bit;
            }
        }
        Ok(value)
    }

    fn bit_write(
        &mut self,
        vcpu: usize,
        register: BitRegister,
        first: u32,
        value: u64,
    ) -> Result<(), DeviceError> {
        if first as usize >= NR_IRQS {
            return Err(DeviceError::InterruptOutOfRange { intid: first });
        }
        for bit in 0..32 {
            let intid = first + bit;
            let set = value & (1 << bit) != 0;
            if !self.owns(intid) {
                if set && register.sets_state() {
                    return Err(DeviceError::UnownedInterrupt { intid });
                }
                continue;
            }
            let irq = self
                .irq_mut(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            match (register, set) {
                (BitRegister::Group, _) => irq.group1 = set,
                (_, true) => register.write_one(irq),
                (_, false) => {}
            }
        }
        Ok(())
    }

    fn priority_read(&self, vcpu: usize, first: u32, size: u8) -> Result<u64, DeviceError> {
        let mut value = 0;
        for byte in 0..u32::from(size) {
            let intid = first + byte;
            let irq = self
                .irq(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            if self.owns(intid) {
                value |= u64::from(irq.priority) << (8 * byte);
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
            let owned = self.owns(intid);
            let irq = self
                .irq_mut(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            if owned {
                irq.priority = (value >> (8 * byte)) as u8;
            }
        }
        Ok(())
    }

    fn config_read(&self, vcpu: usize, first: u32) -> Result<u64, DeviceError> {
        let mut value = 0;
        for i in 0..16 {
            let intid = first + i;
            let irq = self
                .irq(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            if self.owns(intid) && irq.edge {
                value |= 2 << (2 * i);
            }
        }
        Ok(value)
    }

    fn config_write(&mut self, vcpu: usize, first: u32, value: u64) -> Result<(), DeviceError> {
        for i in 0..16 {
            let intid = first + i;
            let owned = self.owns(intid);
            let irq = self
                .irq_mut(vcpu, intid)
                .ok_or(DeviceError::InterruptOutOfRange { intid })?;
            // SGIs are fixed edge-triggered (ICFGR0 is read-only).
            if owned && intid >= 16 {
                irq.edge = value & (2 << (2 * i)) != 0;
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
                let irq = self
                    .irq(0, intid)
                    .ok_or(DeviceError::InterruptOutOfRange { intid })?;
                let route = if self.owns(intid) { irq.route } else { 0 };
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

    fn distributor_read32(&self, offset: u64) -> Result<u64, DeviceError> {
        let typer = ((NR_IRQS as u32 / 32) - 1) | (9 << 19);
        Ok(u64::from(match offset {
            0x0000 => self.ctlr | CTLR_ARE | CTLR_DS,
            0x0004 => typer,
            0x0008 => IIDR,
            0x000c | 0x0010 => 0,
            0xffe8 => PIDR2,
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
                let owned = self.owns(intid);
                let irq = self
                    .irq_mut(0, intid)
                    .ok_or(DeviceError::InterruptOutOfRange { intid })?;
                if owned {
                    // Aff3 in [39:32], IRM in 31, Aff2..Aff0 in [23:0] (12.9.22).
                    const MASK: u64 = 0xff_80ff_ffff;
                    irq.route = match (size, offset % 8) {
                        (8, _) => value & MASK,
                        (_, 0) => (irq.route & !0xffff_ffff) | (value & 0xffff_ffff & MASK),
                        _ => (irq.route & 0xffff_ffff) | ((value << 32) & MASK),
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
            0x0014 => {
                if self.asleep[vcpu] {
                    u64::from(WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP)
                } else {
                    0
                }
            }
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

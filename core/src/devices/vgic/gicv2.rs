//! The GICv2 view of a VM's emulated distributor (GICv2 architecture specification, IHI 0048B,
//! 4.3 GICD_*), decoded over the same interrupt state as the GICv3 view, so that the delivery
//! functions ([`Vgic::next_pending`], [`Vgic::fill_list_registers`]...) serve both unchanged.
//!
//! The guest sees a GICv2 without the Security Extensions (`GICD_TYPER.SecurityExtn = 0`), as
//! Linux sees QEMU `virt,gic-version=2`'s from EL1, with one CPU interface per vCPU: vCPU `i`
//! is CPU `i`, its CPU mask `1 << i`. The choices where the architecture leaves one, and the
//! model's simplifications:
//! - Registers are those of the GICv3 view where they mean the same, with its ownership rules
//!   and its refusal of accesses beyond the implemented lines (ids 128 and up). Word 0 of the
//!   1-bit-per-interrupt registers, GICD_IPRIORITYR0-7 and GICD_ICFGR0-1 (ids 0-31) are the
//!   accessing vCPU's own (banked).
//! - SGIs' enable bits are read-write, as PPIs' (4.3.5 allows RAO/WI or RW); their
//!   set- and clear-pending bits in GICD_ISPENDR0/ICPENDR0 are read-only (4.3.7, 4.3.8):
//!   GICD_SGIR and GICD_SPENDSGIR/CPENDSGIR set and clear them.
//! - GICD_ITARGETSR of an SPI keeps the CPU targets the guest wrote (those of existing vCPUs);
//!   the SPI is delivered to the lowest, whose index goes into the GICv3 route that
//!   [`Vgic::spi_target`] reads. An SPI with no target is not forwarded to any CPU (4.3.12):
//!   its enable bit is held aside, so that the delivery functions see it disabled, until the
//!   guest gives it a target. Its set-enable bit reads as the guest left it.
//! - GICD_ITARGETSR0-7 (ids 0-31) read the reader's own mask in every byte, also with one vCPU
//!   (where a uniprocessor GIC would read zero, 4.3.12), so that Linux finds its CPU's mask.
//! - An SGI is pending or not for a target vCPU, whatever its source: GICD_SPENDSGIR and
//!   GICD_CPENDSGIR read an SGI pending as pending from CPU 0 (`0x01` in its byte), any set
//!   bit in a written byte sets or clears it, and the list register the caller fills for an
//!   SGI names CPU 0, which the guest's GICC_IAR reads in CPUID.
//! - GICD_SGIR's reserved TargetListFilter (3) sends nothing. NSATT is ignored.
//! - Offsets with no register in the 64 KiB frame (reserved, implementation defined,
//!   GICD_NSACR, the identification registers but ICPIDR2) read zero and ignore writes; the
//!   only widths are 32 bits, and 8 bits for GICD_IPRIORITYR, GICD_ITARGETSR and
//!   GICD_SPENDSGIR/CPENDSGIR (4.1.4).

use super::{
    bit, BitRegister, DeviceError, Vgic, CTLR_ENABLE_GRP0, CTLR_ENABLE_GRP1, IIDR, MAX_VCPUS,
    NR_IRQS, PRIVATE_MASK, SGI_MASK,
};

const _: () = assert!(
    MAX_VCPUS <= 8,
    "a GICv2 has at most 8 CPU interfaces (GICD_TYPER.CPUNumber, GICD_ITARGETSR's bytes)"
);

/// GICv2 distributor register offsets (4.1.2, table 4-1).
mod offset {
    /// GICD_CTLR.
    pub const CTLR: u64 = 0x000;
    /// GICD_TYPER.
    pub const TYPER: u64 = 0x004;
    /// GICD_IIDR.
    pub const IIDR: u64 = 0x008;
    /// GICD_IGROUPRn to GICD_ICACTIVERn, 1 bit per interrupt.
    pub const BIT_REGISTERS: u64 = 0x080;
    /// Last byte of the 1-bit-per-interrupt registers.
    pub const BIT_REGISTERS_END: u64 = 0x3ff;
    /// GICD_IPRIORITYRn, a byte per interrupt.
    pub const IPRIORITYR: u64 = 0x400;
    /// GICD_ITARGETSRn, a byte per interrupt.
    pub const ITARGETSR: u64 = 0x800;
    /// GICD_ICFGRn, 2 bits per interrupt.
    pub const ICFGR: u64 = 0xc00;
    /// End of the GICD_ICFGRn.
    pub const ICFGR_END: u64 = 0xd00;
    /// GICD_SGIR.
    pub const SGIR: u64 = 0xf00;
    /// GICD_CPENDSGIRn, a byte per SGI.
    pub const CPENDSGIR: u64 = 0xf10;
    /// GICD_SPENDSGIRn, a byte per SGI.
    pub const SPENDSGIR: u64 = 0xf20;
    /// End of the GICD_SPENDSGIRn.
    pub const SPENDSGIR_END: u64 = 0xf30;
    /// ICPIDR2.
    pub const ICPIDR2: u64 = 0xfe8;
    /// Size of the distributor frame in Keel's guest layout (`abi::layout::GICD_SIZE`).
    pub const FRAME_SIZE: u64 = 0x1_0000;
}

/// ICPIDR2 with ArchRev = 2 in [7:4] (GICv2), the rest as the GICv3 view's GICD_PIDR2.
const ICPIDR2: u32 = 0x2b;

/// GICD_TYPER fields (4.3.2): ITLinesNumber in [4:0], CPUNumber in [7:5]; SecurityExtn
/// (bit 10) and LSPI stay zero.
const TYPER_CPU_NUMBER_SHIFT: u32 = 5;

/// GICD_SGIR fields (4.3.15).
const SGIR_TARGET_LIST_FILTER_SHIFT: u32 = 24;
const SGIR_CPU_TARGET_LIST_SHIFT: u32 = 16;
const SGIR_INTID_MASK: u32 = 0xf;
/// TargetListFilter values: the CPUs of CPUTargetList, all but the requester, the requester.
const FILTER_CPU_TARGET_LIST: u32 = 0;
const FILTER_ALL_BUT_SELF: u32 = 1;
const FILTER_SELF: u32 = 2;

/// The source CPU bit that GICD_SPENDSGIR/CPENDSGIR read for a pending SGI: CPU 0.
const SGI_SOURCE: u64 = 0x01;

impl Vgic {
    /// A guest read of the GICv2 distributor frame by vCPU `vcpu` (banked registers are that
    /// vCPU's), `size` bytes at `offset`.
    pub fn v2_distributor_read(
        &self,
        vcpu: usize,
        offset: u64,
        size: u8,
    ) -> Result<u64, DeviceError> {
        self.v2_check_access(vcpu, offset, false)?;
        match offset {
            offset::IPRIORITYR..offset::ITARGETSR => {
                Self::check_width(offset, size, &[1, 4])?;
                self.priority_read(vcpu, (offset - offset::IPRIORITYR) as u32, size)
            }
            offset::ITARGETSR..offset::ICFGR => {
                Self::check_width(offset, size, &[1, 4])?;
                self.cpu_targets_read(vcpu, (offset - offset::ITARGETSR) as u32, size)
            }
            offset::CPENDSGIR..offset::SPENDSGIR_END => {
                Self::check_width(offset, size, &[1, 4])?;
                Ok(self.sgi_sources_read(vcpu, offset, size))
            }
            _ => {
                Self::check_width(offset, size, &[4])?;
                self.v2_read32(vcpu, offset)
            }
        }
    }

    /// A guest write of `size` bytes of `value` to the GICv2 distributor frame by vCPU `vcpu`.
    ///
    /// Returns the vCPUs (bit `i` for vCPU `i`) that the write may have given an interrupt to
    /// take, for the caller to kick: each vCPU an SGI was sent to (GICD_SGIR, with the writer
    /// if it chose itself), the writer for its own SGIs and PPIs made pending (GICD_SPENDSGIR,
    /// GICD_ISPENDR0), and the target of each SPI the write made pending, enabled or
    /// retargeted while it is pending and enabled (GICD_ISPENDRn, GICD_ISENABLERn,
    /// GICD_ITARGETSRn). Other writes, as the GICv3 view's, leave it to the vCPUs' next entry.
    pub fn v2_distributor_write(
        &mut self,
        vcpu: usize,
        offset: u64,
        size: u8,
        value: u64,
    ) -> Result<u64, DeviceError> {
        self.v2_check_access(vcpu, offset, true)?;
        match offset {
            offset::IPRIORITYR..offset::ITARGETSR => {
                Self::check_width(offset, size, &[1, 4])?;
                let first = (offset - offset::IPRIORITYR) as u32;
                self.priority_write(vcpu, first, size, value).map(|()| 0)
            }
            offset::ITARGETSR..offset::ICFGR => {
                Self::check_width(offset, size, &[1, 4])?;
                self.cpu_targets_write((offset - offset::ITARGETSR) as u32, size, value)
            }
            offset::CPENDSGIR..offset::SPENDSGIR_END => {
                Self::check_width(offset, size, &[1, 4])?;
                Ok(self.sgi_sources_write(vcpu, offset, size, value))
            }
            _ => {
                Self::check_width(offset, size, &[4])?;
                self.v2_write32(vcpu, offset, value as u32)
            }
        }
    }

    /// The value of a GICv2 distributor register that no guest write and no state changes,
    /// for a load of `size` bytes at `offset` by a vCPU of a VM of `vcpus` vCPUs that
    /// [`Vgic::v2_distributor_read`] accepts: GICD_TYPER, GICD_IIDR and ICPIDR2. `None` for
    /// every other offset or width. Such a load needs no lock on the model.
    #[inline(always)]
    pub fn v2_distributor_constant(offset: u64, size: u8, vcpus: usize) -> Option<u64> {
        if size != 4 {
            return None;
        }
        let value = match offset {
            offset::TYPER => {
                // As `reset` takes the count.
                let vcpus = vcpus.clamp(1, MAX_VCPUS) as u32;
                (NR_IRQS as u32 / 32 - 1) | ((vcpus - 1) << TYPER_CPU_NUMBER_SHIFT)
            }
            offset::IIDR => IIDR,
            offset::ICPIDR2 => ICPIDR2,
            _ => return None,
        };
        Some(u64::from(value))
    }

    /// Refuses an access by a vCPU the VM lacks or beyond the frame.
    fn v2_check_access(&self, vcpu: usize, offset: u64, write: bool) -> Result<(), DeviceError> {
        if vcpu >= self.vcpus {
            return Err(DeviceError::NoSuchVcpu { vcpu });
        }
        if offset >= offset::FRAME_SIZE {
            return Err(DeviceError::NoSuchRegister { offset, write });
        }
        Ok(())
    }

    /// The CPU mask of the VM's vCPUs (at most 8, asserted above).
    fn existing_cpus(&self) -> u8 {
        ((1u32 << self.vcpus) - 1) as u8
    }

    fn v2_read32(&self, vcpu: usize, offset: u64) -> Result<u64, DeviceError> {
        if let Some(value) = Self::v2_distributor_constant(offset, 4, self.vcpus) {
            return Ok(value);
        }
        Ok(match offset {
            offset::CTLR => u64::from(self.ctlr & (CTLR_ENABLE_GRP0 | CTLR_ENABLE_GRP1)),
            offset::BIT_REGISTERS..=offset::BIT_REGISTERS_END => {
                let (register, first) = BitRegister::decode(offset)
                    .ok_or(DeviceError::InterruptOutOfRange { intid: 0 })?;
                let mut value = self.bit_read(vcpu, register, first)?;
                if first >= 32
                    && matches!(register, BitRegister::SetEnable | BitRegister::ClearEnable)
                {
                    value |= ((self.enabled_untargeted & self.owned) >> first) as u64 & 0xffff_ffff;
                }
                value
            }
            // GICD_ICFGR0 (SGIs) reads edge-triggered; ICFGR1 is the vCPU's PPIs.
            offset::ICFGR..offset::ICFGR_END => {
                self.config_read(vcpu, ((offset - offset::ICFGR) * 4) as u32)?
            }
            // GICD_SGIR is write-only: reads as zero, as every offset without a register.
            _ => 0,
        })
    }

    fn v2_write32(&mut self, vcpu: usize, offset: u64, value: u32) -> Result<u64, DeviceError> {
        match offset {
            offset::CTLR => self.ctlr = value & (CTLR_ENABLE_GRP0 | CTLR_ENABLE_GRP1),
            offset::BIT_REGISTERS..=offset::BIT_REGISTERS_END => {
                if let Some((register, first)) = BitRegister::decode(offset) {
                    return self.v2_bit_write(vcpu, register, first, value);
                }
            }
            // GICD_ICFGR0 is read-only (`config_write` leaves SGIs edge-triggered).
            offset::ICFGR..offset::ICFGR_END => {
                self.config_write(vcpu, ((offset - offset::ICFGR) * 4) as u32, value.into())?;
            }
            offset::SGIR => return Ok(self.send_sgi(vcpu, value)),
            _ => {}
        }
        Ok(0)
    }

    /// A write of `value` to the 1-bit-per-interrupt register covering ids `first` to
    /// `first + 31`.
    fn v2_bit_write(
        &mut self,
        vcpu: usize,
        register: BitRegister,
        first: u32,
        value: u32,
    ) -> Result<u64, DeviceError> {
        let mut value = value;
        if first == 0
            && matches!(
                register,
                BitRegister::SetPending | BitRegister::ClearPending
            )
        {
            // 4.3.7, 4.3.8: SGIs' pending bits are read-only here.
            value &= !(SGI_MASK as u32);
        }
        self.bit_write(vcpu, register, first, value.into())?;
        if first < 32 {
            let made_pending = register == BitRegister::SetPending && value != 0;
            return Ok(if made_pending { 1 << vcpu } else { 0 });
        }
        // `bit_write` refused `first` beyond the lines: the shift stays inside the u128.
        let written = (u128::from(value) << first) & self.owned;
        match register {
            BitRegister::SetEnable => {
                let parked = self.spis.enabled & self.untargeted;
                self.spis.enabled &= !parked;
                self.enabled_untargeted |= parked;
            }
            BitRegister::ClearEnable => self.enabled_untargeted &= !written,
            _ => {}
        }
        Ok(match register {
            BitRegister::SetEnable | BitRegister::SetPending => self.spis_to_kick(written),
            _ => 0,
        })
    }

    /// The targets of the SPIs of `spis` that are pending and enabled (so targeted).
    fn spis_to_kick(&self, spis: u128) -> u64 {
        let mut candidates =
            spis & self.owned & !PRIVATE_MASK & self.spis.enabled & self.spis.pending();
        let mut vcpus = 0;
        while candidates != 0 {
            let intid = candidates.trailing_zeros();
            candidates &= candidates - 1;
            vcpus |= 1 << self.spi_target(intid);
        }
        vcpus
    }

    /// GICD_ITARGETSR bytes from id `first`: the reader's own mask for ids 0-31, the CPU
    /// targets of owned SPIs, zero for the others.
    fn cpu_targets_read(&self, vcpu: usize, first: u32, size: u8) -> Result<u64, DeviceError> {
        let mut value = 0;
        for byte in 0..u32::from(size) {
            let intid = first + byte;
            let targets = match intid {
                0..=31 => 1 << vcpu,
                _ if intid as usize >= NR_IRQS => {
                    return Err(DeviceError::InterruptOutOfRange { intid })
                }
                _ if self.owns(intid) => self.cpu_targets[intid as usize],
                _ => 0,
            };
            value |= u64::from(targets) << (8 * byte);
        }
        Ok(value)
    }

    /// A write of GICD_ITARGETSR bytes from id `first`: ids 0-31 are read-only and unowned
    /// SPIs ignore it. Returns the vCPUs to kick.
    fn cpu_targets_write(&mut self, first: u32, size: u8, value: u64) -> Result<u64, DeviceError> {
        let existing = self.existing_cpus();
        let mut written = 0;
        for byte in 0..u32::from(size) {
            let intid = first + byte;
            if intid as usize >= NR_IRQS {
                return Err(DeviceError::InterruptOutOfRange { intid });
            }
            if intid >= 32 && self.owns(intid) {
                self.set_cpu_targets(intid, (value >> (8 * byte)) as u8 & existing);
                written |= bit(intid);
            }
        }
        Ok(self.spis_to_kick(written))
    }

    /// Gives SPI `intid` (owned, in range) the CPU targets `targets` (of existing vCPUs):
    /// delivered to the lowest, or to none, its enable bit then held aside.
    fn set_cpu_targets(&mut self, intid: u32, targets: u8) {
        let index = intid as usize % NR_IRQS;
        let mask = bit(intid);
        self.cpu_targets[index] = targets;
        if targets == 0 {
            self.untargeted |= mask;
            self.enabled_untargeted |= self.spis.enabled & mask;
            self.spis.enabled &= !mask;
        } else {
            // Aff0 of the GICv3 route is the vCPU index (`spi_target`).
            self.route[index] = u64::from(targets.trailing_zeros());
            self.untargeted &= !mask;
            self.spis.enabled |= self.enabled_untargeted & mask;
            self.enabled_untargeted &= !mask;
        }
    }

    /// GICD_SPENDSGIR/CPENDSGIR bytes at `offset` (both read alike): the source CPU bits of
    /// the SGIs pending for `vcpu`.
    fn sgi_sources_read(&self, vcpu: usize, offset: u64, size: u8) -> u64 {
        let first = (offset % 0x10) as u32;
        let pending = self.private.get(vcpu).map_or(0, |bank| bank.pending);
        let mut value = 0;
        for byte in 0..u32::from(size) {
            if pending & bit(first + byte) != 0 {
                value |= SGI_SOURCE << (8 * byte);
            }
        }
        value
    }

    /// A write to GICD_CPENDSGIR (clears) or GICD_SPENDSGIR (sets) at `offset`: an SGI whose
    /// byte has any bit set. Returns the vCPUs to kick: `vcpu` if an SGI was made pending.
    fn sgi_sources_write(&mut self, vcpu: usize, offset: u64, size: u8, value: u64) -> u64 {
        let first = (offset % 0x10) as u32;
        let mut sgis = 0;
        for byte in 0..u32::from(size) {
            if (value >> (8 * byte)) as u8 != 0 {
                sgis |= bit(first + byte);
            }
        }
        let Some(bank) = self.private.get_mut(vcpu) else {
            return 0;
        };
        if offset < offset::SPENDSGIR {
            bank.pending &= !sgis;
            0
        } else {
            bank.pending |= sgis;
            if sgis != 0 {
                1 << vcpu
            } else {
                0
            }
        }
    }

    /// GICD_SGIR written by `vcpu`: SGI `SGIINTID` made pending at each existing vCPU that
    /// TargetListFilter selects. Returns them.
    fn send_sgi(&mut self, vcpu: usize, sgir: u32) -> u64 {
        let itself = 1u32 << vcpu;
        let targets = match sgir >> SGIR_TARGET_LIST_FILTER_SHIFT & 3 {
            FILTER_CPU_TARGET_LIST => sgir >> SGIR_CPU_TARGET_LIST_SHIFT & 0xff,
            FILTER_ALL_BUT_SELF => !itself,
            FILTER_SELF => itself,
            _ => 0,
        } & u32::from(self.existing_cpus());
        let sgi = sgir & SGIR_INTID_MASK;
        for target in 0..self.vcpus {
            if targets & (1 << target) != 0 {
                self.raise(target, sgi);
            }
        }
        u64::from(targets)
    }
}

#[cfg(test)]
mod tests;

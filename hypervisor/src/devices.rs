//! The emulated devices of VMs behind one interface: each [`Device`] is a guest-physical
//! window (where a VM sees it, if it has it) mapped to a model in the portable core, and
//! serves the accesses that fault there. A data abort in no window stops the VM.
//!
//! Ownership and locks: each model of a VM has its own lock (`Vm::vgic`, `Vm::uart`, the
//! virtio console's [`virtio::console`], the SP805's [`sp805::watchdog`]), taken by the device for the one access; a model
//! that drives an interrupt line sets its level in the vGIC under its own lock (lock order:
//! the model, then the vGIC; see the crate's [lock order](crate#lock-order)), so that levels
//! are never applied out of order. No lock is held while the console is written.

pub mod sp805;
pub mod virtio;

use core::sync::atomic::Ordering;

use keel_core::abi::layout;
use keel_core::devices::vgic::Vgic;
use keel_core::devices::DeviceError;
use keel_core::system::VmDesc;

use crate::{console, irq, vm};

/// A guest's access to a device register: where in the device's window, how wide, and the
/// value of a store (already cut to `size` bytes).
#[derive(Clone, Copy, Debug)]
pub struct Access {
    /// Offset in the window.
    pub offset: u64,
    /// Bytes accessed.
    pub size: u8,
    /// A store's value; `None` for a load.
    pub write: Option<u64>,
}

/// An emulated device model.
pub trait Device: Sync {
    /// Its name in diagnostics.
    fn name(&self) -> &'static str;

    /// Where VM `desc` sees it: `(base, size)`; `None` if the VM does not have it.
    fn window(&self, desc: &VmDesc) -> Option<(u64, u64)>;

    /// Serves `access` from a vCPU of VM `id`: a load's value (0 for a store).
    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError>;
}

/// Serves an access of `size` bytes at `ipa` (`write`: a store's value, already cut to `size`)
/// from a vCPU of VM `id` (`desc`) with the device whose window holds it: a load's value (0
/// for a store), or the refusal with the device's name; `None` if no window holds `ipa`. Every
/// device model Keel emulates is tried in turn, the console first: a guest's most frequent
/// device accesses are its console's (a trap per byte written, and the status polls around
/// it). Each try is a static call, the window inlined to a few comparisons and the access a
/// direct call (no table of device models to go through).
#[inline(always)]
pub fn access(
    desc: &VmDesc,
    id: usize,
    ipa: u64,
    size: u8,
    write: Option<u64>,
) -> Option<Result<u64, (&'static str, DeviceError)>> {
    let request = (desc, id, ipa, size, write);
    #[cfg(not(keel_gic_v2))]
    let served = serve(&Console, request)
        .or_else(|| serve(&Distributor, request))
        .or_else(|| serve(&Redistributors, request))
        .or_else(|| serve(&virtio::VirtioConsoleDevice, request))
        .or_else(|| serve(&sp805::Sp805Device, request));
    // A GICv2 has no redistributors.
    #[cfg(keel_gic_v2)]
    let served = serve(&Console, request)
        .or_else(|| serve(&Distributor, request))
        .or_else(|| serve(&virtio::VirtioConsoleDevice, request))
        .or_else(|| serve(&sp805::Sp805Device, request));
    served
}

/// [`access`] by `device`, if VM `desc` has it and `ipa` lies in its window.
#[inline(always)]
fn serve<D: Device>(
    device: &D,
    (desc, id, ipa, size, write): (&VmDesc, usize, u64, u8, Option<u64>),
) -> Option<Result<u64, (&'static str, DeviceError)>> {
    let (base, window) = device.window(desc)?;
    let offset = ipa.checked_sub(base).filter(|&offset| offset < window)?;
    let access = Access {
        offset,
        size,
        write,
    };
    Some(
        device
            .access(id, access)
            .map_err(|error| (device.name(), error)),
    )
}

#[cfg(not(keel_gic_v2))]
/// An access to one of the vGIC's frames, `read` or `write` being that frame's registers:
/// under the VM's vGIC lock, a write counted in `gic_writes` (the timer fast path's check).
fn gic_access(
    id: usize,
    access: Access,
    read: fn(&Vgic, u64, u8) -> Result<u64, DeviceError>,
    write: fn(&mut Vgic, u64, u8, u64) -> Result<(), DeviceError>,
) -> Result<u64, DeviceError> {
    let vm = vm::vm(id);
    let mut vgic = vm.vgic.lock();
    match access.write {
        Some(value) => {
            vm.gic_writes.fetch_add(1, Ordering::Relaxed);
            write(&mut vgic, access.offset, access.size, value).map(|()| 0)
        }
        None => read(&vgic, access.offset, access.size),
    }
}

/// The distributor, GICv3 or GICv2 as the hardware's.
struct Distributor;

#[cfg(keel_gic_v2)]
impl Device for Distributor {
    fn name(&self) -> &'static str {
        "GIC distributor"
    }

    #[inline(always)]
    fn window(&self, _: &VmDesc) -> Option<(u64, u64)> {
        Some((layout::GICD_BASE, layout::GICD_SIZE))
    }

    /// A GICv2 distributor's SGI, PPI and priority registers of ids 0-31 are banked: the
    /// accessing vCPU's (the one running here). An SGI sent through GICD_SGIR to other vCPUs
    /// kicks them out of the guest to take it.
    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        // The registers no write changes (GICD_TYPER, GICD_IIDR, ICPIDR2) are read without
        // the lock.
        if access.write.is_none() {
            let vcpus = vm::desc(id).pcpus.len();
            if let Some(value) = Vgic::v2_distributor_constant(access.offset, access.size, vcpus) {
                return Ok(value);
            }
        }
        let vcpu = vm::current().map_or(0, |(_, vcpu)| vcpu);
        let vm = vm::vm(id);
        let (value, raised) = {
            let mut vgic = vm.vgic.lock();
            match access.write {
                Some(value) => {
                    vm.gic_writes.fetch_add(1, Ordering::Relaxed);
                    let raised =
                        vgic.v2_distributor_write(vcpu, access.offset, access.size, value)?;
                    (0, raised)
                }
                None => (
                    vgic.v2_distributor_read(vcpu, access.offset, access.size)?,
                    0,
                ),
            }
        };
        vm::kick_vcpus_but(id, raised, vcpu);
        if access.write.is_some() && !vm::desc(id).devices.is_empty() {
            irq::mirror_device_interrupts(id);
        }
        Ok(value)
    }
}

#[cfg(not(keel_gic_v2))]
impl Device for Distributor {
    fn name(&self) -> &'static str {
        "GIC distributor"
    }

    #[inline(always)]
    fn window(&self, _: &VmDesc) -> Option<(u64, u64)> {
        Some((layout::GICD_BASE, layout::GICD_SIZE))
    }

    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        // The registers no write changes (GICD_TYPER, GICD_IIDR...) are read without the lock.
        if access.write.is_none() {
            if let Some(value) = Vgic::distributor_constant(access.offset, access.size) {
                return Ok(value);
            }
        }
        let value = gic_access(id, access, Vgic::distributor_read, Vgic::distributor_write)?;
        if access.write.is_some() && !vm::desc(id).devices.is_empty() {
            irq::mirror_device_interrupts(id);
        }
        Ok(value)
    }
}

/// The GICv3 redistributors, one frame pair per vCPU.
#[cfg(not(keel_gic_v2))]
struct Redistributors;

#[cfg(not(keel_gic_v2))]
impl Device for Redistributors {
    fn name(&self) -> &'static str {
        "GIC redistributor"
    }

    #[inline(always)]
    fn window(&self, desc: &VmDesc) -> Option<(u64, u64)> {
        Some((
            layout::GICR_BASE,
            desc.pcpus.len() as u64 * layout::GICR_STRIDE,
        ))
    }

    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        gic_access(
            id,
            access,
            Vgic::redistributor_read,
            Vgic::redistributor_write,
        )
    }
}

/// The PL011 console, multiplexed onto the board's UART.
struct Console;

impl Device for Console {
    fn name(&self) -> &'static str {
        "PL011 console"
    }

    #[inline(always)]
    fn window(&self, desc: &VmDesc) -> Option<(u64, u64)> {
        desc.console
            .then_some((layout::UART_BASE, layout::UART_SIZE))
    }

    fn access(&self, id: usize, access: Access) -> Result<u64, DeviceError> {
        let vm = vm::vm(id);
        let mut uart = vm.uart.lock();
        let level = uart.interrupt_level();
        uart.set_transmit_full(console::output_full(id));
        let outcome = match access.write {
            Some(value) => uart
                .write(access.offset, access.size, value as u32)
                .map(|byte| {
                    // Queued under this lock: the VM's vCPUs are its queue's one producer.
                    if let Some(byte) = byte {
                        console::vm_output(id, byte);
                    }
                    0
                }),
            None => uart.read(access.offset, access.size).map(u64::from),
        };
        // The vGIC holds the line's level as of the last change, made under this lock: only
        // a change needs it.
        if uart.interrupt_level() != level {
            vm.vgic
                .lock()
                .set_level(layout::UART_INTID, uart.interrupt_level());
        }
        outcome
    }
}

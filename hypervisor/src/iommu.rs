//! DMA isolation: the SMMU Keel drives in front of the devices given to VMs (`[system] iommu`).
//! Each stream of a device assigned to a VM translates with that VM's memory map (its RAM and
//! flash, IPA to PA), every other stream aborts or is out of range (every 16-bit stream ID is
//! covered: a VM given a PCI host bridge owns the streams of every bus behind it, as its
//! `iommu-map` names them); a VM that ends has its streams cut off (abort, no event), and a
//! VM that restarts gets them back. The SMMU's faults are read here for `health`, which hands
//! each to the policy of the VM whose stream it names.

use core::sync::atomic::{AtomicBool, Ordering};

use keel_core::colour::Colours;
use keel_core::smmu::{Event, GlobalError, Stage1Error, StreamAssignment};
use keel_core::system::{MAX_STREAM_RANGES, MAX_VMS};

use crate::arch::smmu::{self, SmmuError};
use crate::config::SYSTEM;
use crate::tables;
use crate::vm;

/// Enables the SMMU, if the configuration names one: the stream table from every VM's
/// devices, their stage-1 tables from each VM's memory. On pCPU 0 at boot, after the VMs are
/// built and before any runs (so no device masters DMA before the SMMU guards it).
pub fn init() -> Result<(), SmmuError> {
    let Some(iommu) = &SYSTEM.iommu else {
        return Ok(());
    };
    let mut assignments = [StreamAssignment {
        first: 0,
        last: 0,
        vm: 0,
    }; MAX_STREAM_RANGES];
    let mut count = 0;
    for (id, desc) in SYSTEM.vms.iter().enumerate().take(MAX_VMS) {
        for device in desc.devices {
            for &(first, last) in device.streams {
                // The configuration compiler refuses a system with more ranges than these.
                if let Some(slot) = assignments.get_mut(count) {
                    *slot = StreamAssignment {
                        first,
                        last,
                        vm: id,
                    };
                    count += 1;
                }
            }
        }
    }
    let memory = |id: usize, map: &mut smmu::MapRegion| -> Result<(), Stage1Error> {
        let desc = vm::desc(id);
        if desc.colours.is_coloured() {
            // Its RAM page by page, to the frames of its colours, as its stage 2 maps it.
            let memory = desc.memory;
            return map(memory.ipa.0, memory.phys.0, memory.size, desc.colours);
        }
        for region in desc.regions() {
            map(region.ipa.0, region.phys.0, region.size, Colours::NONE)?;
        }
        Ok(())
    };
    // SAFETY: the configuration compiler took the base from the board's SMMUv3 node; Keel's
    // EL2 map covers the device window as device memory; this runs once, on pCPU 0 before any
    // other pCPU starts.
    unsafe {
        smmu::init(
            iommu.base.0,
            &assignments[..count],
            &memory,
            &mut tables::smmu,
        )
    }
}

/// Whether each VM's devices' DMA translates (given back) or aborts (cut off): a resource
/// counter, written with the streams.
static TRANSLATING: [AtomicBool; MAX_VMS] = [const { AtomicBool::new(false) }; MAX_VMS];

/// Cuts VM `id`'s devices off (their streams abort) or, with `translate`, gives them back, in
/// bounded steps with `between` (the caller's poll point) called before each. A VM without
/// DMA-capable devices has nothing to do here: its stop does not walk the stream table.
pub fn set_vm_streams(id: usize, translate: bool, between: fn()) -> Result<(), SmmuError> {
    let has_streams = vm::desc(id).devices.iter().any(|d| !d.streams.is_empty());
    if has_streams {
        let mut ranges = vm::desc(id)
            .devices
            .iter()
            .flat_map(|device| device.streams.iter().copied());
        smmu::set_vm_streams(id, translate, &mut ranges, between)?;
    }
    vm::entry(&TRANSLATING, id).store(translate && has_streams, Ordering::Relaxed);
    Ok(())
}

/// Whether VM `id`'s devices' DMA translates (false for a VM without DMA-capable devices).
pub fn vm_streams_translate(id: usize) -> bool {
    vm::entry(&TRANSLATING, id).load(Ordering::Relaxed)
}

/// The VM whose device masters DMA with stream `stream`, if any: a lookup in the stream
/// table's plan (a VM given a PCI host bridge owns every requester ID of its `iommu-map`, the
/// buses behind its root ports too).
pub fn stream_owner(stream: u32) -> Option<usize> {
    smmu::stream_owner(stream)
}

/// Hands each fault the SMMU recorded since the last call to `each`, and returns its global
/// error if one is active.
pub fn take_faults(each: &mut dyn FnMut(&Event)) -> Option<GlobalError> {
    smmu::take_events(each)
}

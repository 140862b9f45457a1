//! The rejection rules: turns the TOML as written into a [`System`], or names the first broken rule.
//!
//! Rules are checked in file order — `[system]` and the `[[pcpu]]` tables first, then each
//! `[[vm]]` against itself and against the VMs before it, then each shared pCPU across the
//! VMs on it (`schedule`), then each `[[channel]]` against the VMs and the channels before it
//! (`channels`) — so the same file always yields the same error.

use std::path::{Path, PathBuf};

use super::board::{self, Board, BoardTree};
use super::channels;
use super::colouring::{self, Llc};
use super::error::{AddressRange, Backing, ConfigErrorKind, Problem, Subject};
use super::health;
use super::image;
use super::messages;
use super::model::{
    Flash, Initrd, Iommu, System, Vm, DEFAULT_IPA, DEVICE_WINDOW_END, DEVICE_WINDOW_START,
    DTB_REGION_SIZE, FLASH_WINDOW_SIZE, HEALTH_WINDOW, HYPERVISOR_IMAGE_OFFSET, IPA_BITS,
    KNOWN_DEVICES, LINUX_IMAGE_BASE_ALIGN, MAX_PCPUS, MAX_VCPUS, MAX_VMS, MIN_VM_MEMORY, PAGE_SIZE,
};
use super::passthrough;
use super::schedule;
use super::schema::{ConfigFile, RegionTable, SystemTable, VmTable};
use super::tasks;
use crate::colour::Colours;
use crate::sched::Policy;
use crate::system::WfiPolicy;
use crate::trace;

/// Builds the error for `subject`'s `field` breaking `problem`.
fn invalid(subject: &Subject, field: &'static str, problem: Problem) -> ConfigErrorKind {
    ConfigErrorKind::Invalid {
        subject: subject.clone(),
        field,
        problem,
    }
}

/// Checks `value` is 4 KiB aligned.
fn check_aligned(value: u64, what: &'static str) -> Result<(), Problem> {
    if value.is_multiple_of(PAGE_SIZE) {
        Ok(())
    } else {
        Err(Problem::Unaligned { what, value })
    }
}

/// The shape rules every `{ base, size }` obeys: non-empty, page aligned, no wrap-around.
pub(super) fn check_region(region: &RegionTable) -> Result<AddressRange, Problem> {
    let (base, size) = (region.base, region.size.0);
    if size == 0 {
        return Err(Problem::SizeZero);
    }
    check_aligned(base, "base")?;
    check_aligned(size, "size")?;
    AddressRange::new(base, size).ok_or(Problem::Wraps { base, size })
}

/// The `[system]` rules; returns RAM and the hypervisor region.
fn check_system(system: &SystemTable) -> Result<(AddressRange, AddressRange), ConfigErrorKind> {
    let subject = Subject::System;
    if system.name.is_empty() {
        return Err(invalid(&subject, "name", Problem::EmptyName));
    }
    if system.pcpus == 0 {
        return Err(invalid(&subject, "pcpus", Problem::NoPcpus));
    }
    if system.pcpus > MAX_PCPUS {
        return Err(invalid(
            &subject,
            "pcpus",
            Problem::TooManyPcpus {
                count: system.pcpus,
                max: MAX_PCPUS,
            },
        ));
    }
    let ram = check_region(&system.ram).map_err(|problem| invalid(&subject, "ram", problem))?;
    let hypervisor = check_region(&system.hypervisor)
        .map_err(|problem| invalid(&subject, "hypervisor", problem))?;
    if !ram.contains(&hypervisor) {
        return Err(invalid(
            &subject,
            "hypervisor",
            Problem::OutsideRam {
                range: hypervisor,
                ram,
            },
        ));
    }
    if hypervisor.start % HYPERVISOR_IMAGE_OFFSET != 0 {
        return Err(invalid(
            &subject,
            "hypervisor",
            Problem::HypervisorUnaligned {
                base: hypervisor.start,
            },
        ));
    }
    if hypervisor.size() <= HYPERVISOR_IMAGE_OFFSET {
        return Err(invalid(
            &subject,
            "hypervisor",
            Problem::HypervisorTooSmall {
                size: hypervisor.size(),
                offset: HYPERVISOR_IMAGE_OFFSET,
            },
        ));
    }
    Ok((ram, hypervisor))
}

/// Everything a VM is checked against: the system, the VMs declared before it, and the names
/// of all VMs (which `tasks.managers` and `messages.from` may name).
struct Context<'a> {
    config_dir: &'a Path,
    guest_image: &'a dyn Fn(&str) -> Option<PathBuf>,
    pcpu_count: u32,
    policies: &'a [Policy],
    ram: AddressRange,
    hypervisor: AddressRange,
    earlier: &'a [Vm],
    names: &'a [&'a str],
    iommu: Option<&'a Iommu>,
    llc: &'a Llc,
    /// `[system] hypervisor_colours`.
    hypervisor_colours: Colours,
}

/// Name rules: non-empty, unique. Returns the subject to report the VM's other errors under.
fn check_name(table: &VmTable, index: usize, earlier: &[Vm]) -> Result<Subject, ConfigErrorKind> {
    if table.name.is_empty() {
        return Err(invalid(
            &Subject::UnnamedVm(index),
            "name",
            Problem::EmptyName,
        ));
    }
    let subject = Subject::Vm(table.name.clone());
    if let Some(first) = earlier.iter().find(|vm| vm.name == table.name) {
        return Err(invalid(
            &subject,
            "name",
            Problem::DuplicateName {
                first: usize::from(first.id),
                second: index,
            },
        ));
    }
    Ok(subject)
}

/// Physical memory shape: a region of at least [`MIN_VM_MEMORY`] (where it may lie is
/// [`check_placement`]'s, once its colours are known).
fn check_memory(table: &VmTable) -> Result<AddressRange, Problem> {
    let range = check_region(&table.memory)?;
    if range.size() < MIN_VM_MEMORY {
        return Err(Problem::MemoryTooSmall {
            size: range.size(),
            minimum: MIN_VM_MEMORY,
        });
    }
    Ok(range)
}

/// Flash rules: shape, at most the flash window, placed like memory and clear of the VM's own
/// memory (`memory`), whose guest-physical range (`guest_memory`) must lie above the window.
fn check_flash(
    table: &VmTable,
    memory: AddressRange,
    guest_memory: AddressRange,
    context: &Context,
) -> Result<Option<Flash>, Problem> {
    let Some(region) = &table.flash else {
        return Ok(None);
    };
    let range = check_region(region)?;
    if range.size() > FLASH_WINDOW_SIZE {
        return Err(Problem::FlashTooLarge {
            size: range.size(),
            window: FLASH_WINDOW_SIZE,
        });
    }
    check_placement(
        range,
        Colours::NONE,
        Some((table.name.as_str(), memory)),
        context,
    )?;
    let flash_ipa = AddressRange {
        start: 0,
        end: range.size(),
    };
    if guest_memory.overlaps(&flash_ipa) {
        return Err(Problem::OverlapsFlash {
            range: guest_memory,
            flash: flash_ipa,
        });
    }
    Ok(Some(Flash {
        phys: range.start,
        size: range.size(),
    }))
}

/// Where a physical range of a VM may lie: inside RAM, clear of Keel, of every range of the
/// earlier VMs, and of `own` (this VM's name and memory, when placing its flash). A coloured
/// VM's memory (`range` its span, coloured `colours`) may overlap another coloured VM's if
/// their colours are disjoint.
fn check_placement(
    range: AddressRange,
    colours: Colours,
    own: Option<(&str, AddressRange)>,
    context: &Context,
) -> Result<AddressRange, Problem> {
    if !context.ram.contains(&range) {
        return Err(Problem::OutsideRam {
            range,
            ram: context.ram,
        });
    }
    if range.overlaps(&context.hypervisor) {
        return Err(Problem::OverlapsHypervisor {
            range,
            hypervisor: context.hypervisor,
        });
    }
    let own = own.map(|(name, memory)| (name, Backing::Memory, memory, Colours::NONE));
    let earlier = context.earlier.iter().flat_map(|vm| {
        vm.backing().map(move |(what, phys, size)| {
            let range = AddressRange {
                start: phys,
                end: phys + size,
            };
            let colours = match what {
                Backing::Memory => vm.colours,
                Backing::Flash => Colours::NONE,
            };
            (vm.name.as_str(), what, range, colours)
        })
    });
    for (other, other_what, other_range, other_colours) in own.into_iter().chain(earlier) {
        if !range.overlaps(&other_range) {
            continue;
        }
        if colours.is_coloured() && other_colours.is_coloured() {
            colouring::check_interleaved((range, colours), other, (other_range, other_colours))?;
            continue;
        }
        return Err(Problem::OverlapsVm {
            range,
            other: other.to_string(),
            other_what,
            other_range,
        });
    }
    Ok(range)
}

/// Guest-physical rules: page aligned, inside the IPA space, clear of the emulated devices;
/// `what` names the range in messages (`guest memory`, or a channel member's `window`).
pub(super) fn check_ipa(ipa: u64, size: u64, what: &'static str) -> Result<AddressRange, Problem> {
    check_aligned(ipa, "address")?;
    let range = AddressRange::new(ipa, size).ok_or(Problem::Wraps { base: ipa, size })?;
    if range.end > 1 << IPA_BITS {
        return Err(Problem::BeyondIpaSpace {
            what,
            range,
            bits: IPA_BITS,
        });
    }
    let windows = [(DEVICE_WINDOW_START, DEVICE_WINDOW_END), HEALTH_WINDOW];
    for (start, end) in windows {
        let window = AddressRange { start, end };
        if range.overlaps(&window) {
            return Err(Problem::OverlapsDeviceWindow {
                what,
                range,
                window,
            });
        }
    }
    Ok(range)
}

/// pCPU rules: at least one, not too many, each existing, and a pinned one claimed once in
/// the system (a shared one takes any number of vCPUs).
fn check_pcpus(pcpus: &[u32], context: &Context) -> Result<(), Problem> {
    if pcpus.is_empty() {
        return Err(Problem::NoVcpus);
    }
    if pcpus.len() > MAX_VCPUS {
        return Err(Problem::TooManyVcpus {
            count: pcpus.len(),
            max: MAX_VCPUS,
        });
    }
    for (position, &pcpu) in pcpus.iter().enumerate() {
        if pcpu >= context.pcpu_count {
            return Err(Problem::PcpuOutOfRange {
                pcpu,
                count: context.pcpu_count,
            });
        }
        if context.policies[pcpu as usize].is_shared() {
            continue;
        }
        if pcpus[..position].contains(&pcpu) {
            return Err(Problem::PcpuListedTwice { pcpu });
        }
        if let Some(other) = context.earlier.iter().find(|vm| vm.pcpus.contains(&pcpu)) {
            return Err(Problem::PcpuClaimed {
                pcpu,
                other: other.name.clone(),
            });
        }
    }
    Ok(())
}

/// Device rules: known names, each once. Returns whether the console is present.
fn check_devices(devices: &[String]) -> Result<bool, Problem> {
    for (position, device) in devices.iter().enumerate() {
        if !KNOWN_DEVICES.contains(&device.as_str()) {
            return Err(Problem::UnknownDevice {
                device: device.clone(),
                known: KNOWN_DEVICES,
            });
        }
        if devices[..position].contains(device) {
            return Err(Problem::DuplicateDevice {
                device: device.clone(),
            });
        }
    }
    Ok(devices.iter().any(|device| device == "console"))
}

/// The `console` table: only with the emulated console (`console`, from [`check_devices`]),
/// and raw for one VM of the system at most (`earlier`: the VMs before this one). Returns
/// whether the console is raw, or the field at fault and why.
fn check_console(
    table: &VmTable,
    console: bool,
    earlier: &[Vm],
) -> Result<bool, (&'static str, Problem)> {
    let Some(settings) = &table.console else {
        return Ok(false);
    };
    if !console {
        return Err(("console", Problem::ConsoleTableWithoutConsole));
    }
    if settings.raw {
        if let Some(other) = earlier.iter().find(|vm| vm.raw_console) {
            return Err((
                "console.raw",
                Problem::SecondRawConsole {
                    other: other.name.clone(),
                },
            ));
        }
    }
    Ok(settings.raw)
}

/// WFI policy: `native` (the default) or `trap`.
fn check_wfi(wfi: Option<&str>) -> Result<WfiPolicy, Problem> {
    match wfi {
        None | Some("native") => Ok(WfiPolicy::Native),
        Some("trap") => Ok(WfiPolicy::Trap),
        Some(value) => Err(Problem::UnknownWfiPolicy {
            value: value.to_string(),
        }),
    }
}

/// Where a VM that boots from RAM gets its image (above the memory's base, at the image's
/// load offset), device tree (the top [`DTB_REGION_SIZE`]) and initrd (just below the device
/// tree): `(image_ipa, dtb_ipa, initrd)`, or the field at fault and why.
fn ram_layout(
    table: &VmTable,
    guest_memory: AddressRange,
    layout: image::ImageLayout,
    context: &Context,
) -> Result<(u64, u64, Option<Initrd>), (&'static str, Problem)> {
    let ipa = guest_memory.start;
    if layout.is_linux && !ipa.is_multiple_of(LINUX_IMAGE_BASE_ALIGN) {
        return Err(("image", Problem::LinuxImageMisaligned { ipa }));
    }
    // DTB_REGION_SIZE < MIN_VM_MEMORY, so this cannot underflow.
    let dtb_ipa = guest_memory.end - DTB_REGION_SIZE;
    let image_ipa = ipa.saturating_add(layout.load_offset);
    let image_range = AddressRange {
        start: image_ipa,
        end: image_ipa.saturating_add(layout.footprint),
    };
    if image_range.end > dtb_ipa {
        return Err((
            "image",
            Problem::ImageDoesNotFit {
                image: image_range,
                dtb_ipa,
            },
        ));
    }

    let initrd = match &table.initrd {
        None => None,
        Some(initrd_table) => {
            let (source, path) = image::resolve(
                initrd_table,
                context.config_dir,
                context.guest_image,
                "debian-initramfs",
            )
            .map_err(|problem| ("initrd", problem))?;
            let (_, path) = image::load(&path).map_err(|problem| ("initrd", problem))?;
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            // Just below the device tree, 4 KiB aligned, above the image's footprint.
            let ipa = dtb_ipa.saturating_sub(size) & !(PAGE_SIZE - 1);
            if ipa < image_range.end || size > dtb_ipa {
                return Err((
                    "initrd",
                    Problem::InitrdDoesNotFit {
                        size,
                        image_end: image_range.end,
                        dtb_ipa,
                    },
                ));
            }
            Some(Initrd {
                source,
                path,
                ipa,
                size,
            })
        }
    };
    Ok((image_ipa, dtb_ipa, initrd))
}

/// All rules of one `[[vm]]`, in the order its fields are documented.
fn check_vm(
    table: &VmTable,
    index: usize,
    context: &Context,
    board: &mut Board,
) -> Result<Vm, ConfigErrorKind> {
    let subject = check_name(table, index, context.earlier)?;
    let at = |field: &'static str, problem: Problem| invalid(&subject, field, problem);

    let memory = check_memory(table).map_err(|problem| at("memory", problem))?;
    let colours = colouring::check_colours(table, context.llc)
        .map_err(|(field, problem)| at(field, problem))?;
    colouring::check_beside_keel(colours, table.colours_exclusive, context.hypervisor_colours)
        .map_err(|(field, problem)| at(field, problem))?;
    colouring::check_exclusive(colours, table.colours_exclusive, context.earlier)
        .map_err(|(field, problem)| at(field, problem))?;
    colouring::span(memory, colours, context.ram)
        .and_then(|span| check_placement(span, colours, None, context))
        .map_err(|problem| at("memory", problem))?;
    let ipa = table.ipa.unwrap_or(DEFAULT_IPA);
    let guest_memory =
        check_ipa(ipa, memory.size(), "guest memory").map_err(|problem| at("ipa", problem))?;
    let flash = check_flash(table, memory, guest_memory, context)
        .map_err(|problem| at("flash", problem))?;
    check_pcpus(&table.pcpus, context).map_err(|problem| at("pcpus", problem))?;
    let sched = schedule::vcpu_params(table, &subject, context.policies)?;
    let tasks = tasks::check_tasks(table, index, &subject, context.policies, context.names)?;
    let console = check_devices(&table.devices).map_err(|problem| at("devices", problem))?;
    let raw_console = check_console(table, console, context.earlier)
        .map_err(|(field, problem)| at(field, problem))?;
    let messages =
        messages::check_messages(table, &subject, console, context.earlier, context.names)?;
    let virtio_console =
        messages::check_virtio_console(table, index, &subject, messages.as_ref(), context.names)?;
    let watchdog_device = table.devices.iter().any(|device| device == "watchdog");
    let health = health::check_health(table, index, &subject, watchdog_device, context.names)?;
    let wfi = check_wfi(table.wfi.as_deref()).map_err(|problem| at("wfi", problem))?;
    if table.wfi.as_deref() == Some("native") {
        if let Some(&pcpu) = table
            .pcpus
            .iter()
            .find(|&&pcpu| context.policies[pcpu as usize].is_shared())
        {
            return Err(at("wfi", Problem::NativeWfiOnSharedPcpu { pcpu }));
        }
    }
    if table.cmdline.contains('\0') {
        return Err(at("cmdline", Problem::NulInCmdline));
    }

    let (source, path) = image::resolve(
        &table.image,
        context.config_dir,
        context.guest_image,
        "debian-kernel",
    )
    .map_err(|problem| at("image", problem))?;
    let (layout, image_path) = image::load(&path).map_err(|problem| at("image", problem))?;
    let (image_ipa, dtb_ipa, initrd) = match flash {
        Some(flash) => {
            // Firmware boots from flash at IPA 0 and finds its device tree at the start of RAM,
            // as on QEMU `virt` with `-bios`.
            if layout.footprint > flash.size {
                return Err(at(
                    "image",
                    Problem::ImageDoesNotFitFlash {
                        size: layout.footprint,
                        flash: flash.size,
                    },
                ));
            }
            if table.initrd.is_some() {
                return Err(at("initrd", Problem::InitrdWithFlash));
            }
            (0, ipa, None)
        }
        None => ram_layout(table, guest_memory, layout, context)
            .map_err(|(field, problem)| at(field, problem))?,
    };

    let mut vm = Vm {
        id: u16::try_from(index).expect("MAX_VMS fits a u16"),
        name: table.name.clone(),
        phys: memory.start,
        ipa,
        size: memory.size(),
        colours,
        colours_exclusive: table.colours_exclusive,
        pcpus: table.pcpus.clone(),
        sched,
        tasks,
        messages,
        virtio_console,
        image: source,
        image_path,
        flash,
        image_ipa,
        dtb_ipa,
        initrd,
        console,
        raw_console,
        wfi,
        pmu: table.pmu,
        monitor_masked_stretch: table.monitor_masked_stretch,
        trace_reader: table.trace_reader,
        health,
        watchdog_device,
        cmdline: table.cmdline.clone(),
        passthrough: Vec::new(),
    };
    messages::check_pool(&vm, &subject)?;
    vm.passthrough = passthrough::check_passthrough(
        table,
        &vm,
        context.earlier,
        context.ram,
        board,
        context.iommu,
    )
    .map_err(|problem| at("passthrough", Problem::Passthrough(Box::new(problem))))?;
    Ok(vm)
}

/// Checks every rule; `config_dir` is the directory image files are relative to, `board` the
/// board's device tree (read once, if some VM is given a device).
pub fn validate(
    file: &ConfigFile,
    config_dir: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
    board: BoardTree,
) -> Result<System, ConfigErrorKind> {
    let (ram, hypervisor) = check_system(&file.system)?;
    let switch_cost_ns = schedule::switch_cost(&file.system)?;
    let policies = schedule::policies(&file.pcpu, file.system.pcpus)?;
    if file.vm.is_empty() {
        return Err(ConfigErrorKind::NoVms);
    }
    if file.vm.len() > MAX_VMS {
        return Err(ConfigErrorKind::TooManyVms {
            count: file.vm.len(),
            max: MAX_VMS,
        });
    }
    let names: Vec<&str> = file.vm.iter().map(|table| table.name.as_str()).collect();
    let desc = match &file.system.board {
        None => &crate::board::QEMU_VIRT,
        Some(name) => crate::board::board(name).ok_or_else(|| {
            invalid(
                &Subject::System,
                "board",
                Problem::UnknownBoard {
                    value: name.clone(),
                },
            )
        })?,
    };
    let mut board = Board::new(desc, board, file.system.iommu.is_some());
    board::check_board(&mut board, (ram.start, ram.size()), file.system.pcpus).map_err(|why| {
        invalid(
            &Subject::System,
            "board",
            Problem::Board {
                board: desc.name,
                why,
            },
        )
    })?;
    let iommu =
        board::check_iommu(file.system.iommu.as_deref(), &mut board).map_err(|problem| {
            invalid(
                &Subject::System,
                "iommu",
                Problem::Passthrough(Box::new(problem)),
            )
        })?;
    let llc = colouring::last_level_cache(&file.system, &mut board)?;
    let hypervisor_colours = colouring::check_hypervisor_colours(&file.system, hypervisor, &llc)?;
    let mut vms: Vec<Vm> = Vec::with_capacity(file.vm.len());
    for (index, table) in file.vm.iter().enumerate() {
        let context = Context {
            config_dir,
            guest_image,
            pcpu_count: file.system.pcpus,
            policies: &policies,
            ram,
            hypervisor,
            earlier: &vms,
            names: &names,
            iommu: iommu.as_ref(),
            llc: &llc,
            hypervisor_colours,
        };
        let vm = check_vm(table, index, &context, &mut board)?;
        vms.push(vm);
    }
    messages::check_virtio_peers(&vms)?;
    health::check_managers(&vms)?;
    schedule::check_shared_pcpus(&policies, &vms, switch_cost_ns)?;
    let channels = channels::check_channels(&file.channel, &vms, ram, hypervisor)?;
    let trace_bytes = check_trace(&file.system, hypervisor)?;
    Ok(System {
        name: file.system.name.clone(),
        board: desc,
        ram_base: ram.start,
        ram_size: ram.size(),
        hypervisor_base: hypervisor.start,
        hypervisor_size: hypervisor.size(),
        pcpus: file.system.pcpus,
        policies,
        switch_cost_ns,
        vms,
        channels,
        iommu,
        trace_bytes,
        llc: llc.ok(),
        hypervisor_colours,
    })
}

/// `[system] trace`: each pCPU's ring a power of two between
/// [`trace::MIN_RING_BYTES`] and [`trace::MAX_RING_BYTES`], all of them (with their headers)
/// within half of Keel's region (the rest is its image, stacks and tables). 0 without one.
fn check_trace(system: &SystemTable, hypervisor: AddressRange) -> Result<u64, ConfigErrorKind> {
    let Some(table) = &system.trace else {
        return Ok(0);
    };
    let size = table.size.0;
    if !size.is_power_of_two() || !(trace::MIN_RING_BYTES..=trace::MAX_RING_BYTES).contains(&size) {
        return Err(invalid(
            &Subject::System,
            "trace.size",
            Problem::TraceRingSize {
                size,
                min: trace::MIN_RING_BYTES,
                max: trace::MAX_RING_BYTES,
            },
        ));
    }
    let total = u64::from(system.pcpus) * (size + trace::HEADER_BYTES as u64);
    if total > hypervisor.size() / 2 {
        return Err(invalid(
            &Subject::System,
            "trace.size",
            Problem::TraceRingsTooLarge {
                total,
                pcpus: system.pcpus,
                half: hypervisor.size() / 2,
            },
        ));
    }
    Ok(size)
}

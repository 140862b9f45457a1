//! Guest device trees: the platform a VM sees, described as QEMU `virt` would describe it to Linux.
//!
//! Only what Keel presents is listed: the vCPUs (PSCI over HVC), the VM's memory, the emulated
//! GICv3, the architected timer, with the `console` device the emulated PL011, with the
//! `watchdog` device the emulated SP805, and the VM's windows on shared-memory channels
//! (`/keel-channels/<name>`, see [`write_channels`]).
//! Bindings: Linux `Documentation/devicetree/bindings/` (`arm/cpus.yaml`, `arm/psci.yaml`,
//! `interrupt-controller/arm,gic-v3.yaml`, `timer/arm,arch_timer.yaml`, `serial/pl011.yaml`,
//! `watchdog/arm,sp805.yaml`).

use keel_core::abi::layout;
use keel_core::board::GicVersion;
use keel_core::config::{Channel, Vm, DTB_REGION_SIZE};
use keel_core::seed::{GUEST_SEED_LEN, SEED_PROPERTIES};
use vm_fdt::FdtWriter;

/// Phandle of the GIC, the interrupt parent of every device.
const GIC_PHANDLE: u32 = keel_core::config::VM_GIC_PHANDLE;
/// Phandle of the PL011's fixed clock.
const APB_CLOCK_PHANDLE: u32 = 2;
/// Phandle of the first fixed clock of another frequency than `apb-pclk`'s (an assigned
/// device's).
const FIRST_DEVICE_CLOCK_PHANDLE: u32 = 3;
/// Frequency of the PL011's clock (QEMU `virt`'s `apb-pclk`).
const APB_CLOCK_HZ: u32 = 24_000_000;

/// First cell of a GICv3 interrupt specifier: shared peripheral interrupt.
const GIC_SPI: u32 = 0;
/// First cell of a GICv3 interrupt specifier: private peripheral interrupt.
const GIC_PPI: u32 = 1;
/// INTID of the first PPI (GICv3 spec, section 2.2): the specifier counts from it.
const PPI_FIRST_INTID: u32 = 16;
/// INTID of the first SPI.
const SPI_FIRST_INTID: u32 = 32;
/// Secure EL1 physical timer PPI (described for completeness, as QEMU does; never delivered).
const SECURE_PHYS_TIMER_INTID: u32 = 29;
/// Third cell: level-sensitive, active high.
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;

/// Builds VM `vm`'s device tree blob (`vms`: the system's VMs, of which it names those it
/// manages; `channels`: the system's, of which it describes those `vm` is a member); it must
/// fit the [`DTB_REGION_SIZE`] reserved for it.
pub fn guest_dtb(
    vm: &Vm,
    vms: &[Vm],
    channels: &[Channel],
    gic: GicVersion,
) -> Result<Vec<u8>, String> {
    let blob = write_tree(vm, vms, channels, gic)
        .map_err(|error| format!("vm '{}': device tree: {error}", vm.name))?;
    if blob.len() as u64 > DTB_REGION_SIZE {
        return Err(format!(
            "vm '{}': device tree: {:#x} bytes exceed the {DTB_REGION_SIZE:#x} reserved for it",
            vm.name,
            blob.len()
        ));
    }
    Ok(blob)
}

/// PPI flags for the timer: level-high, plus the GICv2-style CPU mask QEMU also emits
/// (one bit per vCPU, at most 8; GICv3 ignores it).
fn timer_flags(vcpu_count: usize) -> u32 {
    let mask = (1u32 << vcpu_count.min(8)) - 1;
    mask << 8 | IRQ_TYPE_LEVEL_HIGH
}

fn write_tree(
    vm: &Vm,
    vms: &[Vm],
    channels: &[Channel],
    gic_version: GicVersion,
) -> Result<Vec<u8>, vm_fdt::Error> {
    let mut fdt = FdtWriter::new()?;
    let vcpu_count = vm.vcpu_count();
    let uart_path = format!("/pl011@{:x}", layout::UART_BASE);

    let root = fdt.begin_node("")?;
    fdt.property_string("compatible", "linux,dummy-virt")?;
    fdt.property_string("model", &format!("Keel VM {}", vm.name))?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_u32("interrupt-parent", GIC_PHANDLE)?;

    // vCPU i has MPIDR_EL1.Aff0 = i (arm/cpus.yaml: reg is the MPIDR affinity).
    let cpus = fdt.begin_node("cpus")?;
    fdt.property_u32("#address-cells", 1)?;
    fdt.property_u32("#size-cells", 0)?;
    for vcpu in 0..vcpu_count {
        let cpu = fdt.begin_node(&format!("cpu@{vcpu:x}"))?;
        fdt.property_string("device_type", "cpu")?;
        fdt.property_string("compatible", "arm,armv8")?;
        fdt.property_u32("reg", vcpu as u32)?;
        fdt.property_string("enable-method", "psci")?;
        fdt.end_node(cpu)?;
    }
    fdt.end_node(cpus)?;

    let psci = fdt.begin_node("psci")?;
    fdt.property_string_list(
        "compatible",
        vec!["arm,psci-1.0".into(), "arm,psci-0.2".into()],
    )?;
    fdt.property_string("method", "hvc")?;
    fdt.end_node(psci)?;

    let memory = fdt.begin_node(&format!("memory@{:x}", vm.ipa))?;
    fdt.property_string("device_type", "memory")?;
    fdt.property_array_u64("reg", &[vm.ipa, vm.size])?;
    fdt.end_node(memory)?;

    let gic = fdt.begin_node(&format!("intc@{:x}", layout::GICD_BASE))?;
    fdt.property_null("interrupt-controller")?;
    fdt.property_u32("#interrupt-cells", 3)?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    fdt.property_null("ranges")?;
    match gic_version {
        // The emulated distributor and Keel's mapping of the hardware GICV as its CPU
        // interface (interrupt-controller/arm,gic.yaml).
        GicVersion::V2 => {
            fdt.property_string("compatible", "arm,cortex-a15-gic")?;
            fdt.property_array_u64(
                "reg",
                &[
                    layout::GICD_BASE,
                    layout::GICD_SIZE,
                    layout::GICC_BASE,
                    layout::GICC_SIZE,
                ],
            )?;
        }
        GicVersion::V3 => {
            fdt.property_string("compatible", "arm,gic-v3")?;
            fdt.property_array_u64(
                "reg",
                &[
                    layout::GICD_BASE,
                    layout::GICD_SIZE,
                    layout::GICR_BASE,
                    layout::GICR_STRIDE * vcpu_count as u64,
                ],
            )?;
            fdt.property_u32("#redistributor-regions", 1)?;
            fdt.property_array_u32(
                "interrupts",
                &[
                    GIC_PPI,
                    layout::MAINTENANCE_INTID - PPI_FIRST_INTID,
                    IRQ_TYPE_LEVEL_HIGH,
                ],
            )?;
        }
    }
    fdt.property_phandle(GIC_PHANDLE)?;
    fdt.end_node(gic)?;

    // arm,arch_timer.yaml: secure physical, non-secure physical, virtual, hypervisor.
    let flags = timer_flags(vcpu_count);
    let timer = fdt.begin_node("timer")?;
    fdt.property_string("compatible", "arm,armv8-timer")?;
    let mut interrupts = Vec::new();
    for intid in [
        SECURE_PHYS_TIMER_INTID,
        layout::PTIMER_INTID,
        layout::VTIMER_INTID,
        layout::HYP_TIMER_INTID,
    ] {
        interrupts.extend([GIC_PPI, intid - PPI_FIRST_INTID, flags]);
    }
    fdt.property_array_u32("interrupts", &interrupts)?;
    fdt.property_null("always-on")?;
    fdt.end_node(timer)?;

    let device_clocks = write_clocks(&mut fdt, vm)?;
    if vm.console {
        let uart = fdt.begin_node(&uart_path[1..])?;
        fdt.property_string_list(
            "compatible",
            vec!["arm,pl011".into(), "arm,primecell".into()],
        )?;
        fdt.property_array_u64("reg", &[layout::UART_BASE, layout::UART_SIZE])?;
        fdt.property_array_u32(
            "interrupts",
            &[
                GIC_SPI,
                layout::UART_INTID - SPI_FIRST_INTID,
                IRQ_TYPE_LEVEL_HIGH,
            ],
        )?;
        fdt.property_array_u32("clocks", &[APB_CLOCK_PHANDLE, APB_CLOCK_PHANDLE])?;
        fdt.property_string_list("clock-names", vec!["uartclk".into(), "apb_pclk".into()])?;
        fdt.end_node(uart)?;

        let aliases = fdt.begin_node("aliases")?;
        fdt.property_string("serial0", &uart_path)?;
        fdt.end_node(aliases)?;
    }

    if vm.virtio_console.is_some() {
        // Keel's virtio-mmio console (virtio/mmio.yaml), where QEMU `virt` puts its first
        // virtio-mmio device; its interrupt follows the used ring (level, SPI 16).
        let virtio = fdt.begin_node(&format!("virtio_mmio@{:x}", layout::VIRTIO_BASE))?;
        fdt.property_string("compatible", "virtio,mmio")?;
        fdt.property_array_u64("reg", &[layout::VIRTIO_BASE, layout::VIRTIO_SIZE])?;
        fdt.property_array_u32(
            "interrupts",
            &[
                GIC_SPI,
                layout::VIRTIO_INTID - SPI_FIRST_INTID,
                IRQ_TYPE_LEVEL_HIGH,
            ],
        )?;
        fdt.property_null("dma-coherent")?;
        fdt.end_node(virtio)?;
    }

    if vm.watchdog_device {
        write_watchdog(&mut fdt, &device_clocks)?;
    }

    write_channels(&mut fdt, vm, channels)?;
    write_manager_window(&mut fdt, vm, vms)?;
    write_assigned_devices(&mut fdt, vm, &device_clocks)?;

    let chosen = fdt.begin_node("chosen")?;
    fdt.property_string("bootargs", &vm.cmdline)?;
    // Placeholders Keel fills with the VM's seeds at each boot, or removes (keel_core::seed).
    for seed in SEED_PROPERTIES {
        fdt.property(seed.name, &[0; GUEST_SEED_LEN][..seed.len])?;
    }
    if vm.console {
        fdt.property_string("stdout-path", &uart_path)?;
    }
    if let Some(initrd) = &vm.initrd {
        // Linux `Documentation/devicetree/bindings/chosen.txt`: start inclusive, end exclusive.
        fdt.property_u64("linux,initrd-start", initrd.ipa)?;
        fdt.property_u64("linux,initrd-end", initrd.ipa + initrd.size)?;
    }
    fdt.end_node(chosen)?;

    fdt.end_node(root)?;
    fdt.finish()
}

/// The VM's fixed clocks: `apb-pclk` (QEMU `virt`'s, 24 MHz) if the PL011, the SP805 or an
/// assigned device takes it, and one `clock-<hz>` per other frequency the SP805's WDOGCLK or
/// an assigned device's clock has. Returns each frequency with its phandle.
fn write_clocks(fdt: &mut FdtWriter, vm: &Vm) -> Result<Vec<(u32, u32)>, vm_fdt::Error> {
    let mut clocks: Vec<(u32, u32)> = Vec::new();
    if vm.console || vm.watchdog_device {
        clocks.push((APB_CLOCK_HZ, APB_CLOCK_PHANDLE));
    }
    let watchdog_clock = vm.watchdog_device.then_some(layout::WATCHDOG_CLOCK_HZ);
    for hz in watchdog_clock.into_iter().chain(
        vm.passthrough
            .iter()
            .flat_map(|device| device.node.clocks.iter().copied()),
    ) {
        if clocks.iter().any(|&(known, _)| known == hz) {
            continue;
        }
        let phandle = if hz == APB_CLOCK_HZ {
            APB_CLOCK_PHANDLE
        } else {
            let others = clocks
                .iter()
                .filter(|&&(_, phandle)| phandle != APB_CLOCK_PHANDLE)
                .count();
            FIRST_DEVICE_CLOCK_PHANDLE + others as u32
        };
        clocks.push((hz, phandle));
    }
    clocks.sort_unstable_by_key(|&(_, phandle)| phandle);
    for &(hz, phandle) in &clocks {
        let name = if phandle == APB_CLOCK_PHANDLE {
            "apb-pclk".to_string()
        } else {
            format!("clock-{hz}")
        };
        let clock = fdt.begin_node(&name)?;
        fdt.property_string("compatible", "fixed-clock")?;
        fdt.property_u32("#clock-cells", 0)?;
        fdt.property_u32("clock-frequency", hz)?;
        if phandle == APB_CLOCK_PHANDLE {
            fdt.property_string("clock-output-names", "clk24mhz")?;
        }
        fdt.property_phandle(phandle)?;
        fdt.end_node(clock)?;
    }
    Ok(clocks)
}

/// The emulated SP805 (`watchdog/arm,sp805.yaml`): an AMBA PrimeCell, whose registers Linux's
/// bus reads with `apb_pclk` on, and whose `sp805_wdt` driver counts with the first clock,
/// `wdog_clk` ([`layout::WATCHDOG_CLOCK_HZ`], `clocks`' entry of that frequency). No interrupt:
/// the driver takes none (the reset output is what Keel acts on).
fn write_watchdog(fdt: &mut FdtWriter, clocks: &[(u32, u32)]) -> Result<(), vm_fdt::Error> {
    let phandle = |hz: u32| {
        clocks
            .iter()
            .find(|&&(known, _)| known == hz)
            .map_or(APB_CLOCK_PHANDLE, |&(_, phandle)| phandle)
    };
    let watchdog = fdt.begin_node(&format!("watchdog@{:x}", layout::WATCHDOG_BASE))?;
    fdt.property_string_list(
        "compatible",
        vec!["arm,sp805".into(), "arm,primecell".into()],
    )?;
    fdt.property_array_u64("reg", &[layout::WATCHDOG_BASE, layout::WATCHDOG_SIZE])?;
    fdt.property_array_u32(
        "clocks",
        &[phandle(layout::WATCHDOG_CLOCK_HZ), phandle(APB_CLOCK_HZ)],
    )?;
    fdt.property_string_list("clock-names", vec!["wdog_clk".into(), "apb_pclk".into()])?;
    fdt.end_node(watchdog)
}

/// The board devices given to the VM: each the board's node as the compiler copied it
/// ([`keel_core::config::DeviceNode`]), its `clocks` pointing at the VM's clocks of the same
/// frequencies (`clocks`, from [`write_clocks`]), with its child nodes. Interrupts keep the
/// board's specifiers: the VM's GIC numbers them as the board's does.
fn write_assigned_devices(
    fdt: &mut FdtWriter,
    vm: &Vm,
    clocks: &[(u32, u32)],
) -> Result<(), vm_fdt::Error> {
    for device in &vm.passthrough {
        write_device_node(fdt, &device.node, clocks)?;
    }
    Ok(())
}

/// One node of an assigned device ([`write_assigned_devices`]) and its children.
fn write_device_node(
    fdt: &mut FdtWriter,
    device: &keel_core::config::DeviceNode,
    clocks: &[(u32, u32)],
) -> Result<(), vm_fdt::Error> {
    let node = fdt.begin_node(&device.name)?;
    for (name, value) in &device.properties {
        fdt.property(name, value)?;
    }
    let phandles: Vec<u32> = device
        .clocks
        .iter()
        .filter_map(|&hz| clocks.iter().find(|&&(known, _)| known == hz))
        .map(|&(_, phandle)| phandle)
        .collect();
    if !phandles.is_empty() {
        fdt.property_array_u32("clocks", &phandles)?;
    }
    for child in &device.children {
        write_device_node(fdt, child, clocks)?;
    }
    fdt.end_node(node)
}

/// Third cell of an SPI's specifier: edge-triggered, rising (a doorbell is an event).
const IRQ_TYPE_EDGE_RISING: u32 = 1;

/// `/keel-channels`: one node per channel `vm` is a member of, named as the channel, with its
/// window (`reg`), its doorbell (`interrupts` for an SPI; `keel,doorbell-sgi` for an SGI, which
/// the GIC binding cannot describe), `read-only` for a read-only window, and what
/// KEEL_CHANNEL_NOTIFY takes: `keel,channel` (the channel's id) and `keel,member` (this VM's
/// position in it). Nothing is written for a VM of no channel. Keel's own binding.
fn write_channels(fdt: &mut FdtWriter, vm: &Vm, channels: &[Channel]) -> Result<(), vm_fdt::Error> {
    let mine: Vec<(usize, &Channel, usize)> = channels
        .iter()
        .enumerate()
        .filter_map(|(id, channel)| {
            let position = channel
                .members
                .iter()
                .position(|member| u16::from(member.vm) == vm.id)?;
            Some((id, channel, position))
        })
        .collect();
    if mine.is_empty() {
        return Ok(());
    }
    let node = fdt.begin_node("keel-channels")?;
    fdt.property_u32("#address-cells", 2)?;
    fdt.property_u32("#size-cells", 2)?;
    for (id, channel, position) in mine {
        let member = channel.members[position];
        let window = fdt.begin_node(&channel.name)?;
        fdt.property_string("compatible", "keel,channel")?;
        fdt.property_array_u64("reg", &[member.ipa, channel.size])?;
        if channel.intid >= SPI_FIRST_INTID {
            fdt.property_array_u32(
                "interrupts",
                &[
                    GIC_SPI,
                    channel.intid - SPI_FIRST_INTID,
                    IRQ_TYPE_EDGE_RISING,
                ],
            )?;
        } else {
            fdt.property_u32("keel,doorbell-sgi", channel.intid)?;
        }
        if !member.writable {
            fdt.property_null("read-only")?;
        }
        fdt.property_u32("keel,channel", id as u32)?;
        fdt.property_u32("keel,member", position as u32)?;
        fdt.end_node(window)?;
    }
    fdt.end_node(node)
}

/// The management window of a VM that manages others (another VM's `health.managers` names
/// it): `reg` is the window (Keel's `layout::MANAGER_BASE`, one page), `keel,managed` the ids
/// of the VMs it manages and `keel,managed-names` their names, in the same order (the `keel`
/// command finds the window here, and takes the names for ids). Nothing is written for a VM
/// that manages none: it has no window. Keel's own binding.
fn write_manager_window(fdt: &mut FdtWriter, vm: &Vm, vms: &[Vm]) -> Result<(), vm_fdt::Error> {
    let Ok(manager) = u8::try_from(vm.id) else {
        return Ok(());
    };
    let managed: Vec<&Vm> = vms
        .iter()
        .filter(|other| other.health.managers.contains(&manager))
        .collect();
    if managed.is_empty() {
        return Ok(());
    }
    let node = fdt.begin_node(&format!("keel-manager@{:x}", layout::MANAGER_BASE))?;
    fdt.property_string("compatible", "keel,manager")?;
    fdt.property_array_u64("reg", &[layout::MANAGER_BASE, layout::MANAGER_SIZE])?;
    let ids: Vec<u32> = managed.iter().map(|other| u32::from(other.id)).collect();
    fdt.property_array_u32("keel,managed", &ids)?;
    fdt.property_string_list(
        "keel,managed-names",
        managed.iter().map(|other| other.name.clone()).collect(),
    )?;
    fdt.end_node(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::addr::VmId;
    use keel_core::config::ImageSource;
    use keel_core::system::WfiPolicy;
    use std::path::PathBuf;
    use std::process::Command;

    fn vm(console: bool, pcpus: Vec<u32>) -> Vm {
        Vm {
            id: 0,
            name: "rt-a".into(),
            phys: 0x5000_0000,
            ipa: 0x4000_0000,
            size: 0x100_0000,
            colours: keel_core::colour::Colours::NONE,
            colours_exclusive: false,
            sched: vec![keel_core::sched::Params::default(); pcpus.len()],
            pcpus,
            image: ImageSource::Guest("test-guest".into()),
            image_path: PathBuf::from("/nonexistent/test-guest.bin"),
            flash: None,
            image_ipa: 0x4000_0000,
            dtb_ipa: 0x40e0_0000,
            initrd: None,
            console,
            raw_console: false,
            wfi: WfiPolicy::Native,
            pmu: false,
            monitor_masked_stretch: false,
            trace_reader: false,
            health: keel_core::config::Health {
                policy: keel_core::health::Policy::DEFAULT,
                managers: Vec::new(),
            },
            watchdog_device: false,
            tasks: None,
            messages: None,
            virtio_console: None,
            cmdline: "keel.mode=ticks keel.off=6".into(),
            passthrough: Vec::new(),
        }
    }

    #[test]
    fn initrd_is_described_in_chosen() {
        let mut with_initrd = vm(true, vec![1]);
        with_initrd.initrd = Some(keel_core::config::Initrd {
            source: ImageSource::File("initrd.cpio.gz".into()),
            path: PathBuf::from("/nonexistent/initrd.cpio.gz"),
            ipa: 0x40c0_0000,
            size: 0x1_2345,
        });
        let blob = guest_dtb(&with_initrd, &[], &[], GicVersion::V3).unwrap();
        let fdt = keel_core::fdt::Fdt::new(&blob).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        assert_eq!(
            chosen.property_u64("linux,initrd-start").unwrap(),
            Some(0x40c0_0000)
        );
        assert_eq!(
            chosen.property_u64("linux,initrd-end").unwrap(),
            Some(0x40c1_2345)
        );
        let without = guest_dtb(&vm(true, vec![1]), &[], &[], GicVersion::V3).unwrap();
        let fdt = keel_core::fdt::Fdt::new(&without).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        assert_eq!(chosen.property("linux,initrd-start").unwrap(), None);
    }

    #[test]
    fn chosen_reserves_the_rng_seed_keel_fills() {
        let blob = guest_dtb(&vm(false, vec![1]), &[], &[], GicVersion::V3).unwrap();
        let key = keel_core::seed::SeedKey::from_platform(&[3; 32]).unwrap();
        for seed in SEED_PROPERTIES {
            let patch = keel_core::seed::seed_patch(&blob, seed, Some(&key), VmId(0), 0)
                .unwrap()
                .unwrap_or_else(|| panic!("no /chosen/{} placeholder", seed.name));
            assert_eq!(patch.bytes().len(), seed.len);
        }
    }

    fn be32(blob: &[u8], offset: usize) -> u32 {
        u32::from_be_bytes(blob[offset..offset + 4].try_into().unwrap())
    }

    /// Decompiles with `dtc` (package device-tree-compiler; a missing `dtc` fails the test).
    fn decompile(blob: &[u8], name: &str) -> String {
        let path = std::env::temp_dir().join(format!("keel-{}-{name}.dtb", std::process::id()));
        std::fs::write(&path, blob).unwrap();
        let output = Command::new("dtc")
            .args(["-I", "dtb", "-O", "dts"])
            .arg(&path)
            .output();
        std::fs::remove_file(&path).unwrap();
        let output = output.unwrap_or_else(|error| {
            panic!("dtc (Debian package device-tree-compiler) is needed by this test and cannot start: {error}; `cargo xtask test` installs it")
        });
        assert!(
            output.status.success(),
            "dtc failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        normalize_hex(&String::from_utf8(output.stdout).unwrap())
    }

    /// The lines (trimmed) of node `name`'s body in decompiled `source`, up to its first `};`.
    fn node_lines<'a>(source: &'a str, name: &str) -> Vec<&'a str> {
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        let start = lines
            .iter()
            .position(|line| *line == format!("{name} {{"))
            .unwrap_or_else(|| panic!("no node {name} in:\n{source}"));
        let end = start + lines[start..].iter().position(|l| *l == "};").unwrap();
        lines[start + 1..end].to_vec()
    }

    /// Drops leading zeros of `0x` numbers: dtc 1.4 prints `<0x2>` where 1.6 prints `<0x02>`.
    fn normalize_hex(text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("0x") {
            out.push_str(&rest[..at + 2]);
            rest = &rest[at + 2..];
            let zeros = rest.len() - rest.trim_start_matches('0').len();
            let more_digits = rest[zeros..].starts_with(|c: char| c.is_ascii_hexdigit());
            // An all-zero number keeps one zero.
            rest = &rest[if more_digits {
                zeros
            } else {
                zeros.saturating_sub(1)
            }..];
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn hex_normalization() {
        assert_eq!(
            normalize_hex("<0x00 0x0d 0x304 0x40000000>"),
            "<0x0 0xd 0x304 0x40000000>"
        );
    }

    #[test]
    fn blob_header_is_valid() {
        let blob = guest_dtb(&vm(true, vec![1, 2]), &[], &[], GicVersion::V3).unwrap();
        assert_eq!(be32(&blob, 0), 0xd00d_feed, "FDT magic");
        assert_eq!(be32(&blob, 4) as usize, blob.len(), "totalsize");
        assert_eq!(be32(&blob, 20), 17, "version");
    }

    #[test]
    fn timer_cpu_mask_covers_the_vcpus() {
        assert_eq!(timer_flags(1), 0x104);
        assert_eq!(timer_flags(4), 0xf04);
        assert_eq!(timer_flags(12), 0xff04);
    }

    #[test]
    fn a_gicv2_guest_sees_the_distributor_and_its_cpu_interface() {
        let blob = guest_dtb(&vm(true, vec![1, 2]), &[], &[], GicVersion::V2).unwrap();
        let source = decompile(&blob, "gicv2");
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        assert!(
            lines.contains(&"compatible = \"arm,cortex-a15-gic\";"),
            "{source}"
        );
        let reg = lines
            .iter()
            .skip_while(|line| !line.starts_with("intc@8000000"))
            .find(|line| line.starts_with("reg = "))
            .unwrap();
        let cells: Vec<u64> = reg["reg = <".len()..reg.len() - 2]
            .split(' ')
            .map(|cell| u64::from_str_radix(&cell[2..], 16).unwrap())
            .collect();
        assert_eq!(
            cells,
            [0, 0x800_0000, 0, 0x1_0000, 0, 0x801_0000, 0, 0x2000]
        );
        assert!(!source.contains("gic-v3") && !source.contains("redistributor"));
    }

    #[test]
    fn decompiled_tree_describes_the_platform() {
        let blob = guest_dtb(&vm(true, vec![1, 2]), &[], &[], GicVersion::V3).unwrap();
        let source = decompile(&blob, "console");
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        let expected_lines = [
            "compatible = \"linux,dummy-virt\";",
            "#address-cells = <0x02>;",
            "interrupt-parent = <0x01>;",
            "cpu@0 {",
            "cpu@1 {",
            "enable-method = \"psci\";",
            "compatible = \"arm,psci-1.0\\0arm,psci-0.2\";",
            "method = \"hvc\";",
            "memory@40000000 {",
            "reg = <0x00 0x40000000 0x00 0x1000000>;",
            "intc@8000000 {",
            "compatible = \"arm,gic-v3\";",
            "reg = <0x00 0x8000000 0x00 0x10000 0x00 0x80a0000 0x00 0x40000>;",
            "interrupts = <0x01 0x09 0x04>;",
            "#redistributor-regions = <0x01>;",
            "interrupts = <0x01 0x0d 0x304 0x01 0x0e 0x304 0x01 0x0b 0x304 0x01 0x0a 0x304>;",
            "always-on;",
            "clock-frequency = <0x16e3600>;",
            "pl011@9000000 {",
            "compatible = \"arm,pl011\\0arm,primecell\";",
            "interrupts = <0x00 0x01 0x04>;",
            "clocks = <0x02 0x02>;",
            "clock-names = \"uartclk\\0apb_pclk\";",
            "serial0 = \"/pl011@9000000\";",
            "stdout-path = \"/pl011@9000000\";",
            "bootargs = \"keel.mode=ticks keel.off=6\";",
        ];
        for expected in expected_lines.map(normalize_hex) {
            assert!(
                lines.contains(&expected.as_str()),
                "missing {expected:?} in:\n{source}"
            );
        }
        assert!(!lines.contains(&"cpu@2 {"));
    }

    #[test]
    fn channels_of_the_vm_are_described_with_what_the_doorbell_takes() {
        use keel_core::config::ChannelMember;
        let member = |vm, ipa, writable| ChannelMember { vm, ipa, writable };
        let channel = |name: &str, intid, members| Channel {
            name: name.into(),
            phys: 0x5f00_0000,
            size: 0x1_0000,
            intid,
            members,
        };
        let channels = [
            channel(
                "telemetry",
                48,
                vec![member(1, 0x7000_0000, true), member(0, 0x6000_0000, false)],
            ),
            channel(
                "elsewhere",
                49,
                vec![member(1, 0x7100_0000, true), member(2, 0x7100_0000, true)],
            ),
            channel(
                "commands",
                5,
                vec![member(0, 0x6010_0000, true), member(1, 0x7010_0000, false)],
            ),
        ];
        let source = decompile(
            &guest_dtb(&vm(true, vec![1]), &[], &channels, GicVersion::V3).unwrap(),
            "channels",
        );
        let lines: Vec<&str> = source.lines().map(str::trim).collect();
        let node = |name: &str| node_lines(&source, name);
        assert!(lines.contains(&"keel-channels {"), "{source}");
        let expected_telemetry = [
            "compatible = \"keel,channel\";",
            "reg = <0x00 0x60000000 0x00 0x10000>;",
            "interrupts = <0x00 0x10 0x01>;",
            "read-only;",
            "keel,channel = <0x00>;",
            "keel,member = <0x01>;",
        ];
        assert_eq!(node("telemetry"), expected_telemetry.map(normalize_hex));
        let expected_commands = [
            "compatible = \"keel,channel\";",
            "reg = <0x00 0x60100000 0x00 0x10000>;",
            "keel,doorbell-sgi = <0x05>;",
            "keel,channel = <0x02>;",
            "keel,member = <0x00>;",
        ];
        assert_eq!(node("commands"), expected_commands.map(normalize_hex));
        assert!(!source.contains("elsewhere"), "not a member");
        let outsider = Vm {
            id: 2,
            ..vm(true, vec![1])
        };
        let alone = decompile(
            &guest_dtb(&outsider, &[], &channels[..1], GicVersion::V3).unwrap(),
            "no-channels",
        );
        assert!(!alone.contains("keel-channels"));
    }

    #[test]
    fn a_manager_has_the_window_and_the_names_of_the_vms_it_manages() {
        let managed_by = |id: u16, name: &str, managers: Vec<u8>| Vm {
            id,
            name: name.into(),
            health: keel_core::config::Health {
                policy: keel_core::health::Policy::DEFAULT,
                managers,
            },
            ..vm(true, vec![1])
        };
        let vms = [
            managed_by(0, "linux", vec![]),
            managed_by(1, "rt", vec![0]),
            managed_by(2, "bare", vec![]),
            managed_by(3, "logger", vec![2, 0]),
        ];
        let source = decompile(
            &guest_dtb(&vms[0], &vms, &[], GicVersion::V3).unwrap(),
            "manager",
        );
        let expected = [
            "compatible = \"keel,manager\";",
            "reg = <0x00 0xb010000 0x00 0x1000>;",
            "keel,managed = <0x01 0x03>;",
            "keel,managed-names = \"rt\\0logger\";",
        ];
        assert_eq!(
            node_lines(&source, "keel-manager@b010000"),
            expected.map(normalize_hex)
        );
        // VM 2 manages only vm 3; vm 1 manages none, and has no window.
        let bare = decompile(
            &guest_dtb(&vms[2], &vms, &[], GicVersion::V3).unwrap(),
            "manager-bare",
        );
        assert!(bare.contains("keel,managed-names = \"logger\";"), "{bare}");
        let managed = decompile(
            &guest_dtb(&vms[1], &vms, &[], GicVersion::V3).unwrap(),
            "managed",
        );
        assert!(!managed.contains("keel-manager"), "{managed}");
    }

    #[test]
    fn no_console_means_no_uart() {
        let blob = guest_dtb(&vm(false, vec![1]), &[], &[], GicVersion::V3).unwrap();
        let source = decompile(&blob, "headless");
        assert!(!source.contains("pl011"));
        assert!(!source.contains("stdout-path"));
        assert!(source.contains("bootargs = \"keel.mode=ticks keel.off=6\";"));
    }

    /// The SP805 of a VM with `devices = ["watchdog"]` and no console: the PrimeCell node with
    /// its two clocks (WDOGCLK at 1 MHz first, then `apb-pclk`), no interrupt; none without it.
    #[test]
    fn a_watchdog_device_is_an_sp805_with_its_clocks() {
        let with = Vm {
            watchdog_device: true,
            ..vm(false, vec![1])
        };
        let source = decompile(
            &guest_dtb(&with, &[], &[], GicVersion::V3).unwrap(),
            "watchdog",
        );
        let node = |name: &str| node_lines(&source, name);
        let expected_watchdog = [
            "compatible = \"arm,sp805\\0arm,primecell\";",
            "reg = <0x00 0xb000000 0x00 0x1000>;",
            "clocks = <0x03 0x02>;",
            "clock-names = \"wdog_clk\\0apb_pclk\";",
        ];
        assert_eq!(
            node("watchdog@b000000"),
            expected_watchdog.map(normalize_hex)
        );
        let wdog_clock = node("clock-1000000");
        for line in [
            "compatible = \"fixed-clock\";",
            "clock-frequency = <0xf4240>;",
            "phandle = <0x03>;",
        ] {
            assert!(
                wdog_clock.contains(&normalize_hex(line).as_str()),
                "{line} in {source}"
            );
        }
        assert!(node("apb-pclk").contains(&normalize_hex("phandle = <0x02>;").as_str()));
        assert!(!source.contains("pl011"));
        let without = decompile(
            &guest_dtb(&vm(true, vec![1]), &[], &[], GicVersion::V3).unwrap(),
            "no-watchdog",
        );
        assert!(!without.contains("sp805"));
        assert!(!without.contains("clock-1000000"));
    }

    /// The board's PL031 given to a VM without a console: the compiler reads QEMU's own tree
    /// (dumped as Keel runs it), and the VM's tree gets the node with its registers where the
    /// VM sees them and its clock pointing at the VM's copy of `apb-pclk`.
    #[test]
    fn an_assigned_device_is_the_boards_node_with_the_vms_clock() {
        let image = format!(
            "{}/../core/tests/fixtures/images/test-guest.bin",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = format!(
            r#"
[system]
name = "rtc"
ram = {{ base = 0x4000_0000, size = "1G" }}
hypervisor = {{ base = 0x4000_0000, size = "32M" }}
pcpus = 2

[[vm]]
name = "rtc"
image = {{ file = "{image}" }}
memory = {{ base = 0x5000_0000, size = "16M" }}
pcpus = [1]

[[vm.passthrough]]
path = "/pl031@9010000"
ipa = 0x1c01_0000
"#
        );
        let system = keel_core::config::parse_str_with_board(
            &text,
            std::path::Path::new("rtc.toml"),
            &|_| None,
            &crate::image::board_tree,
        )
        .unwrap();
        let source = decompile(
            &guest_dtb(&system.vms[0], &[], &[], GicVersion::V3).unwrap(),
            "assigned",
        );
        let node = |name: &str| node_lines(&source, name);
        let expected_rtc = [
            "clock-names = \"apb_pclk\";",
            "interrupts = <0x00 0x02 0x04>;",
            "reg = <0x00 0x1c010000 0x00 0x1000>;",
            "compatible = \"arm,pl031\\0arm,primecell\";",
            "clocks = <0x02>;",
        ];
        assert_eq!(node("pl031@1c010000"), expected_rtc.map(normalize_hex));
        let clock = node("apb-pclk");
        assert!(
            clock.contains(&normalize_hex("phandle = <0x02>;").as_str()),
            "{source}"
        );
        assert!(clock.contains(&"compatible = \"fixed-clock\";"), "{source}");
        assert!(!source.contains("pl011"));
    }
}

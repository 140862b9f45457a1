//! Platform facts read from the device tree the loader passes in x0 (QEMU `virt` first).
//!
//! Every node and property Keel needs is checked; a missing or malformed one is a
//! [`BootError`] naming it, printed on the early console before Keel powers off.

use core::sync::atomic::{AtomicU32, Ordering};

use keel_core::fdt::{Fdt, FdtError, Node};
use keel_core::seed::SeedKey;
use keel_core::text::{Fill, Out, Show};

use keel_core::board::{GicVersion, UartKind};

use crate::arch::boot::MAX_CPUS;
use crate::arch::cpu::Once;
use crate::arch::gic::Regions;

/// The board's facts, read once by pCPU 0 at boot ([`record`]) and only read after.
static PLATFORM: Once<Platform> = Once::new();
/// The physical UART's interrupt id, kept apart for the interrupt loop (one load).
static UART_INTID: AtomicU32 = AtomicU32::new(u32::MAX);

/// Keeps the facts pCPU 0 read from the device tree, before any other pCPU starts.
pub fn record(platform: Platform) -> &'static Platform {
    let platform = PLATFORM.call_once(|| platform);
    UART_INTID.store(platform.uart_intid, Ordering::Relaxed);
    platform
}

/// The board's facts ([`record`]ed at boot).
pub fn get() -> &'static Platform {
    // `panic!` with a literal, not `expect`: `expect` formats its message, which would bring
    // `core::fmt`'s `&str` display into the image.
    let Some(platform) = PLATFORM.get() else {
        panic!("platform is read before any other pCPU starts");
    };
    platform
}

/// The physical UART's interrupt id.
pub fn uart_intid() -> u32 {
    UART_INTID.load(Ordering::Relaxed)
}

/// The hardware Keel runs on.
#[derive(Clone, Debug)]
pub struct Platform {
    /// `model` of the root node.
    pub model: &'static str,
    /// First RAM bank.
    pub ram_base: u64,
    /// Its size.
    pub ram_size: u64,
    /// MPIDR affinity of each CPU, in DTB order; index = Keel's pCPU index.
    pub cpus: [u64; MAX_CPUS],
    /// How many entries of `cpus` are valid.
    pub cpu_count: usize,
    /// The interrupt controller's version.
    pub gic_version: GicVersion,
    /// Its regions.
    pub gic: Regions,
    /// The console UART's kind.
    pub uart_kind: UartKind,
    /// The console UART.
    pub uart: u64,
    /// Its interrupt id.
    pub uart_intid: u32,
    /// The key of the guests' entropy seeds, from `/chosen/rng-seed` (None without one).
    pub seed_key: Option<SeedKey>,
}

/// Why Keel cannot boot on this device tree.
#[derive(Clone, Copy, Debug)]
pub enum BootError {
    /// x0 did not hold a device tree address.
    NoDeviceTree,
    /// The blob itself is malformed.
    Malformed(FdtError),
    /// A node Keel needs is absent.
    MissingNode(&'static str),
    /// A node lacks a property Keel needs, or it has the wrong form.
    BadProperty {
        /// The node.
        node: &'static str,
        /// The property.
        property: &'static str,
    },
    /// PSCI is not reachable by SMC.
    PsciNotSmc,
}

impl Show for BootError {
    fn show(&self, out: &mut dyn Out) {
        match self {
            BootError::NoDeviceTree => {
                out.put("no device tree: x0 was 0 at entry (load Keel as an arm64 Image)")
            }
            BootError::Malformed(error) => keel_core::text!(out, "malformed device tree: ", error),
            BootError::MissingNode(node) => Fill("device tree has no {} node", &[node]).show(out),
            BootError::BadProperty { node, property } => Fill(
                "device tree node {}: property '{}' is missing or malformed",
                &[node, property],
            )
            .show(out),
            BootError::PsciNotSmc => {
                out.put("device tree /psci: method is not \"smc\" (Keel calls PSCI from EL2)")
            }
        }
    }
}

impl From<FdtError> for BootError {
    fn from(error: FdtError) -> Self {
        BootError::Malformed(error)
    }
}

fn required<'a>(node: Option<Node<'a>>, name: &'static str) -> Result<Node<'a>, BootError> {
    node.ok_or(BootError::MissingNode(name))
}

fn first_reg(node: &Node<'_>, name: &'static str, index: usize) -> Result<(u64, u64), BootError> {
    node.reg()?
        .and_then(|mut reg| reg.nth(index))
        .ok_or(BootError::BadProperty {
            node: name,
            property: "reg",
        })
}

/// The first node compatible with one of `compatibles`, and that string.
fn find_any<'a>(
    fdt: &Fdt<'a>,
    compatibles: &'static [&'static str],
) -> Result<Option<(Node<'a>, &'static str)>, BootError> {
    for &compatible in compatibles {
        if let Some(node) = fdt.find_compatible(compatible)? {
            return Ok(Some((node, compatible)));
        }
    }
    Ok(None)
}

/// The interrupt controller: a GICv3's distributor and redistributors, or a GICv2's
/// distributor, CPU interface, virtual interface control and virtual CPU interface.
///
/// A GIC-400 whose CPU interfaces are given as 128 KiB regions (the ZynqMP's) has each 4 KiB
/// page aliased every 64 KiB: the 8 KiB holding GICC_DIR is contiguous only from offset
/// 0xF000, where Linux, Xen and Bao take it too.
fn gic_regions(fdt: &Fdt<'_>) -> Result<(GicVersion, Regions), BootError> {
    if let Some((gic, name)) = find_any(fdt, GicVersion::V3.compatibles())? {
        let (distributor, _) = first_reg(&gic, name, 0)?;
        let (redistributors, redistributors_size) = first_reg(&gic, name, 1)?;
        return Ok((
            GicVersion::V3,
            Regions {
                distributor,
                redistributors,
                redistributors_size,
                ..Regions::default()
            },
        ));
    }
    let (gic, name) = find_any(fdt, GicVersion::V2.compatibles())?.ok_or(
        BootError::MissingNode("GICv3 or GICv2 interrupt controller"),
    )?;
    let aliased = |(base, size): (u64, u64)| {
        if size >= 0x2_0000 {
            base + 0xf000
        } else {
            base
        }
    };
    let (distributor, _) = first_reg(&gic, name, 0)?;
    let cpu_interface = aliased(first_reg(&gic, name, 1)?);
    let (virtual_control, _) = first_reg(&gic, name, 2)?;
    let virtual_cpu = aliased(first_reg(&gic, name, 3)?);
    Ok((
        GicVersion::V2,
        Regions {
            distributor,
            cpu_interface,
            virtual_control,
            virtual_cpu,
            ..Regions::default()
        },
    ))
}

/// The console's UART: the one `/chosen/stdout-path` names (directly or through
/// `/aliases`), if Keel drives its kind, or else the first PL011 or Cadence UART.
fn console_uart<'a>(fdt: &Fdt<'a>) -> Result<(UartKind, Node<'a>, &'static str), BootError> {
    let stdout = match fdt.find_node("/chosen")? {
        Some(chosen) => chosen.property_str("stdout-path")?,
        None => None,
    };
    let stdout = stdout.map(|path| path.split(':').next().unwrap_or(path));
    let path = match stdout {
        Some(path) if !path.starts_with('/') => match fdt.find_node("/aliases")? {
            Some(aliases) => aliases.property_str(path)?,
            None => None,
        },
        other => other,
    };
    for kind in [UartKind::Pl011, UartKind::Cadence] {
        if let Some(node) = path.map(|path| fdt.find_node(path)).transpose()?.flatten() {
            for &compatible in kind.compatibles() {
                if node.is_compatible(compatible)? {
                    return Ok((kind, node, compatible));
                }
            }
        }
    }
    for kind in [UartKind::Pl011, UartKind::Cadence] {
        if let Some((node, name)) = find_any(fdt, kind.compatibles())? {
            return Ok((kind, node, name));
        }
    }
    Err(BootError::MissingNode("PL011 or Cadence UART"))
}

impl Platform {
    /// Reads the platform from the blob at `dtb`.
    ///
    /// `blob` must be the whole device tree (see [`keel_core::fdt::total_size`]).
    pub fn from_dtb(blob: &'static [u8]) -> Result<Self, BootError> {
        let fdt = Fdt::new(blob)?;
        let root = fdt.root();
        let model = root.property_str("model")?.unwrap_or("unknown board");

        let memory = required(fdt.find_node("/memory")?, "/memory")?;
        let (ram_base, ram_size) = first_reg(&memory, "/memory", 0)?;

        let cpus_node = required(fdt.find_node("/cpus")?, "/cpus")?;
        let mut cpus = [0; MAX_CPUS];
        let mut cpu_count = 0;
        for child in cpus_node.children() {
            let child = child?;
            if child.property_str("device_type")? != Some("cpu") {
                continue;
            }
            let (mpidr, _) = first_reg(&child, "/cpus/cpu", 0)?;
            if cpu_count < MAX_CPUS {
                cpus[cpu_count] = mpidr;
                cpu_count += 1;
            }
        }
        if cpu_count == 0 {
            return Err(BootError::MissingNode("/cpus/cpu@*"));
        }

        let psci = required(fdt.find_node("/psci")?, "/psci")?;
        if psci.property_str("method")? != Some("smc") {
            return Err(BootError::PsciNotSmc);
        }

        let (gic_version, gic) = gic_regions(&fdt)?;
        let (uart_kind, uart, uart_name) = console_uart(&fdt)?;
        let (uart_base, _) = first_reg(&uart, uart_name, 0)?;
        let bad_interrupts = BootError::BadProperty {
            node: uart_name,
            property: "interrupts",
        };
        let mut interrupts = uart.interrupts()?.ok_or(bad_interrupts)?;
        let (kind, number) = (interrupts.next(), interrupts.next());
        let uart_intid = match (kind, number) {
            (Some(0), Some(spi)) => spi + 32,
            _ => return Err(bad_interrupts),
        };

        let seed_key = match fdt.find_node("/chosen")? {
            Some(chosen) => chosen
                .property("rng-seed")?
                .and_then(SeedKey::from_platform),
            None => None,
        };

        Ok(Self {
            model,
            ram_base,
            ram_size,
            cpus,
            cpu_count,
            gic_version,
            gic,
            uart_kind,
            uart: uart_base,
            uart_intid,
            seed_key,
        })
    }
}

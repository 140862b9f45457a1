//! The boards Keel is built for: a configuration names one (`[system] board`), the
//! configuration compiler reads its device tree to check the system against it, and Keel
//! reads the same facts from the device tree it is handed at boot and halts if they disagree
//! with the board it was built for.
//!
//! A board here is what Keel drives on it: its interrupt controller and the UART of Keel's own
//! console. Everything else (RAM, CPUs, devices) is read from the board's device tree.

/// The interrupt controller's architecture version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicVersion {
    /// GICv2 with the virtualization extensions (a GIC-400): memory-mapped CPU interface and
    /// list registers (GICC, GICH, GICV).
    V2,
    /// GICv3: redistributors and the system-register CPU interface.
    V3,
}

impl GicVersion {
    /// As the banner and messages name it.
    pub fn name(self) -> &'static str {
        match self {
            GicVersion::V2 => "GICv2",
            GicVersion::V3 => "GICv3",
        }
    }

    /// The device-tree `compatible` strings of this version's interrupt controllers that Keel
    /// drives (Linux's bindings `arm,gic.yaml` and `arm,gic-v3.yaml`).
    pub fn compatibles(self) -> &'static [&'static str] {
        match self {
            GicVersion::V2 => &["arm,gic-400", "arm,cortex-a15-gic", "arm,cortex-a7-gic"],
            GicVersion::V3 => &["arm,gic-v3"],
        }
    }
}

/// The UART Keel's own console drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UartKind {
    /// Arm PrimeCell PL011 (`arm,pl011`).
    Pl011,
    /// Cadence UART (`cdns,uart-r1p12`, the ZynqMP's `xlnx,zynqmp-uart`).
    Cadence,
}

impl UartKind {
    /// As the banner and messages name it.
    pub fn name(self) -> &'static str {
        match self {
            UartKind::Pl011 => "PL011",
            UartKind::Cadence => "Cadence UART",
        }
    }

    /// The device-tree `compatible` strings of this UART.
    pub fn compatibles(self) -> &'static [&'static str] {
        match self {
            UartKind::Pl011 => &["arm,pl011"],
            UartKind::Cadence => &["cdns,uart-r1p12", "xlnx,zynqmp-uart", "xlnx,xuartps"],
        }
    }
}

/// A board Keel is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardDesc {
    /// Its name in `[system] board`.
    pub name: &'static str,
    /// Its interrupt controller.
    pub gic: GicVersion,
    /// The UART of Keel's console.
    pub uart: UartKind,
    /// Whether QEMU 7.2 has a model of it that Keel's tests and demo boot.
    pub emulated: bool,
    /// Where its console UART usually is: where Keel reports a device tree it cannot read
    /// (the only line it can give before it has read the board's own).
    pub early_uart: u64,
}

/// QEMU's `virt` machine with virtualization and a GICv3: the reference platform.
pub const QEMU_VIRT: BoardDesc = BoardDesc {
    name: "qemu-virt",
    gic: GicVersion::V3,
    uart: UartKind::Pl011,
    emulated: true,
    early_uart: 0x0900_0000,
};

/// The boards `[system] board` may name; the first is the default.
pub const BOARDS: &[BoardDesc] = &[
    QEMU_VIRT,
    // QEMU's `virt` machine with `gic-version=2`: a GICv2 with the virtualization extensions.
    BoardDesc {
        name: "qemu-virt-gicv2",
        gic: GicVersion::V2,
        uart: UartKind::Pl011,
        emulated: true,
        early_uart: 0x0900_0000,
    },
    // The Xilinx ZCU102 (Zynq UltraScale+ MPSoC): a GIC-400, Cadence UARTs, RAM at 0.
    BoardDesc {
        name: "zcu102",
        gic: GicVersion::V2,
        uart: UartKind::Cadence,
        emulated: true,
        early_uart: 0xff00_0000,
    },
    // The Raspberry Pi 4 Model B (BCM2711): a GIC-400 and a PL011; no QEMU 7.2 model.
    BoardDesc {
        name: "rpi4b",
        gic: GicVersion::V2,
        uart: UartKind::Pl011,
        emulated: false,
        early_uart: 0xfe20_1000,
    },
];

/// The board named `name`, if Keel knows it.
pub fn board(name: &str) -> Option<&'static BoardDesc> {
    BOARDS.iter().find(|board| board.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boards_are_found_by_name_and_the_default_is_virt_with_gicv3() {
        assert_eq!(BOARDS[0], QEMU_VIRT);
        assert_eq!(QEMU_VIRT.gic, GicVersion::V3);
        assert_eq!(board("zcu102").map(|b| b.uart), Some(UartKind::Cadence));
        assert_eq!(
            board("qemu-virt-gicv2").map(|b| b.gic),
            Some(GicVersion::V2)
        );
        assert!(board("zcu104").is_none());
    }
}

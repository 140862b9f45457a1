//! Whole-reader tests: a test blob builder and sample tree, mutation robustness, and real blobs from dtc and QEMU.

extern crate std;

use super::header::{HEADER_SIZE_V17, MAGIC};
use super::structure::{FDT_BEGIN_NODE, FDT_END, FDT_END_NODE, FDT_NOP, FDT_PROP};
use super::{Fdt, Node};
use std::vec::Vec;

/// A minimal blob writer for tests (§5): header, reservations, structure, strings.
pub(crate) struct Builder {
    pub(crate) structure: Vec<u8>,
    pub(crate) strings: Vec<u8>,
    pub(crate) reservations: Vec<(u64, u64)>,
    pub(crate) version: u32,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Self {
            structure: Vec::new(),
            strings: Vec::new(),
            reservations: Vec::new(),
            version: 17,
        }
    }

    fn word(&mut self, word: u32) -> &mut Self {
        self.structure.extend_from_slice(&word.to_be_bytes());
        self
    }

    fn pad(&mut self) {
        while !self.structure.len().is_multiple_of(4) {
            self.structure.push(0);
        }
    }

    pub(crate) fn begin(&mut self, name: &str) -> &mut Self {
        self.word(FDT_BEGIN_NODE);
        self.structure.extend_from_slice(name.as_bytes());
        self.structure.push(0);
        self.pad();
        self
    }

    pub(crate) fn end(&mut self) -> &mut Self {
        self.word(FDT_END_NODE)
    }

    pub(crate) fn nop(&mut self) -> &mut Self {
        self.word(FDT_NOP)
    }

    pub(crate) fn prop(&mut self, name: &str, value: &[u8]) -> &mut Self {
        let mut key = name.as_bytes().to_vec();
        key.push(0);
        let name_offset = match self.strings.windows(key.len()).position(|w| w == key) {
            Some(offset) => offset,
            None => {
                self.strings.extend_from_slice(&key);
                self.strings.len() - key.len()
            }
        };
        self.word(FDT_PROP)
            .word(value.len() as u32)
            .word(name_offset as u32);
        self.structure.extend_from_slice(value);
        self.pad();
        self
    }

    pub(crate) fn cells(&mut self, name: &str, cells: &[u32]) -> &mut Self {
        let value: Vec<u8> = cells.iter().flat_map(|c| c.to_be_bytes()).collect();
        self.prop(name, &value)
    }

    pub(crate) fn strs(&mut self, name: &str, strings: &[&str]) -> &mut Self {
        let value: Vec<u8> = strings.iter().flat_map(|s| s.bytes().chain([0])).collect();
        self.prop(name, &value)
    }

    pub(crate) fn finish(&mut self) -> Vec<u8> {
        self.word(FDT_END);
        let reservations_offset = HEADER_SIZE_V17;
        let structure_offset = reservations_offset + 16 * (self.reservations.len() + 1);
        let strings_offset = structure_offset + self.structure.len();
        let total = strings_offset + self.strings.len();
        let header = [
            MAGIC,
            total as u32,
            structure_offset as u32,
            strings_offset as u32,
            reservations_offset as u32,
            self.version,
            16,
            0,
            self.strings.len() as u32,
            self.structure.len() as u32,
        ];
        let mut blob: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
        for &(address, size) in self.reservations.iter().chain([&(0, 0)]) {
            blob.extend_from_slice(&address.to_be_bytes());
            blob.extend_from_slice(&size.to_be_bytes());
        }
        blob.extend_from_slice(&self.structure);
        blob.extend_from_slice(&self.strings);
        blob
    }
}

/// A small tree shaped like QEMU's virt machine.
pub(crate) fn sample() -> Vec<u8> {
    let mut b = Builder::new();
    b.reservations.push((0x4800_0000, 0x1000));
    b.begin("")
        .cells("#address-cells", &[2])
        .cells("#size-cells", &[2])
        .strs("compatible", &["linux,dummy-virt"])
        .nop();
    b.begin("chosen")
        .strs("bootargs", &["console=ttyAMA0 earlycon"])
        .end();
    b.begin("memory@40000000")
        .strs("device_type", &["memory"])
        .cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
        .end();
    b.begin("cpus")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[0]);
    b.begin("cpu@0")
        .strs("compatible", &["arm,cortex-a72"])
        .cells("reg", &[0])
        .end();
    b.nop()
        .begin("cpu@1")
        .strs("compatible", &["arm,cortex-a72"])
        .cells("reg", &[1])
        .end();
    b.end();
    b.begin("pl011@9000000")
        .strs("compatible", &["arm,pl011", "arm,primecell"])
        .cells("reg", &[0, 0x0900_0000, 0, 0x1000])
        .cells("interrupts", &[0, 1, 4])
        .prop("empty", &[])
        .end();
    b.begin("soc")
        .cells("#address-cells", &[1])
        .cells("#size-cells", &[1]);
    b.begin("uart@1000")
        .strs("compatible", &["ns16550a"])
        .cells("reg", &[0x1000, 0x100, 0x2000, 0x200])
        .end();
    b.begin("odd")
        .cells("#address-cells", &[3])
        .begin("x@0")
        .cells("reg", &[0, 0, 0, 1]);
    b.end().end();
    b.end();
    b.end();
    b.finish()
}

pub(super) fn names<'a>(node: &Node<'a>) -> Vec<&'a str> {
    node.children().map(|c| c.unwrap().name()).collect()
}

pub(super) fn regs(node: Node<'_>) -> Vec<(u64, u64)> {
    node.reg().unwrap().unwrap().collect()
}

/// Runs `program` if it is installed, returning its success.
/// Runs a host tool these tests need (`dtc`, QEMU); panics naming it, the package that has it
/// and its own error: a missing tool fails the test instead of skipping it.
fn run(program: &str, package: &str, args: &[&str]) {
    let output = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|error| {
            panic!("{program} (Debian package {package}) is needed by this test and cannot start: {error}; `cargo xtask test` installs it")
        });
    assert!(
        output.status.success(),
        "`{program} {}` failed ({}):\n{}",
        args.join(" "),
        output.status,
        std::string::String::from_utf8_lossy(&output.stderr)
    );
}

/// A blob compiled by dtc from a small `virt`-like source (8 nodes).
pub(crate) fn dtc_compiled_blob() -> Vec<u8> {
    let directory = std::env::temp_dir();
    let source = directory.join(std::format!("keel-fdt-{}.dts", std::process::id()));
    let output = source.with_extension("dtb");
    std::fs::write(
        &source,
        r#"/dts-v1/;
/memreserve/ 0x48000000 0x1000;
/ {
#address-cells = <2>;
#size-cells = <2>;
compatible = "linux,dummy-virt";
chosen { bootargs = "console=ttyAMA0"; stdout-path = "/pl011@9000000"; };
memory@40000000 { device_type = "memory"; reg = <0x0 0x40000000 0x0 0x8000000>; };
cpus {
    #address-cells = <1>;
    #size-cells = <0>;
    cpu@0 { device_type = "cpu"; compatible = "arm,cortex-a72"; reg = <0>; };
    cpu@1 { device_type = "cpu"; compatible = "arm,cortex-a72"; reg = <1>; };
};
intc@8000000 {
    compatible = "arm,gic-v3";
    reg = <0x0 0x8000000 0x0 0x10000>, <0x0 0x80a0000 0x0 0xf60000>;
    interrupt-controller;
    #interrupt-cells = <3>;
};
pl011@9000000 {
    compatible = "arm,pl011", "arm,primecell";
    reg = <0x0 0x9000000 0x0 0x1000>;
    interrupts = <0 1 4>;
};
};
"#,
    )
    .unwrap();
    run(
        "dtc",
        "device-tree-compiler",
        &[
            "-I",
            "dts",
            "-O",
            "dtb",
            "-o",
            output.to_str().unwrap(),
            source.to_str().unwrap(),
        ],
    );
    let _ = std::fs::remove_file(&source);
    let blob = std::fs::read(&output).unwrap();
    let _ = std::fs::remove_file(&output);
    blob
}

#[test]
fn reads_a_dtc_compiled_blob() {
    let blob = dtc_compiled_blob();
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        fdt.reserved_memory().collect::<Vec<_>>(),
        [Ok((0x4800_0000, 0x1000))]
    );
    let chosen = fdt.find_node("/chosen").unwrap().unwrap();
    assert_eq!(chosen.property_str("bootargs"), Ok(Some("console=ttyAMA0")));
    assert_eq!(
        regs(fdt.find_node("/memory").unwrap().unwrap()),
        [(0x4000_0000, 0x800_0000)]
    );
    let gic = fdt.find_compatible("arm,gic-v3").unwrap().unwrap();
    assert_eq!(regs(gic), [(0x800_0000, 0x1_0000), (0x80a_0000, 0xf6_0000)]);
    assert_eq!(gic.property("interrupt-controller"), Ok(Some(&[][..])));
    let uart = fdt.find_compatible("arm,pl011").unwrap().unwrap();
    assert_eq!(
        uart.interrupts().unwrap().unwrap().collect::<Vec<_>>(),
        [0, 1, 4]
    );
    assert_eq!(
        regs(fdt.find_node("/cpus/cpu@1").unwrap().unwrap()),
        [(1, 0)]
    );
}

/// The device tree QEMU's `virt` machine (3 CPUs, 1 GiB) gives its guest.
pub(crate) fn qemu_virt_blob() -> Vec<u8> {
    let output = std::env::temp_dir().join(std::format!("keel-virt-{}.dtb", std::process::id()));
    let machine = std::format!(
        "virt,virtualization=on,gic-version=3,dumpdtb={}",
        output.to_str().unwrap()
    );
    let args = [
        "-M",
        &machine,
        "-cpu",
        "cortex-a72",
        "-smp",
        "3",
        "-m",
        "1G",
        "-display",
        "none",
        "-nic",
        "none",
    ];
    run("qemu-system-aarch64", "qemu-system-arm", &args);
    let blob = std::fs::read(&output).unwrap();
    let _ = std::fs::remove_file(&output);
    blob
}

#[test]
fn reads_qemu_virt_blob() {
    let blob = qemu_virt_blob();
    let fdt = Fdt::new(&blob).unwrap();
    assert_eq!(
        regs(fdt.find_node("/memory").unwrap().unwrap()),
        [(0x4000_0000, 0x4000_0000)]
    );
    let cpus = fdt.find_node("/cpus").unwrap().unwrap();
    let cpu_count = cpus
        .children()
        .filter(|c| c.unwrap().base_name() == "cpu")
        .count();
    assert_eq!(cpu_count, 3);
    assert_eq!(
        regs(fdt.find_node("/cpus/cpu@2").unwrap().unwrap()),
        [(2, 0)]
    );
    let uart = fdt.find_compatible("arm,pl011").unwrap().unwrap();
    assert_eq!(regs(uart)[0], (0x0900_0000, 0x1000));
    let gic = fdt.find_compatible("arm,gic-v3").unwrap().unwrap();
    assert_eq!(regs(gic)[0], (0x0800_0000, 0x1_0000));
    assert!(fdt.find_node("/chosen").unwrap().is_some());
    assert_eq!(fdt.compatible_nodes("virtio,mmio").count(), 32);
}

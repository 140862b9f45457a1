//! Host tests of the GICv2 distributor view: its registers as a guest sees them, and the
//! delivery they steer through the shared functions.

use super::*;

const UART: u32 = 33;
const OWNED: u32 = 40;
const UNOWNED: u32 = 34;

const ISENABLER: u64 = 0x100;
const ICENABLER: u64 = 0x180;
const ISPENDR: u64 = 0x200;
const ICPENDR: u64 = 0x280;
const ICACTIVER: u64 = 0x380;

/// A VM of `vcpus` vCPUs owning the UART's SPI and SPI 40, its distributor enabled for
/// group 0 as Linux leaves it.
fn enabled_gic(vcpus: usize) -> Vgic {
    let mut gic = Vgic::new(vcpus, &[UART, OWNED]);
    gic.v2_distributor_write(0, offset::CTLR, 4, 1).unwrap();
    gic
}

/// The word and the bit of `intid` in a 1-bit-per-interrupt register at `base`.
fn bit_at(base: u64, intid: u32) -> (u64, u64) {
    (base + u64::from(intid / 32) * 4, 1 << (intid % 32))
}

#[test]
fn banked_word_0_is_the_accessing_vcpus() {
    let mut gic = enabled_gic(2);
    gic.v2_distributor_write(0, ISENABLER, 4, 1 << 27).unwrap();
    gic.v2_distributor_write(1, ISENABLER, 4, 1 << 30).unwrap();
    assert_eq!(gic.v2_distributor_read(0, ISENABLER, 4), Ok(1 << 27));
    assert_eq!(gic.v2_distributor_read(1, ISENABLER, 4), Ok(1 << 30));
    assert!(gic.is_enabled(0, 27) && !gic.is_enabled(1, 27));
    // Priorities of ids 0-31 too, by byte and by word.
    gic.v2_distributor_write(1, offset::IPRIORITYR + 27, 1, 0x80)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(0, offset::IPRIORITYR + 27, 1),
        Ok(0)
    );
    assert_eq!(
        gic.v2_distributor_read(1, offset::IPRIORITYR + 24, 4),
        Ok(0x8000_0000)
    );
    // The SPI words are one, whoever reads them.
    let (word, uart) = bit_at(ISENABLER, UART);
    gic.v2_distributor_write(1, word, 4, uart).unwrap();
    assert_eq!(gic.v2_distributor_read(0, word, 4), Ok(uart));
}

#[test]
fn banked_targets_read_the_readers_mask_and_ignore_writes() {
    for vcpus in [1, 3, 8] {
        let mut gic = enabled_gic(vcpus);
        for vcpu in 0..vcpus {
            for word in 0..8 {
                let at = offset::ITARGETSR + 4 * word;
                gic.v2_distributor_write(vcpu, at, 4, 0xffff_ffff).unwrap();
                assert_eq!(
                    gic.v2_distributor_read(vcpu, at, 4),
                    Ok(0x0101_0101 << vcpu),
                    "{vcpus} vCPUs, vCPU {vcpu}, word {word}"
                );
                assert_eq!(gic.v2_distributor_read(vcpu, at + 3, 1), Ok(1 << vcpu));
            }
        }
    }
}

#[test]
fn spi_targets_round_trip_and_steer_delivery() {
    let mut gic = enabled_gic(3);
    let target = offset::ITARGETSR + u64::from(UART);
    assert_eq!(
        gic.v2_distributor_read(0, target, 1),
        Ok(1),
        "reset: vCPU 0, as the route"
    );
    gic.v2_distributor_write(0, target, 1, 0b110).unwrap();
    assert_eq!(gic.v2_distributor_read(2, target, 1), Ok(0b110));
    assert_eq!(gic.spi_target(UART), 1, "the lowest target");
    // Beyond the VM's three vCPUs: masked away.
    gic.v2_distributor_write(0, target, 1, 0xfc).unwrap();
    assert_eq!(gic.v2_distributor_read(0, target, 1), Ok(0b100));
    assert_eq!(gic.spi_target(UART), 2);
    // A word write sets four SPIs at once (32-35): only the owned one keeps its byte.
    gic.v2_distributor_write(1, offset::ITARGETSR + 32, 4, 0x0202_0202)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(0, offset::ITARGETSR + 32, 4),
        Ok(0x0000_0200)
    );
    let (word, uart) = bit_at(ISENABLER, UART);
    gic.v2_distributor_write(0, word, 4, uart).unwrap();
    gic.set_level(UART, true);
    assert_eq!(gic.next_pending(0), None);
    assert_eq!(gic.next_pending(1), Some((UART, 0, false)));
    assert_eq!(gic.next_pending(2), None);
    // Moved while pending and enabled: the new target is named to be kicked.
    assert_eq!(
        gic.v2_distributor_write(0, target, 1, 0b001),
        Ok(0b001),
        "kick vCPU 0"
    );
    assert_eq!(gic.next_pending(0).map(|p| p.0), Some(UART));
    assert_eq!(gic.next_pending(1), None);
}

#[test]
fn an_spi_without_targets_is_not_forwarded() {
    let mut gic = enabled_gic(2);
    let target = offset::ITARGETSR + u64::from(UART);
    let (word, uart) = bit_at(ISENABLER, UART);
    gic.v2_distributor_write(0, word, 4, uart).unwrap();
    gic.v2_distributor_write(0, target, 1, 0).unwrap();
    gic.set_level(UART, true);
    assert_eq!(gic.v2_distributor_read(0, target, 1), Ok(0));
    assert_eq!(
        gic.v2_distributor_read(0, word, 4),
        Ok(uart),
        "enabled as the guest left it"
    );
    assert!(!gic.is_enabled(0, UART), "but not forwarded");
    assert_eq!((gic.next_pending(0), gic.next_pending(1)), (None, None));
    assert_eq!(
        gic.v2_distributor_read(0, bit_at(ISPENDR, UART).0, 4),
        Ok(uart),
        "still pending"
    );
    // Disabled and enabled again with no target: still held.
    gic.v2_distributor_write(1, bit_at(ICENABLER, UART).0, 4, uart)
        .unwrap();
    assert_eq!(gic.v2_distributor_read(0, word, 4), Ok(0));
    assert_eq!(gic.v2_distributor_write(1, word, 4, uart), Ok(0));
    assert_eq!((gic.next_pending(0), gic.next_pending(1)), (None, None));
    // A target: forwarded there, and that vCPU named to be kicked.
    assert_eq!(gic.v2_distributor_write(0, target, 1, 0b10), Ok(0b10));
    assert!(gic.is_enabled(0, UART));
    assert_eq!(gic.next_pending(1).map(|p| p.0), Some(UART));
    // Disabled while without targets, it stays disabled when given one.
    gic.v2_distributor_write(0, target, 1, 0).unwrap();
    gic.v2_distributor_write(0, bit_at(ICENABLER, UART).0, 4, uart)
        .unwrap();
    assert_eq!(gic.v2_distributor_write(0, target, 1, 0b01), Ok(0));
    assert_eq!(gic.v2_distributor_read(0, word, 4), Ok(0));
    assert_eq!(gic.next_pending(0), None);
}

/// The SGIs pending for each vCPU, as GICD_ISPENDR0 shows them to it.
fn pending_sgis(gic: &Vgic) -> Vec<u64> {
    (0..gic.vcpus())
        .map(|vcpu| gic.v2_distributor_read(vcpu, ISPENDR, 4).unwrap() & 0xffff)
        .collect()
}

#[test]
fn sgir_sends_to_the_vcpus_its_filter_selects() {
    let mut gic = enabled_gic(3);
    // The CPU target list, with CPUs 3-7 that the VM lacks: masked away.
    assert_eq!(
        gic.v2_distributor_write(1, offset::SGIR, 4, 0x00ff_0003),
        Ok(0b111)
    );
    assert_eq!(pending_sgis(&gic), [1 << 3, 1 << 3, 1 << 3]);
    assert_eq!(
        gic.v2_distributor_write(0, offset::SGIR, 4, 0x0004_0005),
        Ok(0b100)
    );
    assert_eq!(
        gic.v2_distributor_write(0, offset::SGIR, 4, 0x00f8_0005),
        Ok(0),
        "no existing target"
    );
    // All but self, NSATT (bit 15) ignored.
    assert_eq!(
        gic.v2_distributor_write(1, offset::SGIR, 4, 0x01ff_8007),
        Ok(0b101)
    );
    // Self only, whatever the list says.
    assert_eq!(
        gic.v2_distributor_write(2, offset::SGIR, 4, 0x0201_001f),
        Ok(0b100)
    );
    // The reserved filter sends nothing.
    assert_eq!(
        gic.v2_distributor_write(2, offset::SGIR, 4, 0x03ff_0002),
        Ok(0)
    );
    assert_eq!(
        pending_sgis(&gic),
        [1 << 3 | 1 << 7, 1 << 3, 1 << 3 | 1 << 5 | 1 << 7 | 1 << 15]
    );
    assert_eq!(
        gic.v2_distributor_read(0, offset::SGIR, 4),
        Ok(0),
        "write-only"
    );
    // Delivered as any SGI, once enabled.
    gic.v2_distributor_write(2, ISENABLER, 4, 1 << 5).unwrap();
    assert_eq!(gic.next_pending(2), Some((5, 0, false)));
}

#[test]
fn sgi_pending_by_source_registers() {
    let mut gic = enabled_gic(2);
    gic.v2_distributor_write(0, offset::SGIR, 4, 0x0002_0009)
        .unwrap();
    // SGI 9 is byte 1 of GICD_SPENDSGIR2 and CPENDSGIR2, pending from "CPU 0".
    for base in [offset::CPENDSGIR, offset::SPENDSGIR] {
        assert_eq!(gic.v2_distributor_read(1, base + 8, 4), Ok(0x0000_0100));
        assert_eq!(gic.v2_distributor_read(1, base + 9, 1), Ok(1));
        assert_eq!(gic.v2_distributor_read(0, base + 9, 1), Ok(0), "banked");
    }
    // Clearing a source clears the SGI; a byte of zero leaves it.
    gic.v2_distributor_write(1, offset::CPENDSGIR + 8, 4, 0xff00_00ff)
        .unwrap();
    assert_eq!(pending_sgis(&gic), [0, 1 << 9]);
    assert_eq!(
        gic.v2_distributor_write(1, offset::CPENDSGIR + 9, 1, 0x80),
        Ok(0)
    );
    assert_eq!(pending_sgis(&gic), [0, 0]);
    // Setting makes it pending at the writer, named to be kicked.
    assert_eq!(
        gic.v2_distributor_write(1, offset::SPENDSGIR + 15, 1, 0x04),
        Ok(0b10)
    );
    assert_eq!(
        gic.v2_distributor_write(1, offset::SPENDSGIR, 4, 0),
        Ok(0),
        "nothing set"
    );
    assert_eq!(pending_sgis(&gic), [0, 1 << 15]);
    assert_eq!(
        gic.v2_distributor_read(1, offset::SPENDSGIR + 12, 4),
        Ok(0x0100_0000)
    );
}

#[test]
fn sgis_pending_bits_are_read_only_in_the_pending_registers() {
    let mut gic = enabled_gic(1);
    assert_eq!(gic.v2_distributor_write(0, ISPENDR, 4, 0xffff), Ok(0));
    assert_eq!(gic.v2_distributor_read(0, ISPENDR, 4), Ok(0));
    gic.raise(0, 2);
    gic.v2_distributor_write(0, ICPENDR, 4, 0xffff).unwrap();
    assert_eq!(gic.v2_distributor_read(0, ISPENDR, 4), Ok(1 << 2));
    // A PPI's are not, and its pending state is the writer's.
    assert_eq!(gic.v2_distributor_write(0, ISPENDR, 4, 1 << 20), Ok(1));
    assert_eq!(gic.v2_distributor_read(0, ISPENDR, 4), Ok(1 << 20 | 1 << 2));
    gic.v2_distributor_write(0, ICPENDR, 4, 1 << 20).unwrap();
    assert_eq!(gic.v2_distributor_read(0, ISPENDR, 4), Ok(1 << 2));
}

#[test]
fn identification_and_type() {
    for (vcpus, cpu_number) in [(1, 0), (2, 1), (8, 7)] {
        let gic = Vgic::new(vcpus, &[]);
        let typer = gic.v2_distributor_read(0, offset::TYPER, 4).unwrap();
        assert_eq!(typer & 0x1f, 3, "ITLinesNumber: 128 ids");
        assert_eq!(typer >> 5 & 7, cpu_number, "CPUNumber");
        assert_eq!(typer & 1 << 10, 0, "no Security Extensions");
        assert_eq!(typer >> 11, 0);
        let arch_rev = gic.v2_distributor_read(0, offset::ICPIDR2, 4).unwrap() >> 4 & 0xf;
        assert_eq!(arch_rev, 2);
        assert_eq!(
            gic.v2_distributor_read(0, offset::IIDR, 4),
            Ok(u64::from(IIDR))
        );
    }
}

#[test]
fn constants_read_as_the_model_does() {
    for vcpus in [1, 4, 8] {
        let mut gic = Vgic::new(vcpus, &[UART]);
        for offset in (0..offset::FRAME_SIZE).step_by(4) {
            let _ = gic.v2_distributor_write(0, offset, 4, u64::MAX);
        }
        let mut constants = 0;
        for offset in 0..offset::FRAME_SIZE {
            for size in [1, 2, 4, 8] {
                if let Some(value) = Vgic::v2_distributor_constant(offset, size, vcpus) {
                    assert_eq!(
                        gic.v2_distributor_read(vcpus - 1, offset, size),
                        Ok(value),
                        "{offset:#x}"
                    );
                    constants += 1;
                }
            }
        }
        assert_eq!(constants, 3);
    }
}

#[test]
fn control_enables_the_groups_the_delivery_reads() {
    let mut gic = Vgic::new(1, &[]);
    gic.v2_distributor_write(0, ISENABLER, 4, 1 << 27).unwrap();
    gic.raise(0, 27);
    assert_eq!(gic.next_pending(0), None, "distributor disabled");
    gic.v2_distributor_write(0, offset::CTLR, 4, 0xffff_ffff)
        .unwrap();
    assert_eq!(gic.v2_distributor_read(0, offset::CTLR, 4), Ok(0b11));
    gic.v2_distributor_write(0, offset::CTLR, 4, 0b10).unwrap();
    assert_eq!(gic.next_pending(0), None, "group 1 only: 27 is group 0");
    gic.v2_distributor_write(0, 0x080, 4, 1 << 27).unwrap();
    assert_eq!(gic.v2_distributor_read(0, 0x080, 4), Ok(1 << 27));
    assert_eq!(gic.next_pending(0), Some((27, 0, true)));
}

#[test]
fn configuration_of_sgis_is_fixed_and_of_ppis_banked() {
    let mut gic = enabled_gic(2);
    gic.v2_distributor_write(0, offset::ICFGR, 4, 0).unwrap();
    assert_eq!(
        gic.v2_distributor_read(0, offset::ICFGR, 4),
        Ok(0xaaaa_aaaa),
        "SGIs edge"
    );
    gic.v2_distributor_write(1, offset::ICFGR + 4, 4, 2 << 22)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(1, offset::ICFGR + 4, 4),
        Ok(2 << 22)
    );
    assert_eq!(gic.v2_distributor_read(0, offset::ICFGR + 4, 4), Ok(0));
    gic.v2_distributor_write(0, offset::ICFGR + 8, 4, u64::MAX)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(1, offset::ICFGR + 8, 4),
        Ok(2 << 2 | 2 << 16),
        "only the owned SPIs, 33 and 40"
    );
}

#[test]
fn widths_the_architecture_lacks_are_refused() {
    let mut gic = enabled_gic(2);
    let refused = |offset, size| Err(DeviceError::BadWidth { offset, size });
    for (offset, size) in [
        (offset::CTLR, 1),
        (offset::TYPER, 2),
        (offset::TYPER, 8),
        (ISENABLER + 1, 1),
        (ISENABLER + 2, 4),
        (offset::IPRIORITYR + 32, 2),
        (offset::IPRIORITYR + 34, 4),
        (offset::ITARGETSR + 32, 8),
        (offset::ICFGR + 8, 1),
        (offset::SGIR, 1),
        (offset::SPENDSGIR, 2),
        (offset::CPENDSGIR + 1, 4),
        (0x4000, 1),
        (0x4000, 3),
    ] {
        assert_eq!(
            gic.v2_distributor_read(0, offset, size),
            refused(offset, size)
        );
        assert_eq!(
            gic.v2_distributor_write(0, offset, size, 0),
            refused(offset, size)
        );
    }
    for offset in [
        offset::IPRIORITYR + 33,
        offset::ITARGETSR + 33,
        offset::SPENDSGIR + 3,
    ] {
        assert!(gic.v2_distributor_read(0, offset, 1).is_ok(), "{offset:#x}");
    }
}

#[test]
fn unowned_spis_refuse_to_be_set_and_read_as_zero() {
    let mut gic = enabled_gic(2);
    for base in [ISENABLER, ISPENDR, 0x300] {
        let (word, unowned) = bit_at(base, UNOWNED);
        assert_eq!(
            gic.v2_distributor_write(0, word, 4, unowned),
            Err(DeviceError::UnownedInterrupt { intid: UNOWNED })
        );
    }
    // Linux's bulk writes that only disable, clear or configure are harmless.
    for base in [ICENABLER, ICPENDR, ICACTIVER, 0x080] {
        gic.v2_distributor_write(0, base + 4, 4, 0xffff_ffff)
            .unwrap();
    }
    gic.v2_distributor_write(0, offset::IPRIORITYR + 32, 4, 0xa0a0_a0a0)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(0, offset::IPRIORITYR + 32, 4),
        Ok(0xa000)
    );
    assert_eq!(
        gic.v2_distributor_read(0, 0x084, 4),
        Ok(1 << 1 | 1 << 8),
        "ids 33 and 40"
    );
    gic.v2_distributor_write(0, offset::ITARGETSR + u64::from(UNOWNED), 1, 1)
        .unwrap();
    assert_eq!(
        gic.v2_distributor_read(0, offset::ITARGETSR + u64::from(UNOWNED), 1),
        Ok(0)
    );
}

#[test]
fn beyond_the_lines_the_frame_and_the_vcpus_is_refused() {
    let mut gic = enabled_gic(2);
    assert_eq!(
        gic.v2_distributor_write(0, ISENABLER + 0x10, 4, 1),
        Err(DeviceError::InterruptOutOfRange { intid: 128 })
    );
    assert_eq!(
        gic.v2_distributor_read(0, offset::ITARGETSR + 0x3fc, 4),
        Err(DeviceError::InterruptOutOfRange { intid: 1020 })
    );
    assert_eq!(
        gic.v2_distributor_read(0, offset::FRAME_SIZE, 4),
        Err(DeviceError::NoSuchRegister {
            offset: offset::FRAME_SIZE,
            write: false
        })
    );
    assert_eq!(
        gic.v2_distributor_write(0, u64::MAX, 4, 0),
        Err(DeviceError::NoSuchRegister {
            offset: u64::MAX,
            write: true
        })
    );
    assert_eq!(
        gic.v2_distributor_read(2, offset::CTLR, 4),
        Err(DeviceError::NoSuchVcpu { vcpu: 2 })
    );
    assert_eq!(
        gic.v2_distributor_write(usize::MAX, offset::SGIR, 4, 0),
        Err(DeviceError::NoSuchVcpu { vcpu: usize::MAX })
    );
    // Reserved and implementation-defined words: zero, writes ignored.
    for offset in [
        0x00c, 0x020, 0xd00, 0xe00, 0xf04, 0xf30, 0xfd0, 0x1000, 0xfffc,
    ] {
        gic.v2_distributor_write(0, offset, 4, u64::MAX).unwrap();
        assert_eq!(gic.v2_distributor_read(0, offset, 4), Ok(0), "{offset:#x}");
    }
}

/// Every offset, width, value and vCPU (also one the VM lacks): an answer, never a panic,
/// and a read no wider than the access.
#[test]
fn any_access_is_answered() {
    let mut gic = enabled_gic(3);
    for offset in (0..offset::FRAME_SIZE + 8).chain([u64::MAX - 3, 1 << 40]) {
        for size in [1, 2, 3, 4, 8] {
            for vcpu in [0, 2, 3] {
                if let Ok(value) = gic.v2_distributor_read(vcpu, offset, size) {
                    assert!(size == 8 || value >> (8 * u32::from(size)) == 0);
                }
                for value in [0, u64::MAX] {
                    if let Ok(kick) = gic.v2_distributor_write(vcpu, offset, size, value) {
                        assert_eq!(kick >> 3, 0, "{offset:#x}: only existing vCPUs");
                    }
                }
            }
        }
    }
}

#[test]
fn a_reset_forgets_the_targets() {
    let fresh = std::format!("{:?}", Vgic::new(2, &[UART]));
    let mut gic = enabled_gic(2);
    gic.v2_distributor_write(0, bit_at(ISENABLER, UART).0, 4, u64::MAX)
        .unwrap_err();
    let (word, uart) = bit_at(ISENABLER, UART);
    gic.v2_distributor_write(0, word, 4, uart).unwrap();
    gic.v2_distributor_write(0, offset::ITARGETSR + u64::from(UART), 1, 0)
        .unwrap();
    gic.v2_distributor_write(0, offset::ITARGETSR + u64::from(OWNED), 1, 2)
        .unwrap();
    gic.reset(2, &[UART]);
    assert_eq!(std::format!("{gic:?}"), fresh);
    assert_eq!(
        gic.v2_distributor_read(1, offset::ITARGETSR + u64::from(UART), 1),
        Ok(1)
    );
}

/// What Linux's GICv2 driver (drivers/irqchip/irq-gic.c) does at boot on two CPUs, then a
/// device interrupt, its affinity moved, and an IPI.
#[test]
fn linux_boot_then_an_spi_and_an_ipi() {
    let mut gic = Vgic::new(2, &[UART]);
    // gic_dist_init, on CPU 0.
    gic.v2_distributor_write(0, offset::CTLR, 4, 0).unwrap();
    let typer = gic.v2_distributor_read(0, offset::TYPER, 4).unwrap();
    let lines = 32 * ((typer & 0x1f) + 1);
    assert_eq!(lines, 128);
    // gic_get_cpumask: the first non-zero byte of GICD_ITARGETSR0-7.
    let mut mask = gic.v2_distributor_read(0, offset::ITARGETSR, 4).unwrap();
    mask |= mask >> 16;
    mask |= mask >> 8;
    let cpu0_map = mask & 0xff;
    assert_eq!(cpu0_map, 1);
    let all = cpu0_map * 0x0101_0101;
    for intid in (32..lines).step_by(4) {
        gic.v2_distributor_write(0, offset::ITARGETSR + intid, 4, all)
            .unwrap();
    }
    // gic_dist_config: level-triggered, priority 0xa0, deactivated and disabled.
    for intid in (32..lines).step_by(16) {
        gic.v2_distributor_write(0, offset::ICFGR + intid / 4, 4, 0)
            .unwrap();
    }
    for intid in (32..lines).step_by(4) {
        gic.v2_distributor_write(0, offset::IPRIORITYR + intid, 4, 0xa0a0_a0a0)
            .unwrap();
    }
    for intid in (32..lines).step_by(32) {
        gic.v2_distributor_write(0, ICACTIVER + intid / 8, 4, 0xffff_ffff)
            .unwrap();
        gic.v2_distributor_write(0, ICENABLER + intid / 8, 4, 0xffff_ffff)
            .unwrap();
    }
    gic.v2_distributor_write(0, offset::CTLR, 4, 1).unwrap();
    // gic_cpu_init on each CPU: its map, its private interrupts deactivated, disabled, 0xa0.
    let mut maps = [0; 2];
    for (vcpu, map) in maps.iter_mut().enumerate() {
        *map = gic.v2_distributor_read(vcpu, offset::ITARGETSR, 4).unwrap() & 0xff;
        gic.v2_distributor_write(vcpu, ICACTIVER, 4, 0xffff_ffff)
            .unwrap();
        gic.v2_distributor_write(vcpu, ICENABLER, 4, 0xffff_ffff)
            .unwrap();
        for intid in (0..32).step_by(4) {
            gic.v2_distributor_write(vcpu, offset::IPRIORITYR + intid, 4, 0xa0a0_a0a0)
                .unwrap();
        }
        // The IPIs (SGIs 0-7) enabled one by one, as request_percpu_irq does.
        for sgi in 0..8 {
            let (word, sgi) = bit_at(ISENABLER, sgi);
            gic.v2_distributor_write(vcpu, word, 4, sgi).unwrap();
        }
    }
    assert_eq!(maps, [1, 2]);
    // The UART's interrupt: configured level-high by read-modify-write, then enabled.
    let config = offset::ICFGR + u64::from(UART / 16) * 4;
    let value = gic.v2_distributor_read(0, config, 4).unwrap();
    gic.v2_distributor_write(0, config, 4, value & !(3 << 2))
        .unwrap();
    let (word, uart) = bit_at(ISENABLER, UART);
    assert_eq!(gic.v2_distributor_write(0, word, 4, uart), Ok(0));
    gic.set_level(UART, true);
    assert_eq!(gic.next_pending(0), Some((UART, 0xa0, false)));
    assert_eq!(gic.next_pending(1), None);
    // irq_set_affinity to CPU 1: a byte write of its map.
    let target = offset::ITARGETSR + u64::from(UART);
    assert_eq!(gic.v2_distributor_write(0, target, 1, maps[1]), Ok(0b10));
    assert_eq!(
        (gic.next_pending(0), gic.next_pending(1).map(|p| p.0)),
        (None, Some(UART))
    );
    gic.set_level(UART, false);
    // gic_ipi_send_mask from CPU 1 to CPU 0: IPI 1 (reschedule).
    let kick = gic.v2_distributor_write(1, offset::SGIR, 4, maps[0] << 16 | 1);
    assert_eq!(kick, Ok(0b01));
    let mut listed = Vec::new();
    let (occupied, waiting) = gic.fill_list_registers(0, 0, 4, |lr, intid, priority, group1| {
        listed.push((lr, intid, priority, group1));
    });
    assert_eq!((occupied, waiting), (0b1, false));
    assert_eq!(listed, [(0, 1, 0xa0, false)]);
}

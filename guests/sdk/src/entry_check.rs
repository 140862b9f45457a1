//! Checks, in the first instructions a vCPU runs, that Keel entered it in the documented entry
//! state (docs/src/guest-abi.md, "Entry state"): x1-x30, SP, the EL1 and EL0 system registers, DAIF, NZCV
//! and the FP/SIMD registers. The first register found wrong is recorded per vCPU for Rust
//! code to report ([`entry_state`]); the check runs before anything of the guest's own
//! changes a register, from the boot entry and from the CPU_ON entry.
//!
//! x0 is not checked here: it is the device tree address (boot) or the CPU_ON context.

use core::sync::atomic::{AtomicU64, Ordering};

/// Most vCPUs whose result is kept (MPIDR_EL1.Aff0 below this).
const MAX_VCPUS: usize = 8;

/// Per vCPU: the code of the first register found wrong (0: none) and its value (0 for a
/// general-purpose register, whose value the check cannot keep). In `.data`, not `.bss`:
/// it is written before the boot code zeroes the BSS.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".data.keel_entry_check")]
static KEEL_ENTRY_CHECK: [[AtomicU64; 2]; MAX_VCPUS] =
    [const { [AtomicU64::new(0), AtomicU64::new(0)] }; MAX_VCPUS];

/// Code of SP (SP_EL1, as the vCPU enters in EL1h).
const CODE_SP: u64 = 31;
/// Code of DAIF (expected 0x3c0: all masked).
const CODE_DAIF: u64 = 32;
/// Code of NZCV (expected 0).
const CODE_NZCV: u64 = 33;
/// Code of SCTLR_EL1 (expected the reset value Keel documents).
const CODE_SCTLR: u64 = 34;
/// Code of FPCR, then FPSR.
const CODE_FPCR: u64 = 35;
/// Code of the first system register of [`ZERO_SYSREGS`].
const CODE_FIRST_SYSREG: u64 = 40;
/// Code of V0 (V<n> is this plus n).
const CODE_FIRST_VREG: u64 = 100;

/// SCTLR_EL1 at entry under Keel: RES1 bits, MMU, caches and alignment checks off.
pub const KEEL_SCTLR_EL1_AT_ENTRY: u64 = 0x30d0_0800;

/// The system registers that read as zero at entry, in code order from `CODE_FIRST_SYSREG`.
const ZERO_SYSREGS: [&str; 23] = [
    "SP_EL0",
    "ELR_EL1",
    "SPSR_EL1",
    "ESR_EL1",
    "FAR_EL1",
    "TPIDR_EL1",
    "TPIDR_EL0",
    "TPIDRRO_EL0",
    "TTBR0_EL1",
    "TTBR1_EL1",
    "MAIR_EL1",
    "AMAIR_EL1",
    "CONTEXTIDR_EL1",
    "VBAR_EL1",
    "TCR_EL1",
    "PAR_EL1",
    "AFSR0_EL1",
    "AFSR1_EL1",
    "MDSCR_EL1",
    "CNTKCTL_EL1",
    "CNTV_CTL_EL0",
    "CNTV_CVAL_EL0",
    "CPACR_EL1",
];

// `KEEL_CHECK_ENTRY done`: the check, expanded inline at each entry of `boot.rs` (it needs no
// stack and keeps x0). On the first wrong register it stores (code, value) for this vCPU,
// leaves CPACR_EL1 at 0 as it found it, and branches to `done`, clobbering x1-x4 (already
// checked or not needed). NZCV is read before any instruction that sets the flags. The
// assembler needs the operands `entry_sctlr_low` and `entry_sctlr_high` (KEEL_SCTLR_EL1_AT_ENTRY's halves).
macro_rules! entry_check_macros {
    () => {
        r#"
    .macro KEEL_CHECK_ZERO_SYSREG reg, code
        mrs     x1, \reg
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #\code
        b       8f
1:
    .endm

    .macro KEEL_CHECK_ZERO_VREG n
        fmov    x1, d\n
        mov     x2, v\n\().d[1]
        orr     x1, x1, x2
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #(100 + \n)
        b       7f
1:
    .endm

    .macro KEEL_CHECK_ENTRY done
    .irp n, 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30
        cbz     x\n, 1f
        mov     x1, #\n
        mov     x2, #0
        b       8f
1:
    .endr
        mov     x1, sp
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #31
        b       8f
1:      mrs     x1, nzcv
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #33
        b       8f
1:      mrs     x1, daif
        cmp     x1, #0x3c0
        b.eq    1f
        mov     x2, x1
        mov     x1, #32
        b       8f
1:      mrs     x1, sctlr_el1
        movz    x2, #{entry_sctlr_low}
        movk    x2, #{entry_sctlr_high}, lsl #16
        cmp     x1, x2
        b.eq    1f
        mov     x2, x1
        mov     x1, #34
        b       8f
1:
        KEEL_CHECK_ZERO_SYSREG sp_el0, 40
        KEEL_CHECK_ZERO_SYSREG elr_el1, 41
        KEEL_CHECK_ZERO_SYSREG spsr_el1, 42
        KEEL_CHECK_ZERO_SYSREG esr_el1, 43
        KEEL_CHECK_ZERO_SYSREG far_el1, 44
        KEEL_CHECK_ZERO_SYSREG tpidr_el1, 45
        KEEL_CHECK_ZERO_SYSREG tpidr_el0, 46
        KEEL_CHECK_ZERO_SYSREG tpidrro_el0, 47
        KEEL_CHECK_ZERO_SYSREG ttbr0_el1, 48
        KEEL_CHECK_ZERO_SYSREG ttbr1_el1, 49
        KEEL_CHECK_ZERO_SYSREG mair_el1, 50
        KEEL_CHECK_ZERO_SYSREG amair_el1, 51
        KEEL_CHECK_ZERO_SYSREG contextidr_el1, 52
        KEEL_CHECK_ZERO_SYSREG vbar_el1, 53
        KEEL_CHECK_ZERO_SYSREG tcr_el1, 54
        KEEL_CHECK_ZERO_SYSREG par_el1, 55
        KEEL_CHECK_ZERO_SYSREG afsr0_el1, 56
        KEEL_CHECK_ZERO_SYSREG afsr1_el1, 57
        KEEL_CHECK_ZERO_SYSREG mdscr_el1, 58
        KEEL_CHECK_ZERO_SYSREG cntkctl_el1, 59
        KEEL_CHECK_ZERO_SYSREG cntv_ctl_el0, 60
        KEEL_CHECK_ZERO_SYSREG cntv_cval_el0, 61
        KEEL_CHECK_ZERO_SYSREG cpacr_el1, 62
        // CPACR_EL1 is 0 (FP/SIMD trapped at EL1): open it to read the FP/SIMD registers.
        mov     x1, #(3 << 20)
        msr     cpacr_el1, x1
        isb
        .arch_extension fp
        .arch_extension simd
    .irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        KEEL_CHECK_ZERO_VREG \n
    .endr
        mrs     x1, fpcr
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #35
        b       7f
1:      mrs     x1, fpsr
        cbz     x1, 1f
        mov     x2, x1
        mov     x1, #36
        b       7f
1:      .arch_extension nosimd
        .arch_extension nofp
        msr     cpacr_el1, xzr
        isb
        b       \done
7:      msr     cpacr_el1, xzr
        isb
8:      mrs     x3, mpidr_el1
        and     x3, x3, #7
        adrp    x4, KEEL_ENTRY_CHECK
        add     x4, x4, :lo12:KEEL_ENTRY_CHECK
        add     x4, x4, x3, lsl #4
        stp     x1, x2, [x4]
        b       \done
    .endm
"#
    };
}
pub(crate) use entry_check_macros;

/// What the entry check found for one vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Every checked register held its documented value.
    Clean,
    /// The first register found wrong, and its value where the check could keep it.
    Wrong {
        /// The register's name.
        register: Register,
        /// Its value (0 for a general-purpose register).
        value: u64,
    },
}

/// A register the entry check looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register(u64);

impl core::fmt::Display for Register {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            n @ 1..=30 => write!(f, "x{n}"),
            CODE_SP => f.write_str("SP_EL1"),
            CODE_DAIF => f.write_str("DAIF"),
            CODE_NZCV => f.write_str("NZCV"),
            CODE_SCTLR => f.write_str("SCTLR_EL1"),
            CODE_FPCR => f.write_str("FPCR"),
            36 => f.write_str("FPSR"),
            n if (CODE_FIRST_SYSREG..CODE_FIRST_SYSREG + ZERO_SYSREGS.len() as u64)
                .contains(&n) =>
            {
                f.write_str(ZERO_SYSREGS[(n - CODE_FIRST_SYSREG) as usize])
            }
            n if (CODE_FIRST_VREG..CODE_FIRST_VREG + 32).contains(&n) => {
                write!(f, "V{}", n - CODE_FIRST_VREG)
            }
            n => write!(f, "register #{n}"),
        }
    }
}

impl core::fmt::Display for EntryState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            EntryState::Clean => f.write_str("clean"),
            EntryState::Wrong { register, value } if register.0 <= 30 => {
                write!(f, "{register} is not 0")
            }
            EntryState::Wrong { register, value } => write!(f, "{register} = {value:#x}"),
        }
    }
}

/// What the entry check found when `vcpu` (MPIDR_EL1.Aff0) last entered, and forgets it, so
/// that the next entry (CPU_ON after CPU_OFF) is judged alone.
pub fn take_entry_state(vcpu: usize) -> EntryState {
    let Some(slot) = KEEL_ENTRY_CHECK.get(vcpu) else {
        return EntryState::Clean;
    };
    let code = slot[0].load(Ordering::Relaxed);
    let value = slot[1].load(Ordering::Relaxed);
    slot[0].store(0, Ordering::Relaxed);
    slot[1].store(0, Ordering::Relaxed);
    if code == 0 {
        EntryState::Clean
    } else {
        EntryState::Wrong {
            register: Register(code),
            value,
        }
    }
}

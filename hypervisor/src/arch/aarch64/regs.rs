//! System register access and the register bits Keel programs (Arm ARM D23, "AArch64 System Registers").

/// Reads a system register that has no side effects on read.
macro_rules! read_sysreg {
    ($name:literal) => {{
        let value: u64;
        // SAFETY: reading this system register has no side effects and touches no memory.
        unsafe {
            core::arch::asm!(concat!("mrs {}, ", $name), out(reg) value, options(nomem, nostack, preserves_flags));
        }
        value
    }};
}

/// Writes a system register. Expands to an `asm!` that the caller wraps in `unsafe`,
/// stating why the write is sound where it is made.
macro_rules! write_sysreg {
    ($name:literal, $value:expr) => {
        core::arch::asm!(concat!("msr ", $name, ", {}"), in(reg) ($value) as u64, options(nostack, preserves_flags))
    };
}

pub(crate) use read_sysreg;
pub(crate) use write_sysreg;

/// HCR_EL2 bits (D23.2.53).
pub mod hcr {
    /// Stage-2 translation on.
    pub const VM: u64 = 1 << 0;
    /// Set/way invalidation upgraded to clean and invalidate.
    pub const SWIO: u64 = 1 << 1;
    /// Physical FIQs to EL2.
    pub const FMO: u64 = 1 << 3;
    /// Physical IRQs to EL2; EL1 sees the virtual CPU interface.
    pub const IMO: u64 = 1 << 4;
    /// SErrors to EL2.
    pub const AMO: u64 = 1 << 5;
    /// Broadcast TLB and cache maintenance to the inner shareable domain.
    pub const FB: u64 = 1 << 9;
    /// Barrier shareability upgrade: inner shareable.
    pub const BSU_INNER: u64 = 1 << 10;
    /// Trap WFI.
    pub const TWI: u64 = 1 << 13;
    /// Trap SMC.
    pub const TSC: u64 = 1 << 19;
    /// Trap reads of the ID registers (group 3: ID_AA64*, ID_*, MVFR*).
    pub const TID3: u64 = 1 << 18;
    /// Trap implementation-defined system registers.
    pub const TIDCP: u64 = 1 << 20;
    /// Trap ACTLR_EL1.
    pub const TACR: u64 = 1 << 21;
    /// Trap data cache maintenance by set/way.
    pub const TSW: u64 = 1 << 22;
    /// EL1 is AArch64.
    pub const RW: u64 = 1 << 31;
    /// Pointer authentication key registers do not trap.
    pub const APK: u64 = 1 << 40;
    /// Pointer authentication instructions do not trap.
    pub const API: u64 = 1 << 41;
}

/// MDCR_EL2 bits (D23.2.109).
pub mod mdcr {
    /// Trap PMCR_EL0.
    pub const TPMCR: u64 = 1 << 5;
    /// Trap every other PMU register.
    pub const TPM: u64 = 1 << 6;
    /// Trap debug register accesses.
    pub const TDA: u64 = 1 << 9;
    /// Trap the statistical profiling registers.
    pub const TPMS: u64 = 1 << 14;
    /// Trap OS-lock and power-down debug registers.
    pub const TDOSA: u64 = 1 << 10;
    /// Trap debug ROM address registers.
    pub const TDRA: u64 = 1 << 11;
}

/// PMCR_EL0 bits (Arm ARM D13, "PMCR_EL0, Performance Monitors Control Register"); bit 0 (E)
/// enables the counters.
pub mod pmcr {
    /// Write 1: reset every event counter to zero.
    pub const P: u64 = 1 << 1;
    /// Write 1: reset the cycle counter to zero.
    pub const C: u64 = 1 << 2;
    /// The settings bits a vCPU's PMU state keeps: E, D, X, DP, LC and LP (bits 0, 7:3); P
    /// and C are write-only resets, the bits above 7 read-only or RES0.
    pub const SETTINGS: u64 = 0xf9;
    /// N, bits \[15:11\]: the number of event counters (read only).
    pub const N_SHIFT: u32 = 11;
    /// N's width mask, after the shift.
    pub const N_MASK: u64 = 0x1f;
}

/// CPTR_EL2 bits with E2H = 0 (D23.2.31).
pub mod cptr {
    /// RES1 bits 13, 12 (TSM where SME exists: SME traps), 9 and 7:0.
    pub const RES1: u64 = 0x32ff;
    /// Trap SVE (also RES1 where SVE does not exist).
    pub const TZ: u64 = 1 << 8;
    /// Trap FP/SIMD (EC 0x07).
    pub const TFP: u64 = 1 << 10;
    /// Trap the activity monitors.
    pub const TAM: u64 = 1 << 30;
}

/// Reads ID register `S3_0_C0_C<crm>_<op2>` (the space HCR_EL2.TID3 traps; unallocated
/// encodings there read as zero).
pub fn read_id_register(crm: u8, op2: u8) -> u64 {
    // One `MRS` and a branch out per encoding, 8 bytes each, entered at (crm - 1) * 8 + op2
    // (a `match` of 56 arms was about 1.1 KB of code).
    macro_rules! table {
        ($($crm:literal)*) => {
            concat!($(
                "mrs {value}, s3_0_c0_c", $crm, "_0\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_1\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_2\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_3\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_4\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_5\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_6\n b 3f\n",
                "mrs {value}, s3_0_c0_c", $crm, "_7\n b 3f\n",
            )*)
        };
    }
    if !(1..=7).contains(&crm) || op2 > 7 {
        return 0;
    }
    let index = u64::from(crm - 1) * 8 + u64::from(op2);
    let value: u64;
    // SAFETY: the branch lands on one of the table's 56 entries (`index` is below 56), each
    // reading an ID register, which has no side effects and touches no memory, then leaving
    // the table at its end.
    unsafe {
        core::arch::asm!(
            "adr {entry}, 2f",
            "add {entry}, {entry}, {index}, lsl #3",
            "br {entry}",
            "2:",
            table!(1 2 3 4 5 6 7),
            "3:",
            entry = out(reg) _,
            index = in(reg) index,
            value = out(reg) value,
            options(nomem, nostack, preserves_flags)
        );
    }
    value
}

/// CNTHCTL_EL2 bits with E2H = 0 (D23.8.2).
pub mod cnthctl {
    /// EL1 may read the physical counter.
    pub const EL1PCTEN: u64 = 1 << 0;
}

/// SPSR value to enter EL1h with D, A, I, F masked (C5.2.19).
pub const SPSR_EL1H_MASKED: u64 = 0x3c5;
/// SCTLR_EL1 reset-like value: RES1 bits, MMU and caches off, little-endian.
pub const SCTLR_EL1_RESET: u64 = 0x30d0_0800;

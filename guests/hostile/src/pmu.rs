//! The `pmu-reset` attack, in a VM that owns the PMU of its pinned pCPUs (`pmu = true`): it
//! writes values of its own into every PMU register a guest can write, enables the cycle
//! counter and event counter 0 and lets them count; then vCPU 1 is turned off and on again
//! (CPU_ON) and vCPU 0 resets the VM (SYSTEM_RESET). Each of those starts must find the PMU
//! clean, as the book's entry state promises: counters, their interrupts and overflow flags
//! off, PMCR_EL0 with E = 0, PMSELR_EL0, PMUSERENR_EL0 and PMCCFILTR_EL0 zero, and every event
//! counter's type and value (n < PMCR_EL0.N) and the cycle counter zero. A counter that kept
//! running, or a setting that survived, would carry one run's activity into the next.
//!
//! Before those, on its first boot, vCPU 0 checks that the PMU is its own ([`own_values`]):
//! it writes values of its VM's own into every register, lets the cycle counter and event
//! counter 0 count, and gives the pCPU away (KEEL_YIELD) eight times; after each it must find
//! exactly what it left, the two counters only advanced. On a shared pCPU another VM owning
//! the PMU does the same with its values between, so any register switched wrongly shows
//! the other VM's value (or a counter that went back).
//!
//! The reset count below the device tree (see [`crate::lifecycle`]) tells the boot before the
//! reset from the one after it.

use core::arch::asm;

use keel_guest::bootargs::BootArgs;
use keel_guest::devicetree::BootInfo;
use keel_guest::entry_check::take_entry_state;
use keel_guest::psci::{affinity_info, cpu_off, cpu_on};
use keel_guest::{println, system_reset, timer, vm_id, yield_now};

use crate::lifecycle::{read_reset_count, reset_count_address, write_reset_count};
use crate::probe;
use crate::shared::{micros_to_ticks, secondary_stack_top, spin_for, wait_until, Mailbox};

/// Reads a PMU register (the VM owns the PMU, so nothing traps).
macro_rules! read_pmu {
    ($name:literal) => {{
        let value: u64;
        // SAFETY: reads a PMU register of this vCPU; touches no memory.
        unsafe {
            asm!(concat!("mrs {}, ", $name), out(reg) value, options(nomem, nostack, preserves_flags))
        };
        value
    }};
}

/// Writes a PMU register.
macro_rules! write_pmu {
    ($name:literal, $value:expr) => {{
        let value: u64 = $value;
        // SAFETY: writes a PMU register of this vCPU (what it counts and how); touches no
        // memory.
        unsafe {
            asm!(concat!("msr ", $name, ", {}"), in(reg) value, options(nomem, nostack, preserves_flags))
        };
    }};
}

/// PMCR_EL0 written before the reset: E (count), X (export), DP (no cycle counting when
/// prohibited), LC (64-bit cycle counter). D (count every 64 cycles) stays 0.
const PMCR_DIRTY: u64 = 1 << 0 | 1 << 4 | 1 << 5 | 1 << 6;
/// PMCR_EL0 bits a clean PMU has zero: E, P, C, D, X, DP, LC, LP (bits 7:0).
const PMCR_SETTINGS: u64 = 0xff;
/// PMSELR_EL0 written before the reset: counter 31 (the cycle counter's filter).
const PMSELR_DIRTY: u64 = 31;
/// PMUSERENR_EL0 written before the reset: EL0 may use the PMU (EN, SW, CR, ER).
const PMUSERENR_DIRTY: u64 = 0xf;
/// PMCCFILTR_EL0 written before the reset: count at EL2 too (NSH), not at EL0 (U).
const PMCCFILTR_DIRTY: u64 = 1 << 27 | 1 << 30;
/// Every event counter's PMEVTYPER written before the reset: CPU_CYCLES (0x11), counting at
/// EL2 too (NSH).
const EVENT_TYPE_DIRTY: u64 = 1 << 27 | 0x11;
/// Event counter n starts at this plus n.
const EVENT_COUNT_DIRTY: u64 = 0x1234_0000;
/// The cycle counter starts here.
const CYCLES_DIRTY: u64 = 0x00ab_cdef_0000_0000;
/// The cycle counter's bit in PMCNTENSET, PMINTENSET and PMOVSSET.
const CYCLE_COUNTER: u64 = 1 << 31;
/// The bits set there before the reset: the cycle counter and event counter 0.
const ENABLED_DIRTY: u64 = CYCLE_COUNTER | 1;

/// The event counters the VM sees (PMCR_EL0.N, bits 15:11).
fn event_counters() -> u64 {
    (read_pmu!("pmcr_el0") >> 11) & 0x1f
}

/// Selects event counter `counter` for PMXEVTYPER_EL0 and PMXEVCNTR_EL0.
fn select(counter: u64) {
    write_pmu!("pmselr_el0", counter);
    keel_guest::cpu::isb();
}

/// Whether the ID registers show this VM a PMUv3 (ID_AA64DFR0_EL1.PMUVer).
fn pmu_visible() -> bool {
    let dfr0: u64;
    // SAFETY: reads an ID register; touches no memory.
    unsafe {
        asm!("mrs {}, id_aa64dfr0_el1", out(reg) dfr0, options(nomem, nostack, preserves_flags))
    };
    !matches!((dfr0 >> 8) & 0xf, 0 | 0xf)
}

/// Fills every PMU register with the values above, enables the cycle counter and event
/// counter 0, lets them count for a millisecond, and checks that all of it took. The
/// overflow flags are set by hand (PMOVSSET_EL0) with their interrupts enabled.
fn dirty(vcpu: usize) -> bool {
    let counters = event_counters();
    for counter in 0..counters {
        select(counter);
        write_pmu!("pmxevtyper_el0", EVENT_TYPE_DIRTY);
        write_pmu!("pmxevcntr_el0", EVENT_COUNT_DIRTY + counter);
    }
    write_pmu!("pmccfiltr_el0", PMCCFILTR_DIRTY);
    write_pmu!("pmccntr_el0", CYCLES_DIRTY);
    write_pmu!("pmuserenr_el0", PMUSERENR_DIRTY);
    write_pmu!("pmintenset_el1", ENABLED_DIRTY);
    write_pmu!("pmovsset_el0", ENABLED_DIRTY);
    write_pmu!("pmcntenset_el0", ENABLED_DIRTY);
    write_pmu!("pmcr_el0", PMCR_DIRTY);
    write_pmu!("pmselr_el0", PMSELR_DIRTY);
    keel_guest::cpu::isb();
    spin_for(1_000);
    let cycles = read_pmu!("pmccntr_el0");
    let events = read_pmu!("pmevcntr0_el0");
    let took = counters > 0
        && read_pmu!("pmcr_el0") & PMCR_SETTINGS == PMCR_DIRTY
        && read_pmu!("pmselr_el0") & 0x1f == PMSELR_DIRTY
        && read_pmu!("pmuserenr_el0") & 0xf == PMUSERENR_DIRTY
        && read_pmu!("pmccfiltr_el0") == PMCCFILTR_DIRTY
        && read_pmu!("pmevtyper0_el0") == EVENT_TYPE_DIRTY
        && read_pmu!("pmcntenset_el0") & ENABLED_DIRTY == ENABLED_DIRTY
        && read_pmu!("pmintenset_el1") & ENABLED_DIRTY == ENABLED_DIRTY
        && read_pmu!("pmovsset_el0") & ENABLED_DIRTY == ENABLED_DIRTY
        && cycles > CYCLES_DIRTY
        && events > EVENT_COUNT_DIRTY;
    probe!(
        format_args!("pmu-dirty-vcpu-{vcpu}"),
        took,
        "{counters} event counters; counting: PMCCNTR_EL0 {cycles:#x}, PMEVCNTR0_EL0 {events:#x}; \
         PMCR_EL0 {:#x}, PMCNTENSET_EL0 {:#x}, PMOVSSET_EL0 {:#x}",
        read_pmu!("pmcr_el0"),
        read_pmu!("pmcntenset_el0"),
        read_pmu!("pmovsset_el0")
    );
    took
}

/// The event counters a PMU can have (PMCR_EL0.N is at most 31).
const MAX_COUNTERS: usize = 31;

/// What a vCPU's PMU holds, as far as a clean start must have it zero.
struct PmuState {
    /// Each register's name, the part of it that must be zero, and its whole value.
    registers: [(&'static str, u64, u64); 8],
    /// PMCR_EL0.N.
    counters: usize,
    /// PMEVTYPER<n>_EL0 and PMEVCNTR<n>_EL0 for n < `counters`.
    event_types: [u64; MAX_COUNTERS],
    event_counts: [u64; MAX_COUNTERS],
}

impl PmuState {
    /// Reads this vCPU's PMU (and leaves PMSELR_EL0 at 0).
    fn read() -> Self {
        // PMSELR first: reading the event counters below selects them.
        let selected = read_pmu!("pmselr_el0");
        let pmcr = read_pmu!("pmcr_el0");
        let counters = (((pmcr >> 11) & 0x1f) as usize).min(MAX_COUNTERS);
        let mut state = Self {
            registers: [
                ("PMCR_EL0", pmcr & PMCR_SETTINGS, pmcr),
                ("PMSELR_EL0", selected & 0x1f, selected),
                ("PMUSERENR_EL0", read_pmu!("pmuserenr_el0"), 0),
                ("PMCCFILTR_EL0", read_pmu!("pmccfiltr_el0"), 0),
                ("PMCNTENSET_EL0", read_pmu!("pmcntenset_el0"), 0),
                ("PMINTENSET_EL1", read_pmu!("pmintenset_el1"), 0),
                ("PMOVSSET_EL0", read_pmu!("pmovsset_el0"), 0),
                ("PMCCNTR_EL0", read_pmu!("pmccntr_el0"), 0),
            ],
            counters,
            event_types: [0; MAX_COUNTERS],
            event_counts: [0; MAX_COUNTERS],
        };
        for counter in 0..counters {
            select(counter as u64);
            state.event_types[counter] = read_pmu!("pmxevtyper_el0");
            state.event_counts[counter] = read_pmu!("pmxevcntr_el0");
        }
        write_pmu!("pmselr_el0", 0);
        state
    }

    /// How many registers are not clean.
    fn dirty(&self) -> usize {
        let registers = self.registers.iter().filter(|r| r.1 != 0).count();
        let events = self.event_types[..self.counters]
            .iter()
            .chain(&self.event_counts[..self.counters])
            .filter(|&&value| value != 0)
            .count();
        registers + events
    }
}

/// The registers that are not clean, each with its value: `PMCCNTR_EL0 0x..., ...`.
impl core::fmt::Display for PmuState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let mut separator = "";
        for &(name, setting, whole) in &self.registers {
            if setting != 0 {
                write!(f, "{separator}{name} {:#x}", whole | setting)?;
                separator = ", ";
            }
        }
        for counter in 0..self.counters {
            for (kind, value) in [
                ("PMEVTYPER", self.event_types[counter]),
                ("PMEVCNTR", self.event_counts[counter]),
            ] {
                if value != 0 {
                    write!(f, "{separator}{kind}{counter}_EL0 {value:#x}")?;
                    separator = ", ";
                }
            }
        }
        Ok(())
    }
}

/// Checks that this vCPU's PMU is clean; prints probe `name` with every register that is not
/// (its name and value). Whether it is.
fn check_clean(name: &str) -> bool {
    let state = PmuState::read();
    let dirty = state.dirty();
    let clean = state.counters > 0 && dirty == 0;
    if clean {
        probe!(
            name,
            true,
            "PMCR_EL0 {:#x} (E = 0), PMSELR_EL0, PMUSERENR_EL0, PMCCFILTR_EL0, PMCNTENSET_EL0, \
             PMINTENSET_EL1, PMOVSSET_EL0, PMCCNTR_EL0 and PMEVTYPER<n>/PMEVCNTR<n> for n < {} \
             all zero",
            state.registers[0].2,
            state.counters
        );
    } else {
        probe!(
            name,
            false,
            "{dirty} PMU registers not clean ({} event counters): {state}",
            state.counters
        );
    }
    clean
}

/// The values a VM writes for [`own_values`], each distinct for VMs of different parities and
/// the counters' high bits carrying the VM's tag (0xa0 + its id), so that another VM's value
/// is told from its own.
struct OwnValues {
    tag: u64,
    control: u64,
    selected: u64,
    user_enable: u64,
    cycle_filter: u64,
    event_type: u64,
    /// PMCNTENSET, PMINTENSET and PMOVSSET: the interrupts and overflow flags on different
    /// counters, so that no overflow interrupt is raised.
    counting: u64,
    interrupts: u64,
    overflows: u64,
}

impl OwnValues {
    fn of(vm: u64, counters: u64) -> Self {
        let odd = vm % 2 == 1;
        // Only the counters that exist keep their bits (the others are RAZ/WI).
        let existing = CYCLE_COUNTER | ((1u64 << counters) - 1);
        Self {
            tag: 0xa0 + (vm & 0xf),
            // E and LC, with X (odd) or DP (even).
            control: 1 << 0 | 1 << 6 | if odd { 1 << 4 } else { 1 << 5 },
            selected: (if odd { 3 } else { 5 }).min(counters - 1),
            user_enable: if odd { 0xf } else { 0x5 },
            // NSH (count at EL2 too), and U (not at EL0) for the odd one.
            cycle_filter: 1 << 27 | if odd { 1 << 30 } else { 0 },
            event_type: 0x11 | 1 << 27 | if odd { 1 << 30 } else { 0 },
            counting: ENABLED_DIRTY & existing,
            interrupts: (1 << (2 + vm % 2)) & existing,
            overflows: (1 << (4 + vm % 2)) & existing,
        }
    }

    /// Event counter `n`'s start: the tag in bits 31:24.
    fn event_count(&self, n: u64) -> u64 {
        self.tag << 24 | n << 16
    }

    /// The cycle counter's start: the tag in bits 63:56.
    fn cycles(&self) -> u64 {
        self.tag << 56
    }
}

/// Yields of [`own_values`].
const OWN_ROUNDS: usize = 8;

/// A yield longer than this gave the pCPU to another vCPU.
const AWAY_MICROS: u64 = 100;

/// Writes this VM's own values into every PMU register, lets the cycle counter and event
/// counter 0 count, and gives the pCPU away [`OWN_ROUNDS`] times; after each, every register
/// must hold exactly what it left and the two counters must only have advanced, keeping the
/// VM's tag. Probe `pmu-own-values`; on a shared pCPU (`keel.own-pcpus=none`) the yields must
/// have given the pCPU away at least once. Leaves the PMU stopped.
fn own_values(args: &BootArgs<'_>) -> bool {
    let counters = event_counters();
    if counters < 2 {
        probe!(
            "pmu-own-values",
            false,
            "{counters} event counters: too few"
        );
        return false;
    }
    let (vm, _) = vm_id();
    let own = OwnValues::of(vm, counters);
    for counter in 0..counters {
        select(counter);
        write_pmu!("pmxevtyper_el0", own.event_type);
        write_pmu!("pmxevcntr_el0", own.event_count(counter));
    }
    write_pmu!("pmccfiltr_el0", own.cycle_filter);
    write_pmu!("pmccntr_el0", own.cycles());
    write_pmu!("pmuserenr_el0", own.user_enable);
    write_pmu!("pmintenset_el1", own.interrupts);
    write_pmu!("pmovsset_el0", own.overflows);
    write_pmu!("pmcntenset_el0", own.counting);
    write_pmu!("pmcr_el0", own.control);
    write_pmu!("pmselr_el0", own.selected);
    keel_guest::cpu::isb();
    let shared = args.value("keel.own-pcpus") == Some("none");
    let mut cycles = read_pmu!("pmccntr_el0");
    let mut events = read_pmu!("pmevcntr0_el0");
    let (mut away, mut counted, mut elapsed) = (0, 0, 0);
    for round in 0..OWN_ROUNDS {
        spin_for(300);
        let (cycles_before, before) = (read_pmu!("pmccntr_el0"), timer::counter());
        yield_now();
        let took = timer::counter() - before;
        let cycles_after = read_pmu!("pmccntr_el0");
        if took >= micros_to_ticks(AWAY_MICROS) {
            away += 1;
            counted += cycles_after.wrapping_sub(cycles_before);
            elapsed += took;
        }
        let mut wrong: Option<(&str, u64, u64)> = None;
        let mut expect = |name: &'static str, value: u64, expected: u64| {
            if value != expected && wrong.is_none() {
                wrong = Some((name, value, expected));
            }
        };
        // PMSELR first: the event counters below are read through it.
        expect("PMSELR_EL0", read_pmu!("pmselr_el0") & 0x1f, own.selected);
        expect(
            "PMCR_EL0",
            read_pmu!("pmcr_el0") & PMCR_SETTINGS,
            own.control,
        );
        expect(
            "PMUSERENR_EL0",
            read_pmu!("pmuserenr_el0") & 0xf,
            own.user_enable,
        );
        expect(
            "PMCCFILTR_EL0",
            read_pmu!("pmccfiltr_el0"),
            own.cycle_filter,
        );
        expect("PMCNTENSET_EL0", read_pmu!("pmcntenset_el0"), own.counting);
        expect(
            "PMINTENSET_EL1",
            read_pmu!("pmintenset_el1"),
            own.interrupts,
        );
        expect("PMOVSSET_EL0", read_pmu!("pmovsset_el0"), own.overflows);
        let now_cycles = cycles_after;
        let now_events = read_pmu!("pmevcntr0_el0");
        // A counter only advances, and keeps the tag it started with.
        let cycles_ok = now_cycles > cycles && now_cycles >> 56 == own.tag;
        expect(
            "PMCCNTR_EL0",
            now_cycles,
            if cycles_ok { now_cycles } else { cycles },
        );
        let events_ok = now_events > events && now_events >> 24 == own.tag;
        expect(
            "PMEVCNTR0_EL0",
            now_events,
            if events_ok { now_events } else { events },
        );
        for counter in 0..counters {
            select(counter);
            expect(
                "PMEVTYPER<n>_EL0",
                read_pmu!("pmxevtyper_el0"),
                own.event_type,
            );
            if counter > 0 {
                expect(
                    "PMEVCNTR<n>_EL0 (n > 0, not counting)",
                    read_pmu!("pmxevcntr_el0"),
                    own.event_count(counter),
                );
            }
        }
        write_pmu!("pmselr_el0", own.selected);
        keel_guest::cpu::isb();
        if let Some((name, value, expected)) = wrong {
            probe!(
                "pmu-own-values",
                false,
                "vm {vm} after yield {round}: {name} {value:#x}, it left {expected:#x}"
            );
            return false;
        }
        cycles = now_cycles;
        events = now_events;
    }
    write_pmu!("pmcntenclr_el0", own.counting);
    keel_guest::cpu::isb();
    let ok = !shared || away > 0;
    probe!(
        "pmu-own-values",
        ok,
        "vm {vm}: after {OWN_ROUNDS} yields ({away} gave the pCPU away for {} us, in which its \
         cycle counter advanced {counted}) every PMU register held its own value, the counters \
         only advanced (PMCCNTR_EL0 {cycles:#x}, PMEVCNTR0_EL0 {events:#x})",
        elapsed * 1_000_000 / timer::frequency()
    );
    ok
}

/// What vCPU 1 does when started: 1 dirty its PMU, 2 check it.
static TASK: Mailbox = Mailbox::new();
/// vCPU 1's answer for its task: 0 none yet, 1 done.
static DONE: Mailbox = Mailbox::new();
const TASK_DIRTY: u64 = 1;
const TASK_CHECK: u64 = 2;
/// AFFINITY_INFO's "off".
const AFFINITY_OFF: i64 = 1;

/// vCPU 1's entry for this attack: its task, then CPU_OFF.
fn secondary_main(_stack_top: usize) -> ! {
    println!("hostile: vm vcpu 1 entry {}", take_entry_state(1));
    match TASK.get() {
        TASK_DIRTY => {
            dirty(1);
        }
        TASK_CHECK => {
            check_clean("pmu-clean-after-cpu-on");
        }
        _ => {}
    }
    DONE.set(1);
    cpu_off()
}

/// Runs `task` on vCPU 1 and waits (up to 1 s) until it has turned itself off.
fn run_on_vcpu_1(task: u64) -> bool {
    TASK.set(task);
    DONE.set(0);
    if let Err(error) = cpu_on(1, secondary_stack_top()) {
        probe!("pmu-cpu-on", false, "CPU_ON of vCPU 1 returned {error}");
        return false;
    }
    let off = wait_until(1_000_000, || {
        DONE.get() == 1 && affinity_info(1) == AFFINITY_OFF
    });
    if !off {
        probe!("pmu-cpu-on", false, "vCPU 1 did not finish its task {task}");
    }
    off
}

/// `pmu-reset`: see the module's documentation.
pub fn pmu_reset(info: &BootInfo<'_>) {
    let Some(address) = reset_count_address(info) else {
        probe!("pmu-reset", false, "no /memory in the device tree");
        return;
    };
    if !pmu_visible() {
        probe!(
            "pmu-reset",
            false,
            "the ID registers hide the PMU: the VM needs pmu = true"
        );
        return;
    }
    if read_reset_count(address) == 0 {
        if !own_values(&BootArgs::new(info.bootargs)) {
            return;
        }
        keel_guest::boot::set_secondary_main(secondary_main);
        if !(run_on_vcpu_1(TASK_DIRTY) && run_on_vcpu_1(TASK_CHECK)) {
            return;
        }
        if !dirty(0) {
            return;
        }
        write_reset_count(address, 1);
        system_reset();
    }
    write_reset_count(address, 0);
    check_clean("pmu-clean-after-reset");
}

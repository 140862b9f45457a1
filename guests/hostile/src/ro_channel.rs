//! Stores into a read-only channel window by instructions that give Keel no instruction
//! syndrome (ESR_EL2.ISV = 0): a store pair, stores with writeback, a 16-byte SIMD&FP store,
//! a store-exclusive and an LSE atomic. Each is a stage-2 permission fault that must stop
//! the VM naming the channel, with nothing written; the channel's read-write member checks
//! its memory afterwards.
//!
//! | attack | what it does |
//! | --- | --- |
//! | `ro-channel-owner` | fills the first 4 KiB of its read-write window `keel.window` with a pattern, sleeps `keel.millis` ms (default 300), then checks every word (probe `ro-channel-intact`) |
//! | `ro-channel-stores` | waits for the owner's pattern in its read-only window `keel.window`, then stores into it with `keel.store=<form>` (see [`STORE_FORMS`]) |

use core::arch::asm;

use keel_guest::bootargs::BootArgs;
use keel_guest::channel::Window;
use keel_guest::println;

use crate::probe;
use crate::shared::{init_interrupts, micros_to_ticks};

/// The store forms, each by its `keel.store` name, and what it is.
pub const STORE_FORMS: &[(&str, &str)] = &[
    ("stp", "STP of two X registers"),
    ("str-pre", "STR with pre-index writeback"),
    ("str-post", "STR with post-index writeback"),
    ("str-q", "16-byte STR of a Q register"),
    ("stxr", "STXR after an LDXR that set the exclusive monitor"),
    ("swp", "SWP (an LSE atomic: reads and writes)"),
];

/// The bytes of the window the owner fills and checks.
const CHECKED: usize = 4096;
/// Where the stores go: form i at `STORES + 0x40 * i` (16-byte aligned, in the checked page).
const STORES: usize = 0x800;

/// Word `index` of the owner's pattern.
fn pattern(index: usize) -> u32 {
    0x6f77_6e00 ^ index as u32
}

/// The window named by `keel.window` (hex), `CHECKED` bytes long.
fn window(args: &BootArgs<'_>) -> Option<Window> {
    let text = args.value("keel.window")?;
    let base = usize::from_str_radix(text.trim_start_matches("0x"), 16).ok()?;
    // SAFETY: the scenario names this VM's window on the channel (its `ipa`), which no Rust
    // object lives in, and maps at least 4 KiB there.
    Some(unsafe { Window::new(base, CHECKED) })
}

/// `ro-channel-owner`: the read-write member. Its pattern tells the others when to store,
/// and must still be whole after all of them have stored.
pub fn owner(args: &BootArgs<'_>) {
    let Some(window) = window(args) else {
        println!("hostile: ro-channel-owner needs keel.window=<hex address>");
        return;
    };
    let millis = args
        .value("keel.millis")
        .and_then(|m| m.parse::<u64>().ok())
        .unwrap_or(300);
    // Word 0 last: the others store once they see it, so the page is whole by then.
    for word in 1..CHECKED / 4 {
        window.write_u32(word * 4, pattern(word));
    }
    keel_guest::channel::barrier();
    window.write_u32(0, pattern(0));
    sleep(millis * 1_000);
    let wrong = (0..CHECKED / 4)
        .filter(|&word| window.read_u32(word * 4) != pattern(word))
        .count();
    probe!(
        "ro-channel-intact",
        wrong == 0,
        "{} of {} words of the channel's first page hold what the owner wrote, {millis} ms on",
        CHECKED / 4 - wrong,
        CHECKED / 4
    );
}

/// Sleeps `micros` in WFI, woken by the virtual timer (its interrupt taken by the shared
/// handler, which turns the timer off). Spinning instead would cost QEMU's `-icount` thread,
/// which runs every pCPU in turn, real time for nothing.
fn sleep(micros: u64) {
    init_interrupts(0);
    let end = keel_guest::timer::counter() + micros_to_ticks(micros);
    while keel_guest::timer::counter() < end {
        keel_guest::timer::set_deadline(end);
        keel_guest::timer::enable();
        keel_guest::cpu::wait_for_interrupt();
        keel_guest::cpu::enable_irqs();
        keel_guest::cpu::disable_irqs();
    }
}

/// `ro-channel-stores`: one store of form `keel.store` into the read-only window. Returns only
/// if the store went through (a FAIL probe), the form is unknown, or the CPU lacks it.
pub fn stores(args: &BootArgs<'_>) {
    let Some(window) = window(args) else {
        println!("hostile: ro-channel-stores needs keel.window=<hex address>");
        return;
    };
    let form = args.value("keel.store").unwrap_or("");
    let Some(index) = STORE_FORMS.iter().position(|(name, _)| *name == form) else {
        println!("hostile: unknown keel.store '{form}'");
        return;
    };
    if form == "swp" && !has_lse_atomics() {
        println!(
            "hostile: ro-channel-stores: swp: this CPU has no LSE atomics \
             (ID_AA64ISAR0_EL1.Atomic = 0): not run"
        );
        return;
    }
    // The owner's pattern says it has filled the page. Polled every 20 µs, asleep between
    // (spinning pCPUs would hold up the victim's under `-icount`).
    let give_up = keel_guest::timer::counter() + micros_to_ticks(1_000_000);
    let filled = loop {
        if window.read_u32(0) == pattern(0) {
            break true;
        }
        if keel_guest::timer::counter() >= give_up {
            break false;
        }
        sleep(20);
    };
    if !filled {
        probe!(
            format_args!("ro-channel-store-{form}"),
            false,
            "the owner's pattern never appeared in the read-only window"
        );
        return;
    }
    let address = window.base() + STORES + 0x40 * index;
    println!(
        "hostile: ro-channel-stores: {} at {address:#x} (it holds {:#x})",
        STORE_FORMS[index].1,
        window.read_u32(STORES + 0x40 * index)
    );
    store(form, address);
    probe!(
        format_args!("ro-channel-store-{form}"),
        false,
        "the store went through: the window now holds {:#x}",
        window.read_u32(STORES + 0x40 * index)
    );
}

/// Whether the CPU implements the LSE atomics (ID_AA64ISAR0_EL1.Atomic, bits 23:20, ≥ 2).
fn has_lse_atomics() -> bool {
    let isar0: u64;
    // SAFETY: reads an ID register; touches no memory.
    unsafe {
        asm!("mrs {}, id_aa64isar0_el1", out(reg) isar0, options(nomem, nostack, preserves_flags))
    };
    (isar0 >> 20) & 0xf >= 2
}

/// Performs store `form` at `address` (16-byte aligned, in the read-only window).
fn store(form: &str, address: usize) {
    let value: u64 = 0x7772_6974_7465_6e21;
    // SAFETY: (all arms) deliberately hostile: `address` is in this VM's read-only channel
    // window, which no Rust object lives in; Keel must stop the VM at the store. Should it
    // go through, the channel's memory changes and nothing of this guest's.
    unsafe {
        match form {
            "stp" => asm!("stp {0}, {0}, [{1}]", in(reg) value, in(reg) address, options(nostack)),
            "str-pre" => asm!(
                "str {value}, [{base}, #16]!",
                value = in(reg) value,
                base = inout(reg) address - 16 => _,
                options(nostack)
            ),
            "str-post" => asm!(
                "str {value}, [{base}], #16",
                value = in(reg) value,
                base = inout(reg) address => _,
                options(nostack)
            ),
            "str-q" => {
                enable_fp_simd();
                // The target is soft-float: the compiler keeps nothing in V0, so the asm may
                // use it without declaring it (no `vreg` class without the `neon` feature).
                asm!(
                    ".arch_extension fp",
                    ".arch_extension simd",
                    "dup v0.2d, {value}",
                    "str q0, [{address}]",
                    ".arch_extension nosimd",
                    ".arch_extension nofp",
                    value = in(reg) value,
                    address = in(reg) address,
                    options(nostack)
                )
            }
            "stxr" => {
                // A few tries: a store-exclusive whose monitor was lost fails without storing.
                for _ in 0..8 {
                    let status: u64;
                    asm!(
                        "ldxr {old}, [{address}]",
                        "stxr {status:w}, {value}, [{address}]",
                        old = out(reg) _,
                        status = out(reg) status,
                        value = in(reg) value,
                        address = in(reg) address,
                        options(nostack)
                    );
                    if status == 0 {
                        break;
                    }
                }
            }
            "swp" => asm!(
                ".arch_extension lse",
                "swp {value}, {old}, [{address}]",
                ".arch_extension nolse",
                value = in(reg) value,
                old = out(reg) _,
                address = in(reg) address,
                options(nostack)
            ),
            _ => {}
        }
    }
}

/// CPACR_EL1.FPEN = 0b11: FP/SIMD instructions at EL1 do not trap (they do at entry).
fn enable_fp_simd() {
    // SAFETY: only lets this vCPU's EL1 use FP/SIMD, which Keel gives every guest.
    unsafe {
        asm!(
            "mrs {tmp}, cpacr_el1",
            "orr {tmp}, {tmp}, #(3 << 20)",
            "msr cpacr_el1, {tmp}",
            "isb",
            tmp = out(reg) _,
            options(nomem, nostack, preserves_flags)
        )
    };
}

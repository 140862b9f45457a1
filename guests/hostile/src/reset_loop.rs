//! `reset-loop` (issue 19, item 3): the VM resets itself (SYSTEM_RESET) right after every boot
//! for `keel.millis` milliseconds (default 250) of virtual time, so that Keel announces a
//! start, a reset and a reload about 10,000 times a second. Keel must keep those lines to a
//! few per second and count the rest, while the victim ticks on. (Under QEMU a boot costs
//! some 15 ms of real time, its image rewritten and translated again: a virtual second of the
//! loop would take minutes.)
//!
//! A reset reloads the image (every static in it), so the loop's state lives in a few words
//! of RAM that a reset leaves alone, below the device tree's 2 MiB at the top of the VM's
//! memory (as `timer-reset`'s reset count does, in the last 16 bytes there; these are 8 KiB
//! further down).
//! After the loop the VM pauses [`PAUSE_MILLIS`], longer than Keel's one-second rate window,
//! and resets once more: Keel's line about that start then carries the count of the loop's
//! last left-out starts, so that the lines printed and the counts they report add up to every
//! boot. That last boot prints `probe reset-loop: ok boots=N clean=N loop_ms=N`: its boots
//! (the first one included), those entered in the documented state, and how long the loop ran.
//! The entry state is printed as at every other attack's start (`hostile: vm 1 vcpu 0 entry
//! clean`) for the first boot, the last, and any boot not entered in the documented state;
//! the others only count (a line per boot would be thousands through a 2 KiB buffer).

use keel_guest::bootargs::BootArgs;
use keel_guest::cpu::{disable_irqs, wait_for_interrupt};
use keel_guest::devicetree::BootInfo;
use keel_guest::entry_check::{take_entry_state, EntryState};
use keel_guest::{println, system_reset, timer, vm_id};

use crate::probe;
use crate::shared::{init_interrupts, micros_to_ticks};

/// "resetlp!" in the first word: the words were written by a boot of this run.
const MAGIC: u64 = 0x2170_6c74_6573_6572;

/// How long the VM pauses after the loop before its last reset: more than Keel's rate window.
pub const PAUSE_MILLIS: u64 = 1_100;

/// The words that survive a reset.
#[derive(Clone, Copy)]
#[repr(usize)]
enum Word {
    Magic,
    /// Counter at the first boot.
    First,
    /// Counter at which the loop ends.
    End,
    /// Boots so far, the first one included.
    Boots,
    /// Boots entered in the documented state.
    Clean,
    /// 0 while looping; 1 once the pause before the last reset is over.
    Paused,
}

/// The loop's state, in RAM a reset does not reload (see the module's doc).
#[derive(Clone, Copy)]
struct State(usize);

impl State {
    /// This VM's: 8 KiB below the device tree's 2 MiB at the top of its RAM.
    fn of(info: &BootInfo<'_>) -> Option<Self> {
        info.memory
            .map(|memory| State((memory.base + memory.size - (2 << 20) - 8192) as usize))
    }

    fn get(self, word: Word) -> u64 {
        // SAFETY: a word of the VM's own RAM, below its device tree and far above its image
        // and stacks, used by nothing else; only vCPU 0 runs in this attack.
        unsafe { core::ptr::read_volatile((self.0 + word as usize * 8) as *const u64) }
    }

    fn set(self, word: Word, value: u64) {
        // SAFETY: as in `get`.
        unsafe { core::ptr::write_volatile((self.0 + word as usize * 8) as *mut u64, value) }
    }

    fn add(self, word: Word, value: u64) {
        self.set(word, self.get(word) + value);
    }
}

/// Runs one boot's share of the attack: reset at once while the loop lasts; after it, pause
/// and reset once more; at the boot after that, report (the caller then says done).
pub fn reset_loop(args: &BootArgs<'_>, info: &BootInfo<'_>) {
    let now = timer::counter();
    let Some(state) = State::of(info) else {
        probe!("reset-loop", false, "no /memory in the device tree");
        return;
    };
    if state.get(Word::Magic) != MAGIC {
        let millis = args
            .value("keel.millis")
            .and_then(|value| value.parse::<u64>().ok())
            .unwrap_or(250);
        for word in [Word::Boots, Word::Clean, Word::Paused] {
            state.set(word, 0);
        }
        state.set(Word::First, now);
        state.set(Word::End, now + micros_to_ticks(millis * 1000));
        state.set(Word::Magic, MAGIC);
        println!("hostile: reset-loop: resetting after every boot for {millis} ms");
    }
    state.add(Word::Boots, 1);
    let entry = take_entry_state(0);
    let clean = matches!(entry, EntryState::Clean);
    if clean {
        state.add(Word::Clean, 1);
    }
    let last = now >= state.get(Word::End) && state.get(Word::Paused) == 1;
    if !clean || last || state.get(Word::Boots) == 1 {
        println!("hostile: vm {} vcpu 0 entry {entry}", vm_id().0);
    }
    if now < state.get(Word::End) {
        system_reset();
    }
    if state.get(Word::Paused) == 0 {
        state.set(Word::Paused, 1);
        pause(PAUSE_MILLIS * 1000);
        system_reset();
    }
    let (boots, clean) = (state.get(Word::Boots), state.get(Word::Clean));
    let loop_ms = (state.get(Word::End) - state.get(Word::First)) * 1000 / timer::frequency();
    // A later run of this image in the same RAM starts afresh.
    state.set(Word::Magic, 0);
    probe!(
        "reset-loop",
        boots == clean && boots > 2,
        "boots={boots} clean={clean} loop_ms={loop_ms}"
    );
}

/// Sleeps `micros` (WFI with IRQs masked, woken by the virtual timer): under `-icount`, a
/// sleeping pCPU costs QEMU nothing, where a spinning one would take its turns.
pub fn pause(micros: u64) {
    init_interrupts(0);
    disable_irqs();
    let end = timer::counter() + micros_to_ticks(micros);
    timer::set_deadline(end);
    timer::enable();
    while timer::counter() < end {
        wait_for_interrupt();
    }
    timer::disable();
}

//! The console: the PL011 at `layout::UART_BASE`, `print!`/`println!`, and a receive queue
//! filled from the UART's interrupt and emptied by the main loop.

use core::fmt::Write;
use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use keel_core::abi::layout;

use crate::cpu::with_irqs_masked;
use crate::mmio::MmioFrame;
use crate::pl011::Pl011;

/// The console UART.
// SAFETY: UART_BASE is the PL011 frame of QEMU `virt` and of Keel's emulated platform.
pub static CONSOLE: Pl011 = Pl011::new(unsafe { MmioFrame::new(layout::UART_BASE as usize) });

/// Writes one byte to the console.
pub fn putc(byte: u8) {
    CONSOLE.putc(byte);
}

/// Writes `text` to the console.
pub fn puts(text: &str) {
    with_irqs_masked(|| CONSOLE.puts(text));
}

/// Formats `args` to the console, with IRQs masked so that a handler's output cannot land
/// in the middle of it. Used by [`print!`](crate::print).
pub fn print_args(args: core::fmt::Arguments<'_>) {
    with_irqs_masked(|| {
        // Writing to the UART cannot fail.
        let _ = (&CONSOLE).write_fmt(args);
    });
}

/// Formats `args` and a newline as one uninterrupted line. Used by [`println!`](crate::println).
pub fn print_line(args: core::fmt::Arguments<'_>) {
    with_irqs_masked(|| {
        // Writing to the UART cannot fail.
        let _ = (&CONSOLE).write_fmt(args);
        CONSOLE.putc(b'\n');
    });
}

/// Prints to the console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::console::print_args(format_args!($($arg)*))
    };
}

/// Prints a line to the console (lines end with `\n` only).
#[macro_export]
macro_rules! println {
    () => {
        $crate::console::putc(b'\n')
    };
    ($($arg:tt)*) => {
        $crate::console::print_line(format_args!($($arg)*))
    };
}

/// Capacity of the receive queue; a power of two.
const RECEIVE_QUEUE_CAPACITY: usize = 256;

/// Bytes received by [`drain_receive_fifo`] (the producer, in the IRQ handler) and not yet
/// taken by [`read_byte`] (the consumer, with IRQs unmasked or not). One producer and one
/// consumer on one CPU: plain acquire/release loads and stores suffice, no read-modify-write
/// (which the MMU-off Device memory type would not support).
struct ReceiveQueue {
    bytes: [AtomicU8; RECEIVE_QUEUE_CAPACITY],
    /// Count of bytes ever taken; written by the consumer only.
    head: AtomicUsize,
    /// Count of bytes ever queued; written by the producer only.
    tail: AtomicUsize,
    /// Count of bytes dropped because the queue was full; written by the producer only.
    dropped: AtomicUsize,
}

static RECEIVE_QUEUE: ReceiveQueue = ReceiveQueue {
    bytes: [const { AtomicU8::new(0) }; RECEIVE_QUEUE_CAPACITY],
    head: AtomicUsize::new(0),
    tail: AtomicUsize::new(0),
    dropped: AtomicUsize::new(0),
};

/// Enables the console UART and its receive interrupt (the GIC side is the caller's:
/// `layout::UART_INTID`, level-sensitive).
pub fn enable_receive_interrupt() {
    CONSOLE.enable();
    CONSOLE.enable_receive_interrupt();
}

/// Clears the receive interrupt, then moves every byte in the UART's receive FIFO to the
/// receive queue. Call it from the IRQ handler of `layout::UART_INTID`, and only there.
///
/// Clearing first is what makes it race-free: a byte arriving after the last FIFO check
/// raises the interrupt again, where clearing after draining would drop that interrupt and
/// leave the byte (and, with a full FIFO, all input after it) stranded.
pub fn drain_receive_fifo() {
    let queue = &RECEIVE_QUEUE;
    CONSOLE.clear_receive_interrupt();
    while let Some(byte) = CONSOLE.try_getc() {
        let tail = queue.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(queue.head.load(Ordering::Acquire)) == RECEIVE_QUEUE_CAPACITY {
            let dropped = queue.dropped.load(Ordering::Relaxed);
            queue
                .dropped
                .store(dropped.wrapping_add(1), Ordering::Relaxed);
            continue;
        }
        queue.bytes[tail % RECEIVE_QUEUE_CAPACITY].store(byte, Ordering::Relaxed);
        queue.tail.store(tail.wrapping_add(1), Ordering::Release);
    }
}

/// Takes the oldest received byte, if any.
pub fn read_byte() -> Option<u8> {
    let queue = &RECEIVE_QUEUE;
    let head = queue.head.load(Ordering::Relaxed);
    if head == queue.tail.load(Ordering::Acquire) {
        return None;
    }
    let byte = queue.bytes[head % RECEIVE_QUEUE_CAPACITY].load(Ordering::Relaxed);
    queue.head.store(head.wrapping_add(1), Ordering::Release);
    Some(byte)
}

/// Count of received bytes dropped because the receive queue was full.
pub fn dropped_bytes() -> usize {
    RECEIVE_QUEUE.dropped.load(Ordering::Relaxed)
}

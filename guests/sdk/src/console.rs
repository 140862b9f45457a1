//! The console: the PL011 at `layout::UART_BASE`, `print!`/`println!`, and a receive queue
//! filled from the UART's interrupt and emptied by the main loop.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

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
    /// The queue filled and the producer masked the receive interrupt (flow control: the
    /// rest waits in the UART); the consumer unmasks it once half the queue is free.
    throttled: AtomicBool,
}

static RECEIVE_QUEUE: ReceiveQueue = ReceiveQueue {
    bytes: [const { AtomicU8::new(0) }; RECEIVE_QUEUE_CAPACITY],
    head: AtomicUsize::new(0),
    tail: AtomicUsize::new(0),
    throttled: AtomicBool::new(false),
};

/// Enables the console UART and its receive interrupt (the GIC side is the caller's:
/// `layout::UART_INTID`, level-sensitive).
pub fn enable_receive_interrupt() {
    CONSOLE.enable();
    CONSOLE.enable_receive_interrupt();
}

/// Clears the receive interrupt, then moves the bytes in the UART's receive FIFO to the
/// receive queue, until the FIFO is empty or the queue full. Call it from the IRQ handler of
/// `layout::UART_INTID`, and only there.
///
/// Clearing first is what makes it race-free: a byte arriving after the last FIFO check
/// raises the interrupt again, where clearing after draining would drop that interrupt and
/// leave the byte (and, with a full FIFO, all input after it) stranded. A full queue masks
/// the receive interrupt instead of dropping input: the bytes wait in the UART (and in Keel's
/// input queue behind it) until [`read_byte`] has made room and unmasks it.
pub fn drain_receive_fifo() {
    let queue = &RECEIVE_QUEUE;
    CONSOLE.clear_receive_interrupt();
    loop {
        let tail = queue.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(queue.head.load(Ordering::Acquire)) == RECEIVE_QUEUE_CAPACITY {
            queue.throttled.store(true, Ordering::Relaxed);
            CONSOLE.disable_receive_interrupt();
            return;
        }
        let Some(byte) = CONSOLE.try_getc() else {
            return;
        };
        queue.bytes[tail % RECEIVE_QUEUE_CAPACITY].store(byte, Ordering::Relaxed);
        queue.tail.store(tail.wrapping_add(1), Ordering::Release);
    }
}

/// Takes the oldest received byte, if any; unmasks the receive interrupt a full queue masked
/// once half of it is free again.
pub fn read_byte() -> Option<u8> {
    let queue = &RECEIVE_QUEUE;
    let head = queue.head.load(Ordering::Relaxed);
    let tail = queue.tail.load(Ordering::Acquire);
    if head == tail {
        return None;
    }
    let byte = queue.bytes[head % RECEIVE_QUEUE_CAPACITY].load(Ordering::Relaxed);
    queue.head.store(head.wrapping_add(1), Ordering::Release);
    // Should the handler run between this test and the unmasking (an interrupt taken before
    // the mask took effect), it finds the queue full again at worst, and masks it again: no
    // byte is lost either way.
    if queue.throttled.load(Ordering::Relaxed)
        && tail.wrapping_sub(head) <= RECEIVE_QUEUE_CAPACITY / 2
    {
        queue.throttled.store(false, Ordering::Relaxed);
        CONSOLE.enable_receive_interrupt();
    }
    Some(byte)
}

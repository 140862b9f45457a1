//! Keel's console: the physical PL011 shared by the VMs' emulated consoles and Keel itself.
//!
//! Lock order: the console lock is a leaf. It is never held while a VM's device lock is
//! taken; input is collected under it and delivered to VMs after it is released.

use core::fmt::Write;

use keel_core::console::{ConsoleMux, Input, Sink};
use spin::Mutex;

use crate::arch::{timer, uart::Uart};

/// How long a partial output line may wait before it is written anyway (a shell prompt).
const PARTIAL_LINE_DELAY_US: u64 = 20_000;

struct Console {
    mux: ConsoleMux,
    uart: Uart,
}

struct UartSink(Uart);

impl Sink for UartSink {
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }
}

static CONSOLE: Mutex<Option<Console>> = Mutex::new(None);
static EARLY_UART: Mutex<Option<Uart>> = Mutex::new(None);

/// Uses `uart` for Keel's own messages until [`init`].
pub fn init_early(uart: Uart) {
    *EARLY_UART.lock() = Some(uart);
}

/// Starts multiplexing: `names[i]` is VM `i`, `has_console[i]` whether it may take input.
pub fn init(uart: Uart, names: &[&'static str], has_console: &[bool]) {
    uart.enable_rx_interrupt();
    *CONSOLE.lock() = Some(Console {
        mux: ConsoleMux::new(names, has_console),
        uart,
    });
}

/// A fixed buffer that formats one line; longer text is cut.
struct LineBuffer {
    bytes: [u8; 240],
    len: usize,
}

impl Write for LineBuffer {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let room = self.bytes.len() - self.len;
        let take = s.len().min(room);
        self.bytes[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

/// Prints one line of Keel's own, prefixed `[keel]`.
pub fn hypervisor_line(args: core::fmt::Arguments<'_>) {
    let mut line = LineBuffer {
        bytes: [0; 240],
        len: 0,
    };
    let _ = line.write_fmt(args);
    let text = &line.bytes[..line.len];
    if let Some(console) = CONSOLE.lock().as_mut() {
        let mut sink = UartSink(console.uart);
        console.mux.hypervisor_line(text, &mut sink);
    } else if let Some(uart) = *EARLY_UART.lock() {
        uart.write(b"[keel] ");
        uart.write(text);
        uart.write(b"\r\n");
    }
}

/// Prints a line from the panic path without waiting for a lock that may never be released.
pub fn emergency_line(args: core::fmt::Arguments<'_>) {
    let mut line = LineBuffer {
        bytes: [0; 240],
        len: 0,
    };
    let _ = line.write_fmt(args);
    let uart = CONSOLE
        .try_lock()
        .and_then(|c| c.as_ref().map(|c| c.uart))
        .or_else(|| *EARLY_UART.try_lock()?);
    if let Some(uart) = uart {
        uart.write(b"\r\n[keel] ");
        uart.write(&line.bytes[..line.len]);
        uart.write(b"\r\n");
    }
}

/// One byte a VM wrote to its console.
pub fn vm_output(vm: usize, byte: u8) {
    let mut guard = CONSOLE.lock();
    let Some(console) = guard.as_mut() else {
        return;
    };
    let mut sink = UartSink(console.uart);
    if console.mux.output(vm, byte, &mut sink) {
        timer::arm_hyp_timer(timer::frequency() * PARTIAL_LINE_DELAY_US / 1_000_000);
    }
}

/// The partial-line timer fired: write out waiting partial lines.
pub fn flush_partial() {
    timer::disarm_hyp_timer();
    if let Some(console) = CONSOLE.lock().as_mut() {
        let mut sink = UartSink(console.uart);
        console.mux.flush_partial(&mut sink);
    }
}

/// What the physical receive interrupt produced, for the caller to carry out once the
/// console lock is released.
pub struct Received {
    /// Decisions for each byte read.
    pub inputs: [Input; 32],
    /// How many are valid.
    pub count: usize,
}

/// Drains the physical UART's receive FIFO through the multiplexer.
pub fn receive() -> Received {
    let mut received = Received {
        inputs: [Input::Nothing; 32],
        count: 0,
    };
    let mut guard = CONSOLE.lock();
    let Some(console) = guard.as_mut() else {
        return received;
    };
    while received.count < received.inputs.len() {
        let Some(byte) = console.uart.read() else {
            break;
        };
        received.inputs[received.count] = console.mux.input(byte);
        received.count += 1;
    }
    received
}

/// Name of VM `vm` as the console shows it.
pub fn focus_name(vm: usize) -> &'static str {
    CONSOLE.lock().as_ref().map_or("?", |c| c.mux.name(vm))
}

/// Prints a line of Keel's own.
#[macro_export]
macro_rules! keel_println {
    ($($arg:tt)*) => {
        $crate::console::hypervisor_line(format_args!($($arg)*))
    };
}

//! Driver for the Arm PL011 UART (PrimeCell UART r1p5 TRM, section 3.2 register summary).

use crate::mmio::MmioFrame;

/// UARTDR: data register.
const DR: usize = 0x00;
/// UARTFR: flag register.
const FR: usize = 0x18;
/// UARTCR: control register.
const CR: usize = 0x30;
/// UARTIMSC: interrupt mask set/clear.
const IMSC: usize = 0x38;
/// UARTICR: interrupt clear.
const ICR: usize = 0x44;

/// FR.RXFE: receive FIFO empty.
const FR_RX_FIFO_EMPTY: u32 = 1 << 4;
/// FR.TXFF: transmit FIFO full.
const FR_TX_FIFO_FULL: u32 = 1 << 5;
/// CR.UARTEN: UART enable.
const CR_UART_ENABLE: u32 = 1 << 0;
/// CR.TXE: transmit enable.
const CR_TX_ENABLE: u32 = 1 << 8;
/// CR.RXE: receive enable.
const CR_RX_ENABLE: u32 = 1 << 9;
/// IMSC.RXIM / ICR.RXIC: receive interrupt.
const RECEIVE_INTERRUPT: u32 = 1 << 4;
/// ICR.RTIC: receive timeout interrupt.
const RECEIVE_TIMEOUT_INTERRUPT: u32 = 1 << 6;

/// One PL011.
#[derive(Debug)]
pub struct Pl011 {
    registers: MmioFrame,
}

impl Pl011 {
    /// The PL011 whose registers are `registers`.
    pub const fn new(registers: MmioFrame) -> Self {
        Self { registers }
    }

    /// Enables the UART, its transmitter and its receiver.
    pub fn enable(&self) {
        self.registers
            .write_u32(CR, CR_UART_ENABLE | CR_TX_ENABLE | CR_RX_ENABLE);
    }

    /// Writes one byte, waiting while the transmit FIFO is full.
    pub fn putc(&self, byte: u8) {
        while self.registers.read_u32(FR) & FR_TX_FIFO_FULL != 0 {
            // `yield`, as Linux's `cpu_relax()` in its PL011 console's wait (Rust's
            // `spin_loop` is an ISB on Arm, which QEMU does not take as the end of a turn).
            crate::cpu::spin_hint();
        }
        self.registers.write_u32(DR, u32::from(byte));
    }

    /// Writes every byte of `text`.
    pub fn puts(&self, text: &str) {
        text.bytes().for_each(|byte| self.putc(byte));
    }

    /// Reads one received byte, if the receive FIFO holds any.
    pub fn try_getc(&self) -> Option<u8> {
        if self.registers.read_u32(FR) & FR_RX_FIFO_EMPTY != 0 {
            return None;
        }
        Some(self.registers.read_u32(DR) as u8)
    }

    /// Unmasks the receive interrupt (IMSC.RXIM).
    pub fn enable_receive_interrupt(&self) {
        let mask = self.registers.read_u32(IMSC);
        self.registers.write_u32(IMSC, mask | RECEIVE_INTERRUPT);
    }

    /// Masks the receive interrupt (IMSC.RXIM): input stays in the UART (and whatever feeds
    /// it: Keel's input queue behind the FIFO) until it is unmasked.
    pub fn disable_receive_interrupt(&self) {
        let mask = self.registers.read_u32(IMSC);
        self.registers.write_u32(IMSC, mask & !RECEIVE_INTERRUPT);
    }

    /// Clears the receive and receive-timeout interrupts (ICR); bytes still in the FIFO raise
    /// the receive interrupt again as new ones arrive, and reading them clears it.
    pub fn clear_receive_interrupt(&self) {
        self.registers
            .write_u32(ICR, RECEIVE_INTERRUPT | RECEIVE_TIMEOUT_INTERRUPT);
    }
}

/// Writes through `core::fmt`.
impl core::fmt::Write for &Pl011 {
    fn write_str(&mut self, text: &str) -> core::fmt::Result {
        self.puts(text);
        Ok(())
    }
}

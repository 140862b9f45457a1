//! Driver for the physical PL011 UART (PrimeCell UART, DDI 0183G): Keel's console.

use super::super::mmio::Mmio;

const DR: usize = 0x00;
const FR: usize = 0x18;
const IMSC: usize = 0x38;
const ICR: usize = 0x44;
const FR_TXFF: u32 = 1 << 5;
const FR_TXFE: u32 = 1 << 7;
/// Bytes the transmit FIFO holds (16 before the PL011's r1p5, 32 from it): an empty FIFO
/// takes this many without a look at FR between them.
const TX_FIFO_DEPTH: usize = 16;
const FR_RXFE: u32 = 1 << 4;
const INT_RX: u32 = 1 << 4;
const INT_RT: u32 = 1 << 6;

/// The physical UART.
#[derive(Clone, Copy, Debug)]
pub struct Uart {
    regs: Mmio,
}

impl Uart {
    /// The UART at `base` (from the DTB).
    ///
    /// # Safety
    /// `base` must be a PL011 mapped as device memory, used by nothing else.
    pub const unsafe fn new(base: u64) -> Self {
        // SAFETY: forwarded from this function's contract.
        let regs = unsafe { Mmio::new(base) };
        Self { regs }
    }

    /// Readies the UART for Keel's console: nothing on a PL011, which the board's firmware (or
    /// QEMU) leaves enabled.
    pub fn init(&self) {}

    /// Writes bytes, waiting while the transmit FIFO is full. Out of line: its callers (the
    /// early console, the panic path, the flush before power-off) write a line as a few
    /// pieces, and its loop was copied into each.
    #[inline(never)]
    pub fn write(&self, bytes: &[u8]) {
        for &byte in bytes {
            while self.regs.read32(FR) & FR_TXFF != 0 {}
            self.regs.write32(DR, u32::from(byte));
        }
    }

    /// Writes the leading bytes of `bytes` that the transmit FIFO takes now, without
    /// waiting; returns how many.
    pub fn write_some(&self, bytes: &[u8]) -> usize {
        let mut written = 0;
        while written < bytes.len() {
            let flags = self.regs.read32(FR);
            let take = if flags & FR_TXFE != 0 {
                // Empty: a FIFO's worth fits (Keel writes with interrupts masked; reading
                // FR before each byte doubled the cost of a line).
                (bytes.len() - written).min(TX_FIFO_DEPTH)
            } else if flags & FR_TXFF == 0 {
                1
            } else {
                break;
            };
            for &byte in keel_core::table::at(bytes, written..written + take) {
                self.regs.write32(DR, u32::from(byte));
            }
            written += take;
        }
        written
    }

    /// Takes one received byte, if any.
    pub fn read(&self) -> Option<u8> {
        (self.regs.read32(FR) & FR_RXFE == 0).then(|| self.regs.read32(DR) as u8)
    }

    /// Enables the receive interrupts (the line is an SPI given by the DTB).
    pub fn enable_rx_interrupt(&self) {
        self.regs.write32(ICR, 0x7ff);
        self.regs.write32(IMSC, INT_RX | INT_RT);
    }
}

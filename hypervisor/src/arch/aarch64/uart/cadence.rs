//! Driver for the physical Cadence UART (`cdns,uart-r1p12`; the ZynqMP's UART0/UART1, Zynq
//! UltraScale+ MPSoC TRM UG1087, chapter 21 and its register reference): Keel's console on
//! the ZCU102. The baud rate is the one the board's firmware set (QEMU ignores it).

use super::super::mmio::Mmio;

/// Control: enable and disable bits of the receiver and transmitter.
const CR: usize = 0x00;
const CR_RXEN: u32 = 1 << 2;
const CR_RXDIS: u32 = 1 << 3;
const CR_TXEN: u32 = 1 << 4;
const CR_TXDIS: u32 = 1 << 5;
/// Interrupt enable, disable and status (write one to clear).
const IER: usize = 0x08;
const IDR: usize = 0x0c;
const ISR: usize = 0x14;
/// Receive FIFO trigger level (RXWM): an interrupt as soon as one byte waits.
const RXWM: usize = 0x20;
/// Channel status.
const SR: usize = 0x2c;
const SR_RXEMPTY: u32 = 1 << 1;
const SR_TXEMPTY: u32 = 1 << 3;
const SR_TXFULL: u32 = 1 << 4;
/// The transmit and receive FIFOs.
const FIFO: usize = 0x30;
/// Receive trigger and receive timeout interrupts.
const INT_RX: u32 = 1 << 0 | 1 << 8;
/// Bytes the transmit FIFO holds: an empty FIFO takes this many without a look at SR.
const TX_FIFO_DEPTH: usize = 64;

/// The physical UART.
#[derive(Clone, Copy, Debug)]
pub struct Uart {
    regs: Mmio,
}

impl Uart {
    /// The UART at `base` (from the DTB).
    ///
    /// # Safety
    /// `base` must be a Cadence UART mapped as device memory, used by nothing else.
    pub const unsafe fn new(base: u64) -> Self {
        // SAFETY: forwarded from this function's contract.
        let regs = unsafe { Mmio::new(base) };
        Self { regs }
    }

    /// Readies the UART for Keel's console: its transmitter and receiver enabled (left as
    /// the firmware set them otherwise; QEMU resets them disabled).
    pub fn init(&self) {
        let control = self.regs.read32(CR) & !(CR_TXDIS | CR_RXDIS);
        self.regs.write32(CR, control | CR_TXEN | CR_RXEN);
    }

    /// Writes bytes, waiting while the transmit FIFO is full.
    #[inline(never)]
    pub fn write(&self, bytes: &[u8]) {
        for &byte in bytes {
            while self.regs.read32(SR) & SR_TXFULL != 0 {}
            self.regs.write32(FIFO, u32::from(byte));
        }
    }

    /// Writes the leading bytes of `bytes` that the transmit FIFO takes now, without
    /// waiting; returns how many.
    pub fn write_some(&self, bytes: &[u8]) -> usize {
        let mut written = 0;
        while written < bytes.len() {
            let status = self.regs.read32(SR);
            let take = if status & SR_TXEMPTY != 0 {
                (bytes.len() - written).min(TX_FIFO_DEPTH)
            } else if status & SR_TXFULL == 0 {
                1
            } else {
                break;
            };
            for &byte in keel_core::table::at(bytes, written..written + take) {
                self.regs.write32(FIFO, u32::from(byte));
            }
            written += take;
        }
        written
    }

    /// Takes one received byte, if any. With the FIFO empty, the receive interrupts are
    /// cleared, and the FIFO looked at once more: a byte that came in between keeps its
    /// interrupt's cause.
    pub fn read(&self) -> Option<u8> {
        if self.regs.read32(SR) & SR_RXEMPTY == 0 {
            return Some(self.regs.read32(FIFO) as u8);
        }
        self.regs.write32(ISR, INT_RX);
        (self.regs.read32(SR) & SR_RXEMPTY == 0).then(|| self.regs.read32(FIFO) as u8)
    }

    /// Enables the receive interrupts (the line is an SPI given by the DTB).
    pub fn enable_rx_interrupt(&self) {
        self.regs.write32(IDR, !0);
        self.regs.write32(RXWM, 1);
        self.regs.write32(ISR, !0);
        self.regs.write32(IER, INT_RX);
    }
}

//! Emulated Arm PL011 UART (PrimeCell UART r1p5, DDI 0183G): the console of one VM.
//!
//! Transmit is immediate (the FIFO never fills); received bytes wait in a 32-entry FIFO
//! and raise the receive interrupt. A byte arriving on a full FIFO sets the overrun flag
//! (as the hardware does) and is reported to the caller, never dropped silently.

use super::DeviceError;

const DR: u64 = 0x000;
const RSR_ECR: u64 = 0x004;
const FR: u64 = 0x018;
const ILPR: u64 = 0x020;
const IBRD: u64 = 0x024;
const FBRD: u64 = 0x028;
const LCR_H: u64 = 0x02c;
const CR: u64 = 0x030;
const IFLS: u64 = 0x034;
const IMSC: u64 = 0x038;
const RIS: u64 = 0x03c;
const MIS: u64 = 0x040;
const ICR: u64 = 0x044;
const DMACR: u64 = 0x048;
const PERIPH_ID: [u32; 4] = [0x11, 0x10, 0x14, 0x00];
const CELL_ID: [u32; 4] = [0x0d, 0xf0, 0x05, 0xb1];

/// FR bits (DDI 0183G 3.3.3).
const FR_RXFE: u32 = 1 << 4;
const FR_RXFF: u32 = 1 << 6;
const FR_TXFE: u32 = 1 << 7;
/// Interrupt bits in IMSC/RIS/MIS/ICR (3.3.10-3.3.14).
const INT_RX: u32 = 1 << 4;
const INT_TX: u32 = 1 << 5;
const INT_RT: u32 = 1 << 6;
const INT_OE: u32 = 1 << 10;
/// Overrun error bit in DR and RSR.
const DR_OE: u32 = 1 << 11;
const RSR_OE: u32 = 1 << 3;

/// Receive FIFO depth.
pub const FIFO_DEPTH: usize = 32;

/// A received byte found the FIFO full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun;

/// The state of one emulated PL011.
#[derive(Clone, Debug)]
pub struct Pl011 {
    fifo: [u8; FIFO_DEPTH],
    head: usize,
    count: usize,
    imsc: u32,
    raw_tx: bool,
    overrun: bool,
    cr: u32,
    lcr_h: u32,
    ibrd: u32,
    fbrd: u32,
    ifls: u32,
    ilpr: u32,
    dmacr: u32,
}

impl Default for Pl011 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pl011 {
    /// An all-zero UART, for static storage before [`Pl011::new`] replaces it.
    pub const ZEROED: Self = Self {
        fifo: [0; FIFO_DEPTH],
        head: 0,
        count: 0,
        imsc: 0,
        raw_tx: false,
        overrun: false,
        cr: 0,
        lcr_h: 0,
        ibrd: 0,
        fbrd: 0,
        ifls: 0,
        ilpr: 0,
        dmacr: 0,
    };

    /// A UART in its reset state.
    pub const fn new() -> Self {
        Self {
            fifo: [0; FIFO_DEPTH],
            head: 0,
            count: 0,
            imsc: 0,
            raw_tx: false,
            overrun: false,
            cr: 0x300,
            lcr_h: 0,
            ibrd: 0,
            fbrd: 0,
            ifls: 0x12,
            ilpr: 0,
            dmacr: 0,
        }
    }

    fn raw_interrupts(&self) -> u32 {
        let mut ris = 0;
        if self.count > 0 {
            ris |= INT_RX | INT_RT;
        }
        if self.raw_tx {
            ris |= INT_TX;
        }
        if self.overrun {
            ris |= INT_OE;
        }
        ris
    }

    /// Level of the UART's interrupt line.
    pub fn interrupt_level(&self) -> bool {
        self.raw_interrupts() & self.imsc != 0
    }

    /// A byte arrives from the outside world.
    pub fn receive(&mut self, byte: u8) -> Result<(), Overrun> {
        if self.count == FIFO_DEPTH {
            self.overrun = true;
            return Err(Overrun);
        }
        self.fifo[(self.head + self.count) % FIFO_DEPTH] = byte;
        self.count += 1;
        Ok(())
    }

    fn check_width(offset: u64, size: u8) -> Result<(), DeviceError> {
        if matches!(size, 1 | 2 | 4) && offset.is_multiple_of(u64::from(size)) {
            Ok(())
        } else {
            Err(DeviceError::BadWidth { offset, size })
        }
    }

    /// A guest read of `size` bytes at `offset`.
    pub fn read(&mut self, offset: u64, size: u8) -> Result<u32, DeviceError> {
        Self::check_width(offset, size)?;
        let register = offset & !3;
        Ok(match register {
            DR => {
                if self.count == 0 {
                    0
                } else {
                    // `head` is below FIFO_DEPTH (a power of two): the mask drops a bounds check.
                    let byte = self.fifo[self.head % FIFO_DEPTH];
                    self.head = (self.head + 1) % FIFO_DEPTH;
                    self.count -= 1;
                    let error = if self.overrun { DR_OE } else { 0 };
                    self.overrun = false;
                    u32::from(byte) | error
                }
            }
            RSR_ECR if self.overrun => RSR_OE,
            FR => {
                let mut fr = FR_TXFE;
                if self.count == 0 {
                    fr |= FR_RXFE;
                }
                if self.count == FIFO_DEPTH {
                    fr |= FR_RXFF;
                }
                fr
            }
            ILPR => self.ilpr,
            IBRD => self.ibrd,
            FBRD => self.fbrd,
            LCR_H => self.lcr_h,
            CR => self.cr,
            IFLS => self.ifls,
            IMSC => self.imsc,
            RIS => self.raw_interrupts(),
            MIS => self.raw_interrupts() & self.imsc,
            DMACR => self.dmacr,
            0xfe0..=0xfec => PERIPH_ID[((register - 0xfe0) / 4) as usize],
            0xff0..=0xffc => CELL_ID[((register - 0xff0) / 4) as usize],
            _ => 0,
        })
    }

    /// A guest write; returns the byte to transmit, if the write was one.
    pub fn write(&mut self, offset: u64, size: u8, value: u32) -> Result<Option<u8>, DeviceError> {
        Self::check_width(offset, size)?;
        match offset & !3 {
            DR => {
                self.raw_tx = true;
                return Ok(Some(value as u8));
            }
            RSR_ECR => self.overrun = false,
            ILPR => self.ilpr = value & 0xff,
            IBRD => self.ibrd = value & 0xffff,
            FBRD => self.fbrd = value & 0x3f,
            LCR_H => self.lcr_h = value & 0xff,
            CR => self.cr = value & 0xff87,
            IFLS => self.ifls = value & 0x3f,
            IMSC => self.imsc = value & 0x7ff,
            ICR => {
                if value & INT_TX != 0 {
                    self.raw_tx = false;
                }
                if value & INT_OE != 0 {
                    self.overrun = false;
                }
            }
            DMACR => self.dmacr = value & 0x7,
            _ => {}
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transmit_returns_the_byte() {
        let mut uart = Pl011::new();
        assert_eq!(uart.write(DR, 4, u32::from(b'k')), Ok(Some(b'k')));
        assert_eq!(uart.read(FR, 4).unwrap() & FR_TXFE, FR_TXFE);
    }

    #[test]
    fn receive_raises_interrupt_until_drained() {
        let mut uart = Pl011::new();
        uart.write(IMSC, 4, INT_RX | INT_RT).unwrap();
        assert!(!uart.interrupt_level());
        uart.receive(b'a').unwrap();
        uart.receive(b'b').unwrap();
        assert!(uart.interrupt_level());
        assert_eq!(uart.read(FR, 4).unwrap() & FR_RXFE, 0);
        assert_eq!(uart.read(DR, 4), Ok(u32::from(b'a')));
        assert_eq!(uart.read(DR, 4), Ok(u32::from(b'b')));
        assert!(!uart.interrupt_level());
        assert_eq!(uart.read(FR, 4).unwrap() & FR_RXFE, FR_RXFE);
    }

    #[test]
    fn overrun_is_reported_and_flagged() {
        let mut uart = Pl011::new();
        for i in 0..FIFO_DEPTH {
            uart.receive(i as u8).unwrap();
        }
        assert_eq!(uart.receive(0xff), Err(Overrun));
        assert_eq!(uart.read(RSR_ECR, 4), Ok(RSR_OE));
        assert_eq!(uart.read(DR, 4), Ok(DR_OE));
        assert_eq!(uart.read(DR, 4), Ok(1));
    }

    #[test]
    fn tx_interrupt_cleared_by_icr() {
        let mut uart = Pl011::new();
        uart.write(IMSC, 4, INT_TX).unwrap();
        uart.write(DR, 1, 0x41).unwrap();
        assert!(uart.interrupt_level());
        uart.write(ICR, 4, INT_TX).unwrap();
        assert!(!uart.interrupt_level());
    }

    #[test]
    fn identification_registers_and_widths() {
        let mut uart = Pl011::new();
        assert_eq!(uart.read(0xfe0, 4), Ok(0x11));
        assert_eq!(uart.read(0xffc, 4), Ok(0xb1));
        assert_eq!(
            uart.read(DR, 8),
            Err(DeviceError::BadWidth { offset: 0, size: 8 })
        );
        assert_eq!(
            uart.read(0x2, 4),
            Err(DeviceError::BadWidth { offset: 2, size: 4 })
        );
    }
}

//! Emulated Arm PL011 UART (PrimeCell UART r1p5, DDI 0183G): the console of one VM.
//!
//! Transmit hands each byte on at once, to the VM's console output queue behind the UART
//! (`console_queue`); the transmit FIFO reads full (TXFF) while that queue is, as
//! the caller tells the model ([`Pl011::set_transmit_full`]). Received bytes wait in a 32-entry FIFO
//! and raise the receive and receive-timeout interrupts while any waits there. Behind the
//! FIFO, Keel holds the console input the FIFO cannot take yet in a bounded queue of its own
//! ([`InputQueue`], [`INPUT_QUEUE`] bytes: a pasted screenful): each byte the guest reads
//! from UARTDR makes room for the queue's oldest, so the FIFO stays full, and its interrupts
//! asserted, until the guest has read everything, in order, as a real PL011 fed by a sender
//! that respects its flow control. Only a byte arriving when the FIFO and the queue are both
//! full (a guest that stopped reading) is refused: it sets the overrun flag (as the hardware
//! does), is reported to the caller and counted until the count is taken
//! ([`Pl011::take_dropped`]), never dropped silently.

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
const FR_TXFF: u32 = 1 << 5;
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

/// UARTCR and UARTIFLS at reset (DDI 0183G 3.3.8, 3.3.9): transmit and receive enabled,
/// both FIFO levels at half.
const CR_AT_RESET: u32 = 0x300;
const IFLS_AT_RESET: u32 = 0x12;

/// Receive FIFO depth.
pub const FIFO_DEPTH: usize = 32;

/// Bytes of console input held behind the receive FIFO ([`InputQueue`]); a power of two.
pub const INPUT_QUEUE: usize = 4096;
const _: () = assert!(
    INPUT_QUEUE.is_power_of_two(),
    "InputQueue wraps with a mask"
);

/// A received byte found the FIFO and the input queue behind it full, and was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrun;

/// Console input waiting behind the receive FIFO: at most [`INPUT_QUEUE`] bytes, taken in
/// the order they came, and the count of bytes refused because it was full, kept until it
/// is taken ([`InputQueue::take_dropped`]). All zero bytes when empty ([`InputQueue::EMPTY`]),
/// so that a static one takes no image space.
#[derive(Clone, Debug)]
pub struct InputQueue {
    bytes: [u8; INPUT_QUEUE],
    /// Where the oldest byte is (below [`INPUT_QUEUE`]).
    head: usize,
    len: usize,
    /// Bytes refused since the count was last taken.
    dropped: u64,
}

impl Default for InputQueue {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl InputQueue {
    /// An empty queue, nothing refused.
    pub const EMPTY: Self = Self {
        bytes: [0; INPUT_QUEUE],
        head: 0,
        len: 0,
        dropped: 0,
    };

    /// Bytes waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no byte waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `byte`; a full queue refuses it and counts it.
    pub fn push(&mut self, byte: u8) -> Result<(), Overrun> {
        if self.len == INPUT_QUEUE {
            self.dropped = self.dropped.saturating_add(1);
            return Err(Overrun);
        }
        // A power of two: the remainder is a mask, and the index needs no bounds check.
        self.bytes[(self.head + self.len) % INPUT_QUEUE] = byte;
        self.len += 1;
        Ok(())
    }

    /// Takes the oldest byte, if any.
    pub fn pop(&mut self) -> Option<u8> {
        if self.len == 0 {
            return None;
        }
        let byte = self.bytes[self.head % INPUT_QUEUE];
        self.head = (self.head + 1) % INPUT_QUEUE;
        self.len -= 1;
        Some(byte)
    }

    /// Empties the queue (its bytes are not erased, only forgotten: constant work). The count
    /// of refused bytes stays, to be said.
    pub const fn clear(&mut self) {
        self.head = 0;
        self.len = 0;
    }

    /// The bytes refused since the last call (then none).
    pub fn take_dropped(&mut self) -> u64 {
        core::mem::take(&mut self.dropped)
    }

    /// Gives back `count` refused bytes taken by [`take_dropped`](Self::take_dropped) but not
    /// said after all (a rate-limited line left out): they are said with the next ones.
    pub fn restore_dropped(&mut self, count: u64) {
        self.dropped = self.dropped.saturating_add(count);
    }
}

/// The state of one emulated PL011.
#[derive(Clone, Debug)]
pub struct Pl011 {
    fifo: [u8; FIFO_DEPTH],
    head: usize,
    count: usize,
    /// Input behind the FIFO: never holds a byte while the FIFO has room.
    queue: InputQueue,
    imsc: u32,
    raw_tx: bool,
    overrun: bool,
    /// The output queue behind the transmit FIFO is full: FR reads TXFF, not TXFE.
    transmit_full: bool,
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
        queue: InputQueue::EMPTY,
        imsc: 0,
        raw_tx: false,
        overrun: false,
        transmit_full: false,
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
        let mut uart = Self::ZEROED;
        uart.reset();
        uart
    }

    /// Puts the UART in its reset state in place, in constant work (a VM's reset, with
    /// interrupts masked; [`Pl011::new`] is [`Pl011::ZEROED`] reset): the registers' reset
    /// values, the FIFO and the input queue emptied. The count of refused input bytes not yet taken stays, to be said.
    pub const fn reset(&mut self) {
        self.head = 0;
        self.count = 0;
        self.queue.clear();
        self.imsc = 0;
        self.raw_tx = false;
        self.overrun = false;
        self.cr = CR_AT_RESET;
        self.lcr_h = 0;
        self.ibrd = 0;
        self.fbrd = 0;
        self.ifls = IFLS_AT_RESET;
        self.ilpr = 0;
        self.dmacr = 0;
    }

    /// Whether the output queue behind the transmit FIFO is full (the caller looks before
    /// each access): FR then reads TXFF, and a byte written now would be refused.
    pub fn set_transmit_full(&mut self, full: bool) {
        self.transmit_full = full;
    }

    /// Bytes received and not yet read by the guest: in the FIFO and queued behind it.
    pub fn pending_input(&self) -> usize {
        self.count + self.queue.len()
    }

    /// The input bytes refused since the last call ([`InputQueue::take_dropped`]).
    pub fn take_dropped(&mut self) -> u64 {
        self.queue.take_dropped()
    }

    /// Gives back refused bytes taken but not said ([`InputQueue::restore_dropped`]).
    pub fn restore_dropped(&mut self, count: u64) {
        self.queue.restore_dropped(count);
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

    /// A byte arrives from the outside world: into the FIFO if it has room (nothing then
    /// waits in the queue), else at the end of the input queue; refused, counted and flagged
    /// as an overrun if that is full too.
    pub fn receive(&mut self, byte: u8) -> Result<(), Overrun> {
        if self.count < FIFO_DEPTH && self.queue.is_empty() {
            self.push_fifo(byte);
            return Ok(());
        }
        self.queue.push(byte).inspect_err(|_| self.overrun = true)
    }

    /// Appends `byte` to the FIFO, which has room.
    fn push_fifo(&mut self, byte: u8) {
        self.fifo[(self.head + self.count) % FIFO_DEPTH] = byte;
        self.count += 1;
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
                    // The room made is the queue's oldest byte's: the FIFO stays full, and
                    // its interrupts asserted, while input waits.
                    if let Some(next) = self.queue.pop() {
                        self.push_fifo(next);
                    }
                    let error = if self.overrun { DR_OE } else { 0 };
                    self.overrun = false;
                    u32::from(byte) | error
                }
            }
            RSR_ECR if self.overrun => RSR_OE,
            FR => {
                let mut fr = if self.transmit_full { FR_TXFF } else { FR_TXFE };
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
    fn a_full_output_queue_reads_as_a_full_transmit_fifo() {
        let mut uart = Pl011::new();
        uart.set_transmit_full(true);
        assert_eq!(uart.read(FR, 4).unwrap() & (FR_TXFF | FR_TXFE), FR_TXFF);
        uart.set_transmit_full(false);
        assert_eq!(uart.read(FR, 4).unwrap() & (FR_TXFF | FR_TXFE), FR_TXFE);
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

    /// Byte `i` of a test's input: every value, in an order no shorter period repeats.
    fn input_byte(i: usize) -> u8 {
        (i * 7 + i / 256) as u8
    }

    #[test]
    fn overrun_is_reported_and_flagged() {
        let mut uart = Pl011::new();
        for i in 0..FIFO_DEPTH + INPUT_QUEUE {
            uart.receive(i as u8).unwrap();
        }
        assert_eq!(uart.receive(0xff), Err(Overrun));
        assert_eq!(uart.read(RSR_ECR, 4), Ok(RSR_OE));
        assert_eq!(uart.read(DR, 4), Ok(DR_OE));
        assert_eq!(uart.read(DR, 4), Ok(1));
    }

    #[test]
    fn input_beyond_the_fifo_waits_in_order() {
        let mut uart = Pl011::new();
        let total = FIFO_DEPTH + INPUT_QUEUE;
        for i in 0..total {
            assert_eq!(uart.receive(input_byte(i)), Ok(()), "byte {i}");
        }
        assert_eq!(uart.pending_input(), total);
        // Every byte comes out once, in order, nothing flagged; the FIFO stays full until
        // only its own 32 are left.
        for i in 0..total {
            let fr = uart.read(FR, 4).unwrap();
            assert_eq!(fr & FR_RXFF != 0, total - i >= FIFO_DEPTH, "FR at byte {i}");
            assert_eq!(uart.read(DR, 4), Ok(u32::from(input_byte(i))), "byte {i}");
        }
        assert_eq!(uart.read(FR, 4).unwrap() & FR_RXFE, FR_RXFE);
        assert_eq!(uart.read(RSR_ECR, 4), Ok(0));
        assert_eq!(uart.take_dropped(), 0);
    }

    #[test]
    fn input_and_reads_interleaved_keep_order() {
        let mut uart = Pl011::new();
        let (mut sent, mut read) = (0, 0);
        // Bursts larger than the FIFO, the guest reading fewer bytes than came in each round
        // until the queue holds thousands, then draining.
        for round in 0..250 {
            for _ in 0..(if round < 150 { 40 } else { 0 }) {
                uart.receive(input_byte(sent)).unwrap();
                sent += 1;
            }
            for _ in 0..(if round < 150 { 13 } else { 60 }) {
                if read == sent {
                    break;
                }
                assert_eq!(
                    uart.read(DR, 1),
                    Ok(u32::from(input_byte(read))),
                    "byte {read}"
                );
                read += 1;
            }
            assert_eq!(uart.pending_input(), sent - read);
        }
        assert_eq!((read, sent), (6000, 6000));
        assert_eq!(uart.take_dropped(), 0);
    }

    #[test]
    fn a_full_queue_refuses_and_counts() {
        let mut uart = Pl011::new();
        let total = FIFO_DEPTH + INPUT_QUEUE;
        for i in 0..total + 100 {
            let outcome = uart.receive(input_byte(i));
            assert_eq!(outcome.is_ok(), i < total, "byte {i}");
        }
        assert_eq!(uart.pending_input(), total);
        assert_eq!(uart.take_dropped(), 100);
        assert_eq!(uart.take_dropped(), 0, "a count is taken once");
        // Not said after all: given back, it is said with the next ones.
        uart.restore_dropped(100);
        assert_eq!(uart.receive(0), Err(Overrun));
        assert_eq!(uart.take_dropped(), 101);
        // The guest reads one: one more fits, and what was kept is what came first.
        assert_eq!(uart.read(DR, 4), Ok(u32::from(input_byte(0)) | DR_OE));
        assert_eq!(uart.receive(0x55), Ok(()));
        assert_eq!(uart.receive(0x56), Err(Overrun));
        for i in 1..total {
            assert_eq!(uart.read(DR, 4).unwrap() & 0xff, u32::from(input_byte(i)));
        }
        assert_eq!(uart.read(DR, 4), Ok(0x55));
        assert_eq!(uart.pending_input(), 0);
        assert_eq!(uart.take_dropped(), 1);
    }

    #[test]
    fn receive_interrupts_stay_asserted_while_input_waits() {
        let mut uart = Pl011::new();
        uart.write(IMSC, 4, INT_RX | INT_RT).unwrap();
        for i in 0..100 {
            uart.receive(input_byte(i)).unwrap();
        }
        for i in 0..100 {
            assert!(uart.interrupt_level(), "level before byte {i}");
            assert_eq!(
                uart.read(RIS, 4).unwrap() & (INT_RX | INT_RT),
                INT_RX | INT_RT
            );
            // Clearing them (as Linux's handler does) changes nothing while bytes wait.
            uart.write(ICR, 4, INT_RX | INT_RT).unwrap();
            assert_eq!(
                uart.read(MIS, 4).unwrap() & (INT_RX | INT_RT),
                INT_RX | INT_RT
            );
            uart.read(DR, 4).unwrap();
        }
        assert!(!uart.interrupt_level());
        assert_eq!(uart.read(RIS, 4).unwrap() & (INT_RX | INT_RT), 0);
    }

    #[test]
    fn reset_empties_the_input_and_keeps_the_count_to_say() {
        let mut uart = Pl011::new();
        uart.write(IMSC, 4, INT_RX).unwrap();
        uart.write(CR, 4, 0x301).unwrap();
        for i in 0..FIFO_DEPTH + INPUT_QUEUE + 3 {
            let _ = uart.receive(input_byte(i));
        }
        uart.reset();
        assert_eq!(uart.pending_input(), 0);
        assert!(!uart.interrupt_level());
        assert_eq!(uart.read(FR, 4).unwrap() & FR_RXFE, FR_RXFE);
        assert_eq!(uart.read(DR, 4), Ok(0));
        assert_eq!(uart.read(RSR_ECR, 4), Ok(0));
        assert_eq!(uart.read(IMSC, 4), Ok(0));
        assert_eq!(uart.read(CR, 4), Ok(CR_AT_RESET));
        assert_eq!(uart.read(IFLS, 4), Ok(IFLS_AT_RESET));
        assert_eq!(uart.take_dropped(), 3);
        // After it, input flows as on a new UART.
        uart.receive(b'k').unwrap();
        assert_eq!(uart.read(DR, 4), Ok(u32::from(b'k')));
    }

    #[test]
    fn the_zeroed_uart_reset_is_a_new_one() {
        let mut uart = Pl011::ZEROED;
        uart.reset();
        let new = Pl011::new();
        for offset in [CR, IFLS, IMSC, LCR_H, FR, RIS] {
            assert_eq!(
                uart.read(offset, 4),
                Pl011::new().read(offset, 4),
                "{offset:#x}"
            );
        }
        assert_eq!(uart.pending_input(), new.pending_input());
    }

    #[test]
    fn input_queue_alone() {
        let mut queue = InputQueue::EMPTY;
        assert!(queue.is_empty());
        assert_eq!(queue.pop(), None);
        for round in 0..3 {
            for i in 0..INPUT_QUEUE {
                assert_eq!(queue.push(input_byte(i + round)), Ok(()));
            }
            assert_eq!(queue.push(0), Err(Overrun));
            assert_eq!(queue.len(), INPUT_QUEUE);
            for i in 0..INPUT_QUEUE / 2 {
                assert_eq!(queue.pop(), Some(input_byte(i + round)));
            }
            for i in 0..INPUT_QUEUE / 2 {
                assert_eq!(queue.push(input_byte(i + 7)), Ok(()));
            }
            for i in INPUT_QUEUE / 2..INPUT_QUEUE {
                assert_eq!(queue.pop(), Some(input_byte(i + round)));
            }
            for i in 0..INPUT_QUEUE / 2 {
                assert_eq!(queue.pop(), Some(input_byte(i + 7)));
            }
            assert_eq!(queue.pop(), None);
        }
        assert_eq!(queue.take_dropped(), 3);
        queue.push(1).unwrap();
        queue.clear();
        assert!(queue.is_empty());
        assert_eq!(queue.pop(), None);
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

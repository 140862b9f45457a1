//! PROD/CONS index arithmetic of the SMMU's queues (IHI 0070 3.5), with the wrap bit.
//!
//! A queue of `2^n` entries is indexed by bits `[n-1:0]` of its PROD and CONS registers; bit
//! `n` is the wrap bit, toggled each time the index passes the end. The queue is empty when
//! both are equal, and full when the indices are equal but the wrap bits differ. The bits
//! above (CMDQ_CONS.ERR, EVENTQ_PROD.OVFLG...) are not part of the index.

/// The geometry of a queue of `2^log2size` entries, and the arithmetic on its PROD/CONS
/// register values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queue {
    log2size: u32,
}

impl Queue {
    /// Most entries a queue may have: 2^19 (the widest SMMU_IDR1.CMDQS/EVENTQS).
    pub const MAX_LOG2SIZE: u32 = 19;

    /// A queue of `2^log2size` entries, if `log2size` is at most [`Self::MAX_LOG2SIZE`].
    pub const fn new(log2size: u32) -> Option<Self> {
        if log2size <= Self::MAX_LOG2SIZE {
            Some(Self { log2size })
        } else {
            None
        }
    }

    /// log2 of the number of entries (the BASE register's LOG2SIZE).
    pub const fn log2size(self) -> u32 {
        self.log2size
    }

    /// The number of entries.
    pub const fn entries(self) -> u32 {
        1 << self.log2size
    }

    const fn index_mask(self) -> u32 {
        self.entries() - 1
    }

    const fn wrap_bit(self) -> u32 {
        self.entries()
    }

    /// The index and wrap bits of a PROD or CONS register value (the rest dropped).
    pub const fn pointer(self, register: u32) -> u32 {
        register & (self.index_mask() | self.wrap_bit())
    }

    /// The entry `pointer` designates (its index bits).
    pub const fn slot(self, pointer: u32) -> usize {
        (pointer & self.index_mask()) as usize
    }

    /// `pointer`'s wrap bit.
    pub const fn wrap(self, pointer: u32) -> bool {
        pointer & self.wrap_bit() != 0
    }

    /// `pointer` moved on by `count` entries (the wrap bit toggling at each pass of the end).
    pub const fn advance(self, pointer: u32, count: u32) -> u32 {
        self.pointer(self.pointer(pointer).wrapping_add(count))
    }

    /// Whether no entry lies between `cons` and `prod`.
    pub const fn is_empty(self, prod: u32, cons: u32) -> bool {
        self.pointer(prod) == self.pointer(cons)
    }

    /// Whether every entry lies between `cons` and `prod`.
    pub const fn is_full(self, prod: u32, cons: u32) -> bool {
        self.pointer(prod ^ cons) == self.wrap_bit()
    }

    /// The entries produced and not yet consumed.
    pub const fn used(self, prod: u32, cons: u32) -> u32 {
        let (prod, cons) = (self.pointer(prod), self.pointer(cons));
        // Index and wrap bit together count modulo twice the size.
        prod.wrapping_sub(cons) & (self.index_mask() | self.wrap_bit())
    }

    /// The entries a producer may still write before the queue is full.
    pub const fn free(self, prod: u32, cons: u32) -> u32 {
        self.entries().saturating_sub(self.used(prod, cons))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_full_and_counts_across_the_wrap() {
        let queue = Queue::new(2).unwrap();
        assert_eq!(queue.entries(), 4);
        assert!(queue.is_empty(0, 0));
        assert_eq!(queue.free(0, 0), 4);
        let mut prod = 0;
        for written in 1..=4 {
            prod = queue.advance(prod, 1);
            assert_eq!(queue.used(prod, 0), written);
            assert!(!queue.is_empty(prod, 0));
        }
        assert_eq!(prod, 0b100, "index 0, wrap bit set");
        assert!(queue.is_full(prod, 0));
        assert_eq!(queue.free(prod, 0), 0);
        // The consumer takes 3; the producer writes 2 more, past the end again.
        let cons = queue.advance(0, 3);
        assert_eq!((queue.slot(cons), queue.wrap(cons)), (3, false));
        assert_eq!(queue.free(prod, cons), 3);
        prod = queue.advance(prod, 2);
        assert_eq!((queue.slot(prod), queue.wrap(prod)), (2, true));
        assert_eq!(queue.used(prod, cons), 3);
        let cons = queue.advance(cons, 3);
        assert!(queue.is_empty(prod, cons));
        // Two more entries each: both pass the end again, the wrap bits back to clear.
        let (prod, cons) = (queue.advance(prod, 2), queue.advance(cons, 2));
        assert_eq!((prod, cons), (0, 0));
        assert_eq!(queue.advance(0, 8), 0, "two laps");
    }

    #[test]
    fn bits_above_the_wrap_bit_are_not_the_index() {
        let queue = Queue::new(4).unwrap();
        // CMDQ_CONS with ERR = ILL, index 3, wrap set; EVENTQ_PROD with OVFLG.
        let cons = 1 << 24 | 1 << 4 | 3;
        assert_eq!(queue.pointer(cons), 0x13);
        assert_eq!(queue.slot(cons), 3);
        assert!(queue.wrap(cons));
        assert!(queue.is_empty(0x8000_0013, cons));
        assert!(queue.is_full(3, cons));
        assert_eq!(queue.used(0x8000_0000 | 0x15, cons), 2);
    }

    #[test]
    fn sizes() {
        assert_eq!(Queue::new(20), None);
        let largest = Queue::new(19).unwrap();
        let end = largest.advance(0, largest.entries());
        assert!(largest.is_full(end, 0));
        assert_eq!(largest.free(end, 0), 0);
        let single = Queue::new(0).unwrap();
        assert_eq!(single.advance(0, 1), 1);
        assert!(single.is_full(1, 0));
        assert_eq!(single.advance(1, 1), 0);
    }
}

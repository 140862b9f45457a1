//! One VM's console output on its way to the multiplexer: a bounded queue with one producer
//! (the VM's vCPUs, one at a time under the VM's own PL011 lock) and one consumer (whoever
//! holds the console's lock: Keel's console pCPU), and no lock between them. A VM writing its
//! console therefore never waits for another VM's output or for Keel's lines: it stores its
//! byte here and goes on; the console pCPU moves the bytes into the multiplexer
//! ([`crate::console::ConsoleMux::pull`]) and onto the UART.
//!
//! A full queue refuses the byte and counts it ([`OutputQueue::push`]); the count reaches the
//! console as a line of Keel's ([`OutputQueue::take_refused`]). A VM that looks before it
//! writes ([`OutputQueue::is_full`], its PL011's TXFF) loses nothing. The producer tells the
//! consumer nothing: the consumer looks on its own, often (a producer that interrupted it
//! would touch a device the other partitions share).
//!
//! Bytes are atomics (plain byte loads and stores on Arm): the queue is safe code, and a second
//! producer by mistake could garble the VM's own output, never memory.

use core::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// Bytes a VM may have queued before its output is refused; a power of two.
pub const OUTPUT_QUEUE: usize = 2048;
const _: () = assert!(OUTPUT_QUEUE.is_power_of_two());

/// One VM's queue (all zero bytes when empty: a static array of them is in .bss).
pub struct OutputQueue {
    bytes: [AtomicU8; OUTPUT_QUEUE],
    /// Bytes pushed since the start (the producer's; wraps with `usize`).
    tail: AtomicUsize,
    /// Bytes taken since the start (the consumer's).
    head: AtomicUsize,
    /// Bytes refused (queue full) and not yet taken by the consumer.
    refused: AtomicU64,
    /// The position (a value of `tail`) where the VM's line ends before its next byte (it
    /// restarted), plus one; 0: none asked. One more than the position, so that all zero
    /// bytes mean none. The consumer looks at every position it reaches, the last one included,
    /// and the producer's bytes after it are published after it: it is never passed. A second
    /// restart before the consumer reached the first's position replaces it (that line end is
    /// then the later one only).
    end_at: AtomicUsize,
}

impl OutputQueue {
    /// An empty queue.
    pub const fn new() -> Self {
        Self {
            bytes: [const { AtomicU8::new(0) }; OUTPUT_QUEUE],
            tail: AtomicUsize::new(0),
            head: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            end_at: AtomicUsize::new(0),
        }
    }

    /// Producer: queues `byte`, or refuses and counts it if the queue is full.
    pub fn push(&self, byte: u8) {
        let tail = self.tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(self.head.load(Ordering::Acquire)) >= OUTPUT_QUEUE {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.bytes[tail % OUTPUT_QUEUE].store(byte, Ordering::Relaxed);
        // Release: the byte is stored before the consumer can see it counted.
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
    }

    /// Producer: the VM's line ends before whatever it writes next (it restarts: its next
    /// boot's output begins a line of its own).
    pub fn end_line(&self) {
        let tail = self.tail.load(Ordering::Relaxed);
        self.end_at.store(tail.wrapping_add(1), Ordering::Release);
    }

    /// Whether a byte written now would be refused.
    pub fn is_full(&self) -> bool {
        self.len() >= OUTPUT_QUEUE
    }

    /// Bytes queued.
    pub fn len(&self) -> usize {
        let head = self.head.load(Ordering::Acquire);
        self.tail.load(Ordering::Acquire).wrapping_sub(head)
    }

    /// Bytes pushed since the start (a position: wraps).
    pub fn pushed(&self) -> usize {
        self.tail.load(Ordering::Acquire)
    }

    /// Bytes taken since the start (a position: wraps).
    pub fn taken(&self) -> usize {
        self.head.load(Ordering::Acquire)
    }

    /// Whether nothing is queued (refusals and line ends aside).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Consumer: whether anything waits for it to take: bytes or a line end. (A count of
    /// refused bytes is not: the consumer says it when it may, [`refused`](Self::refused).)
    pub fn has_work(&self) -> bool {
        !self.is_empty() || self.end_at.load(Ordering::Acquire) != 0
    }

    /// Consumer: bytes refused and not yet taken.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Consumer: the count of refused bytes, reset.
    pub fn take_refused(&self) -> u64 {
        self.refused.swap(0, Ordering::Relaxed)
    }

    /// Consumer: hands queued bytes to `take`, in order, while it accepts them (`Step::Byte`
    /// false leaves that byte queued) and at most `max` of them; a line end asked for at a
    /// position reached is handed as `Step::EndLine` before the byte there. Returns how many
    /// bytes were taken.
    pub fn take(&self, max: usize, mut take: impl FnMut(Step) -> bool) -> usize {
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Acquire);
        let count = tail.wrapping_sub(head).min(max);
        let mut taken = 0;
        loop {
            let at = head.wrapping_add(taken);
            let end_at = self.end_at.load(Ordering::Acquire);
            if end_at == at.wrapping_add(1) {
                if !take(Step::EndLine) {
                    break;
                }
                // Unless the producer asked again meanwhile (a later position).
                let _ =
                    self.end_at
                        .compare_exchange(end_at, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            if taken == count {
                break;
            }
            let byte = self.bytes[at % OUTPUT_QUEUE].load(Ordering::Relaxed);
            if !take(Step::Byte(byte)) {
                break;
            }
            taken += 1;
        }
        // Release: the bytes are read before the producer may write over them.
        self.head.store(head.wrapping_add(taken), Ordering::Release);
        taken
    }
}

impl Default for OutputQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// What [`OutputQueue::take`] hands over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// A byte the VM wrote.
    Byte(u8),
    /// The VM's line ends here (it restarted).
    EndLine,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(queue: &OutputQueue) -> Vec<Step> {
        let mut got = Vec::new();
        queue.take(usize::MAX, |step| {
            got.push(step);
            true
        });
        got
    }

    #[test]
    fn bytes_come_out_in_order() {
        let queue = OutputQueue::new();
        queue.push(b'a');
        queue.push(b'b');
        assert_eq!(drain(&queue), vec![Step::Byte(b'a'), Step::Byte(b'b')]);
        queue.push(b'c');
        assert_eq!(drain(&queue), vec![Step::Byte(b'c')]);
        assert!(queue.is_empty());
        assert!(!queue.has_work());
    }

    #[test]
    fn a_full_queue_refuses_and_counts() {
        let queue = OutputQueue::new();
        for i in 0..OUTPUT_QUEUE {
            queue.push(i as u8);
            assert_eq!(queue.is_full(), i + 1 == OUTPUT_QUEUE);
        }
        queue.push(1);
        queue.push(2);
        assert_eq!(queue.take_refused(), 2);
        assert_eq!(queue.take_refused(), 0);
        let got = drain(&queue);
        assert_eq!(got.len(), OUTPUT_QUEUE);
        assert!(got
            .iter()
            .enumerate()
            .all(|(i, step)| *step == Step::Byte(i as u8)));
        assert!(!queue.is_full());
    }

    #[test]
    fn a_refusing_consumer_leaves_the_byte_queued() {
        let queue = OutputQueue::new();
        for byte in b"abcd" {
            queue.push(*byte);
        }
        let mut room = 2;
        let taken = queue.take(usize::MAX, |_| {
            room -= 1;
            room >= 0
        });
        assert_eq!(taken, 2);
        assert_eq!(drain(&queue), vec![Step::Byte(b'c'), Step::Byte(b'd')]);
        assert_eq!(queue.take(1, |_| true), 0);
    }

    #[test]
    fn a_line_end_comes_where_it_was_asked() {
        let queue = OutputQueue::new();
        queue.push(b'x');
        queue.end_line();
        queue.push(b'y');
        let mut first = Vec::new();
        assert_eq!(
            queue.take(1, |step| {
                first.push(step);
                true
            }),
            1
        );
        // The end is due once its position is reached, before the byte there.
        assert_eq!(first, vec![Step::Byte(b'x'), Step::EndLine]);
        assert_eq!(drain(&queue), vec![Step::Byte(b'y')]);
        // Asked with nothing queued after it: handed at once, then never again.
        queue.end_line();
        assert_eq!(drain(&queue), vec![Step::EndLine]);
        assert!(drain(&queue).is_empty());
        assert!(!queue.has_work());
    }

    #[test]
    fn positions_wrap_many_times() {
        let queue = OutputQueue::new();
        let mut next = 0u8;
        let mut expect = 0u8;
        for round in 0..50 {
            for _ in 0..(round * 37 % OUTPUT_QUEUE) {
                queue.push(next);
                next = next.wrapping_add(1);
            }
            for step in drain(&queue) {
                assert_eq!(step, Step::Byte(expect));
                expect = expect.wrapping_add(1);
            }
        }
        assert_eq!(next, expect);
    }

    /// One producer thread and one consumer thread: every byte arrives once, in order, and a
    /// refused byte is counted, never lost without a count.
    #[test]
    fn producer_and_consumer_on_two_threads() {
        let queue = std::sync::Arc::new(OutputQueue::new());
        let total = 200_000usize;
        let producer = {
            let queue = queue.clone();
            std::thread::spawn(move || {
                for i in 0..total {
                    while queue.is_full() {
                        std::thread::yield_now();
                    }
                    queue.push(i as u8);
                }
            })
        };
        let mut seen = 0usize;
        while seen < total {
            queue.take(97, |step| {
                assert_eq!(step, Step::Byte(seen as u8), "byte {seen}");
                seen += 1;
                true
            });
        }
        producer.join().unwrap();
        assert_eq!(queue.take_refused(), 0);
    }
}

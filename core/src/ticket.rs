//! The ticket lock's algorithm, without the data it guards (Keel's `Mutex` in the arch layer
//! adds that): each arrival takes the next ticket, and the lock serves tickets in the order
//! they were taken. A waiter is therefore served after the holders ahead of it, at most one
//! per other pCPU (a pCPU waits for one lock at a time), where an unfair test-and-set lock
//! lets one pCPU lose every race to the others for as long as they keep coming back. The wait
//! is bounded by those pCPUs' holds, which is why every hold must be bounded (see the lock
//! order in the hypervisor's `vm` module).
//!
//! Two 16-bit counters: `next`, the ticket the next arrival takes, and `serving`, the ticket
//! that holds the lock (free when it equals `next`). Both wrap; they stay apart by at most the
//! number of holders and waiters, far below 2^16.

use core::sync::atomic::{AtomicU16, Ordering};

/// A fair spin lock's counters: [`lock`](Self::lock) waits its turn, [`unlock`](Self::unlock)
/// serves the next. All zero bytes when free and never taken (a static's lock stays in .bss).
#[derive(Debug, Default)]
#[repr(C)]
pub struct TicketLock {
    /// The ticket being served: the holder's, or `next` when the lock is free. First, so that
    /// its address is the lock's: an unlock (a load and a release store, which takes no
    /// offset) needs no address of its own at each of the many places it is inlined (256
    /// bytes of Keel's image).
    serving: AtomicU16,
    /// The ticket the next arrival takes.
    next: AtomicU16,
}

impl TicketLock {
    /// A free lock.
    pub const fn new() -> Self {
        Self::starting_at(0)
    }

    /// A free lock whose next ticket is `ticket` (the tests start near the wrap).
    const fn starting_at(ticket: u16) -> Self {
        Self {
            serving: AtomicU16::new(ticket),
            next: AtomicU16::new(ticket),
        }
    }

    /// Takes a ticket and waits, calling `relax` between looks, until it is served: then the
    /// caller holds the lock. Acquire: what the previous holder wrote before its
    /// [`unlock`](Self::unlock) is seen.
    #[inline(always)]
    pub fn lock(&self, mut relax: impl FnMut()) {
        // Relaxed: the ticket only has to be unique (the add is one atomic step); the order
        // with the previous holder comes from the acquire load below.
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        while self.serving.load(Ordering::Acquire) != ticket {
            relax();
        }
    }

    /// Takes the lock if it is free, without waiting; whether it did. A lock held or waited for
    /// is left as it was (no ticket is taken).
    #[inline(always)]
    pub fn try_lock(&self) -> bool {
        let serving = self.serving.load(Ordering::Acquire);
        // Free if no ticket was taken beyond the one served: take that one. `serving` only
        // grows, and never past `next`, so if `next` still equals what was read, so does
        // `serving`.
        self.next
            .compare_exchange(
                serving,
                serving.wrapping_add(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
    }

    /// Serves the next ticket. Only the holder may call it (the lock's guard does, once):
    /// `serving` is written by the holder alone, so a load and a store suffice. Release: what
    /// the holder wrote is seen by the next one.
    #[inline(always)]
    pub fn unlock(&self) {
        let serving = self.serving.load(Ordering::Relaxed);
        self.serving
            .store(serving.wrapping_add(1), Ordering::Release);
    }

    /// How many hold or wait for the lock (0: free). A snapshot, for tests and reports.
    pub fn queued(&self) -> u16 {
        let serving = self.serving.load(Ordering::Acquire);
        self.next.load(Ordering::Acquire).wrapping_sub(serving)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::{Arc, Mutex};
    use std::thread;

    fn relax() {
        thread::yield_now();
    }

    /// Waits until `done` says so; fails after ten seconds (a waiter that never queued).
    fn wait_for(done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed().as_secs() < 10, "a waiter never queued");
            thread::yield_now();
        }
    }

    /// Each thread, many times: lock, check that no one else is inside, add one to a counter
    /// with a separate load and store (an increment two holders at once would lose), unlock.
    fn one_holder_at_a_time_from(start: u16) {
        const THREADS: usize = 4;
        const ROUNDS: u64 = 5_000;
        let lock = Arc::new(TicketLock::starting_at(start));
        let inside = Arc::new(AtomicBool::new(false));
        let count = Arc::new(AtomicU64::new(0));
        let workers: Vec<_> = (0..THREADS)
            .map(|_| {
                let (lock, inside, count) = (lock.clone(), inside.clone(), count.clone());
                thread::spawn(move || {
                    for _ in 0..ROUNDS {
                        lock.lock(relax);
                        assert!(!inside.swap(true, Ordering::Relaxed), "two holders");
                        let seen = count.load(Ordering::Relaxed);
                        thread::yield_now();
                        count.store(seen + 1, Ordering::Relaxed);
                        inside.store(false, Ordering::Relaxed);
                        lock.unlock();
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        assert_eq!(count.load(Ordering::Relaxed), THREADS as u64 * ROUNDS);
        assert_eq!(lock.queued(), 0);
    }

    #[test]
    fn one_holder_at_a_time() {
        one_holder_at_a_time_from(0);
    }

    #[test]
    fn one_holder_at_a_time_across_the_wrap() {
        // 20,000 tickets from 2^16 - 10,000: the counters wrap mid-run.
        one_holder_at_a_time_from(u16::MAX - 10_000);
    }

    /// The main thread holds the lock; waiters arrive one after the other (each has its ticket
    /// before the next starts); once released, they are served in the order they arrived. A
    /// test-and-set lock serves them in whatever order their retries happen to win.
    fn served_in_arrival_order_from(start: u16) {
        const WAITERS: usize = 6;
        let lock = Arc::new(TicketLock::starting_at(start));
        let served = Arc::new(Mutex::new(Vec::new()));
        lock.lock(relax);
        let mut waiters = Vec::new();
        for arrival in 0..WAITERS {
            let (mine, served) = (lock.clone(), served.clone());
            waiters.push(thread::spawn(move || {
                mine.lock(relax);
                served.lock().unwrap().push(arrival);
                // Held a while, so that the others really wait for it.
                for _ in 0..100 {
                    thread::yield_now();
                }
                mine.unlock();
            }));
            // The holder and the waiters so far, this one included.
            wait_for(|| usize::from(lock.queued()) == arrival + 2);
        }
        assert!(served.lock().unwrap().is_empty(), "served while held");
        lock.unlock();
        for waiter in waiters {
            waiter.join().unwrap();
        }
        assert_eq!(*served.lock().unwrap(), (0..WAITERS).collect::<Vec<_>>());
        assert_eq!(lock.queued(), 0);
    }

    // Several rounds each: a test-and-set lock passes one now and then, when the threads'
    // retries happen to win in arrival order.
    #[test]
    fn served_in_arrival_order() {
        for _ in 0..5 {
            served_in_arrival_order_from(0);
        }
    }

    #[test]
    fn served_in_arrival_order_across_the_wrap() {
        for _ in 0..5 {
            served_in_arrival_order_from(u16::MAX - 2);
        }
    }

    #[test]
    fn try_lock_takes_only_a_free_lock_and_no_ticket() {
        let lock = TicketLock::starting_at(u16::MAX);
        assert!(lock.try_lock());
        assert!(!lock.try_lock(), "held");
        assert_eq!(lock.queued(), 1, "the refused try took no ticket");
        lock.unlock();
        assert_eq!(lock.queued(), 0);
        lock.lock(|| unreachable!("the lock is free"));
        assert!(!lock.try_lock());
        lock.unlock();
        assert!(lock.try_lock());
        lock.unlock();
        assert_eq!(lock.queued(), 0);
    }

    #[test]
    fn try_lock_refuses_while_others_wait() {
        let lock = Arc::new(TicketLock::new());
        lock.lock(relax);
        let waiter = {
            let lock = lock.clone();
            thread::spawn(move || {
                lock.lock(relax);
                lock.unlock();
            })
        };
        wait_for(|| lock.queued() == 2);
        assert!(!lock.try_lock(), "a waiter is ahead");
        lock.unlock();
        waiter.join().unwrap();
        assert!(lock.try_lock());
        lock.unlock();
    }

    #[test]
    fn a_new_lock_is_all_zero_bytes() {
        let lock = TicketLock::new();
        assert_eq!(core::mem::size_of::<TicketLock>(), 4);
        assert_eq!(lock.next.load(Ordering::Relaxed), 0);
        assert_eq!(lock.serving.load(Ordering::Relaxed), 0);
    }
}

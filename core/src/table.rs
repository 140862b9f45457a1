//! Indexing with one shared out-of-range panic: an index out of range is a bug, and
//! `array[index]` inlined at each use gives each its own panic call and location in Keel's
//! image (about 40 bytes apiece); through [`Table`] or [`at`] they share one.

use core::ops::{Deref, DerefMut, Index, IndexMut};
use core::slice::SliceIndex;

/// An array indexed as one (`table[i]`, `table[a..b]`), with the shared panic; the rest
/// (`get`, `iter`...) is its array's, through `Deref`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Table<T, const N: usize>(pub [T; N]);

impl<T, I: SliceIndex<[T]>, const N: usize> Index<I> for Table<T, N> {
    type Output = I::Output;

    #[inline(always)]
    fn index(&self, index: I) -> &I::Output {
        at(&self.0, index)
    }
}

impl<T, I: SliceIndex<[T]>, const N: usize> IndexMut<I> for Table<T, N> {
    #[inline(always)]
    fn index_mut(&mut self, index: I) -> &mut I::Output {
        at_mut(&mut self.0, index)
    }
}

impl<T, const N: usize> Deref for Table<T, N> {
    type Target = [T; N];

    fn deref(&self) -> &[T; N] {
        &self.0
    }
}

impl<T, const N: usize> DerefMut for Table<T, N> {
    fn deref_mut(&mut self) -> &mut [T; N] {
        &mut self.0
    }
}

/// `slice[index]` (an element or a range), with the shared panic.
#[inline(always)]
pub fn at<T, I: SliceIndex<[T]>>(slice: &[T], index: I) -> &I::Output {
    match slice.get(index) {
        Some(found) => found,
        None => out_of_range(),
    }
}

/// `&mut slice[index]` (an element or a range), with the shared panic.
#[inline(always)]
pub fn at_mut<T, I: SliceIndex<[T]>>(slice: &mut [T], index: I) -> &mut I::Output {
    match slice.get_mut(index) {
        Some(found) => found,
        None => out_of_range(),
    }
}

#[cold]
#[inline(never)]
fn out_of_range() -> ! {
    panic!("an index or range out of its table");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indexes_as_its_array() {
        let mut table = Table([1, 2, 3, 4]);
        assert_eq!(table[2], 3);
        assert_eq!(table[1..3], [2, 3]);
        assert_eq!(table[..1], [1]);
        assert_eq!(table[3..], [4]);
        table[0] = 9;
        table[2..].copy_from_slice(&[7, 8]);
        assert_eq!(table.0, [9, 2, 7, 8]);
        assert_eq!(at(&table.0, 1..=2), [2, 7]);
        at_mut(&mut table.0, ..2).fill(0);
        assert_eq!(table.0, [0, 0, 7, 8]);
        assert_eq!(table.get(3), Some(&8));
        assert_eq!(table.iter().sum::<i32>(), 15);
    }

    #[test]
    #[should_panic(expected = "out of its table")]
    fn panics_out_of_range() {
        let table = Table([1, 2]);
        let _ = table[2];
    }

    #[test]
    #[should_panic(expected = "out of its table")]
    fn panics_on_a_range_out_of_range() {
        let table = Table([1, 2]);
        let _ = &table[1..3];
    }
}

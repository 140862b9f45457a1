//! Big-endian field reads, token alignment and name splitting shared by the blob reader (§5.2,
//! §5.4.1).

/// Reads the big-endian `u32` at `offset`, if the slice holds it. Out of line: the boot's
/// walks of the tree inlined it at each of its readers.
#[inline(never)]
pub(super) fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let end = offset.checked_add(4)?;
    let &[a, b, c, d] = bytes.get(offset..end)? else {
        return None;
    };
    Some(u32::from_be_bytes([a, b, c, d]))
}

/// Reads the big-endian `u64` at `offset`, if the slice holds it.
pub(super) fn read_u64(bytes: &[u8], offset: usize) -> Option<u64> {
    let high = read_u32(bytes, offset)?;
    let low = read_u32(bytes, offset.checked_add(4)?)?;
    Some(u64::from(high) << 32 | u64::from(low))
}

/// Rounds up to the 4-byte token alignment (§5.4.1), `None` on overflow.
pub(super) fn align4(offset: usize) -> Option<usize> {
    offset.checked_add(3).map(|o| o & !3)
}

/// Widens a header field; a value that does not fit fails every later bounds check.
pub(super) fn widen(value: u32) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

/// Splits `text` at the first `separator` (an ASCII byte), which neither part keeps: `str`'s
/// `split_once` with a byte loop instead of `core`'s `memchr` (names and paths are short, and
/// the blob reader runs once, at boot).
pub(super) fn split_once(text: &str, separator: u8) -> Option<(&str, &str)> {
    let at = text.bytes().position(|byte| byte == separator)?;
    // An ASCII byte is a character of its own: both ends are character boundaries.
    Some((text.get(..at)?, text.get(at + 1..)?))
}

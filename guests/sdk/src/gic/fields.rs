//! Where an INTID's field sits in the distributor's per-INTID register arrays, the same on
//! GICv2 (spec 4.3) and GICv3 (spec 12.9): one bit, one byte or two bits per INTID.

use super::IntId;

/// Byte offset of the 32-bit register holding `intid`'s bit in a one-bit-per-INTID array
/// (GICD_IGROUPR, GICD_ISENABLER, GICD_ICENABLER), and the bit within it.
pub(crate) fn bit_position(intid: IntId) -> (usize, u32) {
    ((intid / 32) as usize * 4, intid % 32)
}

/// Byte offset of the 32-bit register holding `intid`'s byte in a one-byte-per-INTID array
/// (GICD_IPRIORITYR, GICD_ITARGETSR), and the byte's shift within it.
pub(crate) fn byte_position(intid: IntId) -> (usize, u32) {
    ((intid / 4) as usize * 4, (intid % 4) * 8)
}

/// Byte offset of the 32-bit GICD_ICFGR register holding `intid`'s two-bit field, and the
/// field's shift within it.
pub(crate) fn config_position(intid: IntId) -> (usize, u32) {
    ((intid / 16) as usize * 4, (intid % 16) * 2)
}

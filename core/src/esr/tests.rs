//! Helpers shared by the ESR decoding tests: the oracle's fields, a random stream and the IL bit.

use aarch64_esr_decoder::FieldInfo;

/// The value of `ISS.<name>` in the oracle's decoding.
pub(super) fn oracle_field(fields: &[FieldInfo], name: &str) -> Option<u64> {
    let iss = fields.iter().find(|f| f.name == "ISS")?;
    iss.subfields
        .iter()
        .find(|f| f.name == name)
        .map(|f| f.value)
}

/// Deterministic xorshift64 stream.
pub(super) fn xorshift(mut state: u64) -> impl FnMut() -> u64 {
    move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    }
}

/// ESR_ELx.IL, bit \[25\]: the trapped instruction was 32 bits long.
pub(super) const IL: u64 = 1 << 25;

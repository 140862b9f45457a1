//! Boot entropy for guests: each VM's `/chosen/rng-seed`, derived from the platform's own seed.
//!
//! Linux credits `/chosen/rng-seed` as entropy (Linux `Documentation/devicetree/bindings/
//! chosen.txt`; `add_bootloader_randomness`). Without it a guest on Keel has no entropy
//! source and its random number generator stays uninitialised for minutes; Linux 6.1 then
//! runs a whole entropy extraction (BLAKE2s and ChaCha20, about 9,000 instructions) for
//! every `get_random_u16`, which `RANDOMIZE_KSTACK_OFFSET` calls on every system call.
//!
//! Every VM gets its own 32 bytes, the first half of the ChaCha20 block (RFC 8439 §2.3)
//! keyed with the platform's seed and with the VM's id and reset generation as nonce: no
//! two VMs, and no two boots of one VM, see the same seed, and none learns the platform's.
//! The next 8 bytes of the block are its `/chosen/kaslr-seed`, which Linux places its kernel
//! with (KASLR), as QEMU gives a kernel it boots directly. The build tool reserves both
//! properties in each guest device tree (zero bytes); without a platform seed Keel overwrites
//! them with `FDT_NOP`s, so that a guest is never handed a known seed as if it were entropy.

use crate::addr::VmId;
use crate::fdt::{Fdt, FdtError, FDT_NOP};
use crate::table::{at, at_mut};

/// Length of the `/chosen/rng-seed` Keel gives a guest: 256 bits, what Linux needs to be
/// ready; also the least platform seed Keel accepts.
pub const GUEST_SEED_LEN: usize = 32;

/// A seed property Keel fills in each guest device tree's `/chosen`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeedProperty {
    /// The property's name.
    pub name: &'static str,
    /// Its length, a multiple of 4.
    pub len: usize,
    /// Where its bytes start in the VM's ChaCha20 block.
    first: usize,
}

/// `/chosen/rng-seed`: entropy Linux credits at boot.
pub const RNG_SEED: SeedProperty = SeedProperty {
    name: "rng-seed",
    len: GUEST_SEED_LEN,
    first: 0,
};

/// `/chosen/kaslr-seed`: the 64 bits Linux randomizes its kernel's placement with.
pub const KASLR_SEED: SeedProperty = SeedProperty {
    name: "kaslr-seed",
    len: 8,
    first: GUEST_SEED_LEN,
};

/// Every seed property, as the build tool reserves them and Keel fills them.
pub const SEED_PROPERTIES: [SeedProperty; 2] = [RNG_SEED, KASLR_SEED];

/// Bytes of an `FDT_PROP` token with its length and name offset, before the value (§5.4.1).
const PROPERTY_HEADER_LEN: usize = 12;

/// The longest patch: a whole seed property turned into `FDT_NOP`s.
const MAX_PATCH_LEN: usize = PROPERTY_HEADER_LEN + GUEST_SEED_LEN;

/// The platform's seed, as the ChaCha20 key the guests' seeds are derived from.
#[derive(Clone)]
pub struct SeedKey([u32; 8]);

impl core::fmt::Debug for SeedKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("SeedKey(..)")
    }
}

impl SeedKey {
    /// The key from the platform's `/chosen/rng-seed`: bytes past the 32nd are folded in by
    /// XOR. None if it is shorter than [`GUEST_SEED_LEN`]: too little to hand on as 256 bits.
    pub fn from_platform(seed: &[u8]) -> Option<Self> {
        if seed.len() < GUEST_SEED_LEN {
            return None;
        }
        let mut bytes = [0u8; GUEST_SEED_LEN];
        for (index, byte) in seed.iter().enumerate() {
            bytes[index % GUEST_SEED_LEN] ^= byte;
        }
        let mut key = [0u32; 8];
        for (word, chunk) in key.iter_mut().zip(bytes.chunks_exact(4)) {
            *word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        }
        Some(Self(key))
    }

    /// The entropy seed of VM `vm` in its reset generation `generation`.
    pub fn guest_seed(&self, vm: VmId, generation: u32) -> [u8; GUEST_SEED_LEN] {
        let mut seed = [0u8; GUEST_SEED_LEN];
        seed.copy_from_slice(&self.guest_block(vm, generation)[..GUEST_SEED_LEN]);
        seed
    }

    /// The ChaCha20 block the seeds of VM `vm` in generation `generation` are taken from.
    fn guest_block(&self, vm: VmId, generation: u32) -> [u8; 64] {
        let block = chacha20_block(&self.0, 0, [u32::from(vm.0), generation, 0]);
        let mut bytes = [0u8; 64];
        for (chunk, word) in bytes.chunks_exact_mut(4).zip(block) {
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        bytes
    }
}

/// Bytes to write into a guest's copy of its device tree, at `offset` from its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeedPatch {
    /// Where, from the start of the blob.
    pub offset: usize,
    bytes: [u8; MAX_PATCH_LEN],
    len: usize,
}

impl SeedPatch {
    /// What to write.
    pub fn bytes(&self) -> &[u8] {
        at(&self.bytes, ..self.len)
    }
}

/// The patch that fills seed `property` of device tree `dtb` for VM `vm` in reset
/// generation `generation`: the value of its `/chosen` placeholder, or with no `key`, the
/// whole property made `FDT_NOP`s. None if the blob has no placeholder of the right length.
pub fn seed_patch(
    dtb: &[u8],
    property: SeedProperty,
    key: Option<&SeedKey>,
    vm: VmId,
    generation: u32,
) -> Result<Option<SeedPatch>, FdtError> {
    Ok(seed_offset(dtb, property)?.map(|offset| patch_at(offset, property, key, vm, generation)))
}

/// Where `property`'s value sits in `dtb` (an offset from the blob's start), if `/chosen` has
/// it with the length it should have: the part of [`seed_patch`] that parses the blob, done
/// once per VM (the blob never changes) so that each boot's patch costs no parsing.
pub fn seed_offset(dtb: &[u8], property: SeedProperty) -> Result<Option<usize>, FdtError> {
    let fdt = Fdt::new(dtb)?;
    let Some(chosen) = fdt.find_node("/chosen")? else {
        return Ok(None);
    };
    let Some(value) = chosen.property(property.name)? else {
        return Ok(None);
    };
    if value.len() != property.len {
        return Ok(None);
    }
    // The value is a sub-slice of the blob: its distance from the blob's start is its offset.
    Ok(Some(value.as_ptr() as usize - dtb.as_ptr() as usize))
}

/// The patch of [`seed_patch`] for a value found at `value_offset` by [`seed_offset`].
pub fn patch_at(
    value_offset: usize,
    property: SeedProperty,
    key: Option<&SeedKey>,
    vm: VmId,
    generation: u32,
) -> SeedPatch {
    let mut bytes = [0u8; MAX_PATCH_LEN];
    let (offset, len) = match key {
        Some(key) => {
            let block = key.guest_block(vm, generation);
            at_mut(&mut bytes, ..property.len)
                .copy_from_slice(at(&block, property.first..property.first + property.len));
            (value_offset, property.len)
        }
        None => {
            let len = PROPERTY_HEADER_LEN + property.len;
            for word in at_mut(&mut bytes, ..len).chunks_exact_mut(4) {
                word.copy_from_slice(&FDT_NOP.to_be_bytes());
            }
            (value_offset - PROPERTY_HEADER_LEN, len)
        }
    };
    SeedPatch { offset, bytes, len }
}

/// The ChaCha20 block function (RFC 8439 §2.3): 16 words of key stream.
fn chacha20_block(key: &[u32; 8], counter: u32, nonce: [u32; 3]) -> [u32; 16] {
    let mut initial = [0u32; 16];
    initial[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    initial[4..12].copy_from_slice(key);
    initial[12] = counter;
    initial[13..].copy_from_slice(&nonce);
    let mut state = initial;
    // The eight quarter rounds written out with constant indices, so that the state stays in
    // registers with no bounds checks: looping over a table of indices made a VM reset's
    // seed step about 4,500 instructions with interrupts masked.
    for _ in 0..10 {
        quarter_round(&mut state, 0, 4, 8, 12);
        quarter_round(&mut state, 1, 5, 9, 13);
        quarter_round(&mut state, 2, 6, 10, 14);
        quarter_round(&mut state, 3, 7, 11, 15);
        quarter_round(&mut state, 0, 5, 10, 15);
        quarter_round(&mut state, 1, 6, 11, 12);
        quarter_round(&mut state, 2, 7, 8, 13);
        quarter_round(&mut state, 3, 4, 9, 14);
    }
    for (word, start) in state.iter_mut().zip(initial) {
        *word = word.wrapping_add(start);
    }
    state
}

/// The ChaCha quarter round on four words of the state (RFC 8439 §2.2).
#[inline(always)]
fn quarter_round(state: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
    state[a] = state[a].wrapping_add(state[b]);
    state[d] = (state[d] ^ state[a]).rotate_left(16);
    state[c] = state[c].wrapping_add(state[d]);
    state[b] = (state[b] ^ state[c]).rotate_left(12);
    state[a] = state[a].wrapping_add(state[b]);
    state[d] = (state[d] ^ state[a]).rotate_left(8);
    state[c] = state[c].wrapping_add(state[d]);
    state[b] = (state[b] ^ state[c]).rotate_left(7);
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::fdt::tests::Builder;

    #[test]
    fn chacha20_block_matches_rfc_8439() {
        // RFC 8439 §2.3.2: key 00..1f, counter 1, nonce 00:00:00:09:00:00:00:4a:00:00:00:00.
        let key: [u32; 8] = core::array::from_fn(|i| {
            u32::from_le_bytes(core::array::from_fn(|j| (4 * i + j) as u8))
        });
        let block = chacha20_block(&key, 1, [0x0900_0000, 0x4a00_0000, 0]);
        assert_eq!(
            block,
            [
                0xe4e7_f110,
                0x1559_3bd1,
                0x1fdd_0f50,
                0xc471_20a3,
                0xc7f4_d1c7,
                0x0368_c033,
                0x9aaa_2204,
                0x4e6c_d4c3,
                0x4664_82d2,
                0x09aa_9f07,
                0x05d7_c214,
                0xa202_8bd9,
                0xd19c_12b5,
                0xb94e_16de,
                0xe883_d0cb,
                0x4e3c_50a2,
            ]
        );
    }

    #[test]
    fn platform_seed_must_hold_256_bits() {
        assert!(SeedKey::from_platform(&[7; 31]).is_none());
        assert!(SeedKey::from_platform(&[7; 32]).is_some());
        // Longer seeds are folded in: a change past byte 32 changes every guest's seed.
        let mut long = [7u8; 40];
        let short = SeedKey::from_platform(&long)
            .unwrap()
            .guest_seed(VmId(0), 0);
        long[39] = 8;
        assert_ne!(
            SeedKey::from_platform(&long)
                .unwrap()
                .guest_seed(VmId(0), 0),
            short
        );
    }

    #[test]
    fn seeds_differ_by_vm_and_generation() {
        let key = SeedKey::from_platform(&[0x5a; 32]).unwrap();
        let first = key.guest_seed(VmId(0), 0);
        assert_eq!(first, key.guest_seed(VmId(0), 0));
        assert_ne!(first, key.guest_seed(VmId(1), 0));
        assert_ne!(first, key.guest_seed(VmId(0), 1));
        assert_ne!(&first[..], &[0x5a; 32][..]);
    }

    fn blob(seed: &[u8]) -> std::vec::Vec<u8> {
        let mut b = Builder::new();
        b.begin("")
            .begin("chosen")
            .strs("bootargs", &["console=ttyAMA0"])
            .prop("rng-seed", seed)
            .prop("kaslr-seed", &[0; 8])
            .end()
            .end();
        b.finish()
    }

    fn apply(dtb: &[u8], patch: &SeedPatch) -> std::vec::Vec<u8> {
        let mut patched = dtb.to_vec();
        patched[patch.offset..patch.offset + patch.bytes().len()].copy_from_slice(patch.bytes());
        patched
    }

    #[test]
    fn fills_the_placeholders_with_the_guest_seeds() {
        let dtb = blob(&[0; GUEST_SEED_LEN]);
        let key = SeedKey::from_platform(&[1; 32]).unwrap();
        let mut seeded = dtb.clone();
        for property in SEED_PROPERTIES {
            let patch = seed_patch(&seeded, property, Some(&key), VmId(3), 2)
                .unwrap()
                .unwrap();
            seeded = apply(&seeded, &patch);
        }
        let fdt = Fdt::new(&seeded).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        let block = key.guest_block(VmId(3), 2);
        assert_eq!(chosen.property("rng-seed").unwrap(), Some(&block[..32]));
        assert_eq!(chosen.property("kaslr-seed").unwrap(), Some(&block[32..40]));
        assert_eq!(
            chosen.property("rng-seed").unwrap(),
            Some(&key.guest_seed(VmId(3), 2)[..])
        );
        assert_eq!(
            chosen.property_str("bootargs").unwrap(),
            Some("console=ttyAMA0")
        );
    }

    #[test]
    fn without_platform_seed_the_placeholder_disappears() {
        let mut seeded = blob(&[0; GUEST_SEED_LEN]);
        for property in SEED_PROPERTIES {
            let patch = seed_patch(&seeded, property, None, VmId(0), 0)
                .unwrap()
                .unwrap();
            seeded = apply(&seeded, &patch);
        }
        let fdt = Fdt::new(&seeded).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap().unwrap();
        assert_eq!(chosen.property("rng-seed").unwrap(), None);
        assert_eq!(chosen.property("kaslr-seed").unwrap(), None);
        assert_eq!(
            chosen.property_str("bootargs").unwrap(),
            Some("console=ttyAMA0")
        );
    }

    #[test]
    fn no_placeholder_no_patch() {
        let key = SeedKey::from_platform(&[1; 32]).unwrap();
        assert_eq!(
            seed_patch(&blob(&[0; 8]), RNG_SEED, Some(&key), VmId(0), 0),
            Ok(None)
        );
        let mut b = Builder::new();
        b.begin("").strs("model", &["x"]).end();
        assert_eq!(
            seed_patch(&b.finish(), KASLR_SEED, Some(&key), VmId(0), 0),
            Ok(None)
        );
    }
}

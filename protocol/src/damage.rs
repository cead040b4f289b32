//! Damaged encodings for the decoders' property tests: a valid message with
//! one byte changed, cut short, run on into more bytes, or with a hostile
//! 32-bit count or length written over four of its bytes. A decoder must
//! answer each with `Ok` or `Err`; a count it trusted before checking it
//! against the bytes left would reserve gigabytes and abort the test.

use proptest::prelude::*;
use proptest::sample::Index;

/// One draw of every kind of damage; [`Damage::apply`] turns it into the
/// damaged copies of a valid encoding.
#[derive(Clone, Debug)]
pub(crate) struct Damage {
    at: Index,
    mask: u8,
    cut: Index,
    extra: Vec<u8>,
    hostile: u32,
}

/// Damage of every kind, with hostile values that are the usual suspects
/// (all ones, the sign bit, just past a 16 MiB limit) or anything at all.
pub(crate) fn damage() -> impl Strategy<Value = Damage> {
    (
        any::<Index>(),
        1u8..=255,
        any::<Index>(),
        proptest::collection::vec(any::<u8>(), 1..16),
        prop_oneof![
            Just(u32::MAX),
            Just(0x8000_0000),
            Just((16 << 20) + 1),
            any::<u32>()
        ],
    )
        .prop_map(|(at, mask, cut, extra, hostile)| Damage {
            at,
            mask,
            cut,
            extra,
            hostile,
        })
}

impl Damage {
    /// The damaged copies of `valid`: one byte flipped, a strict prefix,
    /// `valid` with bytes after it, and a hostile `u32` over four bytes.
    pub(crate) fn apply(&self, valid: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::with_capacity(4);
        if !valid.is_empty() {
            let mut flipped = valid.to_vec();
            flipped[self.at.index(valid.len())] ^= self.mask;
            out.push(flipped);
            out.push(valid[..self.cut.index(valid.len())].to_vec());
        }
        let mut extended = valid.to_vec();
        extended.extend_from_slice(&self.extra);
        out.push(extended);
        if valid.len() >= 4 {
            let mut hostile = valid.to_vec();
            let at = self.at.index(valid.len() - 3);
            hostile[at..at + 4].copy_from_slice(&self.hostile.to_be_bytes());
            out.push(hostile);
        }
        out
    }
}

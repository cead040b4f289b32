//! How crash and chaos tests place the messages they produce, and the
//! partition the spec puts each one in, so a test can check where it landed.

/// How a producer places its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// With a key: the partition of the key's hash.
    Keyed,
    /// In the partition named by `?partition=`.
    Pinned(u32),
    /// No key: round-robin from a random start, so no partition is known.
    Keyless,
}

/// What one produce sends for its placement, and where the message must
/// land when the placement says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The key; empty for none.
    pub key: Vec<u8>,
    /// The query string (`?key=...`, `?partition=...`, or empty).
    pub query: String,
    /// The partition the message belongs in, if the placement fixes it.
    pub home: Option<u32>,
}

impl Placement {
    /// The produce of a message keyed `key` (used only when keyed) to a
    /// topic of `partitions` partitions.
    pub fn place(self, key: &str, partitions: u32) -> Placed {
        match self {
            Self::Keyed => Placed {
                key: key.as_bytes().to_vec(),
                query: format!("?key={key}"),
                home: Some(key_partition(key.as_bytes(), partitions)),
            },
            Self::Pinned(partition) => Placed {
                key: Vec::new(),
                query: format!("?partition={partition}"),
                home: Some(partition),
            },
            Self::Keyless => Placed {
                key: Vec::new(),
                query: String::new(),
                home: None,
            },
        }
    }
}

/// The spec's key hash: FNV-1a, 32 bits, then `mod partitions`.
pub fn key_partition(key: &[u8], partitions: u32) -> u32 {
    let hash = key.iter().fold(0x811c_9dc5_u32, |hash, &byte| {
        (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193)
    });
    hash % partitions
}

#[cfg(test)]
mod tests {
    use super::key_partition;

    #[test]
    fn the_key_hash_is_fnv_1a_32() {
        // FNV-1a 32 of "a" is 0xe40c292c = 3,826,002,220.
        assert_eq!(key_partition(b"a", 1_000), 220);
        assert_eq!(key_partition(b"", 7), 0x811c_9dc5 % 7);
    }
}

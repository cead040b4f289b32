//! Walking a raw query string: keys may hold arbitrary bytes, `+` is a
//! space, and a parameter given twice is an error rather than a guess.

/// One decoded parameter.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Param {
    pub(crate) name: Vec<u8>,
    pub(crate) value: Vec<u8>,
}

/// The parameters of `query` in order, percent-decoded.
pub(crate) fn params(query: &str) -> Vec<Param> {
    query
        .split('&')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let (name, value) = part.split_once('=').unwrap_or((part, ""));
            Param {
                name: percent_decode(name),
                value: percent_decode(value),
            }
        })
        .collect()
}

/// Decodes `%XX` and `+`; a malformed escape is kept as it is.
pub(crate) fn percent_decode(text: &str) -> Vec<u8> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(high), Some(low)) => {
                    out.push(high << 4 | low);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            byte => out.push(byte),
        }
        i += 1;
    }
    out
}

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// `bytes` with every byte escaped as `%XX`, the most a client can send.
    fn escaped(bytes: &[u8]) -> String {
        bytes.iter().map(|byte| format!("%{byte:02X}")).collect()
    }

    proptest! {
        #![proptest_config(crate::testing::seeded_proptest_config())]

        #[test]
        fn any_query_decodes_without_panicking_and_never_grows(
            query in prop_oneof!["\\PC{0,64}", "[%+=&0-9a-fA-Fgz]{0,64}"],
        ) {
            for param in params(&query) {
                prop_assert!(param.name.len() + param.value.len() <= query.len());
            }
            prop_assert!(percent_decode(&query).len() <= query.len());
        }

        #[test]
        fn escaped_names_and_values_round_trip(
            pairs in prop::collection::vec(
                (
                    prop::collection::vec(any::<u8>(), 1..12),
                    prop::collection::vec(any::<u8>(), 0..12),
                ),
                0..6,
            ),
        ) {
            let query: Vec<String> = pairs
                .iter()
                .map(|(name, value)| format!("{}={}", escaped(name), escaped(value)))
                .collect();
            let decoded: Vec<(Vec<u8>, Vec<u8>)> = params(&query.join("&"))
                .into_iter()
                .map(|param| (param.name, param.value))
                .collect();
            prop_assert_eq!(decoded, pairs);
        }
    }

    #[test]
    fn binary_key_bytes_survive_decoding() {
        assert_eq!(percent_decode("%83a+b"), vec![0x83, b'a', b' ', b'b']);
    }

    #[test]
    fn malformed_escape_is_kept() {
        assert_eq!(percent_decode("a%2"), b"a%2".to_vec());
        assert_eq!(percent_decode("%zz"), b"%zz".to_vec());
    }

    #[test]
    fn params_keep_order_and_repeats() {
        let params = params("key=a&partition=1&key=b");
        assert_eq!(params.len(), 3);
        assert_eq!(params[2].value, b"b".to_vec());
    }
}

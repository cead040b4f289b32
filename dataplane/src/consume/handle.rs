//! The receipt handle: `partition:offset:nonce`, three decimal ASCII
//! numbers naming one lease. The nonce is what makes a handle unguessable
//! and what tells a lease from an earlier lease of the same offset.

use std::fmt;

/// One lease, as the client echoes it back on ack, extend and nack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReceiptHandle {
    /// The partition of the leased record.
    pub partition: u32,
    /// The leased record's offset.
    pub offset: u64,
    /// The lease's nonce.
    pub nonce: u64,
}

/// Why a handle did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// Not three `:`-separated decimal numbers within range.
    #[error("invalid receipt_handle: want partition:offset:nonce in decimal digits")]
    Malformed,
}

impl ReceiptHandle {
    /// Parses `partition:offset:nonce`. Each field is one or more ASCII
    /// digits (no sign, no spaces) and fits its type.
    ///
    /// # Errors
    /// [`HandleError::Malformed`] for anything else.
    pub fn parse(text: &str) -> Result<Self, HandleError> {
        let mut fields = text.split(':');
        let partition = fields.next().map(decimal).ok_or(HandleError::Malformed)??;
        let offset = fields.next().map(decimal).ok_or(HandleError::Malformed)??;
        let nonce = fields.next().map(decimal).ok_or(HandleError::Malformed)??;
        if fields.next().is_some() {
            return Err(HandleError::Malformed);
        }
        Ok(Self {
            partition: u32::try_from(partition).map_err(|_| HandleError::Malformed)?,
            offset,
            nonce,
        })
    }
}

/// One field: ASCII digits only (`u64::from_str` alone would take a `+`).
fn decimal(field: &str) -> Result<u64, HandleError> {
    if field.is_empty() || !field.bytes().all(|byte| byte.is_ascii_digit()) {
        return Err(HandleError::Malformed);
    }
    field.parse().map_err(|_| HandleError::Malformed)
}

impl fmt::Display for ReceiptHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.partition, self.offset, self.nonce)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #![proptest_config(crate::testing::seeded_proptest_config())]

        #[test]
        fn every_handle_round_trips(partition: u32, offset: u64, nonce: u64) {
            let handle = ReceiptHandle { partition, offset, nonce };
            prop_assert_eq!(ReceiptHandle::parse(&handle.to_string()), Ok(handle));
        }

        /// Digits, colons and signs: text shaped like a handle, which
        /// reaches the range checks that random text rarely does.
        #[test]
        fn handle_shaped_text_parses_only_as_three_decimal_fields(text in "[0-9:+-]{0,64}") {
            if let Ok(handle) = ReceiptHandle::parse(&text) {
                let fields: Vec<&str> = text.split(':').collect();
                prop_assert_eq!(fields.len(), 3);
                prop_assert!(fields.iter().all(|field| field.bytes().all(|b| b.is_ascii_digit())));
                prop_assert_eq!(fields[1].parse::<u64>().ok(), Some(handle.offset));
                prop_assert_eq!(fields[2].parse::<u64>().ok(), Some(handle.nonce));
            }
        }

        #[test]
        fn any_text_parses_or_is_refused_without_panicking(text in "\\PC{0,40}") {
            if let Ok(handle) = ReceiptHandle::parse(&text) {
                let fields: Vec<&str> = text.split(':').collect();
                prop_assert_eq!(fields.len(), 3);
                prop_assert_eq!(fields[0].parse::<u32>().ok(), Some(handle.partition));
            }
        }
    }

    #[test]
    fn display_and_parse_round_trip() {
        let handle = ReceiptHandle {
            partition: 2,
            offset: 17,
            nonce: u64::MAX,
        };
        let text = handle.to_string();
        assert_eq!(text, format!("2:17:{}", u64::MAX));
        assert_eq!(ReceiptHandle::parse(&text), Ok(handle));
    }

    #[test]
    fn the_wire_contract_examples_parse() {
        assert_eq!(
            ReceiptHandle::parse("1:2:3"),
            Ok(ReceiptHandle {
                partition: 1,
                offset: 2,
                nonce: 3
            })
        );
        assert!(ReceiptHandle::parse("2:17:99").is_ok());
    }

    #[test]
    fn leading_zeros_are_decimal() {
        assert_eq!(
            ReceiptHandle::parse("01:002:0003").map(|h| (h.partition, h.offset, h.nonce)),
            Ok((1, 2, 3))
        );
    }

    #[test]
    fn wrong_field_counts_are_refused() {
        for text in ["", "1", "1:2", "1:2:3:4", "1:2:3:", ":1:2:3"] {
            assert_eq!(
                ReceiptHandle::parse(text),
                Err(HandleError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn anything_but_ascii_digits_is_refused() {
        for text in [
            "+1:2:3", "-1:2:3", "1: 2:3", "1:2:3 ", "1:2:0x3", "1:2:三", "a:b:c", "1::3",
        ] {
            assert_eq!(
                ReceiptHandle::parse(text),
                Err(HandleError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn fields_out_of_range_are_refused() {
        let partition_too_big = format!("{}:0:0", u64::from(u32::MAX) + 1);
        assert_eq!(
            ReceiptHandle::parse(&partition_too_big),
            Err(HandleError::Malformed)
        );
        assert_eq!(
            ReceiptHandle::parse("0:18446744073709551616:0"),
            Err(HandleError::Malformed)
        );
    }
}

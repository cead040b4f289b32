//! Field encodings that messages share beyond what
//! `crate::codec` offers: booleans, optional values and counted
//! lists. Each decoder refuses every byte pattern its encoder never writes,
//! so a value has exactly one encoding.

use std::ops::RangeInclusive;

use crate::{DecodeError, Reader, Writer};

/// Appends a boolean as one byte, 0 or 1.
pub fn put_bool(writer: &mut Writer, value: bool) {
    writer.u8(u8::from(value));
}

/// Reads a boolean written by [`put_bool`].
///
/// # Errors
/// [`DecodeError::Truncated`], or [`DecodeError::InvalidValue`] for a byte
/// other than 0 or 1.
pub fn get_bool(reader: &mut Reader, field: &'static str) -> Result<bool, DecodeError> {
    match reader.u8(field)? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(invalid(field, other)),
    }
}

/// Appends an optional value: a presence byte (0 absent, 1 present), then
/// the value when present.
pub fn put_option<T>(writer: &mut Writer, value: Option<&T>, put: impl FnOnce(&mut Writer, &T))
where
    T: ?Sized,
{
    match value {
        Some(value) => {
            writer.u8(1);
            put(writer, value);
        }
        None => writer.u8(0),
    }
}

/// Reads an optional value written by [`put_option`].
///
/// # Errors
/// As [`get_bool`] for the presence byte, then `get`'s errors.
pub fn get_option<T>(
    reader: &mut Reader,
    field: &'static str,
    get: impl FnOnce(&mut Reader) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    if get_bool(reader, field)? {
        get(reader).map(Some)
    } else {
        Ok(None)
    }
}

/// Appends the `u32` count of a list.
///
/// # Panics
/// If `len` exceeds `max`: the peer's decoder would refuse the message, so
/// building one is a programmer error of the sender.
pub fn put_count(writer: &mut Writer, field: &'static str, len: usize, max: u32) {
    assert!(
        len <= max as usize,
        "{field}: {len} items, over the limit of {max}"
    );
    writer.u32(len as u32);
}

/// Reads a list count written by [`put_count`], refusing one over `max` and
/// one that the remaining input cannot hold at `item_bytes_min` bytes per
/// item, so a forged count never makes the decoder reserve memory the
/// input does not back.
///
/// # Errors
/// [`DecodeError::Truncated`], [`DecodeError::InvalidValue`] over `max`, or
/// [`DecodeError::LengthExceedsInput`] beyond the input.
pub fn get_count(
    reader: &mut Reader,
    field: &'static str,
    max: u32,
    item_bytes_min: usize,
) -> Result<usize, DecodeError> {
    get_count_in(reader, field, field, 0..=max, item_bytes_min)
}

/// Reads a list count like [`get_count`], refusing one outside `range`.
/// `count_field` names the count where it is cut short or out of range,
/// `list_field` the list where the input cannot hold it.
///
/// # Errors
/// [`DecodeError::Truncated`], [`DecodeError::InvalidValue`] outside
/// `range`, or [`DecodeError::LengthExceedsInput`] beyond the input.
pub fn get_count_in(
    reader: &mut Reader,
    count_field: &'static str,
    list_field: &'static str,
    range: RangeInclusive<u32>,
    item_bytes_min: usize,
) -> Result<usize, DecodeError> {
    const _: () = assert!(u32::BITS <= usize::BITS);
    let count = reader.u32(count_field)?;
    if !range.contains(&count) {
        return Err(invalid(count_field, count));
    }
    let count = count as usize;
    let needed = count.saturating_mul(item_bytes_min);
    if needed > reader.remaining() {
        return Err(DecodeError::LengthExceedsInput {
            field: list_field,
            claimed: needed as u64,
            remaining: reader.remaining(),
        });
    }
    Ok(count)
}

/// The error for a value outside its field's domain.
pub fn invalid(field: &'static str, value: impl Into<u64>) -> DecodeError {
    DecodeError::InvalidValue {
        field,
        value: value.into(),
    }
}

//! Zigzag varints as used inside record batch v2 (protobuf encoding).
//!
//! `varint` values are i32 (at most 5 bytes), `varlong` values i64 (at most
//! 10 bytes); longer encodings are rejected, as Java's `ByteUtils` does.

use bytes::BufMut;

use crate::protocol::ProtocolError;

/// Bytes needed to encode `value` as a zigzag varint.
#[inline]
pub(crate) fn varint_len(value: i32) -> usize {
    uvarint_len(u64::from(zigzag32(value)))
}

/// Bytes needed to encode `value` as a zigzag varlong.
#[inline]
pub(crate) fn varlong_len(value: i64) -> usize {
    uvarint_len(zigzag64(value))
}

#[inline]
fn uvarint_len(value: u64) -> usize {
    // 1 byte per started group of 7 bits, at least one byte.
    let bits = 64 - (value | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[inline]
fn zigzag32(value: i32) -> u32 {
    ((value << 1) ^ (value >> 31)) as u32
}

#[inline]
fn zigzag64(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

/// Writes `value` as a zigzag varint.
#[inline]
pub(crate) fn put_varint(out: &mut impl BufMut, value: i32) {
    put_uvarint(out, u64::from(zigzag32(value)));
}

/// Writes `value` as a zigzag varlong.
#[inline]
pub(crate) fn put_varlong(out: &mut impl BufMut, value: i64) {
    put_uvarint(out, zigzag64(value));
}

#[inline]
fn put_uvarint(out: &mut impl BufMut, mut value: u64) {
    if value < 0x80 {
        out.put_u8(value as u8);
        return;
    }
    let mut tmp = [0u8; 10];
    let mut n = 0;
    while value >= 0x80 {
        tmp[n] = (value as u8) | 0x80;
        value >>= 7;
        n += 1;
    }
    tmp[n] = value as u8;
    out.put_slice(&tmp[..=n]);
}

/// Reads an unsigned varint of at most `MAX` bytes from `buf` at `*pos`.
///
/// Always inlined: record decoding reads five to seven of these per record,
/// and most are one or two bytes long.
#[inline(always)]
fn read_uvarint<const MAX: usize>(
    buf: &[u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<u64, ProtocolError> {
    let rest = buf.get(*pos..).unwrap_or_default();
    let mut value = 0u64;
    for i in 0..MAX {
        let Some(&byte) = rest.get(i) else {
            return Err(truncated(what, i + 1, rest.len()));
        };
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            *pos += i + 1;
            return Ok(value);
        }
    }
    Err(overlong(what, MAX))
}

#[cold]
fn truncated(what: &'static str, needed: usize, available: usize) -> ProtocolError {
    ProtocolError::Truncated {
        what,
        needed,
        available,
    }
}

#[cold]
fn overlong(what: &'static str, max: usize) -> ProtocolError {
    ProtocolError::Invalid {
        what,
        reason: format!("varint longer than {max} bytes"),
    }
}

/// Reads a zigzag varint (i32, at most 5 bytes).
#[inline(always)]
pub(crate) fn read_varint(
    buf: &[u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<i32, ProtocolError> {
    let raw = read_uvarint::<5>(buf, pos, what)? as u32;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

/// Reads a zigzag varlong (i64, at most 10 bytes).
#[inline(always)]
pub(crate) fn read_varlong(
    buf: &[u8],
    pos: &mut usize,
    what: &'static str,
) -> Result<i64, ProtocolError> {
    let raw = read_uvarint::<10>(buf, pos, what)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_encodings() {
        let cases: [(i64, &[u8]); 7] = [
            (0, &[0x00]),
            (-1, &[0x01]),
            (1, &[0x02]),
            (63, &[0x7e]),
            (-64, &[0x7f]),
            (64, &[0x80, 0x01]),
            (300, &[0xd8, 0x04]),
        ];
        for (value, bytes) in cases {
            let mut out = Vec::new();
            put_varlong(&mut out, value);
            assert_eq!(out, bytes, "{value}");
            assert_eq!(varlong_len(value), bytes.len());
            let mut pos = 0;
            assert_eq!(read_varlong(bytes, &mut pos, "v").unwrap(), value);
            assert_eq!(pos, bytes.len());
        }
    }

    #[test]
    fn overlong_and_truncated_are_errors() {
        let mut pos = 0;
        assert!(matches!(
            read_varint(&[0x80; 6], &mut pos, "v"),
            Err(ProtocolError::Invalid { .. })
        ));
        assert!(matches!(
            read_varlong(&[0x80; 11], &mut pos, "v"),
            Err(ProtocolError::Invalid { .. })
        ));
        assert!(matches!(
            read_varint(&[0x80, 0x80], &mut pos, "v"),
            Err(ProtocolError::Truncated { .. })
        ));
        assert!(read_varint(&[], &mut pos, "v").is_err());
        assert_eq!(pos, 0);
    }

    proptest! {
        #[test]
        fn varint_round_trip(v: i32) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varint(&out, &mut pos, "v").unwrap(), v);
            prop_assert_eq!(pos, out.len());
        }

        #[test]
        fn varlong_round_trip(v: i64) {
            let mut out = Vec::new();
            put_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_len(v));
            let mut pos = 0;
            prop_assert_eq!(read_varlong(&out, &mut pos, "v").unwrap(), v);
            prop_assert_eq!(pos, out.len());
        }
    }
}

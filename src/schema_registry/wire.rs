//! The Confluent wire format: a magic byte `0`, the schema id as a 4-byte
//! big-endian integer, then the payload; Protobuf payloads carry, between
//! id and message, the path of message indexes to the message type in its
//! file as zig-zag varints (a count, then the indexes; the common `[0]` is
//! written as the single byte `0`).
//!
//! Pure functions over byte slices; input is hostile (a record from any
//! producer), so every length is checked and nothing panics.

use bytes::{BufMut, Bytes, BytesMut};

/// The magic byte that starts every framed value.
pub const MAGIC_BYTE: u8 = 0;

/// Length of the header before the payload (magic byte and schema id).
pub const HEADER_LEN: usize = 5;

/// Most message indexes accepted in a Protobuf header: nesting deeper than
/// this is not a real schema, and the bound caps the allocation.
pub const MAX_MESSAGE_INDEXES: usize = 64;

/// Writes the header for `schema_id` and then `payload`.
pub fn frame(schema_id: u32, payload: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(HEADER_LEN + payload.len());
    out.put_u8(MAGIC_BYTE);
    out.put_u32(schema_id);
    out.put_slice(payload);
    out.freeze()
}

/// Splits a framed value into its schema id and payload; the error says
/// what is wrong with the header.
pub fn unframe(data: &[u8]) -> Result<(u32, &[u8]), String> {
    if data.len() < HEADER_LEN {
        return Err(format!(
            "{} bytes: too short for the 5-byte schema registry header",
            data.len()
        ));
    }
    if data[0] != MAGIC_BYTE {
        return Err(format!(
            "unknown magic byte {} (expected {MAGIC_BYTE}): not written by a schema registry serializer",
            data[0]
        ));
    }
    let id = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
    Ok((id, &data[HEADER_LEN..]))
}

/// Appends the Protobuf message-index path: `[0]` as the single byte 0,
/// otherwise the count and each index as zig-zag varints.
pub fn put_message_indexes(out: &mut BytesMut, indexes: &[i32]) {
    if indexes == [0] {
        out.put_u8(0);
        return;
    }
    put_zigzag(out, indexes.len() as i64);
    for &i in indexes {
        put_zigzag(out, i64::from(i));
    }
}

/// Reads a message-index path from the front of `data`; returns the
/// indexes and the rest. An empty path (count 0) means `[0]`.
pub fn take_message_indexes(data: &[u8]) -> Result<(Vec<i32>, &[u8]), String> {
    let (count, mut rest) = take_zigzag(data)?;
    if count == 0 {
        return Ok((vec![0], rest));
    }
    let count = usize::try_from(count)
        .ok()
        .filter(|&c| c <= MAX_MESSAGE_INDEXES)
        .ok_or_else(|| format!("message index count {count} outside 0..={MAX_MESSAGE_INDEXES}"))?;
    let mut indexes = Vec::with_capacity(count);
    for _ in 0..count {
        let (i, r) = take_zigzag(rest)?;
        let i = i32::try_from(i)
            .ok()
            .filter(|&i| i >= 0)
            .ok_or_else(|| format!("message index {i} is not a valid index"))?;
        indexes.push(i);
        rest = r;
    }
    Ok((indexes, rest))
}

fn put_zigzag(out: &mut BytesMut, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.put_u8((z as u8) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

fn take_zigzag(data: &[u8]) -> Result<(i64, &[u8]), String> {
    let mut z: u64 = 0;
    for (n, &b) in data.iter().enumerate().take(10) {
        z |= u64::from(b & 0x7f) << (7 * n);
        if b & 0x80 == 0 {
            let v = ((z >> 1) as i64) ^ -((z & 1) as i64);
            return Ok((v, &data[n + 1..]));
        }
    }
    Err("truncated or overlong varint in the message indexes".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn header_is_magic_then_big_endian_id() {
        let framed = frame(0x0102_0304, b"xyz");
        assert_eq!(&framed[..], &[0, 1, 2, 3, 4, b'x', b'y', b'z']);
        assert_eq!(unframe(&framed).unwrap(), (0x0102_0304, &b"xyz"[..]));
    }

    #[test]
    fn bad_headers_are_named() {
        assert!(unframe(&[0, 0, 0]).unwrap_err().contains("too short"));
        assert!(unframe(&[1, 0, 0, 0, 1])
            .unwrap_err()
            .contains("magic byte 1"));
    }

    #[test]
    fn message_indexes_follow_the_confluent_encoding() {
        let mut out = BytesMut::new();
        put_message_indexes(&mut out, &[0]);
        assert_eq!(&out[..], &[0]);
        let mut out = BytesMut::new();
        // count 2 -> zig-zag 4; 1 -> 2; 3 -> 6.
        put_message_indexes(&mut out, &[1, 3]);
        assert_eq!(&out[..], &[4, 2, 6]);
        assert_eq!(
            take_message_indexes(&[4, 2, 6, 9]).unwrap(),
            (vec![1, 3], &[9u8][..])
        );
        assert_eq!(
            take_message_indexes(&[0, 9]).unwrap(),
            (vec![0], &[9u8][..])
        );
    }

    #[test]
    fn hostile_message_indexes_are_refused() {
        // A huge count must not allocate.
        assert!(take_message_indexes(&[0xfe, 0xff, 0xff, 0xff, 0x0f]).is_err());
        // Truncated varint.
        assert!(take_message_indexes(&[0x80]).is_err());
        // Count 1, then a negative index (zig-zag 1 = -1).
        assert!(take_message_indexes(&[2, 1]).is_err());
    }

    proptest! {
        #[test]
        fn frames_round_trip(id: u32, payload: Vec<u8>) {
            let framed = frame(id, &payload);
            prop_assert_eq!(unframe(&framed).unwrap(), (id, &payload[..]));
        }

        #[test]
        fn indexes_round_trip(indexes in proptest::collection::vec(0i32..i32::MAX, 1..8)) {
            let mut out = BytesMut::new();
            put_message_indexes(&mut out, &indexes);
            let (back, rest) = take_message_indexes(&out).unwrap();
            prop_assert_eq!(back, indexes);
            prop_assert!(rest.is_empty());
        }

        #[test]
        fn unframe_never_panics(data: Vec<u8>) {
            let _ = unframe(&data);
            let _ = take_message_indexes(&data);
        }
    }
}

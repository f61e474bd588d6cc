//! Snappy (attribute code 2).
//!
//! Kafka's Java client writes snappy through xerial's `SnappyOutputStream`:
//! a 16-byte header (`\x82SNAPPY\0`, then version and compatible version as
//! big-endian i32, both 1) followed by chunks of `[u32 BE length][raw snappy
//! block]`, each block holding at most 32 KiB of input. Some clients
//! (librdkafka) send a single raw snappy block instead; both are decoded.

use bytes::{BufMut, BytesMut};

use super::{check_size, corrupt, too_large, Compression};
use crate::protocol::ProtocolError;

/// Magic bytes opening a xerial snappy stream.
const XERIAL_MAGIC: [u8; 8] = *b"\x82SNAPPY\0";
/// Magic plus version and compatible version.
const XERIAL_HEADER_LEN: usize = 16;
/// Version and minimum compatible version written by xerial (both 1).
const XERIAL_VERSION: u32 = 1;
/// Uncompressed bytes per xerial chunk (xerial's default block size).
const XERIAL_BLOCK: usize = 32 * 1024;

pub(super) fn compress(input: &[u8], out: &mut BytesMut) -> Result<(), ProtocolError> {
    let mut encoder = snap::raw::Encoder::new();
    out.reserve(XERIAL_HEADER_LEN + snap::raw::max_compress_len(input.len().min(XERIAL_BLOCK)));
    out.put_slice(&XERIAL_MAGIC);
    out.put_u32(XERIAL_VERSION);
    out.put_u32(XERIAL_VERSION);
    for chunk in input.chunks(XERIAL_BLOCK) {
        let start = out.len();
        let max = snap::raw::max_compress_len(chunk.len());
        out.resize(start + 4 + max, 0);
        let written = encoder
            .compress(chunk, &mut out[start + 4..])
            .map_err(|e| ProtocolError::Encode {
                what: "snappy block",
                reason: e.to_string(),
            })?;
        // A block is at most `max_compress_len(32 KiB)` bytes, far below u32::MAX.
        out[start..start + 4].copy_from_slice(&(written as u32).to_be_bytes());
        out.truncate(start + 4 + written);
    }
    Ok(())
}

pub(super) fn decompress(input: &[u8], max_size: usize) -> Result<Vec<u8>, ProtocolError> {
    let mut out = Vec::new();
    if input.len() >= XERIAL_MAGIC.len() && input[..XERIAL_MAGIC.len()] == XERIAL_MAGIC {
        let mut rest = input
            .get(XERIAL_HEADER_LEN..)
            .ok_or_else(|| corrupt(Compression::Snappy, "truncated xerial header"))?;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| corrupt(Compression::Snappy, "truncated xerial chunk length"))?;
            let len = u32::from_be_bytes(*len) as usize;
            let block = tail
                .get(..len)
                .ok_or_else(|| corrupt(Compression::Snappy, "truncated xerial chunk"))?;
            decompress_block(block, &mut out, max_size)?;
            rest = &tail[len..];
        }
    } else {
        decompress_block(input, &mut out, max_size)?;
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, checking its claimed length against
/// what is left of `max_size` before allocating.
fn decompress_block(block: &[u8], out: &mut Vec<u8>, max_size: usize) -> Result<(), ProtocolError> {
    let claimed = snap::raw::decompress_len(block).map_err(|e| corrupt(Compression::Snappy, e))?;
    let total = out
        .len()
        .checked_add(claimed)
        .ok_or_else(|| too_large(u64::MAX, max_size))?;
    check_size(total, max_size)?;
    let start = out.len();
    out.resize(total, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| corrupt(Compression::Snappy, e))?;
    if written != claimed {
        return Err(corrupt(
            Compression::Snappy,
            "block shorter than its header",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_xerial_framing() {
        let data = crate::protocol::compression::tests::sample(70_000);
        let mut out = BytesMut::new();
        compress(&data, &mut out).unwrap();
        assert_eq!(&out[..8], b"\x82SNAPPY\0");
        assert_eq!(&out[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        // 70 000 bytes = three chunks of at most 32 KiB.
        let mut rest = &out[16..];
        let mut chunks = 0;
        while !rest.is_empty() {
            let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
            rest = &rest[4 + len..];
            chunks += 1;
        }
        assert_eq!(chunks, 3);
        assert_eq!(decompress(&out, data.len()).unwrap(), data);
    }

    #[test]
    fn reads_raw_blocks() {
        let data = b"raw snappy as librdkafka may send it".repeat(10);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress(&raw, data.len()).unwrap(), data);
    }

    #[test]
    fn claimed_length_is_bounded_before_allocation() {
        // Varint header claiming 2^32 - 1 bytes, then nothing.
        let bomb = [0xff, 0xff, 0xff, 0xff, 0x0f, 0x00];
        assert!(matches!(
            decompress(&bomb, 1 << 20),
            Err(ProtocolError::TooLarge { .. })
        ));
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 6]);
        framed.extend_from_slice(&bomb);
        assert!(matches!(
            decompress(&framed, 1 << 20),
            Err(ProtocolError::TooLarge { .. })
        ));
    }

    #[test]
    fn truncated_xerial_is_an_error() {
        let mut out = BytesMut::new();
        compress(&[5u8; 1000], &mut out).unwrap();
        assert!(decompress(&out[..out.len() - 1], 10_000).is_err());
        assert!(decompress(&out[..12], 10_000).is_err());
    }
}

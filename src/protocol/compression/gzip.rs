//! gzip (attribute code 1): RFC 1952 members over DEFLATE, via `flate2`'s
//! pure-Rust backend. Java's `GZIPInputStream` reads concatenated members, so
//! the decoder does too.

use std::io::Write;

use bytes::{BufMut, BytesMut};
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;

use super::{read_stream, Compression};
use crate::protocol::ProtocolError;

/// Level used when none is given (zlib's default, which Kafka's -1 selects).
const DEFAULT_LEVEL: u32 = 6;

pub(super) fn compress(
    level: Option<i32>,
    input: &[u8],
    out: &mut BytesMut,
) -> Result<(), ProtocolError> {
    let level = match level {
        Some(l @ 1..=9) => l as u32,
        _ => DEFAULT_LEVEL,
    };
    let mut encoder = GzEncoder::new(out.writer(), flate2::Compression::new(level));
    encoder
        .write_all(input)
        .and_then(|()| encoder.try_finish())
        .map_err(|e| ProtocolError::Encode {
            what: "gzip stream",
            reason: e.to_string(),
        })
}

pub(super) fn decompress(input: &[u8], max_size: usize) -> Result<Vec<u8>, ProtocolError> {
    read_stream(
        Compression::Gzip,
        input,
        MultiGzDecoder::new(input),
        max_size,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_change_output_and_round_trip() {
        let data = crate::protocol::compression::tests::sample(50_000);
        let mut fast = BytesMut::new();
        let mut best = BytesMut::new();
        compress(Some(1), &data, &mut fast).unwrap();
        compress(Some(9), &data, &mut best).unwrap();
        assert_ne!(fast, best);
        assert_eq!(decompress(&fast, data.len()).unwrap(), data);
        assert_eq!(decompress(&best, data.len()).unwrap(), data);
    }

    #[test]
    fn concatenated_members_are_read() {
        let mut out = BytesMut::new();
        compress(None, b"hello ", &mut out).unwrap();
        compress(None, b"world", &mut out).unwrap();
        assert_eq!(decompress(&out, 100).unwrap(), b"hello world");
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let mut out = BytesMut::new();
        compress(None, &[1u8; 1000], &mut out).unwrap();
        assert!(decompress(&out[..out.len() - 5], 10_000).is_err());
    }
}

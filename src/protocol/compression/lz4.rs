//! LZ4 (attribute code 3): the standard LZ4 frame format, via `lz4_flex`.
//!
//! Kafka before KIP-57 computed the frame header checksum wrongly; record
//! batch v2 always uses the correct checksum, so the standard frame decoder
//! applies. Output mirrors Java's `Lz4BlockOutputStream`: 64 KiB independent
//! blocks, no block or content checksums, no content size.

use std::io::Write;

use bytes::{BufMut, BytesMut};
use lz4_flex::frame::{BlockMode, BlockSize, FrameDecoder, FrameEncoder, FrameInfo};

use super::{read_stream, Compression};
use crate::protocol::ProtocolError;

pub(super) fn compress(input: &[u8], out: &mut BytesMut) -> Result<(), ProtocolError> {
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Independent);
    let mut encoder = FrameEncoder::with_frame_info(info, out.writer());
    encoder
        .write_all(input)
        .map_err(|e| e.to_string())
        .and_then(|()| encoder.finish().map(drop).map_err(|e| e.to_string()))
        .map_err(|reason| ProtocolError::Encode {
            what: "lz4 frame",
            reason,
        })
}

pub(super) fn decompress(input: &[u8], max_size: usize) -> Result<Vec<u8>, ProtocolError> {
    read_stream(Compression::Lz4, input, FrameDecoder::new(input), max_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_declares_64k_independent_blocks() {
        let mut out = BytesMut::new();
        compress(b"hello lz4", &mut out).unwrap();
        assert_eq!(&out[..4], &[0x04, 0x22, 0x4d, 0x18]);
        // FLG: version 01, block independence set, no checksums, no size.
        assert_eq!(out[4], 0b0110_0000);
        // BD: block max size code 4 = 64 KiB.
        assert_eq!(out[5], 0x40);
        assert_eq!(decompress(&out, 9).unwrap(), b"hello lz4");
    }

    #[test]
    fn corrupt_header_checksum_is_rejected() {
        let mut out = BytesMut::new();
        compress(b"hello lz4", &mut out).unwrap();
        out[6] ^= 0xff;
        assert!(decompress(&out, 100).is_err());
    }
}
